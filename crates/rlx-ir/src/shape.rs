//! Shape helpers shared by the op rules and the backends.

use crate::{DType, Error, Result};

/// Number of elements of `dims`, or `None` on overflow.
pub fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Number of elements of a shape already known not to overflow (every graph node's is).
pub fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// `numel(dims) * dtype.size_bytes()`, checked; the error names `what`. The product of
/// the nonzero dims must fit too (as NumPy requires): a kernel's strides and row sizes
/// are products of some of the dims, and `[0, 2, 3, 2^64 - 1]` holds no element yet
/// overflowed every one of them (found by the graph_run fuzzer).
pub fn checked_byte_len(what: &str, dtype: DType, dims: &[usize]) -> Result<usize> {
    let nonzero = dims.iter().try_fold(dtype.size_bytes(), |acc, &d| acc.checked_mul(d.max(1)));
    nonzero
        .and_then(|_| checked_numel(dims))
        .and_then(|n| n.checked_mul(dtype.size_bytes()))
        .ok_or_else(|| Error::shape(format!("{what}: shape {} of {dtype} overflows usize", fmt_dims(dims))))
}

/// Row-major strides (in elements) of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// `[2,3]` style.
pub fn fmt_dims(dims: &[usize]) -> String {
    let inner: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", inner.join(","))
}

/// `f32[2,3]` style.
pub fn fmt_type(dtype: DType, dims: &[usize]) -> String {
    format!("{dtype}{}", fmt_dims(dims))
}

/// NumPy broadcasting of two shapes, or `None` when they are incompatible.
pub fn broadcast_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Element strides that read `src` (right-aligned) as if it had shape `out`:
/// 0 along broadcast axes. `src` must broadcast to `out`.
pub fn broadcast_strides(src: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(src);
    let lead = out.len() - src.len();
    (0..out.len()).map(|i| if i < lead || src[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_dims(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_dims(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_dims(&[0], &[1]), Some(vec![0]));
        assert_eq!(broadcast_dims(&[2], &[3]), None);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
    }

    #[test]
    fn overflow_is_caught() {
        assert!(checked_numel(&[usize::MAX, 2]).is_none());
        assert!(checked_byte_len("x", DType::F64, &[usize::MAX / 4]).is_err());
    }
}
