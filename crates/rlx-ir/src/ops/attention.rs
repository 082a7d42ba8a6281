//! Scaled dot-product attention with grouped K/V heads.
//!
//! Shape rule: `q [b, hq, sq, d]`, `k [b, hkv, skv, d]`, `v [b, hkv, skv, dv]`, `hkv`
//! dividing `hq` (GQA; query head `h` reads K/V head `h / (hq / hkv)`), optional additive
//! `bias` broadcastable to `[b, hq, sq, skv]`; out `[b, hq, sq, dv]`. Float; `k` and `v`
//! share a dtype that may be narrower than `q`'s (a KV cache kept in f16), read widened to
//! `q`'s; the bias has `q`'s dtype; out has `q`'s.
//!
//! Reference semantics: `out = softmax(scale * q k^T + mask) v` over the key axis,
//! `scale` defaulting to `1 / sqrt(d)` (computed in the compute type, so an f64
//! graph gets the f64 value). `Causal` aligns the last query with the last key
//! (query `i` sees keys `0 ..= i + skv - sq`), which is what a KV-cached decode step
//! needs; it requires `sq <= skv` so that no row is fully masked. `CausalLen(len)` is the
//! same over only the first `len` keys (an integer scalar operand read at run time: the
//! filled part of a KV cache); `sq <= len <= skv` is checked when it runs.
//! `SlidingLen(len, window)` is `CausalLen` where a query also sees only the `window`
//! keys up to and including its own position (query at position `t` sees keys
//! `t - window < j <= t`): the local layers of Gemma 2/3, Mistral, whose `t - j <
//! window` rule llama.cpp calls "standard" SWA.

use super::{F32Attr, Op, Operand, check_finite, check_float, check_same_dtype};
use crate::shape::broadcast_dims;
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

/// The mask argument of [`Graph::attention`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionMask {
    None,
    Causal,
    /// An additive bias node (e.g. 0 / -inf), broadcastable to `[b, hq, sq, skv]`.
    Bias(NodeId),
    /// Causal over the first `len` keys, `len` an integer scalar node.
    CausalLen(NodeId),
    /// `CausalLen(len)` seeing only the last `window` keys (the query's own included).
    SlidingLen(NodeId, usize),
}

/// The mask kind stored in the op (a bias is the op's fourth operand).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    None,
    Causal,
    Bias,
    CausalLen,
    SlidingLen { window: usize },
}

impl MaskKind {
    /// Whether the mask is the op's fourth operand.
    pub fn has_operand(self) -> bool {
        matches!(self, MaskKind::Bias | MaskKind::CausalLen | MaskKind::SlidingLen { .. })
    }

    /// Whether the op's fourth operand is a causal length read at run time.
    pub fn has_len(self) -> bool {
        matches!(self, MaskKind::CausalLen | MaskKind::SlidingLen { .. })
    }

    /// The sliding window, if the mask has one.
    pub fn window(self) -> Option<usize> {
        match self {
            MaskKind::SlidingLen { window } => Some(window),
            _ => None,
        }
    }
}

pub(crate) fn infer(mask: MaskKind, scale: Option<F32Attr>, ins: &[Operand]) -> Result<(DType, Vec<usize>)> {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    check_float("q", q)?;
    check_float("k", k)?;
    check_same_dtype(&[k, v])?;
    let dtype = q.dtype;
    if mask == MaskKind::Bias {
        check_same_dtype(&[q, ins[3]])?;
    }
    if let Some(s) = scale {
        check_finite("scale", s.0)?;
    }
    if q.dims.len() != 4 || k.dims.len() != 4 || v.dims.len() != 4 {
        return Err(Error::shape(format!(
            "expects q [b, hq, sq, d], k [b, hkv, skv, d], v [b, hkv, skv, dv], got {}, {}, {}",
            q.ty(),
            k.ty(),
            v.ty()
        )));
    }
    let (b, hq, sq, d) = (q.dims[0], q.dims[1], q.dims[2], q.dims[3]);
    let (hkv, skv, dv) = (k.dims[1], k.dims[2], v.dims[3]);
    if k.dims[0] != b || v.dims[0] != b || k.dims[3] != d || v.dims[1] != hkv || v.dims[2] != skv {
        return Err(Error::shape(format!("q {}, k {}, v {} do not agree", q.ty(), k.ty(), v.ty())));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::shape(format!("{hkv} K/V heads must divide {hq} query heads")));
    }
    if mask == MaskKind::Causal && sq > skv {
        return Err(Error::shape(format!("causal attention needs sq <= skv, got sq {sq} > skv {skv}")));
    }
    if mask.window() == Some(0) {
        return Err(Error::shape("a sliding window must hold at least 1 key, got 0"));
    }
    if mask.has_len() {
        let len = ins[3];
        if !len.dtype.is_int() || crate::shape::numel(len.dims) != 1 || len.dims.len() > 1 {
            return Err(Error::shape(format!("causal length must be an integer scalar ([] or [1]), got {}", len.ty())));
        }
    }
    if mask == MaskKind::Bias {
        let bias = ins[3];
        let full = [b, hq, sq, skv];
        if broadcast_dims(bias.dims, &full).as_deref() != Some(&full[..]) {
            return Err(Error::shape(format!("bias {} does not broadcast to [{b},{hq},{sq},{skv}]", bias.ty())));
        }
    }
    Ok((dtype, vec![b, hq, sq, dv]))
}

