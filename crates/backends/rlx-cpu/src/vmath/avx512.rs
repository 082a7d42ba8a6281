//! What the hand-scheduled AVX-512 kernels (`log_avx512`, `tanh_avx512`, `gelu_avx512`)
//! share: the loop that maps a 16-lane function over memory, the leaf sum built on it,
//! their tables and the per-interval polynomial of tanh and gelu.

use std::arch::x86_64::*;

/// A hand-scheduled AVX-512 map: `out[i] = f(x[i])` for `i < n`; `out` may be `x` (the
/// in-place kernel). Unsafe: the caller checked the CPU has AVX-512 F/BW/VL/DQ, AVX2 and
/// FMA, and that `x` and `out` hold `n` values.
pub(super) type Map = unsafe fn(*const f32, *mut f32, usize);

/// Defines `$name: Map` from a 16-lane function `$f(__m512) -> __m512`: 16 values at a
/// time, the tail through masked loads and stores.
macro_rules! map_avx512 {
    ($name:ident, $f:ident) => {
        /// # Safety
        /// AVX-512 F/BW/VL/DQ, AVX2 and FMA are available; `x` and `out` hold `n` values
        /// (`out` may be `x`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
        pub(super) unsafe fn $name(x: *const f32, out: *mut f32, n: usize) {
            let mut i = 0;
            while i + 16 <= n {
                // SAFETY: i + 16 <= n: inside both buffers. Each lane is read before it is written.
                unsafe { _mm512_storeu_ps(out.add(i), $f(_mm512_loadu_ps(x.add(i)))) };
                i += 16;
            }
            if i < n {
                let mask: __mmask16 = ((1u32 << (n - i)) - 1) as u16;
                // SAFETY: the masked lanes [i, n) lie inside both buffers.
                unsafe {
                    let v = _mm512_maskz_loadu_ps(mask, x.add(i));
                    _mm512_mask_storeu_ps(out.add(i), mask, $f(v));
                }
            }
        }
    };
}

/// The leaf sum of `map`'s values over `x` (at most `SUM_BLOCK` of them): the values, then
/// the lane order of [`crate::kernels::rows::sum_map`], as the other arms' leaf sums.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2 and FMA are available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(super) unsafe fn leaf_sum(map: Map, x: &[f32]) -> f32 {
    let mut values = [0f32; rlx_ir::ops::reduce::SUM_BLOCK];
    let values = &mut values[..x.len()];
    // SAFETY: the caller checked the CPU; `values` holds x.len() values.
    unsafe { map(x.as_ptr(), values.as_mut_ptr(), x.len()) };
    crate::kernels::rows::sum_map(values, |v| v)
}

/// A 32-entry table in two registers, the operands of `vpermt2ps`.
#[derive(Clone, Copy)]
pub(super) struct Table([__m512; 2]);

impl Table {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub(super) fn load(values: &[u32; 32]) -> Table {
        // SAFETY: both loads read 16 values inside `values`.
        unsafe {
            let p = values.as_ptr().cast::<f32>();
            Table([_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))])
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub(super) fn get(self, index: __m512i) -> __m512 {
        _mm512_permutex2var_ps(self.0[0], index, self.0[1])
    }
}

/// A degree-5 polynomial on each of 32 intervals of a >= 0, read off a's top bits (bits >>
/// 21: the exponent and two mantissa bits, four intervals a binade over [2^-4, 16); a <
/// 2^-4 takes interval 0, through max(a, 2^-4)): p(a) = c0 + t*(c1 + ... + t*c5) with t =
/// a - b, b and each c one `vpermt2ps` lookup (`vpermt2ps` reads the index's low 5 bits,
/// so the tables are stored rotated by 492 mod 32, 492 = bits(2^-4) >> 21). tanh's and
/// gelu's kernels.
#[derive(Clone, Copy)]
pub(super) struct IntervalPoly {
    b: Table,
    c: [Table; 6],
}

impl IntervalPoly {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub(super) fn load(b: &[u32; 32], c: [&[u32; 32]; 6]) -> IntervalPoly {
        // Each load spelled out: through a closure (`c.map`, which has no target features)
        // the loads stayed out of line, in the loop: gelu on 98304 values 72 -> 478 us.
        let c = [
            Table::load(c[0]),
            Table::load(c[1]),
            Table::load(c[2]),
            Table::load(c[3]),
            Table::load(c[4]),
            Table::load(c[5]),
        ];
        IntervalPoly { b: Table::load(b), c }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub(super) fn eval(self, a: __m512) -> __m512 {
        let index = _mm512_srli_epi32::<21>(_mm512_castps_si512(_mm512_max_ps(a, _mm512_set1_ps(1.0 / 16.0))));
        let t = _mm512_sub_ps(a, self.b.get(index));
        let mut p = self.c[5].get(index);
        for ck in self.c[..5].iter().rev() {
            p = _mm512_fmadd_ps(p, t, ck.get(index));
        }
        p
    }
}
