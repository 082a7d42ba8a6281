//! The 16-bit activation path's long products (a prompt pass): an integer GEMM over
//! weights unpacked once per call.
//!
//! Every supported scheme decodes to `w = sw * u + ow` per group of `G` values (32, or 16
//! for the sub-blocks of Q2_K, Q3_K and Q6_K), with `u` a small unsigned integer: Q4_0 `u = q`, `ow = -8 d`;
//! Q4_1 / Q5_1 `ow = m`; Q5_0 `ow = -16 d`; Q8_0 `u = q + 128`, `ow = -128 d`; Q4_K / Q5_K
//! `sw = d sc`, `ow = -dmin mn`; Q6_K `sw = d sc`, `ow = -32 d sc`; per 16 values Q2_K
//! `sw = d sc`, `ow = -dmin mn`, Q3_K `u = q + 4`, `ow = -4 d sc`. With an activation row
//! quantized as `x = da * q` per block of 32 (16-bit `q`), one output is
//!
//! `sum_g da_g (sw_g * sum_{k in g} u_k q_k + ow_g * sum_{k in g} q_k)`,
//!
//! the inner sums exact in 32-bit integers (at most 32 x 255 x 32767 < 2^31).
//!
//! The weights of 48 output columns (a panel) are unpacked once into `vpdpwssd` order
//! (16 columns x 2 consecutive weights per vector), then every activation row streams
//! past them: per group, `G / 2` integer dot instructions for 16 columns x 1 row (32
//! products each, twice an f32 FMA's 16), one conversion and two FMAs. Each output's sum
//! runs in one order whatever the row or thread count.

use super::q8_packed::{self, Packed};
use crate::features::{Arm, features};
use crate::multiversion;
use rlx_ir::quant::{QuantScheme, k_scale_min};

/// Output columns per vector, and vectors per panel.
const LANES: usize = 16;
const VECS: usize = 3;
const PANEL: usize = LANES * VECS;

/// Whether this GEMM runs `scheme` on `arm` on this host: with AVX-512 VNNI, or with AVX2
/// (`vpmaddwd` + `vpaddd` for `vpdpwssd`, 8 columns a register; the same integer sums and
/// f32 steps, so the same bits).
pub fn available(scheme: QuantScheme, arm: Arm) -> bool {
    let f = features();
    cfg!(target_arch = "x86_64")
        && (vnni(arm) || (arm >= Arm::Avx2 && f.has_avx2_fma() && f.f16c))
        && group_size(scheme).is_some()
}

/// Whether `arm` takes the AVX-512 VNNI kernels on this host.
pub fn vnni(arm: Arm) -> bool {
    let f = features();
    arm >= Arm::Avx512 && f.has_avx512() && f.avx512vnni
}

/// Values per scale group (`sw`, `ow`) of the unpacked weights.
pub(super) fn group_size(scheme: QuantScheme) -> Option<usize> {
    match scheme {
        QuantScheme::Q4_0
        | QuantScheme::Q4_1
        | QuantScheme::Q5_0
        | QuantScheme::Q5_1
        | QuantScheme::Q8_0
        | QuantScheme::Q4K
        | QuantScheme::Q5K => Some(32),
        QuantScheme::Q2K | QuantScheme::Q3K | QuantScheme::Q6K => Some(16),
        _ => None,
    }
}

/// Activation rows quantized to 16 bits, element order: `q` holds `k` values a row, `d`
/// one scale per 32 values, `ds[g] = d * sum(q in g)` per weight group.
pub(super) struct Acts<'a> {
    pub m: usize,
    pub k: usize,
    pub q: &'a [i16],
    pub d: &'a [f32],
    pub ds: &'a [f32],
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    rlx_ir::f16_bits_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The 32 nibbles of a 4-bit block: low halves first, then high halves.
#[inline(always)]
fn nibbles(qs: &[u8], u: &mut [u8]) {
    let (qs, u) = (&qs[..16], &mut u[..32]);
    for j in 0..16 {
        u[j] = qs[j] & 0xF;
        u[j + 16] = qs[j] >> 4;
    }
}

/// ORs bit `j` of `qh` into value `j` as its fifth bit (Q5_0, Q5_1).
#[inline(always)]
fn fifth_bits(qh: u32, u: &mut [u8]) {
    for (j, v) in u[..32].iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) as u8) << 4;
    }
}

