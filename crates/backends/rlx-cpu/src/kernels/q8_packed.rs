//! The 8-bit activation products (decode) against weights repacked 16 rows side by side.
//!
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K rows are repacked once
//! (a param's copy lives in its `ParamBuffer`) so that one 64-byte load holds the same 4
//! quants of 16 weight rows: `vpdpbusd` then takes 4 activation bytes broadcast and gives
//! 16 rows' partial dots, one per lane, and a block of 32 costs 8 of them per (16 rows,
//! activation row), plus one conversion and two FMAs for the scales. Row by row
//! (`quant_matmul`'s kernels, and the K-quants' own until 2026-12-07) costs about 6
//! instructions per (block pair, weight row, activation row) instead: 8 activation rows
//! cost 4.2x one row there (SmolLM2, 2 threads), where here the 16 rows' weights stay in
//! L1 across the activation rows of a batch.
//!
//! Each output is one lane's chain in block order (`acc = fma(isum, sw * da, acc)`, then
//! `acc = fma(ow, s, acc)`; Q3_K and Q6_K one `fma(isum, sw * da, acc)` per sub-block of
//! 16, their offset in the integer sum; Q2_K both steps per sub-block of 16) whatever the
//! number of activation rows or threads, so a row of a batched decode step gets the bits
//! it gets alone.
//!
//! Layout, per group of 16 rows and per block of 32 values: the quants (4-bit: 4 chunks of
//! 64 bytes, chunk `c` holding steps `2c` (low nibbles) and `2c + 1` (high nibbles), then
//! for the 5-bit schemes a 64-bit mask per step of the values' fifth bits, for Q6_K two
//! 64-byte planes of the top two bits; 2-bit (Q2_K) two such planes of the values, Q3_K's
//! third bits after them in masks as the fifth bits; 8-bit: 8 chunks, Q8_0's signed quants
//! biased by +128), where step `t` of lane `j` is row `j`'s values `4t..4t + 4`; then the
//! 16 rows' f16 scales `d`; then, for Q4_1 and Q5_1, their f16 mins. A K-quant super-block
//! (8 blocks) puts its 16 rows' header first ([`k_header_bytes`]) and its blocks' quants
//! after. The groups follow each other in row order, each group's blocks in column order,
//! so a product reads the bytes in address order (the Zen 4 prefetcher's best case).

use super::quant_gemm::vnni;
use super::quant_matmul::Q8Row;
use crate::features::{Arm, features};
use crate::param::PageRelease;
use rlx_ir::quant::QuantScheme;

/// Weight rows per group: the lanes of a 512-bit vector of i32.
pub const ROWS: usize = 16;

/// Activation rows per pass over a group's blocks (their accumulators stay in registers;
/// the group's weights, a few KiB, stay in L1 between passes). 8 rows in one pass instead
/// of two of 4 decode each block's nibbles once: an 8-row SmolLM2 step, 1 thread, 380-387
/// -> 463-523 tok/s (AMD EPYC); 24 of the 32 vector registers.
const PASS: usize = 8;

/// `$kernel::<A>(args)` with `A` = `$rows` (1 to 8: the activation rows of a pass); with
/// `[P,]` before the arguments, `$kernel::<P, A>(args)`.
macro_rules! by_rows {
    ($($kernel:ident)::+ $([$($first:tt)*])? ($($arg:expr),*), $rows:expr) => {
        match $rows {
            8 => $($kernel)::+::<$($($first)*)? 8>($($arg),*),
            7 => $($kernel)::+::<$($($first)*)? 7>($($arg),*),
            6 => $($kernel)::+::<$($($first)*)? 6>($($arg),*),
            5 => $($kernel)::+::<$($($first)*)? 5>($($arg),*),
            4 => $($kernel)::+::<$($($first)*)? 4>($($arg),*),
            3 => $($kernel)::+::<$($($first)*)? 3>($($arg),*),
            2 => $($kernel)::+::<$($($first)*)? 2>($($arg),*),
            _ => $($kernel)::+::<$($($first)*)? 1>($($arg),*),
        }
    };
}

/// The packable schemes as const parameters of the kernels, so that a kernel's per-block
/// tests of its scheme (unpacking, offsets, Q8_0's bias) fold away. In one process, best
/// of 4, 1 thread (Intel Xeon, model 207), against the scheme tested at run time: 8-bit
/// rows, Q4_1 576 x 1536, 1 row 11.9 -> 10.1 us, 8 rows 42.9 -> 42.5; SmolLM2's Q8_0 head
/// (49152 x 576), 8 rows 1604 -> 1443 us; 16-bit rows (Q8_0 alone a constant), Q4_1 10
/// and 32 rows 2.7-3.4% faster (110.8 -> 107.5 us, 343.7 -> 332.4).
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q8_0: u8 = 3;
const Q4_K: u8 = 4;
const Q6_K: u8 = 5;
const Q5_1: u8 = 6;
const Q5_K: u8 = 7;
const Q2_K: u8 = 8;
const Q3_K: u8 = 9;

/// `scheme`'s const parameter (one of the packable schemes: [`available`]).
fn scheme_id(scheme: QuantScheme) -> u8 {
    match scheme {
        QuantScheme::Q4_0 => Q4_0,
        QuantScheme::Q4_1 => Q4_1,
        QuantScheme::Q5_0 => Q5_0,
        QuantScheme::Q4K => Q4_K,
        QuantScheme::Q6K => Q6_K,
        QuantScheme::Q5_1 => Q5_1,
        QuantScheme::Q5K => Q5_K,
        QuantScheme::Q2K => Q2_K,
        QuantScheme::Q3K => Q3_K,
        _ => Q8_0,
    }
}

/// The scheme of const parameter `id`.
const fn scheme_of(id: u8) -> QuantScheme {
    match id {
        Q4_0 => QuantScheme::Q4_0,
        Q4_1 => QuantScheme::Q4_1,
        Q5_0 => QuantScheme::Q5_0,
        Q4_K => QuantScheme::Q4K,
        Q6_K => QuantScheme::Q6K,
        Q5_1 => QuantScheme::Q5_1,
        Q5_K => QuantScheme::Q5K,
        Q2_K => QuantScheme::Q2K,
        Q3_K => QuantScheme::Q3K,
        _ => QuantScheme::Q8_0,
    }
}

/// `$kernel::<S, A>(args)` with `S` the const parameter of `$scheme` and `A` = `$rows`.
macro_rules! by_scheme_rows {
    ($($kernel:ident)::+($($arg:expr),*), $scheme:expr, $rows:expr) => {
        match scheme_id($scheme) {
            Q4_0 => by_rows!($($kernel)::+[Q4_0,]($($arg),*), $rows),
            Q4_1 => by_rows!($($kernel)::+[Q4_1,]($($arg),*), $rows),
            Q5_0 => by_rows!($($kernel)::+[Q5_0,]($($arg),*), $rows),
            Q4_K => by_rows!($($kernel)::+[Q4_K,]($($arg),*), $rows),
            Q6_K => by_rows!($($kernel)::+[Q6_K,]($($arg),*), $rows),
            Q5_1 => by_rows!($($kernel)::+[Q5_1,]($($arg),*), $rows),
            Q5_K => by_rows!($($kernel)::+[Q5_K,]($($arg),*), $rows),
            Q2_K => by_rows!($($kernel)::+[Q2_K,]($($arg),*), $rows),
            Q3_K => by_rows!($($kernel)::+[Q3_K,]($($arg),*), $rows),
            _ => by_rows!($($kernel)::+[Q8_0,]($($arg),*), $rows),
        }
    };
}

/// Whether 8-bit activation products on [`Packed`] weights ([`dot_groups`]) run `scheme`
/// on `arm` on this host: with AVX-512 VNNI, or with AVX2 (`vpmaddubsw`, half a group a
/// register).
pub fn available(scheme: QuantScheme, arm: Arm) -> bool {
    let f = features();
    cfg!(target_arch = "x86_64")
        && f.f16c
        && (vnni(arm) || (arm >= Arm::Avx2 && f.has_avx2_fma()))
        && SCHEMES.contains(&scheme)
}

/// The schemes repacked here: those whose weights are `sw * u + ow` per group of 32 or 16
/// (all but the float ones; `quant_gemm` fills its panels from this layout).
pub const SCHEMES: [QuantScheme; 10] = [
    QuantScheme::Q4_0,
    QuantScheme::Q4_1,
    QuantScheme::Q5_0,
    QuantScheme::Q5_1,
    QuantScheme::Q8_0,
    QuantScheme::Q2K,
    QuantScheme::Q3K,
    QuantScheme::Q4K,
    QuantScheme::Q5K,
    QuantScheme::Q6K,
];

/// Whether 16-bit activation products dot [`Packed`] weights in place ([`dot_groups_q16`])
/// for `scheme` on `arm` on this host: AVX-512 VNNI or AVX2, the 32-value schemes.
/// (`quant_gemm` fills its panels from any packed weight.)
pub fn available_q16(scheme: QuantScheme, arm: Arm) -> bool {
    available(scheme, arm) && !is_k(scheme)
}

/// Whether [`dot_groups_q16`] on `arm` reads [`Q16Row`]'s bytes (the VNNI kernel) rather
/// than its 16-bit values (the AVX2 one).
pub(super) fn q16_reads_bytes(arm: Arm) -> bool {
    vnni(arm)
}

