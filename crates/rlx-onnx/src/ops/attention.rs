//! Transformer blocks of opset 23: Attention (composed from matmuls and a softmax, so
//! every variant — GQA, masks, causal, softcap, a KV cache, the `qk_matmul_output` taps —
//! is the same few IR ops), RotaryEmbedding (from its cos / sin caches) and
//! RMSNormalization (the IR's last-axis norm on the flattened tail).

use super::{OpDef, axis, def, one};
use crate::import::{Importer, Node};
use rlx_ir::shape::numel;
use rlx_ir::{CompareOp, DType, Error, HostTensor, NodeId, Result, Unary};

pub const OPS: &[OpDef] = &[
    def("Attention", 23, attention),
    def("Attention", 24, attention),
    def("RotaryEmbedding", 23, rotary_embedding),
    def("RMSNormalization", 23, rms_norm),
];

/// A positive head count attribute, when given.
fn heads(n: &Node, name: &str) -> Result<Option<usize>> {
    n.int_opt(name)?
        .map(|h| {
            usize::try_from(h).ok().filter(|&h| h > 0).ok_or_else(|| Error::shape(format!("{name} {h} must be > 0")))
        })
        .transpose()
}

/// `[b, s, h * d]` as `[b, h, s, d]`.
fn split_heads(i: &mut Importer, x: NodeId, h: usize, what: &str) -> Result<NodeId> {
    let d = i.g.dims(x).to_vec();
    let [b, s, hidden] = d[..] else { return Err(rank_error(i, x, what)) };
    if !hidden.is_multiple_of(h) {
        return Err(Error::shape(format!(
            "{what} {}: hidden size {hidden} is not a multiple of {h} heads",
            i.g.describe(x)
        )));
    }
    let y = i.g.reshape(x, &[b, s, h, hidden / h])?;
    i.g.transpose(y, &[0, 2, 1, 3])
}

fn rank_error(i: &Importer, x: NodeId, what: &str) -> Error {
    Error::shape(format!("{what} must be 3-D or 4-D, got {}", i.g.describe(x)))
}

/// `x [b, kvh, s, d]` with each head repeated `reps` times in place (`h0 h0 h1 h1 ..`).
fn repeat_heads(i: &mut Importer, x: NodeId, reps: usize) -> Result<NodeId> {
    if reps == 1 {
        return Ok(x);
    }
    let d = i.g.dims(x).to_vec();
    let y = i.g.reshape(x, &[d[0], d[1], 1, d[2], d[3]])?;
    let y = i.g.expand(y, &[d[0], d[1], reps, d[2], d[3]])?;
    i.g.reshape(y, &[d[0], d[1] * reps, d[2], d[3]])
}

/// A constant `[rows, cols]` bias of `dtype`: 0 where `keep(r, c)`, -inf elsewhere.
fn bias_table(
    i: &mut Importer,
    dtype: DType,
    rows: usize,
    cols: usize,
    keep: impl Fn(usize, usize) -> bool,
) -> Result<NodeId> {
    let v: Vec<f64> =
        (0..rows * cols).map(|f| if keep(f / cols, f % cols) { 0.0 } else { f64::NEG_INFINITY }).collect();
    i.g.constant_tensor(HostTensor::from_f64_as(dtype, &[rows, cols], &v)?)
}