/// Block `b`'s quants as unsigned bytes `u`, element order: Q4_0 / Q4_1 / Q5_0 / Q5_1 /
/// Q2_K / Q3_K / Q4_K / Q5_K / Q6_K their stored values (offsets apart: see `unpack_block`), Q8_0 its
/// signed values biased by +128. Shared with the row kernels of `quant_matmul`.
#[inline(always)]
pub(super) fn quants(scheme: QuantScheme, b: &[u8], u: &mut [u8]) {
    match scheme {
        QuantScheme::Q4_0 => nibbles(&b[2..18], u),
        QuantScheme::Q4_1 => nibbles(&b[4..20], u),
        QuantScheme::Q5_0 => {
            nibbles(&b[6..22], u);
            fifth_bits(u32::from_le_bytes([b[2], b[3], b[4], b[5]]), u);
        }
        QuantScheme::Q5_1 => {
            nibbles(&b[8..24], u);
            fifth_bits(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), u);
        }
        QuantScheme::Q8_0 => {
            for (v, &q) in u[..32].iter_mut().zip(&b[2..34]) {
                *v = q ^ 0x80;
            }
        }
        QuantScheme::Q4K | QuantScheme::Q5K => {
            let (qh, qs) =
                if scheme == QuantScheme::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for pair in 0..4 {
                for l in 0..32 {
                    let byte = qs[pair * 32 + l];
                    let (mut lo, mut hi) = (byte & 0xF, byte >> 4);
                    if let Some(qh) = qh {
                        lo |= ((qh[l] >> (2 * pair)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * pair + 1)) & 1) << 4;
                    }
                    u[pair * 64 + l] = lo;
                    u[pair * 64 + 32 + l] = hi;
                }
            }
        }
        QuantScheme::Q6K => {
            let (ql, qh) = (&b[0..128], &b[128..192]);
            for h in 0..2 {
                let (ql, qh, u) = (&ql[h * 64..][..64], &qh[h * 32..][..32], &mut u[h * 128..][..128]);
                for l in 0..32 {
                    let hb = qh[l];
                    u[l] = (ql[l] & 0xF) | ((hb & 3) << 4);
                    u[l + 32] = (ql[l + 32] & 0xF) | (((hb >> 2) & 3) << 4);
                    u[l + 64] = (ql[l] >> 4) | (((hb >> 4) & 3) << 4);
                    u[l + 96] = (ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4);
                }
            }
        }
        QuantScheme::Q2K | QuantScheme::Q3K => {
            // Value e = 128 h + 32 s + l: bits 2 s of byte 32 h + l; Q3_K's third bit is
            // bit e / 32 of hmask[l].
            let (qs, hmask) =
                if scheme == QuantScheme::Q3K { (&b[32..96], Some(&b[0..32])) } else { (&b[16..80], None) };
            for (e, u) in u[..256].iter_mut().enumerate() {
                let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
                *u = (qs[32 * h + l] >> (2 * s)) & 3;
                if let Some(hmask) = hmask {
                    *u |= ((hmask[l] >> (e / 32)) & 1) << 2;
                }
            }
        }
        _ => unreachable!("quants: {scheme:?} has no unpacked form"),
    }
}

/// Block `b` of `scheme` as unsigned bytes `u` (element order, [`quants`]) and per-group
/// `sw`, `ow` (`w = sw * u + ow`). Inlined into each arm of `unpack_rows`, so that its
/// loops vectorize there.
#[inline(always)]
fn unpack_block(scheme: QuantScheme, b: &[u8], u: &mut [u8], sw: &mut [f32], ow: &mut [f32]) {
    quants(scheme, b, u);
    match scheme {
        QuantScheme::Q4_0 | QuantScheme::Q5_0 | QuantScheme::Q8_0 => {
            let d = f16_at(b, 0);
            let offset = match scheme {
                QuantScheme::Q4_0 => -8.0,
                QuantScheme::Q5_0 => -16.0,
                _ => -128.0,
            };
            (sw[0], ow[0]) = (d, offset * d);
        }
        QuantScheme::Q4_1 | QuantScheme::Q5_1 => (sw[0], ow[0]) = (f16_at(b, 0), f16_at(b, 2)),
        QuantScheme::Q4K | QuantScheme::Q5K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let (sc, mn) = k_scale_min(&b[4..16]);
            for j in 0..8 {
                (sw[j], ow[j]) = (d * sc[j] as f32, -dmin * mn[j] as f32);
            }
        }
        QuantScheme::Q2K => {
            // 16 sub-blocks, each a 4-bit scale (low nibble) and min (high).
            let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
            for (g, &s) in b[..16].iter().enumerate() {
                (sw[g], ow[g]) = (d * (s & 0xF) as f32, -dmin * (s >> 4) as f32);
            }
        }
        QuantScheme::Q3K => {
            // 16 signed sub-block scales, quants stored as q + 4.
            let d = f16_at(b, 108);
            for (g, s) in rlx_ir::quant::q3k_scales(&b[96..108]).into_iter().enumerate() {
                let scale = d * s as f32;
                (sw[g], ow[g]) = (scale, -4.0 * scale);
            }
        }
        _ => {
            // Q6_K: 16 signed sub-block scales, quants stored as q + 32.
            let d = f16_at(b, 208);
            for (g, &s) in b[192..208].iter().enumerate() {
                let scale = d * (s as i8) as f32;
                (sw[g], ow[g]) = (scale, -32.0 * scale);
            }
        }
    }
}