impl Graph {
    /// `softmax(scale * q k^T + mask) v`; `scale` defaults to `1 / sqrt(head_dim)`.
    pub fn attention(
        &mut self,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        mask: AttentionMask,
        scale: Option<f32>,
    ) -> Result<NodeId> {
        let scale = scale.map(F32Attr);
        let (kind, inputs) = match mask {
            AttentionMask::None => (MaskKind::None, vec![q, k, v]),
            AttentionMask::Causal => (MaskKind::Causal, vec![q, k, v]),
            AttentionMask::Bias(b) => (MaskKind::Bias, vec![q, k, v, b]),
            AttentionMask::CausalLen(len) => (MaskKind::CausalLen, vec![q, k, v, len]),
            AttentionMask::SlidingLen(len, window) => (MaskKind::SlidingLen { window }, vec![q, k, v, len]),
        };
        self.push(Op::Attention { mask: kind, scale }, &inputs)
    }
}

// Derivatives, through the op's definition in primitive ops: `s = q kx^T * scale + mask`,
// `p = softmax(s)`, `out = p vx`, where kx / vx repeat each K/V head for its query-head
// group. VJP: `dp = ct vx^T`, `ds = p (dp - sum(dp p))`, `dq = ds kx * scale`,
// `dkx = ds^T q * scale`, `dvx = p^T ct`, group repeats summed back; a bias receives
// `ds` summed to its dims; a causal length none. Masked keys get zero weight and zero
// derivative.

struct Parts {
    scale: NodeId,
    kx: NodeId,
    vx: NodeId,
    p: NodeId,
    group: usize,
}

/// `x [b, hkv, s, d]` with each head repeated `group` times: `[b, hkv * group, s, d]`.
fn repeat_heads(g: &mut Graph, x: NodeId, group: usize) -> Result<NodeId> {
    if group == 1 {
        return Ok(x);
    }
    let d = g.dims(x).to_vec();
    let x = g.reshape(x, &[d[0], d[1], 1, d[2], d[3]])?;
    let x = g.expand(x, &[d[0], d[1], group, d[2], d[3]])?;
    g.reshape(x, &[d[0], d[1] * group, d[2], d[3]])
}

/// The transpose of `repeat_heads`: group repeats summed.
fn sum_heads(g: &mut Graph, x: NodeId, group: usize) -> Result<NodeId> {
    if group == 1 {
        return Ok(x);
    }
    let d = g.dims(x).to_vec();
    let x = g.reshape(x, &[d[0], d[1] / group, group, d[2], d[3]])?;
    g.reduce(super::ReduceOp::Sum, x, &[2], false)
}

fn parts(g: &mut Graph, mask: MaskKind, scale: Option<F32Attr>, ins: &[NodeId]) -> Result<Parts> {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    let (qd, kd) = (g.dims(q).to_vec(), g.dims(k).to_vec());
    let (sq, skv, group) = (qd[2], kd[2], qd[1] / kd[1]);
    let dt = g.dtype(q);
    let scale = g.scalar_f64(dt, scale.map_or(1.0 / (qd[3] as f64).sqrt(), |s| s.0 as f64))?;
    // K and V read in q's dtype (a narrower cache is widened).
    let (k, v) = if g.dtype(k) == dt { (k, v) } else { (g.cast(k, dt)?, g.cast(v, dt)?) };
    let kx = repeat_heads(g, k, group)?;
    let vx = repeat_heads(g, v, group)?;
    let kt = g.transpose_last2(kx)?;
    let s = g.matmul(q, kt)?;
    let s = g.mul(s, scale)?;
    // Causal masks as 0 / -inf over [sq, skv]: key j is visible to query i when
    // j <= i + len - sq (len = skv for plain causal), and with a window also when
    // j > i + len - sq - window.
    let causal = |g: &mut Graph, limit: NodeId, int: DType| -> Result<NodeId> {
        let j = g.iota(int, skv)?;
        let j = g.reshape(j, &[1, skv])?;
        let i = g.iota(int, sq)?;
        let i = g.reshape(i, &[sq, 1])?;
        let off = g.sub(j, i)?;
        let visible = g.le(off, limit)?;
        let zero = g.full(dt, &[sq, skv], 0.0)?;
        let hidden = g.full(dt, &[sq, skv], f64::NEG_INFINITY)?;
        let bias = g.where_(visible, zero, hidden)?;
        let Some(window) = mask.window() else { return Ok(bias) };
        let w = g.scalar_f64(int, window as f64)?;
        let floor = g.sub(limit, w)?;
        let inside = g.gt(off, floor)?;
        g.where_(inside, bias, hidden)
    };
    let mask = match mask {
        MaskKind::None => None,
        MaskKind::Bias => Some(ins[3]),
        MaskKind::Causal => {
            let limit = g.scalar_f64(DType::I64, skv as f64 - sq as f64)?;
            Some(causal(g, limit, DType::I64)?)
        }
        MaskKind::CausalLen | MaskKind::SlidingLen { .. } => {
            let len = g.cast(ins[3], DType::I64)?;
            let n = g.scalar_f64(DType::I64, sq as f64)?;
            let limit = g.sub(len, n)?;
            Some(causal(g, limit, DType::I64)?)
        }
    };
    let s = match mask {
        Some(m) => g.add(s, m)?,
        None => s,
    };
    let p = g.softmax(s, 3)?;
    Ok(Parts { scale, kx, vx, p, group })
}

