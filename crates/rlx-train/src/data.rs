//! The UCI handwritten digits (1797 images of 8x8, shipped in `data/digits.bin`), a
//! seeded train / held-out split, and shuffled mini-batches.

use rlx_ir::{DType, Error, HostTensor, Result};

const RAW: &[u8] = include_bytes!("../data/digits.bin");
pub const PIXELS: usize = 64;

/// A seeded generator (SplitMix64): shuffles, splits and initial weights.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// Images scaled to [0, 1] and their labels.
#[derive(Clone, Debug)]
pub struct Digits {
    pub images: Vec<[f32; PIXELS]>,
    pub labels: Vec<u8>,
}

impl Digits {
    /// The whole set.
    pub fn load() -> Result<Digits> {
        if !RAW.len().is_multiple_of(PIXELS + 1) {
            return Err(Error::parse(format!("digits.bin: {} bytes is not whole 65-byte records", RAW.len())));
        }
        let mut images = Vec::new();
        let mut labels = Vec::new();
        for (i, rec) in RAW.chunks_exact(PIXELS + 1).enumerate() {
            if rec[..PIXELS].iter().any(|&p| p > 16) || rec[PIXELS] > 9 {
                return Err(Error::parse(format!(
                    "digits.bin: record {i} (byte {}) is out of range",
                    i * (PIXELS + 1)
                )));
            }
            let mut img = [0f32; PIXELS];
            img.iter_mut().zip(&rec[..PIXELS]).for_each(|(o, &p)| *o = p as f32 / 16.0);
            images.push(img);
            labels.push(rec[PIXELS]);
        }
        Ok(Digits { images, labels })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// A shuffled split: (train, held out), `held_out_fraction` of each class held out
    /// (stratified, so every class is in both in proportion).
    pub fn split(&self, held_out_fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
        let mut rng = Rng::new(seed);
        let (mut train, mut test) = (Vec::new(), Vec::new());
        for class in 0..10u8 {
            let mut idx: Vec<usize> = (0..self.len()).filter(|&i| self.labels[i] == class).collect();
            rng.shuffle(&mut idx);
            let k = (idx.len() as f64 * held_out_fraction).round() as usize;
            test.extend_from_slice(&idx[..k]);
            train.extend_from_slice(&idx[k..]);
        }
        rng.shuffle(&mut train);
        test.sort_unstable();
        (train, test)
    }

    /// Images `idx` as `[n, ..example]` f32 (example `[64]` or `[1, 8, 8]`), labels `[n]` i64.
    pub fn batch(&self, idx: &[usize], example: &[usize]) -> Result<(HostTensor, HostTensor)> {
        let mut dims = vec![idx.len()];
        dims.extend_from_slice(example);
        let x: Vec<f32> = idx.iter().flat_map(|&i| self.images[i]).collect();
        let y: Vec<i64> = idx.iter().map(|&i| self.labels[i] as i64).collect();
        Ok((HostTensor::from_f32_as(DType::F32, &dims, &x)?, HostTensor::from_i64(&[idx.len()], &y)?))
    }
}