/// Attention: `softmax(softcap(q k^T scale) + bias) v` per head, with `bias` from
/// `attn_mask` (bool: attend where true; float: added), `is_causal` (query `i` sees keys
/// `<= i + past`) and `nonpad_kv_seqlen` (opset 24: keys past each batch's length are
/// masked). `past_key` / `past_value` are prepended along the sequence and returned as
/// the present outputs.
fn attention(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (q, k, v) = (i.input(n, 0)?, i.input(n, 1)?, i.input(n, 2)?);
    let mask = i.opt_input(n, 3)?;
    let (past_k, past_v) = (i.opt_input(n, 4)?, i.opt_input(n, 5)?);
    let nonpad = i.opt_input(n, 6)?;
    let dtype = i.g.dtype(q);
    if !dtype.is_float() || i.g.dtype(k) != dtype || i.g.dtype(v) != dtype {
        return Err(Error::dtype(format!(
            "Q, K and V must share one float type, got {}, {}, {}",
            i.g.describe(q),
            i.g.describe(k),
            i.g.describe(v)
        )));
    }
    let rank = i.g.dims(q).len();
    if i.g.dims(k).len() != rank || i.g.dims(v).len() != rank {
        return Err(Error::shape(format!(
            "Q, K and V differ in rank: {}, {}, {}",
            i.g.describe(q),
            i.g.describe(k),
            i.g.describe(v)
        )));
    }
    let (q, k, v) = match rank {
        4 => (q, k, v),
        3 => {
            let (Some(qh), Some(kvh)) = (heads(n, "q_num_heads")?, heads(n, "kv_num_heads")?) else {
                return Err(Error::shape("3-D inputs need the q_num_heads and kv_num_heads attributes"));
            };
            (split_heads(i, q, qh, "Q")?, split_heads(i, k, kvh, "K")?, split_heads(i, v, kvh, "V")?)
        }
        _ => return Err(rank_error(i, q, "Q")),
    };
    if past_k.is_some() != past_v.is_some() {
        return Err(Error::graph("past_key and past_value must be given together"));
    }
    let k = match past_k {
        Some(p) => i.g.concat(&[p, k], 2)?,
        None => k,
    };
    let v = match past_v {
        Some(p) => i.g.concat(&[p, v], 2)?,
        None => v,
    };
    let (qd, kd, vd) = (i.g.dims(q).to_vec(), i.g.dims(k).to_vec(), i.g.dims(v).to_vec());
    let (b, qh, sq, hd) = (qd[0], qd[1], qd[2], qd[3]);
    let (kvh, skv) = (kd[1], kd[2]);
    if kd[0] != b || vd[0] != b || vd[1] != kvh || vd[2] != skv || kd[3] != hd || kvh == 0 || !qh.is_multiple_of(kvh) {
        return Err(Error::shape(format!(
            "Q {qd:?}, K {kd:?} and V {vd:?} (with the past) are not [b, h, s, d] with q heads a multiple of kv heads"
        )));
    }
    let past = past_k.map_or(0, |p| i.g.dims(p)[2]);
    let scale = if n.has("scale") { n.float("scale", 1.0)? as f64 } else { 1.0 / (hd as f64).sqrt() };
    // sqrt(scale) on each side, as the spec's graph has it.
    let root = i.g.scalar_like(q, scale.sqrt())?;
    let qs = i.g.mul(q, root)?;
    let ks = i.g.mul(k, root)?;
    let ke = repeat_heads(i, ks, qh / kvh)?;
    let ve = repeat_heads(i, v, qh / kvh)?;
    let kt = i.g.transpose(ke, &[0, 1, 3, 2])?;
    let raw = i.g.matmul(qs, kt)?;
    let softcap = n.float("softcap", 0.0)? as f64;
    let capped = if softcap > 0.0 {
        let c = i.g.scalar_like(raw, softcap)?;
        let t = i.g.div(raw, c)?;
        let t = i.g.unary(Unary::Tanh, t)?;
        i.g.mul(t, c)?
    } else {
        raw
    };
    let mut bias = None;
    if let Some(m) = mask {
        let md = i.g.dims(m).to_vec();
        let Some(&last) = md.last() else { return Err(Error::shape("attn_mask is a scalar")) };
        let m = if i.g.dtype(m) == DType::Bool {
            let zero = i.g.scalar_f64(dtype, 0.0)?;
            let ninf = i.g.scalar_f64(dtype, f64::NEG_INFINITY)?;
            i.g.where_(m, zero, ninf)?
        } else if i.g.dtype(m) == dtype {
            m
        } else {
            return Err(Error::dtype(format!("attn_mask must be bool or {dtype}, got {}", i.g.describe(m))));
        };
        // A mask shorter than the keys is padded with -inf (the keys past it are masked).
        let m = match skv.checked_sub(last) {
            Some(0) => m,
            Some(pad) => {
                let mut pd = md.clone();
                if let Some(p) = pd.last_mut() {
                    *p = pad;
                }
                let fill = i.g.full(dtype, &pd, f64::NEG_INFINITY)?;
                i.g.concat(&[m, fill], md.len() - 1)?
            }
            None => return Err(Error::shape(format!("attn_mask {md:?} is longer than the {skv} keys"))),
        };
        bias = Some(m);
    }
    if n.int("is_causal", 0)? != 0 {
        let c = bias_table(i, dtype, sq, skv, |r, col| col <= r + past)?;
        bias = i.g.add_opt(bias, Some(c))?;
    }
    if let Some(len) = nonpad {
        if i.g.dims(len) != [b] || !i.g.dtype(len).is_int() {
            return Err(Error::shape(format!("nonpad_kv_seqlen must be integers [{b}], got {}", i.g.describe(len))));
        }
        let pos = i.g.iota(i.g.dtype(len), skv)?;
        let pos = i.g.reshape(pos, &[1, 1, 1, skv])?;
        let len = i.g.reshape(len, &[b, 1, 1, 1])?;
        let keep = i.g.compare(CompareOp::Lt, pos, len)?;
        let zero = i.g.scalar_f64(dtype, 0.0)?;
        let ninf = i.g.scalar_f64(dtype, f64::NEG_INFINITY)?;
        let pad = i.g.where_(keep, zero, ninf)?;
        bias = i.g.add_opt(bias, Some(pad))?;
    }
    let biased = match bias {
        Some(bias) => {
            let y = i.g.add(capped, bias)?;
            if i.g.dims(y) != [b, qh, sq, skv] {
                return Err(Error::shape(format!(
                    "attn_mask does not broadcast to the scores [{b}, {qh}, {sq}, {skv}]"
                )));
            }
            y
        }
        None => capped,
    };
    let probs = match n.int_opt("softmax_precision")? {
        None => i.g.softmax(biased, 3)?,
        Some(p) => {
            let p =
                crate::tensor::dtype_of(i32::try_from(p).map_err(|_| Error::parse(format!("softmax_precision {p}")))?)?;
            if !p.is_float() {
                return Err(Error::unsupported(format!("softmax_precision {p}")));
            }
            let wide = if p == dtype { biased } else { i.g.cast(biased, p)? };
            let s = i.g.softmax(wide, 3)?;
            if p == dtype { s } else { i.g.cast(s, dtype)? }
        }
    };
    let y = i.g.matmul(probs, ve)?;
    let y = if rank == 3 {
        let t = i.g.transpose(y, &[0, 2, 1, 3])?;
        let vdim = vd[3];
        i.g.reshape(t, &[b, sq, qh * vdim])?
    } else {
        y
    };
    let tap = match n.int("qk_matmul_output_mode", 0)? {
        0 => raw,
        1 => capped,
        2 => biased,
        3 => probs,
        m => return Err(Error::unsupported(format!("qk_matmul_output_mode {m}"))),
    };
    // Present K / V are the concatenated caches before any head repetition; a graph
    // output may not alias another node, so they are fresh nodes.
    let present_k = i.g.reshape(k, &kd)?;
    let present_v = i.g.reshape(v, &vd)?;
    Ok(vec![y, present_k, present_v, tap])
}