/// Whether `scheme` is a K-quant (super-blocks of 256 values, [`Packed`]'s K layout).
fn is_k(scheme: QuantScheme) -> bool {
    matches!(scheme, QuantScheme::Q2K | QuantScheme::Q3K | QuantScheme::Q4K | QuantScheme::Q5K | QuantScheme::Q6K)
}

/// Whether `scheme`'s scale terms go by 16 values: two sub-blocks a block of 32, each its
/// own `(sw, ow)`.
fn by_16(scheme: QuantScheme) -> bool {
    matches!(scheme, QuantScheme::Q2K | QuantScheme::Q3K | QuantScheme::Q6K)
}

/// Whether `scheme`'s quants are stored as planes of 2 bits (Q3_K's third bit apart).
fn two_bits(scheme: QuantScheme) -> bool {
    matches!(scheme, QuantScheme::Q2K | QuantScheme::Q3K)
}

/// Whether `scheme`'s quants have a fifth bit (stored in per-step masks).
fn five_bits(scheme: QuantScheme) -> bool {
    matches!(scheme, QuantScheme::Q5_0 | QuantScheme::Q5_1 | QuantScheme::Q5K)
}

/// Where a (group, block)'s per-step bit masks lie in its quants, and the bit of the
/// value they set: the 5-bit schemes' fifth bits after the nibbles, Q3_K's third bits
/// after its two planes.
fn bit_masks(scheme: QuantScheme) -> Option<(usize, u8)> {
    if five_bits(scheme) {
        Some((256, 4))
    } else if scheme == QuantScheme::Q3K {
        Some((128, 2))
    } else {
        None
    }
}

/// `log2` of the offset a by-16 scheme's quants are stored with, taken off in the
/// integer sums with the activation rows' sums by 16 (Q6_K `q + 32`, Q3_K `q + 4`); 0 for
/// Q2_K, whose offsets are its mins (`ow * s` per sub-block).
fn offset_shift(scheme: QuantScheme) -> u32 {
    match scheme {
        QuantScheme::Q6K => 5,
        QuantScheme::Q3K => 2,
        _ => 0,
    }
}

/// Whether `scheme`'s blocks (or super-blocks) carry a min beside the scale: `ow` is its
/// own f16 (`m`, or `-dmin * mn`), not a multiple of the scale.
fn has_min(scheme: QuantScheme) -> bool {
    matches!(scheme, QuantScheme::Q4_1 | QuantScheme::Q5_1 | QuantScheme::Q4K | QuantScheme::Q5K)
}

/// Whether [`dot_groups`] on `scheme` and `arm` reads the activation rows' sums of each 16
/// quants (`Q8Row::sums16`): the by-16 schemes' offsets and mins, and on AVX2 Q8_0's bias
/// of 128 (one sum a call, where each chunk of columns had summed every row again).
pub(super) fn takes_sums16(scheme: QuantScheme, arm: Arm) -> bool {
    available(scheme, arm) && (by_16(scheme) || (scheme == QuantScheme::Q8_0 && !vnni(arm)))
}

/// Bytes of one (group, unit): a block's quants, scales and mins; a K-quant super-block's
/// header ([`k_header_bytes`]) and its 8 blocks' quants.
fn unit_bytes(scheme: QuantScheme) -> usize {
    if is_k(scheme) {
        k_header_bytes(scheme) + 8 * quant_bytes(scheme)
    } else if has_min(scheme) {
        quant_bytes(scheme) + 64
    } else {
        quant_bytes(scheme) + 32
    }
}

/// Bytes of a K-quant (group, super-block)'s header: Q4_K's and Q5_K's 16 rows' f16 `d`,
/// then their f16 `dmin`, then the 8 sub-block scales (8 x 16 bytes, row by row in each)
/// and the 8 mins (the same); Q2_K's `d` and `dmin`, then its 16 sub-blocks' bytes as
/// stored (scale in the low nibble, min in the high; 16 x 16 bytes); Q3_K's and Q6_K's
/// `d`, then their 16 signed sub-block scales (16 x 16 bytes).
const fn k_header_bytes(scheme: QuantScheme) -> usize {
    match scheme {
        QuantScheme::Q3K | QuantScheme::Q6K => 32 + 256,
        _ => 64 + 256,
    }
}

/// Bytes of one group (16 weight rows) of `k` values.
pub(super) fn group_bytes(scheme: QuantScheme, k: usize) -> usize {
    k / scheme.block_size() * unit_bytes(scheme)
}

/// Where block `b`'s quants lie in a group: the next block's follow them, except at a
/// K-quant super-block's end, where the next super-block's header comes first.
pub(super) fn quants_offset(scheme: QuantScheme, b: usize) -> usize {
    if is_k(scheme) {
        (b / 8) * unit_bytes(scheme) + k_header_bytes(scheme) + (b % 8) * quant_bytes(scheme)
    } else {
        b * unit_bytes(scheme)
    }
}

/// Bytes of the quants of one (group, block): 4 or 8 bits for 16 x 32 values, and for
/// the 5-bit schemes the fifth bits (8 masks of 64 bits, one per step), for Q6_K the top
/// two bits (two 64-byte planes, one per 4 steps); Q2_K's two planes alone, Q3_K's with
/// its third bits' masks.
pub(super) fn quant_bytes(scheme: QuantScheme) -> usize {
    match scheme {
        QuantScheme::Q8_0 => 512,
        QuantScheme::Q6K => 256 + 128,
        QuantScheme::Q2K => 128,
        QuantScheme::Q3K => 128 + 64,
        _ if five_bits(scheme) => 256 + 64,
        _ => 256,
    }
}

/// `ow / sw` where a scheme's offset is a multiple of its scale: the quants are stored
/// unsigned (`q + 8`, `q + 16`, `q + 128`).
pub(super) fn offset(scheme: QuantScheme) -> f32 {
    match scheme {
        QuantScheme::Q4_0 => -8.0,
        QuantScheme::Q5_0 => -16.0,
        QuantScheme::Q8_0 => -128.0,
        _ => 0.0,
    }
}

/// Bytes of the source weight a repacking run covers: runs go to workers as they free up,
/// and each run's source pages are released when it is done.
const RELEASE_BYTES: usize = 4 << 20;

/// Writes the low 4 bits of `values` (one block of row `lane`, in order) into the
/// group's nibble chunks at `dst`: byte e of chunk c holds value 8c + e low and 8c + 4 + e
/// high.
fn pack_nibbles(values: &[u8], lane: usize, dst: &mut [u8]) {
    for c in 0..4 {
        let word: [u8; 4] = std::array::from_fn(|e| (values[8 * c + e] & 0xF) | (values[8 * c + 4 + e] << 4));
        dst[c * 64 + lane * 4..][..4].copy_from_slice(&word);
    }
}