/// One panel's unpacked weights: `values[p][v]` is a vector of 16 columns x weights
/// `2p, 2p + 1` as `i16` pairs (`vpdpwssd`'s operand), stored as one `u32` per column;
/// `sw[g][v]`, `ow[g][v]` their 16 columns' group terms. Columns past the weight rows are
/// zero. `rows` is scratch: the panel's weights as bytes, a row per column.
#[derive(Default)]
struct Panel {
    values: Vec<u32>,
    sw: Vec<f32>,
    ow: Vec<f32>,
    rows: Vec<u8>,
}

thread_local! {
    /// Each thread's panel, grown to the largest product it has run: a prompt pass of 211
    /// products allocated and zeroed ~300 KiB per product (and per parallel split) when
    /// each call made its own.
    static THREAD_PANEL: std::cell::RefCell<Panel> = std::cell::RefCell::new(Panel::default());
}

/// Runs `f` with this thread's panel, holding at least the buffers for `k` and groups of `g`
/// (longer ones from earlier calls are fine: every access is at computed offsets).
fn with_panel<R>(k: usize, g: usize, f: impl FnOnce(&mut Panel) -> R) -> R {
    fn grow<T: Clone + Default>(v: &mut Vec<T>, len: usize) {
        if v.len() < len {
            v.resize(len, T::default());
        }
    }
    THREAD_PANEL.with(|cell| {
        let panel = &mut *cell.borrow_mut();
        let terms = k / g * PANEL;
        grow(&mut panel.values, k / 2 * PANEL);
        grow(&mut panel.sw, terms);
        grow(&mut panel.ow, terms);
        grow(&mut panel.rows, k * PANEL);
        f(panel)
    })
}

impl Panel {
    /// Unpacks weight rows `w` (`n` whole rows of `k` values, at most `PANEL`).
    fn fill(&mut self, arm: Arm, scheme: QuantScheme, k: usize, g: usize, w: &[u8], n: usize) {
        if n < PANEL {
            self.rows.fill(0);
            self.sw.fill(0.0);
            self.ow.fill(0.0);
        }
        unpack_rows(arm, scheme, k, g, w, n, self);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: panels are filled only where `available` found AVX-512 BW/VL (`vnni`)
        // or AVX2; `rows` holds PANEL rows of k bytes and `values` k / 2 x PANEL words.
        unsafe {
            if vnni(arm) {
                x86::interleave_avx512(k, &self.rows, &mut self.values)
            } else {
                x86::interleave_avx2(k, &self.rows, &mut self.values)
            }
        };
    }
}

multiversion! {
    /// Each of the `n` weight rows in `w` as bytes (the panel's `rows`, `k` a row) and its
    /// group terms (`sw`, `ow` in panel order).
    fn unpack_rows(scheme: QuantScheme, k: usize, g: usize, w: &[u8], n: usize, panel: &mut Panel) {
        let Panel { rows, sw, ow, .. } = panel;
        let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
        let rb = k / bs * bb;
        let (mut bsw, mut bow) = ([0f32; 16], [0f32; 16]);
        let per_block = bs / g;
        for col in 0..n {
            let (v, lane) = (col / LANES, col % LANES);
            let row = &mut rows[col * k..][..k];
            for (c, block) in w[col * rb..][..rb].chunks_exact(bb).enumerate() {
                unpack_block(scheme, block, &mut row[c * bs..][..bs], &mut bsw, &mut bow);
                for gi in 0..per_block {
                    let at = ((c * per_block + gi) * VECS + v) * LANES + lane;
                    (sw[at], ow[at]) = (bsw[gi], bow[gi]);
                }
            }
        }
    }
}

