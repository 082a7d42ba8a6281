//! Rotary position embedding (semantics in `rlx_ir::ops::rope`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float};
use crate::with_float;
use rlx_ir::{Result, RopeStyle};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Debug)]
pub struct RopePlan {
    pub style: RopeStyle,
    /// Product of the leading dims (batch x heads).
    pub outer: usize,
    pub seq: usize,
    pub head_dim: usize,
    /// base^(-2i / rotary_dims) for each pair i, in f64.
    pub inv_freq: Vec<f64>,
    /// Which angle table serves this plan: (base bits, rotary dims).
    key: (u32, usize),
}

impl RopePlan {
    pub fn new(x: &[usize], style: RopeStyle, base: f32, rotary_dims: usize) -> RopePlan {
        let r = x.len();
        let inv_freq = (0..rotary_dims / 2).map(|i| (base as f64).powf(-2.0 * i as f64 / rotary_dims as f64)).collect();
        RopePlan {
            style,
            outer: rlx_ir::shape::numel(&x[..r - 2]),
            seq: x[r - 2],
            head_dim: x[r - 1],
            inv_freq,
            key: (base.to_bits(), rotary_dims),
        }
    }
}

/// Bytes of cached angles per (base, rotary dims): positions past what fits are computed
/// per call (at 128 pairs a position, the first 4096 positions are cached).
const TABLE_BYTES: usize = 8 << 20;

/// `(sin, cos)` of `pos * inv_freq[i]` for positions `0..len / half`, `half` per position.
type AngleTable = Arc<Vec<(f64, f64)>>;

/// The process's angle tables. Every rope node of a model (two per layer) uses the same
/// few (one per RoPE base): each computed once instead of per call (f64 `sin_cos` per
/// position and pair was 4.5% of a 512-token Gemma 3 prompt, recomputed by 36 nodes).
fn table(p: &RopePlan, positions: usize) -> AngleTable {
    static TABLES: OnceLock<Mutex<HashMap<(u32, usize), AngleTable>>> = OnceLock::new();
    let half = p.inv_freq.len();
    let mut tables = TABLES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let have = tables.get(&p.key).cloned().unwrap_or_default();
    let want = positions.min(TABLE_BYTES / 16 / half.max(1));
    if have.len() >= want * half {
        return have;
    }
    let mut grown = Vec::with_capacity(want * half);
    grown.extend_from_slice(&have);
    for pos in have.len() / half.max(1)..want {
        grown.extend(p.inv_freq.iter().map(|&f| (pos as f64 * f).sin_cos()));
    }
    let grown = Arc::new(grown);
    tables.insert(p.key, grown.clone());
    grown
}

pub fn rope(p: &RopePlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => rope_typed::<T>(p, ins.get(0)?, ins, out_mut(out)?))
}

fn rope_typed<T: Float>(p: &RopePlan, x: &[T], ins: &Args, out: &mut [T]) -> Result<()> {
    out.copy_from_slice(x);
    let half = p.inv_freq.len();
    let mut max_pos = 0;
    for s in 0..p.seq {
        max_pos = max_pos.max(ins.index(1, s)?);
    }
    let cached = table(p, usize::try_from(max_pos).map_or(0, |m| m.saturating_add(1)));
    // A position's angles are the same for every head: looked up (or computed) once.
    let mut computed = vec![(0f64, 0f64); half];
    for s in 0..p.seq {
        // Any integer position is valid, negative ones included.
        let pos = ins.index(1, s)?;
        let angles = match usize::try_from(pos).ok().and_then(|q| cached.get(q * half..(q + 1) * half)) {
            Some(row) => row,
            None => {
                for (angle, &f) in computed.iter_mut().zip(&p.inv_freq) {
                    *angle = (pos as f64 * f).sin_cos();
                }
                &computed[..]
            }
        };
        for o in 0..p.outer {
            let row = (o * p.seq + s) * p.head_dim;
            for (i, &(sin, cos)) in angles.iter().enumerate() {
                let (a, b) = match p.style {
                    RopeStyle::NeoX => (row + i, row + i + half),
                    RopeStyle::GptJ => (row + 2 * i, row + 2 * i + 1),
                };
                let (x0, x1) = (x[a].to_f64(), x[b].to_f64());
                out[a] = T::from_f64(x0 * cos - x1 * sin);
                out[b] = T::from_f64(x0 * sin + x1 * cos);
            }
        }
    }
    Ok(())
}