pub(crate) fn vjp(
    g: &mut Graph,
    mask: MaskKind,
    scale: Option<F32Attr>,
    ins: &[NodeId],
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    let q = ins[0];
    let Parts { scale, kx, vx, p, group } = parts(g, mask, scale, ins)?;
    let vt = g.transpose_last2(vx)?;
    let dp = g.matmul(ct, vt)?;
    let pt = g.transpose_last2(p)?;
    let dvx = g.matmul(pt, ct)?;
    let dpp = g.mul(dp, p)?;
    let sum = g.reduce(super::ReduceOp::Sum, dpp, &[3], true)?;
    let centered = g.sub(dp, sum)?;
    let ds = g.mul(p, centered)?;
    let dss = g.mul(ds, scale)?;
    let dq = g.matmul(dss, kx)?;
    let dst = g.transpose_last2(dss)?;
    let dkx = g.matmul(dst, q)?;
    let (dk, dv) = (sum_heads(g, dkx, group)?, sum_heads(g, dvx, group)?);
    // Cotangents in the operands' own dtypes.
    let kt = g.dtype(ins[1]);
    let (dk, dv) = if kt == g.dtype(q) { (dk, dv) } else { (g.cast(dk, kt)?, g.cast(dv, kt)?) };
    let mut out = vec![Some(dq), Some(dk), Some(dv)];
    match mask {
        MaskKind::Bias => {
            let bd = g.dims(ins[3]).to_vec();
            out.push(Some(g.sum_to(ds, &bd)?));
        }
        MaskKind::CausalLen | MaskKind::SlidingLen { .. } => out.push(None),
        MaskKind::None | MaskKind::Causal => {}
    }
    Ok(out)
}

pub(crate) fn jvp(
    g: &mut Graph,
    mask: MaskKind,
    scale: Option<F32Attr>,
    ins: &[NodeId],
    t: &[Option<NodeId>],
) -> Result<Option<NodeId>> {
    let q = ins[0];
    let Parts { scale, kx, vx, p, group } = parts(g, mask, scale, ins)?;
    let mut ts = None;
    if let Some(tq) = t[0] {
        let kt = g.transpose_last2(kx)?;
        ts = Some(g.matmul(tq, kt)?);
    }
    let dt = g.dtype(q);
    let widen = |g: &mut Graph, x: NodeId| if g.dtype(x) == dt { Ok(x) } else { g.cast(x, dt) };
    if let Some(tk) = t[1] {
        let tk = widen(g, tk)?;
        let tkx = repeat_heads(g, tk, group)?;
        let tkt = g.transpose_last2(tkx)?;
        let term = g.matmul(q, tkt)?;
        ts = g.add_opt(ts, Some(term))?;
    }
    let mut ts = ts.map(|ts| g.mul(ts, scale)).transpose()?;
    if mask == MaskKind::Bias
        && let Some(tb) = t[3]
    {
        let dims = g.dims(p).to_vec();
        let tb = g.broadcast_to(tb, &dims)?;
        ts = g.add_opt(ts, Some(tb))?;
    }
    let mut to = None;
    if let Some(ts) = ts {
        let tsp = g.mul(ts, p)?;
        let sum = g.reduce(super::ReduceOp::Sum, tsp, &[3], true)?;
        let centered = g.sub(ts, sum)?;
        let tp = g.mul(p, centered)?;
        to = Some(g.matmul(tp, vx)?);
    }
    if let Some(tv) = t[2] {
        let tv = widen(g, tv)?;
        let tvx = repeat_heads(g, tv, group)?;
        let term = g.matmul(p, tvx)?;
        to = g.add_opt(to, Some(term))?;
    }
    Ok(to)
}