/// RotaryEmbedding: pairs of the first `rotary_embedding_dim` features (halves, or
/// adjacent pairs when `interleaved`) rotated by the cached cos / sin of each token's
/// position (`position_ids` rows of the caches, or caches already per token).
fn rotary_embedding(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, cos, sin) = (i.input(n, 0)?, i.input(n, 1)?, i.input(n, 2)?);
    let pos = i.opt_input(n, 3)?;
    let xd = i.g.dims(x).to_vec();
    // Work on [b, h, s, d] (4-D) or [b, s, h, d] (3-D split into heads); the caches
    // become [b, 1, s, r/2] or [b, s, 1, r/2] to match.
    let (x4, b, s, heads_first) = match xd[..] {
        [b, _, s, _] => (x, b, s, true),
        [b, s, hidden] => {
            let h = heads(n, "num_heads")?.ok_or_else(|| Error::shape("a 3-D input needs the num_heads attribute"))?;
            if !hidden.is_multiple_of(h) {
                return Err(Error::shape(format!("hidden size {hidden} is not a multiple of num_heads {h}")));
            }
            (i.g.reshape(x, &[b, s, h, hidden / h])?, b, s, false)
        }
        _ => return Err(Error::shape(format!("input must be 3-D or 4-D, got {}", i.g.describe(x)))),
    };
    let d = i.g.dims(x4)[3];
    let r = match n.int("rotary_embedding_dim", 0)? {
        0 => d,
        r => usize::try_from(r)
            .ok()
            .filter(|&r| r <= d && r.is_multiple_of(2))
            .ok_or_else(|| Error::shape(format!("rotary_embedding_dim {r} must be even and <= head size {d}")))?,
    };
    let half = r / 2;
    let cache_dims = if heads_first { [b, 1, s] } else { [b, s, 1] };
    let cached = |i: &mut Importer, c: NodeId, what: &str| -> Result<NodeId> {
        let c = match pos {
            Some(p) => i.g.gather(c, p)?,
            None => c,
        };
        if i.g.dims(c) != [b, s, half] {
            return Err(Error::shape(format!("{what} per token is {}, expected [{b}, {s}, {half}]", i.g.describe(c))));
        }
        i.g.reshape(c, &[b, cache_dims[1], cache_dims[2], half])
    };
    let (c, s) = (cached(i, cos, "cos_cache")?, cached(i, sin, "sin_cache")?);
    let xr = i.g.narrow(x4, 3, 0, r)?;
    let interleaved = n.int("interleaved", 0)? != 0;
    let rotated = if interleaved {
        let dims4 = i.g.dims(xr).to_vec();
        let pairs = [dims4[0], dims4[1], dims4[2], half, 2];
        let xp = i.g.reshape(xr, &pairs)?;
        let x1 = i.g.narrow(xp, 4, 0, 1)?;
        let x2 = i.g.narrow(xp, 4, 1, 1)?;
        let cd = [b, cache_dims[1], cache_dims[2], half, 1];
        let c5 = i.g.reshape(c, &cd)?;
        let s5 = i.g.reshape(s, &cd)?;
        let (re, im) = rotate(i, x1, x2, c5, s5)?;
        let y = i.g.concat(&[re, im], 4)?;
        i.g.reshape(y, &dims4)?
    } else {
        let x1 = i.g.narrow(xr, 3, 0, half)?;
        let x2 = i.g.narrow(xr, 3, half, half)?;
        let (re, im) = rotate(i, x1, x2, c, s)?;
        i.g.concat(&[re, im], 3)?
    };
    let y = if r < d {
        let rest = i.g.narrow(x4, 3, r, d - r)?;
        i.g.concat(&[rotated, rest], 3)?
    } else {
        rotated
    };
    one(if i.g.dims(y) == xd { y } else { i.g.reshape(y, &xd)? })
}

