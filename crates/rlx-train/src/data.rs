//! Data to train on: [`ArrayData`] (features and integer targets, one example per row of
//! each, gathered into batches), the UCI handwritten digits (1797 images of 8x8, shipped in
//! `data/digits.bin`), character windows of a text, and seeded train / held-out splits.

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

    /// The whole state: `Rng::new(r.state())` continues where `r` is.
    pub fn state(&self) -> u64 {
        self.0
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
        let labels: Vec<i64> = self.labels.iter().map(|&l| l as i64).collect();
        stratified_split(&labels, held_out_fraction, seed)
    }

    /// The whole set as arrays: images `[1797, ..example]` f32, labels `[1797]` i64.
    pub fn arrays(&self, example: &[usize]) -> Result<ArrayData> {
        let all: Vec<usize> = (0..self.len()).collect();
        let (x, y) = self.batch(&all, example)?;
        ArrayData::new(x, y)
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

/// A shuffled split of examples labelled `labels` (class ids 0..): `held_out_fraction` of
/// each class held out, so every class is in both in proportion.
pub fn stratified_split(labels: &[i64], held_out_fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut rng = Rng::new(seed);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    // Each class's examples in index order, classes ascending (an absent class would
    // shuffle nothing and draw nothing, so only present ones are visited).
    let mut classes: std::collections::BTreeMap<i64, Vec<usize>> = Default::default();
    for (i, &l) in labels.iter().enumerate() {
        classes.entry(l).or_default().push(i);
    }
    for mut idx in classes.into_values() {
        rng.shuffle(&mut idx);
        let k = (idx.len() as f64 * held_out_fraction).round() as usize;
        test.extend_from_slice(&idx[..k]);
        train.extend_from_slice(&idx[k..]);
    }
    rng.shuffle(&mut train);
    test.sort_unstable();
    (train, test)
}

/// Examples as arrays: features `x` `[n, ..]` (any dtype) and targets `y` `[n, ..]` (i64
/// class ids), row `i` of each being example `i`.
#[derive(Clone, Debug)]
pub struct ArrayData {
    pub x: HostTensor,
    pub y: HostTensor,
}

impl ArrayData {
    /// Checks that `x` and `y` hold the same number of examples and that `y` holds
    /// integers >= 0 (any integer dtype; kept as i64).
    pub fn new(x: HostTensor, y: HostTensor) -> Result<ArrayData> {
        let (nx, ny) = (x.dims().first().copied(), y.dims().first().copied());
        if nx.is_none() || nx != ny {
            return Err(Error::input(format!(
                "features {} and targets {} must both hold one example per row of their first axis",
                rlx_ir::shape::fmt_dims(x.dims()),
                rlx_ir::shape::fmt_dims(y.dims())
            )));
        }
        if !matches!(y.dtype(), DType::I64 | DType::I32 | DType::I8 | DType::U8) {
            return Err(Error::input(format!("targets must be integer class ids, got {:?}", y.dtype())));
        }
        let values = y.to_f64_vec();
        if let Some(i) = values.iter().position(|&v| v < 0.0) {
            return Err(Error::input(format!("target {} at index {i} is negative", values[i])));
        }
        let y = HostTensor::from_i64(y.dims(), &values.iter().map(|&v| v as i64).collect::<Vec<_>>())?;
        Ok(ArrayData { x, y })
    }

    pub fn len(&self) -> usize {
        self.x.dims()[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One example's feature dims.
    pub fn example(&self) -> &[usize] {
        &self.x.dims()[1..]
    }

    /// One example's target dims.
    pub fn target(&self) -> &[usize] {
        &self.y.dims()[1..]
    }

    /// Every target, flattened.
    pub fn labels(&self) -> Vec<i64> {
        self.y.to_f64_vec().iter().map(|&v| v as i64).collect()
    }

    /// An error naming the first target outside `0..classes`.
    pub fn check_classes(&self, classes: usize) -> Result<()> {
        let per = self.target().iter().product::<usize>().max(1);
        let labels = self.labels();
        match labels.iter().position(|&l| l as u64 >= classes as u64) {
            Some(i) => Err(Error::input(format!(
                "target {} of example {} is out of range for {classes} classes",
                labels[i],
                i / per
            ))),
            None => Ok(()),
        }
    }

    /// (train, held out): stratified by class when each example has one label, a plain
    /// shuffle otherwise.
    pub fn split(&self, held_out_fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
        if self.target().is_empty() {
            return stratified_split(&self.labels(), held_out_fraction, seed);
        }
        let mut all: Vec<usize> = (0..self.len()).collect();
        Rng::new(seed).shuffle(&mut all);
        let k = (self.len() as f64 * held_out_fraction).round() as usize;
        let mut test = all[..k].to_vec();
        test.sort_unstable();
        (all[k..].to_vec(), test)
    }

    /// Examples `idx` (each < len) as `(x, y)` batches.
    pub fn batch(&self, idx: &[usize]) -> Result<(HostTensor, HostTensor)> {
        Ok((rows(&self.x, idx)?, rows(&self.y, idx)?))
    }
}

/// Rows `idx` of `t` along its first axis.
fn rows(t: &HostTensor, idx: &[usize]) -> Result<HostTensor> {
    let row = t.bytes().len() / t.dims()[0].max(1);
    let mut bytes = Vec::with_capacity(row * idx.len());
    for &i in idx {
        bytes.extend_from_slice(&t.bytes()[i * row..(i + 1) * row]);
    }
    let mut dims = t.dims().to_vec();
    dims[0] = idx.len();
    HostTensor::from_bytes(t.dtype(), &dims, bytes)
}

/// A text's characters as next-character windows: the sorted distinct characters (the
/// vocabulary) and every window of `seq` ids starting at a multiple of `stride`, with
/// its targets one character on (`x`, `y`: `[n, seq]` i64).
pub fn char_windows(text: &str, seq: usize, stride: usize) -> Result<(Vec<char>, ArrayData)> {
    let mut vocab: Vec<char> = text.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let ids: Vec<i64> = text.chars().map(|c| vocab.binary_search(&c).map_or(0, |i| i as i64)).collect();
    if seq == 0 || stride == 0 || ids.len() < seq + 1 {
        return Err(Error::input(format!(
            "a text of {} characters has no window of {seq} characters and a next one",
            ids.len()
        )));
    }
    let starts: Vec<usize> = (0..ids.len() - seq).step_by(stride).collect();
    let x: Vec<i64> = starts.iter().flat_map(|&s| ids[s..s + seq].iter().copied()).collect();
    let y: Vec<i64> = starts.iter().flat_map(|&s| ids[s + 1..s + seq + 1].iter().copied()).collect();
    let dims = [starts.len(), seq];
    Ok((vocab, ArrayData::new(HostTensor::from_i64(&dims, &x)?, HostTensor::from_i64(&dims, &y)?)?))
}
