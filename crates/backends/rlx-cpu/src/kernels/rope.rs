//! Rotary position embedding (semantics in `rlx_ir::ops::rope`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float};
use crate::features::Arm;
use crate::{multiversion, with_float};
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

/// Per position (`0..len / (2 half)`), the `half` values `sin(pos * inv_freq[i])`, then
/// the `half` cosines.
type AngleTable = Arc<Vec<f64>>;

/// The process's angle tables. Every rope node of a model (two per layer) uses the same
/// few (one per RoPE base): each computed once instead of per call (f64 `sin_cos` per
/// position and pair was 4.5% of a 512-token Gemma 3 prompt, recomputed by 36 nodes).
fn table(p: &RopePlan, positions: usize) -> AngleTable {
    static TABLES: OnceLock<Mutex<HashMap<(u32, usize), AngleTable>>> = OnceLock::new();
    let half = p.inv_freq.len();
    let mut tables = TABLES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let have = tables.get(&p.key).cloned().unwrap_or_default();
    let want = positions.min(TABLE_BYTES / 16 / half.max(1));
    if have.len() >= 2 * want * half {
        return have;
    }
    let mut grown = Vec::with_capacity(2 * want * half);
    grown.extend_from_slice(&have);
    for pos in have.len() / (2 * half).max(1)..want {
        angles(p, pos as i64, &mut grown);
    }
    let grown = Arc::new(grown);
    tables.insert(p.key, grown.clone());
    grown
}

/// Appends position `pos`'s sines, then its cosines, to `to`.
fn angles(p: &RopePlan, pos: i64, to: &mut Vec<f64>) {
    to.extend(p.inv_freq.iter().map(|&f| (pos as f64 * f).sin()));
    to.extend(p.inv_freq.iter().map(|&f| (pos as f64 * f).cos()));
}

pub fn rope(p: &RopePlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => rope_typed::<T>(p, ins.get(0)?, ins, out_mut(out)?))
}

fn rope_typed<T: Float>(p: &RopePlan, x: &[T], ins: &Args, out: &mut [T]) -> Result<()> {
    if out.is_empty() {
        return Ok(()); // no rows (or rows of nothing): nothing to rotate
    }
    let half = p.inv_freq.len();
    // Any integer position is valid, negative ones included.
    let position = |s: usize| ins.index(1, s);
    let mut max_pos = 0;
    for s in 0..p.seq {
        max_pos = max_pos.max(position(s)?);
    }
    let cached = table(p, usize::try_from(max_pos).map_or(0, |m| m.saturating_add(1)));
    let in_table = |pos: i64| usize::try_from(pos).ok().and_then(|q| cached.get(2 * q * half..2 * (q + 1) * half));
    // Angles of the positions past the table (or negative), computed once for all heads.
    let mut computed = Vec::new();
    for s in 0..p.seq {
        let pos = position(s)?;
        if in_table(pos).is_none() {
            angles(p, pos, &mut computed);
        }
    }
    let mut next = computed.chunks_exact((2 * half).max(1));
    let rows = (0..p.seq)
        .map(|s| Ok(in_table(position(s)?).or_else(|| next.next()).unwrap_or_default()))
        .collect::<Result<Vec<&[f64]>>>()?;
    if T::CLASS == Class::F32 {
        // SAFETY: `T` is f32 (its class), so the slices are f32 slices.
        let (x, out) = unsafe {
            (
                std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()),
                std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len()),
            )
        };
        rotate_f32(Arm::best(), p.style, x, &rows, p.head_dim, out);
    } else {
        rotate_rows(p.style, x, &rows, p.head_dim, out);
    }
    Ok(())
}

/// Rows of `head_dim` values (per head, one for each of `rows`, the position's sines then
/// cosines): the first `2 half` values of each rotated pairwise in f64, the rest copied.
/// Written so that the compiler vectorizes it for f32 ([`rotate_f32`]).
#[inline(always)]
fn rotate_rows<T: Float>(style: RopeStyle, x: &[T], rows: &[&[f64]], head_dim: usize, out: &mut [T]) {
    let head = rows.len() * head_dim;
    for (x, out) in x.chunks_exact(head).zip(out.chunks_exact_mut(head)) {
        let rows_of_head = x.chunks_exact(head_dim).zip(out.chunks_exact_mut(head_dim));
        for ((x, out), angles) in rows_of_head.zip(rows) {
            let half = angles.len() / 2;
            out[2 * half..].copy_from_slice(&x[2 * half..]);
            let (sin, cos) = angles.split_at(half);
            let rotate = |x0: T, x1: T, sin: f64, cos: f64| {
                let (x0, x1) = (x0.to_f64(), x1.to_f64());
                (T::from_f64(x0 * cos - x1 * sin), T::from_f64(x0 * sin + x1 * cos))
            };
            match style {
                RopeStyle::NeoX => {
                    let (x0, x1) = x[..2 * half].split_at(half);
                    let (o0, o1) = out[..2 * half].split_at_mut(half);
                    for ((((o0, o1), (&x0, &x1)), &sin), &cos) in
                        o0.iter_mut().zip(o1).zip(x0.iter().zip(x1)).zip(sin).zip(cos)
                    {
                        (*o0, *o1) = rotate(x0, x1, sin, cos);
                    }
                }
                RopeStyle::GptJ => {
                    let pairs = out[..2 * half].chunks_exact_mut(2).zip(x[..2 * half].chunks_exact(2));
                    for (((o, x), &sin), &cos) in pairs.zip(sin).zip(cos) {
                        (o[0], o[1]) = rotate(x[0], x[1], sin, cos);
                    }
                }
            }
        }
    }
}

multiversion! {
    /// [`rotate_rows`] of f32 on each arm: per pair the same f64 multiplies and adds (no
    /// fused multiply-add), so every arm gives the same bits, in vector loops. The scalar
    /// loop it replaced took 0.34 ms a 12-token SmolLM2 prompt (60 calls of 9 heads x 12
    /// rows x 32 pairs), 15.2 ms a 512-token one.
    fn rotate_f32(style: RopeStyle, x: &[f32], rows: &[&[f64]], head_dim: usize, out: &mut [f32]) {
        rotate_rows(style, x, rows, head_dim, out)
    }
}