/// `(x1 cos - x2 sin, x1 sin + x2 cos)`.
fn rotate(i: &mut Importer, x1: NodeId, x2: NodeId, c: NodeId, s: NodeId) -> Result<(NodeId, NodeId)> {
    let a = i.g.mul(x1, c)?;
    let b = i.g.mul(x2, s)?;
    let re = i.g.sub(a, b)?;
    let a = i.g.mul(x1, s)?;
    let b = i.g.mul(x2, c)?;
    Ok((re, i.g.add(a, b)?))
}

/// RMSNormalization over axes `axis..`: `x / sqrt(mean(x^2) + eps) * scale`.
fn rms_norm(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, scale) = (i.input(n, 0)?, i.input(n, 1)?);
    let d = i.g.dims(x).to_vec();
    let a = axis(n.int("axis", -1)?, d.len())?;
    let eps = n.float("epsilon", 1e-5)?;
    if n.int("stash_type", 1)? != 1 {
        return Err(Error::unsupported("stash_type other than float"));
    }
    let inner = numel(&d[a..]);
    let tail = d[a..].to_vec();
    let xf = if a + 1 == d.len() { x } else { i.g.reshape(x, &[d[..a].to_vec(), vec![inner]].concat())? };
    let g = i.g.broadcast_to(scale, &tail)?;
    let g = if tail.len() == 1 { g } else { i.g.reshape(g, &[inner])? };
    let y = i.g.rms_norm(xf, Some(g), eps)?;
    one(if a + 1 == d.len() { y } else { i.g.reshape(y, &d)? })
}