/// [`pack_nibbles`] straight from a Q4_0 / Q4_1 block's 16 quant bytes (byte j: value j
/// low, value j + 16 high), four 32-bit words of masks and shifts instead of a byte per
/// value: chunk 0 takes the low nibbles of bytes 0..8, chunk 1 of bytes 8..16, chunks 2
/// and 3 their high nibbles. `rlx generate` on SmolLM2 Q4_1, 2 threads (AMD EPYC Zen 4):
/// "compile and pack" 108-109 -> 74-75 ms.
fn repack_q4_nibbles(quants: &[u8; 16], lane: usize, dst: &mut [u8]) {
    let word = |i: usize| u32::from_le_bytes(quants[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let (a, b, c, d) = (word(0), word(1), word(2), word(3));
    let chunks =
        [nibble_chunk(a, b, false), nibble_chunk(c, d, false), nibble_chunk(a, b, true), nibble_chunk(c, d, true)];
    for (i, chunk) in chunks.iter().enumerate() {
        dst[i * 64 + lane * 4..][..4].copy_from_slice(&chunk.to_le_bytes());
    }
}

/// [`pack_nibbles`] for a block whose 32 values are the low (or, with `high`, the high)
/// nibbles of 32 bytes in order (a Q4_K run), by 32-bit words as [`repack_q4_nibbles`].
/// `rlx generate` on Gemma 3 270M Q4_K_M, 2 threads (AMD EPYC Zen 4): "compile and pack"
/// 237-296 -> 199-209 ms.
fn repack_nibble_run(bytes: &[u8; 32], high: bool, lane: usize, dst: &mut [u8]) {
    let word = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    for c in 0..4 {
        let chunk = nibble_chunk(word(2 * c), word(2 * c + 1), high);
        dst[c * 64 + lane * 4..][..4].copy_from_slice(&chunk.to_le_bytes());
    }
}

/// A nibble chunk's word: byte e holds the low (with `high`, the high) nibble of `first`'s
/// byte e in its low half and that of `second`'s byte e in its high half.
fn nibble_chunk(first: u32, second: u32, high: bool) -> u32 {
    const LOW: u32 = 0x0F0F_0F0F;
    if high { ((first >> 4) & LOW) | (second & !LOW) } else { (first & LOW) | ((second & LOW) << 4) }
}

/// Writes bit `bit` of `values` (one block of row `lane`) into the group's step masks at
/// `dst`: bit 4 lane + e of step t's 64-bit mask is value 4t + e's.
fn pack_bit_masks(values: &[u8], bit: u8, lane: usize, dst: &mut [u8]) {
    for t in 0..8 {
        for e in 0..4 {
            let at = 4 * lane + e;
            dst[8 * t + at / 8] |= ((values[4 * t + e] >> bit) & 1) << (at % 8);
        }
    }
}

/// Writes bits `shift..shift + 2` of `values` (one block of row `lane`) into the group's
/// two 2-bit planes at `dst`: those of value 4t + e at bits 2 (t % 4) of byte 4 lane + e
/// of plane t / 4.
fn pack_two_bit_planes(values: &[u8], shift: u8, lane: usize, dst: &mut [u8]) {
    for t in 0..8 {
        for e in 0..4 {
            dst[64 * (t / 4) + 4 * lane + e] |= ((values[4 * t + e] >> shift) & 3) << (2 * (t % 4));
        }
    }
}

/// Writes weight row `lane` of a group's unit (`src`, one `scheme` block or K-quant
/// super-block) into `dst`, the group's repacked unit: the quants, then the f16 scale
/// `d` and for the schemes with a min their f16 `m`.
fn repack_unit(scheme: QuantScheme, src: &[u8], lane: usize, dst: &mut [u8]) {
    if is_k(scheme) {
        return repack_k(scheme, src, lane, dst);
    }
    if scheme == QuantScheme::Q8_0 {
        let quants: &[u8; 32] = src[2..34].try_into().expect("a Q8_0 block's 32 quants");
        for t in 0..8 {
            let word = u32::from_le_bytes(quants[4 * t..4 * t + 4].try_into().expect("4 quants")) ^ 0x8080_8080;
            dst[t * 64 + lane * 4..][..4].copy_from_slice(&word.to_le_bytes());
        }
    } else if matches!(scheme, QuantScheme::Q4_0 | QuantScheme::Q4_1) {
        // The 16 quant bytes after the f16 scale (and min).
        let at = if scheme == QuantScheme::Q4_1 { 4 } else { 2 };
        repack_q4_nibbles(src[at..at + 16].try_into().expect("16 quant bytes"), lane, dst);
    } else {
        let mut values = [0u8; 32];
        super::quant_gemm::quants(scheme, src, &mut values);
        pack_nibbles(&values, lane, dst);
        if let Some((at, bit)) = bit_masks(scheme) {
            pack_bit_masks(&values, bit, lane, &mut dst[at..]);
        }
    }
    let quant_bytes = quant_bytes(scheme);
    dst[quant_bytes + 2 * lane..][..2].copy_from_slice(&src[..2]);
    if has_min(scheme) {
        dst[quant_bytes + 32 + 2 * lane..][..2].copy_from_slice(&src[2..4]);
    }
}

/// [`repack_unit`] for a K-quant super-block: the header's row `lane` (see
/// [`k_header_bytes`]; Q4_K's and Q5_K's scales and mins unpacked from their 6 bits,
/// Q3_K's from theirs), then each block of 32 values (`quant_gemm::quants`' order,
/// unsigned: Q6_K's `q + 32`, Q3_K's `q + 4`) as nibble chunks, Q5_K's fifth bits as the
/// 5-bit schemes', Q6_K's two top bits in two planes ([`pack_two_bit_planes`]); Q2_K's
/// and Q3_K's low two bits in the planes, Q3_K's third in masks.
fn repack_k(scheme: QuantScheme, src: &[u8], lane: usize, dst: &mut [u8]) {
    let (header, blocks) = dst.split_at_mut(k_header_bytes(scheme));
    let (d, scales): (&[u8], [u8; 16]) = match scheme {
        QuantScheme::Q2K => {
            header[32 + 2 * lane..][..2].copy_from_slice(&src[82..84]);
            (&src[80..82], src[..16].try_into().expect("16 scale bytes"))
        }
        QuantScheme::Q3K => (&src[108..110], rlx_ir::quant::q3k_scales(&src[96..108]).map(|s| s as u8)),
        QuantScheme::Q6K => (&src[208..210], src[192..208].try_into().expect("16 scales")),
        _ => {
            header[32 + 2 * lane..][..2].copy_from_slice(&src[2..4]);
            let (sc, mn) = rlx_ir::quant::k_scale_min(&src[4..16]);
            (&src[..2], std::array::from_fn(|j| if j < 8 { sc[j] } else { mn[j - 8] }))
        }
    };
    header[2 * lane..][..2].copy_from_slice(d);
    let first = k_header_bytes(scheme) - 256;
    for (j, &scale) in scales.iter().enumerate() {
        header[first + 16 * j + lane] = scale;
    }
    if scheme == QuantScheme::Q4K {
        // Its 4 runs of 32 quant bytes after the header hold blocks 2r (low nibbles) and
        // 2r + 1 (high): the nibble chunks straight from them.
        for (b, block) in blocks.chunks_exact_mut(quant_bytes(scheme)).enumerate() {
            let bytes = src[16 + 32 * (b / 2)..][..32].try_into().expect("32 quant bytes");
            repack_nibble_run(bytes, b % 2 == 1, lane, block);
        }
        return;
    }
    let mut u = [0u8; 256];
    super::quant_gemm::quants(scheme, src, &mut u);
    for (values, block) in u.chunks_exact(32).zip(blocks.chunks_exact_mut(quant_bytes(scheme))) {
        if two_bits(scheme) {
            pack_two_bit_planes(values, 0, lane, block);
        } else {
            pack_nibbles(values, lane, block);
        }
        if let Some((at, bit)) = bit_masks(scheme) {
            pack_bit_masks(values, bit, lane, &mut block[at..]);
        }
        if scheme == QuantScheme::Q6K {
            pack_two_bit_planes(values, 4, lane, &mut block[256..]);
        }
    }
}

/// `n` weight rows of `k` values in `scheme`, repacked.
pub struct Packed {
    pub scheme: QuantScheme,
    pub n: usize,
    pub k: usize,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({:?}, {} x {})", self.scheme, self.n, self.k)
    }
}

impl Packed {
    /// Repacks `w` (`n` rows of `k` values in `scheme`, a packable one; `k` a multiple of
    /// its block size). Rows past `n` in the last group are zeros (scale 0). Runs of groups (about
    /// [`RELEASE_BYTES`] of `w` each) are repacked on the calling pool's workers
    /// ([`crate::threads::current`]), and `release` is called on each run's rows when it is
    /// done and on all of `w` at the end (a mapped file's pages can go as they are
    /// consumed: the weight is not resident twice even while it is repacked).
    pub fn new(scheme: QuantScheme, w: &[u8], n: usize, k: usize, release: Option<&PageRelease>) -> Packed {
        use rayon::prelude::*;
        let (units, bb) = (k / scheme.block_size(), scheme.block_bytes());
        let out_unit = unit_bytes(scheme);
        let groups = n.div_ceil(ROWS);
        let group_bytes = group_bytes(scheme, k);
        let mut bytes = vec![0u8; groups * group_bytes];
        let row_bytes = units * bb;
        // At least a few runs a worker, so that a small weight is split too.
        let workers = crate::threads::current();
        let run_groups = (RELEASE_BYTES / (ROWS * row_bytes).max(1)).min(groups.div_ceil(4 * workers)).max(1);
        let repack_run = |(r, out): (usize, &mut [u8])| {
            let first = r * run_groups * ROWS;
            let rows = first..n.min(first + out.len() / group_bytes.max(1) * ROWS);
            for row in rows.clone() {
                let (g, lane) = (row / ROWS - r * run_groups, row % ROWS);
                for b in 0..units {
                    let src = &w[(row * units + b) * bb..][..bb];
                    repack_unit(scheme, src, lane, &mut out[g * group_bytes + b * out_unit..][..out_unit]);
                }
            }
            if let Some(release) = release {
                release(&w[rows.start * row_bytes..rows.end * row_bytes]);
            }
        };
        // (`max(1)`: an empty weight has no bytes, and chunks of 0 are refused.)
        let run_bytes = (run_groups * group_bytes).max(1);
        if workers > 1 {
            bytes.par_chunks_mut(run_bytes).enumerate().for_each(repack_run);
        } else {
            bytes.chunks_mut(run_bytes).enumerate().for_each(repack_run);
        }
        if let Some(release) = release {
            release(&w[..n * row_bytes]);
        }
        Packed { scheme, n, k, bytes }
    }

    /// The packed bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// `out[i][j] = W[j0 + j] . acts[i]` for the weight rows of groups `g0..g0 + out[i].len() /
/// 16` (whole groups, the last possibly partial at `n`), `out[i]` starting at row `16 g0`.
///
/// # Panics
/// If the host lacks the features ([`available`]) or the slices do not fit.
pub(super) fn dot_groups(p: &Packed, arm: Arm, g0: usize, acts: &[Q8Row], out: &mut [&mut [f32]]) {
    assert!(available(p.scheme, arm), "q8_packed: {:?} is not available on this host", p.scheme);
    let nb = p.k / 32;
    let cols = out.first().map_or(0, |o| o.len());
    assert!(g0 * ROWS + cols <= p.n && out.iter().all(|o| o.len() == cols));
    assert!(acts.iter().all(|a| a.q.len() == p.k && a.d.len() == nb && a.s.len() == nb));
    assert!(!takes_sums16(p.scheme, arm) || acts.iter().all(|a| a.sums16.len() == 2 * nb));
    #[cfg(target_arch = "x86_64")]
    for (acts, out) in acts.chunks(PASS).zip(out.chunks_mut(PASS)) {
        // SAFETY: the features were checked; every group read lies in `p.bytes` (groups
        // g0.. cover rows 16 g0..16 g0 + cols <= n); every activation row holds k values
        // and nb scales and sums; stores stay within `cols` values of each `out` row.
        unsafe {
            if vnni(arm) {
                by_scheme_rows!(x86::groups_avx512(p, g0, acts, out), p.scheme, acts.len())
            } else {
                by_scheme_rows!(x86::groups_avx2(p, g0, acts, out), p.scheme, acts.len())
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (g0, acts, out, nb);
}

/// A 16-bit activation row (prompt path, `quant_gemm`'s quantization): its values `q`
/// (what the AVX2 kernel reads, `vpmaddwd` multiplying 16-bit integers) and, for the VNNI
/// kernel ([`q16_reads_bytes`]; empty otherwise), the values split into bytes for
/// `vpdpbusd`, which multiplies unsigned bytes by signed ones: `q = 256 hi + lo` with
/// `hi = q >> 8` signed and `lo = q & 255` unsigned. For Q8_0, whose weights need all 8
/// bits unsigned and so are the unsigned operand of both products, `lo` is stored biased
/// (`lo ^ 128` read as signed, `lo - 128`) and the kernel adds back 128 x the weights' sum.
/// `d` holds its block scales, `ds = d * sum(q)` per block.
pub(super) struct Q16Row<'a> {
    pub(super) q: &'a [i16],
    pub(super) hi: &'a [i8],
    pub(super) lo: &'a [u8],
    pub(super) d: &'a [f32],
    pub(super) ds: &'a [f32],
}

/// Splits 16-bit quants into [`Q16Row`]'s bytes for `scheme`.
pub(super) fn split_q16(scheme: QuantScheme, q: &[i16], hi: &mut [i8], lo: &mut [u8]) {
    let bias = if scheme == QuantScheme::Q8_0 { 0x80 } else { 0 };
    for ((&q, h), l) in q.iter().zip(hi).zip(lo) {
        *h = (q >> 8) as i8;
        *l = (q as u8) ^ bias;
    }
}

/// `out[i][j] = W[j0 + j] . acts[i]` as [`dot_groups`], for 16-bit activation rows: the
/// same integer block sums and f32 steps as `quant_gemm`'s panel GEMM, so the same bits,
/// without unpacking the weights into panels first (a prompt of a few tokens spent about
/// half its time there).
///
/// # Panics
/// If the host lacks the features ([`available_q16`]) or the slices do not fit.
pub(super) fn dot_groups_q16(p: &Packed, arm: Arm, g0: usize, acts: &[Q16Row], out: &mut [&mut [f32]]) {
    assert!(available_q16(p.scheme, arm), "q8_packed: 16-bit {:?} is not available on this host", p.scheme);
    let nb = p.k / 32;
    let cols = out.first().map_or(0, |o| o.len());
    assert!(g0 * ROWS + cols <= p.n && out.iter().all(|o| o.len() == cols));
    let bytes = q16_reads_bytes(arm);
    assert!(acts.iter().all(|a| a.q.len() == p.k && a.d.len() == nb && a.ds.len() == nb));
    assert!(!bytes || acts.iter().all(|a| a.hi.len() == p.k && a.lo.len() == p.k));
    #[cfg(target_arch = "x86_64")]
    for (acts, out) in acts.chunks(Q16_PASS).zip(out.chunks_mut(Q16_PASS)) {
        // SAFETY: as in `dot_groups`; every activation row holds k values (and with
        // `bytes` k bytes of each half) and nb scales and sums.
        unsafe {
            if bytes {
                by_scheme_rows!(x86::groups_q16_avx512(p, g0, acts, out), p.scheme, acts.len())
            } else {
                by_scheme_rows!(x86::groups_q16_avx2(p, g0, acts, out), p.scheme, acts.len())
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (g0, acts, out, nb);
}

/// Activation rows per pass of [`dot_groups_q16`]: each takes 4 accumulator chains.
const Q16_PASS: usize = 8;

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::{Packed, Q8Row, ROWS, group_bytes, k_header_bytes, quant_bytes, quants_offset};

    /// Bytes ahead of the block being dotted that are fetched into L2 (`prefetcht1`).
    /// Into L1 (`prefetcht0`) 2 KiB ahead, the prefetches held the L1 fill buffers and one
    /// core streamed a cold 200000 x 576 Q4_1 weight at 16.8-19.9 GB/s, two at 24.0-24.2;
    /// into L2 8 KiB ahead: 22.0-25.1 and 34.1-38.6 GB/s (AMD EPYC; 16 KiB ahead was no
    /// better). The L2 streamer then feeds L1 in time.
    const PREFETCH: usize = 8192;
    use rlx_ir::quant::QuantScheme;
    use std::arch::x86_64::*;

    /// The 8 steps of one (group, block) whose quants are at `at`: vector `t` holds, per
    /// lane (row), its values `4t..4t + 4` as unsigned bytes.
    ///
    /// # Safety
    /// `at` points at a whole (group, block)'s quants of `scheme`; the caller has AVX-512
    /// F/BW.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn steps(scheme: QuantScheme, at: *const u8) -> [__m512i; 8] {
        // SAFETY: as the caller guarantees.
        unsafe {
            let mut steps = [_mm512_setzero_si512(); 8];
            if scheme == QuantScheme::Q8_0 {
                for (t, s) in steps.iter_mut().enumerate() {
                    *s = _mm512_loadu_si512(at.add(64 * t) as *const __m512i);
                }
                return steps;
            }
            if super::two_bits(scheme) {
                // Step t's bits sit at bits 2 (t % 4) of plane t / 4's bytes (16-bit
                // shifts; what crosses a byte is masked away).
                let mask = _mm512_set1_epi8(3);
                for (h, steps) in steps.chunks_exact_mut(4).enumerate() {
                    let plane = _mm512_loadu_si512(at.add(64 * h) as *const __m512i);
                    steps[0] = _mm512_and_si512(plane, mask);
                    steps[1] = _mm512_and_si512(_mm512_srli_epi16::<2>(plane), mask);
                    steps[2] = _mm512_and_si512(_mm512_srli_epi16::<4>(plane), mask);
                    steps[3] = _mm512_and_si512(_mm512_srli_epi16::<6>(plane), mask);
                }
            } else {
                let mask = _mm512_set1_epi8(0x0F);
                for c in 0..4 {
                    let x = _mm512_loadu_si512(at.add(64 * c) as *const __m512i);
                    steps[2 * c] = _mm512_and_si512(x, mask);
                    steps[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(x), mask);
                }
            }
            if let Some((masks, bit)) = super::bit_masks(scheme) {
                for (t, s) in steps.iter_mut().enumerate() {
                    let bits = (at.add(masks + 8 * t) as *const u64).read_unaligned();
                    *s = _mm512_or_si512(*s, _mm512_maskz_set1_epi8(bits, 1 << bit));
                }
            }
            if scheme == QuantScheme::Q6K {
                // Step t's top bits sit at bits 2 (t % 4) of plane t / 4's bytes: shifted
                // to bits 4-5 (16-bit shifts; what crosses a byte is masked away).
                let top = _mm512_set1_epi8(0x30);
                for (h, steps) in steps.chunks_exact_mut(4).enumerate() {
                    let plane = _mm512_loadu_si512(at.add(256 + 64 * h) as *const __m512i);
                    let shifted = [
                        _mm512_slli_epi16::<4>(plane),
                        _mm512_slli_epi16::<2>(plane),
                        plane,
                        _mm512_srli_epi16::<2>(plane),
                    ];
                    for (s, bits) in steps.iter_mut().zip(shifted) {
                        *s = _mm512_or_si512(*s, _mm512_and_si512(bits, top));
                    }
                }
            }
            steps
        }
    }

    /// Group terms `(sw, ow)` (`w = sw * u + ow` per lane) of block `b` of the group at
    /// `group`: of its 32 values, or for the by-16 schemes of its sub-block `h` (values
    /// `16 h..16 h + 16`; `h` is ignored otherwise). Each lane's terms are the scalar code's
    /// (`quant_gemm::unpack_block`): Q2_K / Q4_K `d * sc`, `-dmin * mn`; Q6_K `d * sc`,
    /// `-32 d sc`; Q3_K `d * sc`, `-4 d sc`.
    ///
    /// # Safety
    /// `group` points at a whole group of `scheme`, `b` is one of its blocks; the caller
    /// has AVX-512 F and F16C.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn terms(
        scheme: QuantScheme,
        group: *const u8,
        b: usize,
        h: usize,
    ) -> (__m512, __m512) {
        // SAFETY: as the caller guarantees. (No closures: they would not inherit the
        // caller's target features.)
        unsafe {
            let at = group.add(quants_offset(scheme, b));
            if super::is_k(scheme) {
                let header = at.sub(k_header_bytes(scheme) + (b % 8) * quant_bytes(scheme));
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(header as *const __m256i));
                let (sc, mn) = match scheme {
                    QuantScheme::Q4K | QuantScheme::Q5K => {
                        let sc = _mm_loadu_si128(header.add(64 + 16 * (b % 8)) as *const __m128i);
                        let mn = _mm_loadu_si128(header.add(192 + 16 * (b % 8)) as *const __m128i);
                        (_mm512_cvtepu8_epi32(sc), _mm512_cvtepu8_epi32(mn))
                    }
                    QuantScheme::Q2K => {
                        let bytes = _mm_loadu_si128(header.add(64 + 16 * (2 * (b % 8) + h)) as *const __m128i);
                        let bytes = _mm512_cvtepu8_epi32(bytes);
                        (_mm512_and_si512(bytes, _mm512_set1_epi32(0xF)), _mm512_srli_epi32::<4>(bytes))
                    }
                    _ => {
                        // Q3_K, Q6_K: signed scales, the offset a multiple of the scale.
                        let sc = _mm_loadu_si128(header.add(32 + 16 * (2 * (b % 8) + h)) as *const __m128i);
                        let sw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
                        let offset = -((1 << super::offset_shift(scheme)) as f32);
                        return (sw, _mm512_mul_ps(sw, _mm512_set1_ps(offset)));
                    }
                };
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(header.add(32) as *const __m256i));
                // -dmin exactly (the sign flipped, as the scalar `-dmin`).
                let dmin =
                    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(i32::MIN)));
                let sw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
                return (sw, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)));
            }
            let quant_bytes = quant_bytes(scheme);
            let sw = _mm512_cvtph_ps(_mm256_loadu_si256(at.add(quant_bytes) as *const __m256i));
            let ow = if super::has_min(scheme) {
                _mm512_cvtph_ps(_mm256_loadu_si256(at.add(quant_bytes + 32) as *const __m256i))
            } else {
                _mm512_mul_ps(sw, _mm512_set1_ps(super::offset(scheme)))
            };
            (sw, ow)
        }
    }

    /// Fetches into L2 the `len` bytes [`PREFETCH`] past `at` (a kernel reading its weights
    /// in address order).
    #[inline(always)]
    fn prefetch_ahead(at: *const u8, len: usize) {
        let ahead = at.wrapping_add(PREFETCH);
        for line in (0..len).step_by(64) {
            // SAFETY: a prefetch of any address is defined (no access is made).
            unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line) as *const i8) };
        }
    }

    /// Block `b` of the group at `group`: its 8 steps ([`steps`]) and its [`terms`] (of
    /// sub-block 0 for the by-16 schemes), with the bytes [`PREFETCH`] past it (up to the next block's
    /// quants, a K-quant header included) fetched into L2.
    ///
    /// # Safety
    /// As [`terms`]; the caller has AVX-512 BW too.
    #[inline(always)]
    unsafe fn block(scheme: QuantScheme, group: *const u8, b: usize) -> ([__m512i; 8], (__m512, __m512)) {
        let at = group.wrapping_add(quants_offset(scheme, b));
        prefetch_ahead(at, quants_offset(scheme, b + 1) - quants_offset(scheme, b));
        // SAFETY: as the caller guarantees.
        unsafe { (steps(scheme, at), terms(scheme, group, b, 0)) }
    }

    /// `acc + isum * (sw * d) + ow * s`, in this order, for one block's integer sums
    /// `isum` (per lane) against an activation row's scale `d` and scaled sum `s`: the f32
    /// step of both kernels here and of `quant_gemm`'s panel GEMM, which is why a 16-bit
    /// product gets the same bits on either path.
    ///
    /// # Safety
    /// The caller has AVX-512 F.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn add_block(
        acc: __m512,
        isum: __m512i,
        (sw, ow): (__m512, __m512),
        (d, s): (__m512, __m512),
    ) -> __m512 {
        // SAFETY: as the caller guarantees.
        unsafe {
            let acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw, d), acc);
            _mm512_fmadd_ps(ow, s, acc)
        }
    }

    /// Lane `l` of `acc[i]` into column `first + l` of `out[i]`, for the columns each
    /// `out` row holds.
    ///
    /// # Safety
    /// The caller has AVX-512 F; `first` is below the rows' length.
    #[inline(always)]
    unsafe fn store_group<const A: usize>(out: &mut [&mut [f32]], first: usize, acc: &[__m512; A]) {
        let lanes = (out[0].len() - first).min(ROWS);
        let keep: __mmask16 = if lanes == ROWS { !0 } else { (1u16 << lanes) - 1 };
        for (o, &a) in out.iter_mut().zip(acc) {
            // SAFETY: the masked store writes `lanes` floats from `first`, inside the row.
            unsafe { _mm512_mask_storeu_ps(o.as_mut_ptr().add(first), keep, a) };
        }
    }

    /// [`super::dot_groups`] for `A` activation rows.
    ///
    /// # Safety
    /// As `dot_groups` checks; the host has AVX-512 F/BW/VL/DQ, VNNI and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn groups_avx512<const S: u8, const A: usize>(
        p: &Packed,
        g0: usize,
        acts: &[Q8Row],
        out: &mut [&mut [f32]],
    ) {
        // As an array: no bounds check per row, whose branches had left one row's
        // broadcasts going through general registers (1 thread, 8 rows x 20000 x 576
        // Q4_1: 163 -> 166 G products/s, AMD EPYC).
        let acts: &[Q8Row; A] = acts[..A].try_into().expect("A activation rows");
        let scheme = super::scheme_of(S);
        debug_assert_eq!(scheme, p.scheme);
        let nb = p.k / 32;
        let gb = group_bytes(scheme, p.k);
        let cols = out[0].len();
        // SAFETY (whole body): as the caller guarantees.
        unsafe {
            for g in 0..cols.div_ceil(ROWS) {
                let mut acc = [_mm512_setzero_ps(); A];
                let group = p.bytes.as_ptr().add((g0 + g) * gb);
                for b in 0..nb {
                    let (steps, terms0) = block(scheme, group, b);
                    let (sw, ow) = terms0;
                    if super::by_16(scheme) {
                        // Two sub-blocks of 16 (steps 0-3, 4-7), each its own terms; Q3_K's
                        // and Q6_K's offsets taken off in integers, Q2_K's mins as `ow * s`
                        // with `s` the activation scale times the sub-block's sum.
                        let terms1 = terms(scheme, group, b, 1);
                        let shift = super::offset_shift(scheme);
                        for i in 0..A {
                            let q = acts[i].q.as_ptr().add(b * 32);
                            let da = *acts[i].d.get_unchecked(b);
                            for (h, (sw, ow)) in [terms0, terms1].into_iter().enumerate() {
                                let sum = *acts[i].sums16.get_unchecked(2 * b + h);
                                let mut isum = _mm512_set1_epi32(if shift > 0 { -(sum << shift) } else { 0 });
                                for (t, &step) in steps.iter().enumerate().skip(4 * h).take(4) {
                                    let x = _mm512_set1_epi32((q.add(4 * t) as *const i32).read_unaligned());
                                    isum = _mm512_dpbusd_epi32(isum, step, x);
                                }
                                let d = _mm512_set1_ps(da);
                                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw, d), acc[i]);
                                if shift == 0 {
                                    acc[i] = _mm512_fmadd_ps(ow, _mm512_set1_ps(da * sum as f32), acc[i]);
                                }
                            }
                        }
                        continue;
                    }
                    for i in 0..A {
                        let q = acts[i].q.as_ptr().add(b * 32);
                        // Integer sums, so the chains' split changes nothing: one chain
                        // with 4 or more activation rows (their chains interleave), two of
                        // 4 steps each with fewer. One chain for 8 rows, in one process, best of 4
                        // (Intel Xeon, model 207): SmolLM2's Q8_0 head (49152 x 576) 1790
                        // -> 1582 us on 1 thread, 903 -> 801 on 2; a 576 x 1536 Q4_1
                        // 44.6 -> 43.8 and 27.6 -> 26.0 us. (The 16-bit kernel below lost
                        // 12-15% with one high and one low chain a row: it keeps four.)
                        let chains = if A >= 4 { 1 } else { 2 };
                        let mut sums = [_mm512_setzero_si512(); 2];
                        for (t, &step) in steps.iter().enumerate() {
                            let x = _mm512_set1_epi32((q.add(4 * t) as *const i32).read_unaligned());
                            sums[t % chains] = _mm512_dpbusd_epi32(sums[t % chains], step, x);
                        }
                        let (d, s) = (*acts[i].d.get_unchecked(b), *acts[i].s.get_unchecked(b));
                        let isum = if chains == 1 { sums[0] } else { _mm512_add_epi32(sums[0], sums[1]) };
                        acc[i] = add_block(acc[i], isum, (sw, ow), (_mm512_set1_ps(d), _mm512_set1_ps(s)));
                    }
                }
                store_group(out, g * ROWS, &acc);
            }
        }
    }

    /// [`super::dot_groups_q16`] for `A` activation rows.
    ///
    /// # Safety
    /// As `dot_groups_q16` checks; the host has AVX-512 F/BW/VL/DQ, VNNI and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn groups_q16_avx512<const S: u8, const A: usize>(
        p: &Packed,
        g0: usize,
        acts: &[super::Q16Row],
        out: &mut [&mut [f32]],
    ) {
        // As an array: no bounds check per row (see `groups_avx512`).
        let acts: &[super::Q16Row; A] = acts[..A].try_into().expect("A activation rows");
        let scheme = super::scheme_of(S);
        debug_assert_eq!(scheme, p.scheme);
        let nb = p.k / 32;
        let gb = group_bytes(scheme, p.k);
        let cols = out[0].len();
        let biased = scheme == QuantScheme::Q8_0;
        // SAFETY (whole body): as the caller guarantees.
        unsafe {
            let ones = _mm512_set1_epi8(1);
            for g in 0..cols.div_ceil(ROWS) {
                let mut acc = [_mm512_setzero_ps(); A];
                let group = p.bytes.as_ptr().add((g0 + g) * gb);
                for b in 0..nb {
                    let (steps, (sw, ow)) = block(scheme, group, b);
                    // Q8_0: 128 x each row's block sum, what the biased `lo` takes off.
                    let mut restore = _mm512_setzero_si512();
                    if biased {
                        for &s in &steps {
                            restore = _mm512_dpbusd_epi32(restore, s, ones);
                        }
                        restore = _mm512_slli_epi32::<7>(restore);
                    }
                    for i in 0..A {
                        let (hi, lo) = (acts[i].hi.as_ptr().add(b * 32), acts[i].lo.as_ptr().add(b * 32));
                        let bcast =
                            |p: *const u8, t: usize| _mm512_set1_epi32((p.add(4 * t) as *const i32).read_unaligned());
                        // Integer sums: the chains' split changes nothing.
                        let (mut h0, mut h1, mut l0, mut l1) = (
                            _mm512_setzero_si512(),
                            _mm512_setzero_si512(),
                            _mm512_setzero_si512(),
                            _mm512_setzero_si512(),
                        );
                        for t in (0..8).step_by(2) {
                            h0 = _mm512_dpbusd_epi32(h0, steps[t], bcast(hi.cast(), t));
                            h1 = _mm512_dpbusd_epi32(h1, steps[t + 1], bcast(hi.cast(), t + 1));
                            if biased {
                                l0 = _mm512_dpbusd_epi32(l0, steps[t], bcast(lo, t));
                                l1 = _mm512_dpbusd_epi32(l1, steps[t + 1], bcast(lo, t + 1));
                            } else {
                                // 4- and 5-bit quants fit a signed byte: `lo` is the unsigned side.
                                l0 = _mm512_dpbusd_epi32(l0, bcast(lo, t), steps[t]);
                                l1 = _mm512_dpbusd_epi32(l1, bcast(lo, t + 1), steps[t + 1]);
                            }
                        }
                        let high = _mm512_slli_epi32::<8>(_mm512_add_epi32(h0, h1));
                        let isum = _mm512_add_epi32(_mm512_add_epi32(high, _mm512_add_epi32(l0, l1)), restore);
                        let (d, ds) = (*acts[i].d.get_unchecked(b), *acts[i].ds.get_unchecked(b));
                        acc[i] = add_block(acc[i], isum, (sw, ow), (_mm512_set1_ps(d), _mm512_set1_ps(ds)));
                    }
                }
                store_group(out, g * ROWS, &acc);
            }
        }
    }

    /// Half a (group, block) at `at` for AVX2: vector `t` holds, per 32-bit lane, rows
    /// `8 half..8 half + 8`'s values `4t..4t + 4`, as unsigned bytes (4- and 5-bit quants)
    /// or, for Q8_0, as the signed quants (the bias taken off).
    ///
    /// # Safety
    /// `at` points at a whole (group, block) of `scheme`; the caller has AVX2.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn half_steps_avx2(scheme: QuantScheme, at: *const u8, half: usize) -> [__m256i; 8] {
        // (A closure here would not inherit the target features: one call per load.)
        // SAFETY: as the caller guarantees.
        unsafe {
            let mut steps = [_mm256_setzero_si256(); 8];
            for (t, step) in steps.iter_mut().enumerate() {
                *step = step_avx2(scheme, at, half, t);
            }
            steps
        }
    }

    /// Step `t` of [`half_steps_avx2`] alone.
    ///
    /// # Safety
    /// As [`half_steps_avx2`].
    #[inline(always)]
    unsafe fn step_avx2(scheme: QuantScheme, at: *const u8, half: usize, t: usize) -> __m256i {
        // SAFETY: as the caller guarantees.
        unsafe {
            let at = at.add(32 * half);
            if scheme == QuantScheme::Q8_0 {
                return _mm256_xor_si256(_mm256_loadu_si256(at.add(64 * t) as *const __m256i), _mm256_set1_epi8(-128));
            }
            let step = if super::two_bits(scheme) {
                // As `steps` takes them.
                let plane = _mm256_loadu_si256(at.add(64 * (t / 4)) as *const __m256i);
                let bits = match t % 4 {
                    0 => plane,
                    1 => _mm256_srli_epi16::<2>(plane),
                    2 => _mm256_srli_epi16::<4>(plane),
                    _ => _mm256_srli_epi16::<6>(plane),
                };
                _mm256_and_si256(bits, _mm256_set1_epi8(3))
            } else {
                let packed = _mm256_loadu_si256(at.add(64 * (t / 2)) as *const __m256i);
                let nibbles = if t.is_multiple_of(2) { packed } else { _mm256_srli_epi16::<4>(packed) };
                _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F))
            };
            if scheme == QuantScheme::Q6K {
                // The top bits, as `steps` takes them.
                let plane = _mm256_loadu_si256(at.add(256 + 64 * (t / 4)) as *const __m256i);
                let bits = match t % 4 {
                    0 => _mm256_slli_epi16::<4>(plane),
                    1 => _mm256_slli_epi16::<2>(plane),
                    2 => plane,
                    _ => _mm256_srli_epi16::<2>(plane),
                };
                return _mm256_or_si256(step, _mm256_and_si256(bits, _mm256_set1_epi8(0x30)));
            }
            let Some((masks, bit)) = super::bit_masks(scheme) else { return step };
            // Byte j of the step takes bit j of the half's 32-bit mask: byte j / 8 of the
            // mask spread to bytes j, then tested against bit j % 8.
            let spread = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            );
            let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let mask = (at.add(masks + 8 * t - 28 * half) as *const i32).read_unaligned();
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(mask), spread);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bits), bits);
            _mm256_or_si256(step, _mm256_and_si256(set, _mm256_set1_epi8(1 << bit)))
        }
    }

    /// [`terms`] for half `half` of the group (rows `8 half..8 half + 8`), on AVX2.
    ///
    /// # Safety
    /// As [`terms`]; the caller has AVX2 and F16C.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn terms_avx2(
        scheme: QuantScheme,
        group: *const u8,
        b: usize,
        h: usize,
        half: usize,
    ) -> (__m256, __m256) {
        // SAFETY: as the caller guarantees. (No closures: see `terms`.)
        unsafe {
            let at = group.add(quants_offset(scheme, b));
            if super::is_k(scheme) {
                let header = at.sub(k_header_bytes(scheme) + (b % 8) * quant_bytes(scheme));
                let d = _mm256_cvtph_ps(_mm_loadu_si128(header.add(16 * half) as *const __m128i));
                let (sc, mn) = match scheme {
                    QuantScheme::Q4K | QuantScheme::Q5K => {
                        let sc = _mm_loadl_epi64(header.add(64 + 16 * (b % 8) + 8 * half) as *const __m128i);
                        let mn = _mm_loadl_epi64(header.add(192 + 16 * (b % 8) + 8 * half) as *const __m128i);
                        (_mm256_cvtepu8_epi32(sc), _mm256_cvtepu8_epi32(mn))
                    }
                    QuantScheme::Q2K => {
                        let at = header.add(64 + 16 * (2 * (b % 8) + h) + 8 * half);
                        let bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(at as *const __m128i));
                        (_mm256_and_si256(bytes, _mm256_set1_epi32(0xF)), _mm256_srli_epi32::<4>(bytes))
                    }
                    _ => {
                        let at = header.add(32 + 16 * (2 * (b % 8) + h) + 8 * half);
                        let sc = _mm_loadl_epi64(at as *const __m128i);
                        let sw = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
                        let offset = -((1 << super::offset_shift(scheme)) as f32);
                        return (sw, _mm256_mul_ps(sw, _mm256_set1_ps(offset)));
                    }
                };
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(header.add(32 + 16 * half) as *const __m128i));
                let dmin =
                    _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(dmin), _mm256_set1_epi32(i32::MIN)));
                let sw = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
                return (sw, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn)));
            }
            let quant_bytes = quant_bytes(scheme);
            let sw = _mm256_cvtph_ps(_mm_loadu_si128(at.add(quant_bytes + 16 * half) as *const __m128i));
            let ow = if super::has_min(scheme) {
                _mm256_cvtph_ps(_mm_loadu_si128(at.add(quant_bytes + 32 + 16 * half) as *const __m128i))
            } else {
                _mm256_mul_ps(sw, _mm256_set1_ps(super::offset(scheme)))
            };
            (sw, ow)
        }
    }

    /// Lane `l` of `acc[i][h]` into column `first + 8 h + l` of `out[i]`, for the columns
    /// each `out` row holds: [`store_group`] for the AVX2 kernels' half groups.
    ///
    /// # Safety
    /// The caller has AVX; `first` is below the rows' length.
    #[inline(always)]
    unsafe fn store_halves<const A: usize>(out: &mut [&mut [f32]], first: usize, acc: &[[__m256; 2]; A]) {
        let lanes = (out[0].len() - first).min(ROWS);
        for (o, acc) in out.iter_mut().zip(acc) {
            let mut lane_values = [0f32; ROWS];
            // SAFETY: `lane_values` holds 16 floats.
            unsafe {
                _mm256_storeu_ps(lane_values.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(lane_values.as_mut_ptr().add(8), acc[1]);
            }
            o[first..first + lanes].copy_from_slice(&lane_values[..lanes]);
        }
    }

    /// [`super::dot_groups`] for `A` activation rows on AVX2 without VNNI: each half group
    /// (8 rows, one register) as `groups_avx512` takes a whole one, `vpmaddubsw` +
    /// `vpmaddwd` in place of `vpdpbusd`. The integer block sums are the same numbers and
    /// the f32 steps the same ([`add_block`]'s order), so the outputs have the AVX-512
    /// kernel's bits.
    ///
    /// The loop goes step by step through a half block, each step (a load and a mask)
    /// shared by the A rows and each row's sums kept in a register: holding the 8 steps
    /// for row after row (as the AVX-512 kernel does with 32 registers) spilled them. AMD
    /// EPYC Zen 3, one thread, 8 rows: Q4_1 1536 x 576 105 -> 90 us, Q8_0 49152 x 576
    /// 5.4-5.5 -> 4.9-5.0 ms, Q5_0 within the noise; 1 to 5 rows as fast or faster.
    ///
    /// `vpmaddubsw` adds two byte products into a saturating i16: 4-bit quants sum all 8
    /// steps in i16 before widening (at most 8 x 2 x 15 x 128 = 30720), 5-bit ones 4
    /// (31744); Q8_0's quants, 0..255 biased, would saturate, so it takes the signed quant's magnitude
    /// times the activation given its sign (at most 128 x 127 x 2 a pair), widened each
    /// step, and adds back 128 x the activation block's sum for the bias. (An activation
    /// of -128, which only a block with a denormal scale can hold, would come out of the
    /// sign as -128 where the VNNI kernel takes +128 for a negative weight: such a block's
    /// terms are below 1e-33.)
    ///
    /// # Safety
    /// As `dot_groups` checks; the host has AVX2, FMA and F16C.
    // `half` and `i` are register-tile coordinates: indexing reads clearer than zipped iterators.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn groups_avx2<const S: u8, const A: usize>(
        p: &Packed,
        g0: usize,
        acts: &[Q8Row],
        out: &mut [&mut [f32]],
    ) {
        let acts: &[Q8Row; A] = acts[..A].try_into().expect("A activation rows");
        let scheme = super::scheme_of(S);
        debug_assert_eq!(scheme, p.scheme);
        let nb = p.k / 32;
        let gb = group_bytes(scheme, p.k);
        let cols = out[0].len();
        let q8 = scheme == QuantScheme::Q8_0;
        // The by-16 schemes' offsets taken off in the integer sums (Q3_K, Q6_K), or their
        // mins added per sub-block (Q2_K).
        let shift = super::offset_shift(scheme);
        let mins16 = super::by_16(scheme) && shift == 0;
        // Steps whose products add up in i16 without overflow: 8 for 4-bit quants (8 x 2 x
        // 15 x 128 = 30720), 4 for 5-bit quants and the 2- and 3-bit ones (a sub-block's
        // steps), 2 for Q6_K's 6 (2 x 2 x 63 x 128), 1 for Q8_0 (2 x 128 x 128 a step).
        let chain = match scheme {
            QuantScheme::Q4_0 | QuantScheme::Q4_1 | QuantScheme::Q4K => 8,
            QuantScheme::Q6K => 2,
            QuantScheme::Q8_0 => 1,
            _ => 4,
        };
        // Sub-blocks of a block, each its own terms: the by-16 schemes' two (4 steps each).
        let subs = if super::by_16(scheme) { 2 } else { 1 };
        // SAFETY (whole body): as the caller guarantees.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            for g in 0..cols.div_ceil(ROWS) {
                let mut acc = [[_mm256_setzero_ps(); 2]; A];
                let group = p.bytes.as_ptr().add((g0 + g) * gb);
                for b in 0..nb {
                    let at = group.add(quants_offset(scheme, b));
                    // More rows than one are compute-bound, and the prefetches only take issue
                    // slots: AVX2 arm of an AMD EPYC Zen 4, 1 thread, SmolLM2's Q8_0 head (one
                    // product) 2 / 4 / 8 rows 1.28-1.44 / 2.80-2.83 / 4.8-5.1 -> 1.20 / 2.56-2.59
                    // / 4.4 ms, its 8-row decode step 21.4 -> 18.1-18.5 ms (a quiet phase of the
                    // VM; in a noisy one the two overlapped: the step 19.8-20.5 -> 19.3-26.0 ms,
                    // the head's best 4.99-5.57 -> 4.56-5.76 ms). One row streams the
                    // weight, where the prefetch stays: even there on Zen 4 (a cold Q4_1 200000
                    // x 576, 24.8-26.6 GB/s with, 26.7-27.4 without), not measured on the
                    // AVX2-only CPUs that take this kernel.
                    if A == 1 {
                        prefetch_ahead(at, quants_offset(scheme, b + 1) - quants_offset(scheme, b));
                    }
                    for half in 0..2 {
                        for h in 0..subs {
                            let steps = 8 / subs * h..8 / subs * (h + 1);
                            // Step by step, each shared by the A rows; per row its products
                            // summed in i16 over `chain` steps, then widened into i32.
                            let mut isums = [_mm256_setzero_si256(); A];
                            if q8 {
                                // 128 x the activation block's sum, the biased weights' share.
                                for (i, isum) in isums.iter_mut().enumerate() {
                                    let sums = acts[i].sums16.get_unchecked(2 * b..2 * b + 2);
                                    *isum = _mm256_set1_epi32((sums[0] + sums[1]) << 7);
                                }
                            }
                            if shift > 0 {
                                // The quants' offset, in integers (as `groups_avx512`).
                                for (i, isum) in isums.iter_mut().enumerate() {
                                    *isum = _mm256_set1_epi32(-(*acts[i].sums16.get_unchecked(2 * b + h) << shift));
                                }
                            }
                            for first in steps.clone().step_by(chain) {
                                let mut pairs = [_mm256_setzero_si256(); A];
                                for t in first..first + chain {
                                    let step = step_avx2(scheme, at, half, t);
                                    let magnitude = if q8 { _mm256_abs_epi8(step) } else { step };
                                    for i in 0..A {
                                        let x = _mm256_set1_epi32(
                                            (acts[i].q.as_ptr().add(b * 32 + 4 * t) as *const i32).read_unaligned(),
                                        );
                                        let x = if q8 { _mm256_sign_epi8(x, step) } else { x };
                                        pairs[i] = _mm256_add_epi16(pairs[i], _mm256_maddubs_epi16(magnitude, x));
                                    }
                                }
                                for i in 0..A {
                                    let wide = _mm256_madd_epi16(pairs[i], ones);
                                    let fresh = first == 0 && !q8 && shift == 0;
                                    isums[i] = if fresh { wide } else { _mm256_add_epi32(isums[i], wide) };
                                }
                            }
                            let (sw, ow) = terms_avx2(scheme, group, b, h, half);
                            for i in 0..A {
                                let d = *acts[i].d.get_unchecked(b);
                                let a = _mm256_fmadd_ps(
                                    _mm256_cvtepi32_ps(isums[i]),
                                    _mm256_mul_ps(sw, _mm256_set1_ps(d)),
                                    acc[i][half],
                                );
                                // (Q3_K's and Q6_K's offsets went in with the integers.)
                                let s = if mins16 {
                                    d * *acts[i].sums16.get_unchecked(2 * b + h) as f32
                                } else {
                                    *acts[i].s.get_unchecked(b)
                                };
                                acc[i][half] = if shift > 0 { a } else { _mm256_fmadd_ps(ow, _mm256_set1_ps(s), a) };
                            }
                        }
                    }
                }
                store_halves(out, g * ROWS, &acc);
            }
        }
    }
    /// [`super::dot_groups_q16`] for `A` activation rows on AVX2 without VNNI: per half
    /// group (8 weight rows, one register) and step, the 4 unsigned quants of each row
    /// widened to 16 bits in two registers (values 0, 1 and 2, 3 of a lane) and
    /// multiplied by the activation's 16-bit values with `vpmaddwd`, its pairs added in
    /// i32. The block sums are the integers the VNNI kernel and `quant_gemm`'s panels
    /// get (`sum u q`, at most 32 x 255 x 32767 < 2^31, Q8_0's quants biased as there),
    /// then [`add_block`]'s f32 steps: the same bits. Against the panels (unpacked from
    /// the repacked weight on each call): `quant_matmul::AVX2_SPLIT_ROWS`. No software
    /// prefetch: compute-bound from one row (the Q8_0 head, 1 / 8 rows, 1.49 / 4.74 ->
    /// 1.37 / 4.66-4.69 ms without it, AVX2 arm of an AMD EPYC Zen 4).
    ///
    /// # Safety
    /// As `dot_groups_q16` checks; the host has AVX2, FMA and F16C.
    // `half` and `i` are register-tile coordinates: indexing reads clearer than zipped iterators.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn groups_q16_avx2<const S: u8, const A: usize>(
        p: &Packed,
        g0: usize,
        acts: &[super::Q16Row],
        out: &mut [&mut [f32]],
    ) {
        let acts: &[super::Q16Row; A] = acts[..A].try_into().expect("A activation rows");
        let scheme = super::scheme_of(S);
        debug_assert!(scheme == p.scheme && !super::is_k(scheme));
        let nb = p.k / 32;
        let gb = group_bytes(scheme, p.k);
        let cols = out[0].len();
        // SAFETY (whole body): as the caller guarantees.
        unsafe {
            // Bytes 0, 1 (and 2, 3) of each 32-bit lane into its two 16-bit halves.
            let (pair01, pair23) = (
                _mm256_setr_epi8(
                    0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1, //
                    0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1,
                ),
                _mm256_setr_epi8(
                    2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1, //
                    2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1,
                ),
            );
            for g in 0..cols.div_ceil(ROWS) {
                let mut acc = [[_mm256_setzero_ps(); 2]; A];
                let group = p.bytes.as_ptr().add((g0 + g) * gb);
                for b in 0..nb {
                    let at = group.add(quants_offset(scheme, b));
                    for half in 0..2 {
                        let mut isums = [_mm256_setzero_si256(); A];
                        for t in 0..8 {
                            // Unsigned quants: Q8_0's as stored (biased), the others unpacked.
                            let step = if scheme == QuantScheme::Q8_0 {
                                _mm256_loadu_si256(at.add(32 * half + 64 * t) as *const __m256i)
                            } else {
                                step_avx2(scheme, at, half, t)
                            };
                            let (w01, w23) = (_mm256_shuffle_epi8(step, pair01), _mm256_shuffle_epi8(step, pair23));
                            for i in 0..A {
                                let q = acts[i].q.as_ptr().add(b * 32 + 4 * t);
                                let x01 = _mm256_set1_epi32((q as *const i32).read_unaligned());
                                let x23 = _mm256_set1_epi32((q.add(2) as *const i32).read_unaligned());
                                let pairs = _mm256_add_epi32(_mm256_madd_epi16(w01, x01), _mm256_madd_epi16(w23, x23));
                                isums[i] = _mm256_add_epi32(isums[i], pairs);
                            }
                        }
                        let (sw, ow) = terms_avx2(scheme, group, b, 0, half);
                        for i in 0..A {
                            let (d, ds) = (*acts[i].d.get_unchecked(b), *acts[i].ds.get_unchecked(b));
                            let a = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(isums[i]),
                                _mm256_mul_ps(sw, _mm256_set1_ps(d)),
                                acc[i][half],
                            );
                            acc[i][half] = _mm256_fmadd_ps(ow, _mm256_set1_ps(ds), a);
                        }
                    }
                }
                store_halves(out, g * ROWS, &acc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Value `i` (0..32) of block `b` of weight row `row`, read back from the repacked copy
    /// by its layout: 4-bit values 8c + e (low nibble) and 8c + 4 + e (high) in byte e of
    /// chunk c at the row's lane; 5-bit schemes' fifth bits in per-step masks; Q6_K's top two in
    /// two planes; Q2_K's and Q3_K's low two in two planes, Q3_K's third in masks; Q8_0 biased by 128.
    fn repacked_value(p: &Packed, row: usize, b: usize, i: usize) -> i32 {
        let (g, lane) = (row / ROWS, row % ROWS);
        let group = &p.bytes()[g * group_bytes(p.scheme, p.k)..];
        let block = &group[quants_offset(p.scheme, b)..][..quant_bytes(p.scheme)];
        if p.scheme == QuantScheme::Q8_0 {
            return (block[(i / 4) * 64 + lane * 4 + i % 4] ^ 0x80) as i8 as i32;
        }
        let (c, e, high, t) = (i / 8, i % 4, i % 8 >= 4, i / 4);
        let plane = |at: usize| ((block[at + 64 * (t / 4) + 4 * lane + e] >> (2 * (t % 4))) & 3) as i32;
        let mask_bit = |at: usize| {
            let bit = lane * 4 + e;
            ((block[at + 8 * t + bit / 8] >> (bit % 8)) & 1) as i32
        };
        let low4 = || {
            let byte = block[c * 64 + lane * 4 + e];
            (if high { byte >> 4 } else { byte & 0xF }) as i32
        };
        match p.scheme {
            _ if five_bits(p.scheme) => low4() | (mask_bit(256) << 4),
            QuantScheme::Q6K => low4() | (plane(256) << 4),
            QuantScheme::Q2K => plane(0),
            QuantScheme::Q3K => plane(0) | (mask_bit(128) << 2),
            _ => low4(),
        }
    }

    /// The header fields of row `row`'s super-block `u` in a K-quant repack: (f16 bytes of
    /// `d`, of `dmin` (Q2_K, Q4_K, Q5_K), the sub-block scales).
    fn repacked_k_header(p: &Packed, row: usize, u: usize) -> ([u8; 2], [u8; 2], Vec<u8>) {
        let (g, lane) = (row / ROWS, row % ROWS);
        let header = &p.bytes()[g * group_bytes(p.scheme, p.k) + u * unit_bytes(p.scheme)..];
        let f16 = |at: usize| [header[at + 2 * lane], header[at + 2 * lane + 1]];
        // Q4_K's 8 scales then 8 mins, the others' 16 sub-block bytes: 16 bytes apart.
        let no_min = matches!(p.scheme, QuantScheme::Q3K | QuantScheme::Q6K);
        let first = if no_min { 32 } else { 64 };
        let sc = (0..16).map(|j| header[first + 16 * j + lane]).collect();
        (f16(0), if no_min { [0, 0] } else { f16(32) }, sc)
    }

    /// The repacked copy holds every value and scale of the source, in runs on one thread
    /// or split across workers (bytes identical), with a partial last group; each run's
    /// rows are released once they are read.
    #[test]
    fn repacking_keeps_every_value_on_one_thread_or_several() {
        let pool = crate::threads::pool(2).unwrap();
        let n = 37;
        for scheme in SCHEMES {
            let k = 3 * scheme.block_size();
            let bb = scheme.block_bytes();
            let w: Vec<u8> =
                (0..n * k / scheme.block_size() * bb).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
            let released = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let (base, calls) = (w.as_ptr() as usize, released.clone());
            let release: PageRelease = std::sync::Arc::new(move |bytes: &[u8]| {
                calls
                    .lock()
                    .unwrap()
                    .push(bytes.as_ptr() as usize - base..bytes.as_ptr() as usize - base + bytes.len());
            });
            let one = crate::threads::inline(|| Packed::new(scheme, &w, n, k, None));
            let split = pool.install(|| Packed::new(scheme, &w, n, k, Some(&release)));
            assert!(one.bytes() == split.bytes(), "{scheme:?}: the split repack differs");
            // The runs' releases (all calls but the last, the whole weight's) cover it.
            let calls = released.lock().unwrap();
            let mut covered = vec![false; w.len()];
            calls[..calls.len() - 1].iter().for_each(|r| covered[r.clone()].fill(true));
            assert!(calls.len() > 2 && covered.iter().all(|&c| c), "{scheme:?}: runs not released: {calls:?}");
            let units = k / scheme.block_size();
            for row in 0..n {
                for unit in 0..units {
                    let src = &w[(row * units + unit) * bb..][..bb];
                    // The unit's values in order, unsigned, by the scalar unpacking (Q8_0's
                    // signed).
                    let mut want = [0u8; 256];
                    super::super::quant_gemm::quants(scheme, src, &mut want);
                    for v in 0..scheme.block_size() {
                        let (b, i) = (unit * scheme.block_size() / 32 + v / 32, v % 32);
                        let want =
                            if scheme == QuantScheme::Q8_0 { (want[v] ^ 0x80) as i8 as i32 } else { want[v] as i32 };
                        assert_eq!(repacked_value(&one, row, b, i), want, "{scheme:?} row {row} block {b} value {i}");
                    }
                    if is_k(scheme) {
                        let (d, dmin, sc) = repacked_k_header(&one, row, unit);
                        let (want_sc, want_d, want_dmin): (Vec<u8>, _, _) = match scheme {
                            QuantScheme::Q2K => (src[..16].to_vec(), [src[80], src[81]], [src[82], src[83]]),
                            QuantScheme::Q3K => {
                                let sc = rlx_ir::quant::q3k_scales(&src[96..108]);
                                (sc.iter().map(|&s| s as u8).collect(), [src[108], src[109]], [0, 0])
                            }
                            QuantScheme::Q6K => (src[192..208].to_vec(), [src[208], src[209]], [0, 0]),
                            _ => {
                                let (sc, mn) = rlx_ir::quant::k_scale_min(&src[4..16]);
                                (sc.iter().chain(&mn).copied().collect(), [src[0], src[1]], [src[2], src[3]])
                            }
                        };
                        assert_eq!(
                            (d, dmin, sc),
                            (want_d, want_dmin, want_sc),
                            "{scheme:?} row {row} super-block {unit}: d, dmin, scales"
                        );
                        continue;
                    }
                    let block = &one.bytes()[(row / ROWS) * group_bytes(scheme, k) + unit * unit_bytes(scheme)..];
                    let (qb, lane) = (quant_bytes(scheme), row % ROWS);
                    assert_eq!(block[qb + 2 * lane..][..2], src[..2], "{scheme:?} row {row} block {unit}: scale");
                    if has_min(scheme) {
                        assert_eq!(
                            block[qb + 32 + 2 * lane..][..2],
                            src[2..4],
                            "{scheme:?} row {row} block {unit}: min"
                        );
                    }
                }
            }
        }
    }
}