/// `out [m, n] = x @ W^T` for the 16-bit activations `acts` and the `n` weight rows in `w`,
/// split by panels across the current pool's threads (at most `threads`).
/// With `packed` (the weight as the 8-bit decode reads it, 16 rows side by side), panels
/// are filled from it instead of `w`, with the same values: `w`'s pages are then never
/// read (a model drops them, see `ParamBuffer::with_page_release`).
pub(super) fn gemm(
    arm: Arm,
    scheme: QuantScheme,
    acts: &Acts,
    (w, packed): (&[u8], Option<&Packed>),
    n: usize,
    threads: usize,
    out: &mut [f32],
) {
    // The vector code below runs only on this check.
    assert!(available(scheme, arm), "quant_gemm: {scheme:?} on {arm:?} is not available on this host");
    let (m, k) = (acts.m, acts.k);
    let g = group_size(scheme).unwrap_or(32);
    let rb = k / scheme.block_size() * scheme.block_bytes();
    assert!(
        out.len() == m * n
            && w.len() == n * rb
            && acts.q.len() == m * k
            && acts.d.len() == m * k / 32
            && acts.ds.len() == m * k / g
            && packed.is_none_or(|p| (p.scheme, p.n, p.k) == (scheme, n, k) && q8_packed::available(scheme, arm))
    );
    // Each panel writes only its own columns of each row (below).
    let base = super::SharedOut::new(out);
    let run = |p: usize, panel: &mut Panel| {
        let j0 = p * PANEL;
        let cols = PANEL.min(n - j0);
        match packed {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `q8_packed::available` (checked above) found AVX-512 BW/VL and F16C
            // (`vnni`) or AVX2 and F16C; the packed weight is this one; the panel holds
            // k / 2 x PANEL words and k / 32 x PANEL terms.
            Some(packed) => unsafe {
                if vnni(arm) {
                    x86::fill_packed_avx512(packed, j0 / q8_packed::ROWS, panel)
                } else {
                    x86::fill_packed_avx2(packed, j0 / q8_packed::ROWS, panel)
                }
            },
            _ => panel.fill(arm, scheme, k, g, &w[j0 * rb..][..cols * rb], cols),
        }
        // SAFETY: out holds m * n values; this panel writes columns j0..j0 + cols of each
        // row, which no other panel touches; the features were checked by `available`.
        unsafe { panel_rows(vnni(arm), panel, g, acts, base.at(j0), n, cols) };
    };
    let panels = n.div_ceil(PANEL);
    let threads = crate::threads::current().min(threads);
    if threads <= 1 || panels == 1 {
        with_panel(k, g, |panel| (0..panels).for_each(|p| run(p, panel)));
    } else {
        use rayon::prelude::*;
        (0..panels).into_par_iter().for_each(|p| with_panel(k, g, |panel| run(p, panel)));
    }
}

/// Every activation row against one panel: with `vnni`, [`x86::tile_avx512`] 4 rows at a
/// time, else [`x86::tile_avx2`] 2 at a time.
///
/// # Safety
/// The host has AVX-512 F/BW/VL/DQ and VNNI (`vnni`) or AVX2 and FMA; `out` points at
/// column 0 of the panel in an `m x n` row-major output, `cols` of its columns are written.
unsafe fn panel_rows(vnni: bool, panel: &Panel, g: usize, acts: &Acts, out: *mut f32, n: usize, cols: usize) {
    let m = acts.m;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as the caller guarantees.
    unsafe {
        let mut i = 0;
        macro_rules! tiles {
            ($tile:ident, $rows:literal) => {{
                while m - i >= $rows {
                    let o = out.add(i * n);
                    if g == 16 {
                        x86::$tile::<$rows, 16>(panel, acts, i, o, n, cols);
                    } else {
                        x86::$tile::<$rows, 32>(panel, acts, i, o, n, cols);
                    }
                    i += $rows;
                }
            }};
        }
        if vnni {
            tiles!(tile_avx512, 4);
            tiles!(tile_avx512, 1);
        } else {
            tiles!(tile_avx2, 2);
            tiles!(tile_avx2, 1);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (vnni, panel, g, acts, out, n, cols);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::q8_packed::x86::add_block;
    use super::{Acts, LANES, PANEL, Packed, Panel, VECS};
    use rlx_ir::quant::QuantScheme;
    use std::arch::x86_64::*;

    /// The panel of columns `16 g0..16 g0 + 48` from the repacked weight: per block, each
    /// 4-value step of 16 rows (a 64-byte vector, nibbles split as the 8-bit kernel does)
    /// gives two pairs, its dwords' low and high halves narrowed to words and the bytes
    /// widened; the group terms as the 8-bit kernel forms them (`q8_packed::x86::terms`).
    /// Groups past the weight are zeros.
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL and F16C; the panel was made for `p.k` and the scheme's
    /// groups ([`super::group_size`]).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
    pub unsafe fn fill_packed_avx512(p: &Packed, g0: usize, panel: &mut Panel) {
        use super::q8_packed::{group_bytes, quants_offset};
        let nb = p.k / 32;
        let (gb, per_block) = (group_bytes(p.scheme, p.k), 32 / super::group_size(p.scheme).unwrap_or(32));
        let groups = p.n.div_ceil(LANES);
        let terms = nb * per_block * PANEL;
        assert!(panel.values.len() >= nb * 16 * PANEL && panel.sw.len() >= terms && panel.ow.len() >= terms);
        let bytes = p.bytes();
        if g0 + VECS > groups {
            panel.values.fill(0);
            panel.sw.fill(0.0);
            panel.ow.fill(0.0);
        }
        // SAFETY (whole body): each group read lies in `bytes` (g0 + v < groups); stores
        // write pair (16 b + 2 t + 1) of vector v and term (b per_block + h, v), inside the
        // panel.
        unsafe {
            let values = panel.values.as_mut_ptr();
            for v in 0..VECS.min(groups - g0) {
                let group = bytes.as_ptr().add((g0 + v) * gb);
                for b in 0..nb {
                    let at = group.add(quants_offset(p.scheme, b));
                    let steps = super::q8_packed::x86::steps(p.scheme, at);
                    for (t, &s) in steps.iter().enumerate() {
                        let pair = b * 16 + 2 * t;
                        let low = _mm512_cvtepu8_epi16(_mm512_cvtepi32_epi16(s));
                        let high = _mm512_cvtepu8_epi16(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(s)));
                        _mm512_storeu_si512(values.add((pair * VECS + v) * LANES) as *mut __m512i, low);
                        _mm512_storeu_si512(values.add(((pair + 1) * VECS + v) * LANES) as *mut __m512i, high);
                    }
                    for h in 0..per_block {
                        let (sw, ow) = super::q8_packed::x86::terms(p.scheme, group, b, h);
                        let term = ((b * per_block + h) * VECS + v) * LANES;
                        _mm512_storeu_ps(panel.sw.as_mut_ptr().add(term), sw);
                        _mm512_storeu_ps(panel.ow.as_mut_ptr().add(term), ow);
                    }
                }
            }
        }
    }

    /// The 32 bytes (16 pairs) at `at` of 16 rows `k` apart, transposed by 16-bit pairs in
    /// three unpack stages (shared by both interleave arms): `w[c]` (rows 0-7) and
    /// `w[8 + c]` (rows 8-15) hold pair `c` in their low 128 bits and pair `c + 8` in
    /// their high ones, which the arms join with `vperm2i128`.
    ///
    /// # Safety
    /// The caller has AVX2; 16 rows of 32 bytes lie at `at`, `k` apart.
    #[inline(always)]
    unsafe fn transpose_pairs(at: *const u8, k: usize) -> [__m256i; 16] {
        // SAFETY: as the caller guarantees.
        unsafe {
            let zero = _mm256_setzero_si256();
            let mut r = [zero; 16];
            for (lane, r) in r.iter_mut().enumerate() {
                *r = _mm256_loadu_si256(at.add(lane * k) as *const __m256i);
            }
            // Rows 2i, 2i + 1 interleaved by pair: pairs 0-3 (4-7) of each half.
            let mut t = [zero; 16];
            for i in 0..8 {
                t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
            }
            // Rows 4i..4i + 4 by two pairs: u[4i + c] holds pairs 2c, 2c + 1.
            let mut u = [zero; 16];
            for i in 0..4 {
                u[4 * i] = _mm256_unpacklo_epi32(t[4 * i], t[4 * i + 2]);
                u[4 * i + 1] = _mm256_unpackhi_epi32(t[4 * i], t[4 * i + 2]);
                u[4 * i + 2] = _mm256_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
                u[4 * i + 3] = _mm256_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
            }
            // Rows 8j..8j + 8: w[8j + c] holds pair c (low half) and c + 8 (high).
            let mut w = [zero; 16];
            for j in 0..2 {
                for c in 0..4 {
                    w[8 * j + 2 * c] = _mm256_unpacklo_epi64(u[8 * j + c], u[8 * j + 4 + c]);
                    w[8 * j + 2 * c + 1] = _mm256_unpackhi_epi64(u[8 * j + c], u[8 * j + 4 + c]);
                }
            }
            w
        }
    }

    /// `values[p][v][lane] = rows[16 v + lane][2p, 2p + 1]` widened to an `i16` pair: per
    /// 16 columns x 16 pairs, a 16 x 16 transpose of 16-bit pairs in four unpack stages,
    /// then each pair's bytes zero-extended (strided byte loads cost ~2.5 cycles a weight:
    /// most of a 4-row product's time).
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL and AVX2.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
    pub unsafe fn interleave_avx512(k: usize, rows: &[u8], values: &mut [u32]) {
        assert!(k.is_multiple_of(32) && rows.len() >= VECS * LANES * k && values.len() >= k / 2 * VECS * LANES);
        // SAFETY (whole body): loads read 32 bytes at pair p0 of a row (2 p0 + 32 <= k);
        // stores write 16 words at pair p0 + c of vector v, inside `values` (checked above).
        unsafe {
            let (src, dst) = (rows.as_ptr(), values.as_mut_ptr());
            for v in 0..VECS {
                for p0 in (0..k / 2).step_by(16) {
                    let w = transpose_pairs(src.add(v * LANES * k + 2 * p0), k);
                    for c in 0..8 {
                        let lo = _mm256_permute2x128_si256::<0x20>(w[c], w[8 + c]);
                        let hi = _mm256_permute2x128_si256::<0x31>(w[c], w[8 + c]);
                        let at = |pair: usize| dst.add((pair * VECS + v) * LANES) as *mut __m512i;
                        _mm512_storeu_si512(at(p0 + c), _mm512_cvtepu8_epi16(lo));
                        _mm512_storeu_si512(at(p0 + c + 8), _mm512_cvtepu8_epi16(hi));
                    }
                }
            }
        }
    }

    /// [`interleave_avx512`] on AVX2: the same transpose, each pair's bytes zero-extended
    /// 16 at a time.
    ///
    /// # Safety
    /// The host has AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn interleave_avx2(k: usize, rows: &[u8], values: &mut [u32]) {
        assert!(k.is_multiple_of(32) && rows.len() >= VECS * LANES * k && values.len() >= k / 2 * VECS * LANES);
        // SAFETY (whole body): as in `interleave_avx512`.
        unsafe {
            let (src, dst) = (rows.as_ptr(), values.as_mut_ptr());
            for v in 0..VECS {
                for p0 in (0..k / 2).step_by(16) {
                    let w = transpose_pairs(src.add(v * LANES * k + 2 * p0), k);
                    for c in 0..8 {
                        let lo = _mm256_permute2x128_si256::<0x20>(w[c], w[8 + c]);
                        let hi = _mm256_permute2x128_si256::<0x31>(w[c], w[8 + c]);
                        for (pair, x) in [(p0 + c, lo), (p0 + c + 8, hi)] {
                            let at = dst.add((pair * VECS + v) * LANES) as *mut __m256i;
                            _mm256_storeu_si256(at, _mm256_cvtepu8_epi16(_mm256_castsi256_si128(x)));
                            _mm256_storeu_si256(at.add(1), _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(x)));
                        }
                    }
                }
            }
        }
    }

    /// [`fill_packed_avx512`] on AVX2: each half group's steps (8 rows a register) give
    /// the pairs of those 8 columns, the dwords' low and high halves gathered by a byte
    /// shuffle and the bytes widened.
    ///
    /// # Safety
    /// The host has AVX2 and F16C; the panel was made for `p.k` and the scheme's groups.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn fill_packed_avx2(p: &Packed, g0: usize, panel: &mut Panel) {
        use super::q8_packed::{group_bytes, quants_offset};
        let nb = p.k / 32;
        let (gb, per_block) = (group_bytes(p.scheme, p.k), 32 / super::group_size(p.scheme).unwrap_or(32));
        let groups = p.n.div_ceil(LANES);
        let terms = nb * per_block * PANEL;
        assert!(panel.values.len() >= nb * 16 * PANEL && panel.sw.len() >= terms && panel.ow.len() >= terms);
        let bytes = p.bytes();
        if g0 + VECS > groups {
            panel.values.fill(0);
            panel.sw.fill(0.0);
            panel.ow.fill(0.0);
        }
        // SAFETY (whole body): as in `fill_packed_avx512`.
        unsafe {
            // Per 128-bit lane: the low words of its 4 dwords, then the high words.
            let split = _mm256_setr_epi8(
                0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, //
                0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
            );
            let bias = _mm256_set1_epi8(if p.scheme == QuantScheme::Q8_0 { -128 } else { 0 });
            let values = panel.values.as_mut_ptr();
            for v in 0..VECS.min(groups - g0) {
                let group = bytes.as_ptr().add((g0 + v) * gb);
                for b in 0..nb {
                    let at = group.add(quants_offset(p.scheme, b));
                    for half in 0..2 {
                        // Q8_0's steps come signed; the panel holds them biased (`u = q + 128`).
                        let steps = super::q8_packed::x86::half_steps_avx2(p.scheme, at, half);
                        for (t, &s) in steps.iter().enumerate() {
                            let pair = b * 16 + 2 * t;
                            let words = _mm256_shuffle_epi8(_mm256_xor_si256(s, bias), split);
                            // Qwords: [low words rows 0-3, high 0-3, low 4-7, high 4-7].
                            let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(words);
                            let (low, high) = (_mm256_castsi256_si128(words), _mm256_extracti128_si256::<1>(words));
                            let dst = values.add((pair * VECS + v) * LANES + 8 * half) as *mut __m256i;
                            _mm256_storeu_si256(dst, _mm256_cvtepu8_epi16(low));
                            _mm256_storeu_si256(dst.add(VECS * LANES / 8), _mm256_cvtepu8_epi16(high));
                        }
                        for h in 0..per_block {
                            let (sw, ow) = super::q8_packed::x86::terms_avx2(p.scheme, group, b, h, half);
                            let term = ((b * per_block + h) * VECS + v) * LANES + 8 * half;
                            _mm256_storeu_ps(panel.sw.as_mut_ptr().add(term), sw);
                            _mm256_storeu_ps(panel.ow.as_mut_ptr().add(term), ow);
                        }
                    }
                }
            }
        }
    }

    /// [`tile_avx512`] on AVX2: per group and step, each (row, 8 columns) one `vpmaddwd`
    /// and `vpaddd` (the same integer sums as `vpdpwssd`), then `add_block`'s f32 steps.
    /// 2 rows x 6 registers of sums: SmolLM2's pp512, AMD EPYC Zen 3, 72 / 112-117
    /// GFLOP/s at 1 / 2 threads; 5 rows x 2 registers a pass (each weight load feeding 5
    /// products) was 11-24% slower in alternating runs.
    ///
    /// # Safety
    /// As `tile_avx512`, the host having AVX2 and FMA.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_avx2<const R: usize, const G: usize>(
        panel: &Panel,
        acts: &Acts,
        i0: usize,
        out: *mut f32,
        n: usize,
        cols: usize,
    ) {
        const HALVES: usize = 2 * VECS;
        let k = acts.k;
        let groups = k / G;
        let steps = G / 2;
        // SAFETY (whole body): as in `tile_avx512`.
        unsafe {
            let (wp, swp, owp) = (panel.values.as_ptr(), panel.sw.as_ptr(), panel.ow.as_ptr());
            let (mut q, mut d, mut ds) =
                ([std::ptr::null::<i16>(); R], [std::ptr::null::<f32>(); R], [std::ptr::null::<f32>(); R]);
            for r in 0..R {
                q[r] = acts.q.as_ptr().add((i0 + r) * k);
                d[r] = acts.d.as_ptr().add((i0 + r) * (k / 32));
                ds[r] = acts.ds.as_ptr().add((i0 + r) * groups);
            }
            let mut acc = [[_mm256_setzero_ps(); HALVES]; R];
            for grp in 0..groups {
                let mut isum = [[_mm256_setzero_si256(); HALVES]; R];
                let wg = wp.add(grp * steps * VECS * LANES);
                for t in 0..steps {
                    let mut a = [_mm256_setzero_si256(); R];
                    for r in 0..R {
                        a[r] = _mm256_set1_epi32((q[r].add(grp * G + t * 2) as *const i32).read_unaligned());
                    }
                    for h in 0..HALVES {
                        let wv = _mm256_loadu_si256(wg.add(t * VECS * LANES + 8 * h) as *const __m256i);
                        for r in 0..R {
                            isum[r][h] = _mm256_add_epi32(isum[r][h], _mm256_madd_epi16(wv, a[r]));
                        }
                    }
                }
                for h in 0..HALVES {
                    let sw = _mm256_loadu_ps(swp.add(grp * VECS * LANES + 8 * h));
                    let ow = _mm256_loadu_ps(owp.add(grp * VECS * LANES + 8 * h));
                    for r in 0..R {
                        let da = _mm256_set1_ps(*d[r].add(grp * G / 32));
                        let dsum = _mm256_set1_ps(*ds[r].add(grp));
                        let x = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h]), _mm256_mul_ps(sw, da), acc[r][h]);
                        acc[r][h] = _mm256_fmadd_ps(ow, dsum, x);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (h, &a) in acc.iter().enumerate() {
                    let first = 8 * h;
                    if first >= cols {
                        break;
                    }
                    let mut lanes = [0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), a);
                    let len = (cols - first).min(8);
                    std::ptr::copy_nonoverlapping(lanes.as_ptr(), out.add(r * n + first), len);
                }
            }
        }
    }

    /// Rows `i0..i0 + R` of `acts` against the panel: per group, `G / 4` steps of one
    /// `vpdpbusd` per (row, 16 columns), the 4 activation bytes broadcast; then the group's
    /// integer sums converted and scaled by `sw * da`, and `ow * ds` added.
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL/DQ and VNNI; the panel was filled for `acts.k` and `G`;
    /// `out` points at row `i0`, column 0 of the panel in a row-major output `n` wide.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    pub unsafe fn tile_avx512<const R: usize, const G: usize>(
        panel: &Panel,
        acts: &Acts,
        i0: usize,
        out: *mut f32,
        n: usize,
        cols: usize,
    ) {
        let k = acts.k;
        let groups = k / G;
        let steps = G / 2;
        // SAFETY (whole body): the panel holds `groups` groups of `steps` x VECS vectors
        // and VECS x 16 terms per group; rows i0..i0 + R of `acts` hold k bytes, k / 32
        // scales and `groups` sums; the stores stay within `cols` columns of R rows.
        unsafe {
            let (wp, swp, owp) = (panel.values.as_ptr(), panel.sw.as_ptr(), panel.ow.as_ptr());
            let (mut q, mut d, mut ds) =
                ([std::ptr::null::<i16>(); R], [std::ptr::null::<f32>(); R], [std::ptr::null::<f32>(); R]);
            for r in 0..R {
                q[r] = acts.q.as_ptr().add((i0 + r) * k);
                d[r] = acts.d.as_ptr().add((i0 + r) * (k / 32));
                ds[r] = acts.ds.as_ptr().add((i0 + r) * groups);
            }
            let mut acc = [[_mm512_setzero_ps(); VECS]; R];
            let (mut wv, mut sw, mut ow) =
                ([_mm512_setzero_si512(); VECS], [_mm512_setzero_ps(); VECS], [_mm512_setzero_ps(); VECS]);
            for grp in 0..groups {
                let mut isum = [[_mm512_setzero_si512(); VECS]; R];
                let wg = wp.add(grp * steps * VECS * LANES);
                for t in 0..steps {
                    for (v, wv) in wv.iter_mut().enumerate() {
                        *wv = _mm512_loadu_si512(wg.add((t * VECS + v) * LANES) as *const __m512i);
                    }
                    for r in 0..R {
                        let a = _mm512_set1_epi32((q[r].add(grp * G + t * 2) as *const i32).read_unaligned());
                        for v in 0..VECS {
                            isum[r][v] = _mm512_dpwssd_epi32(isum[r][v], wv[v], a);
                        }
                    }
                }
                for v in 0..VECS {
                    sw[v] = _mm512_loadu_ps(swp.add((grp * VECS + v) * LANES));
                    ow[v] = _mm512_loadu_ps(owp.add((grp * VECS + v) * LANES));
                }
                for r in 0..R {
                    let da = _mm512_set1_ps(*d[r].add(grp * G / 32));
                    let dsum = _mm512_set1_ps(*ds[r].add(grp));
                    for v in 0..VECS {
                        acc[r][v] = add_block(acc[r][v], isum[r][v], (sw[v], ow[v]), (da, dsum));
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (v, &a) in acc.iter().enumerate() {
                    let first = v * LANES;
                    if first >= cols {
                        break;
                    }
                    let mask: __mmask16 = if cols - first >= LANES { !0 } else { (1u16 << (cols - first)) - 1 };
                    _mm512_mask_storeu_ps(out.add(r * n + first), mask, a);
                }
            }
        }
    }
}
