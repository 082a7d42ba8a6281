//! f32 matmuls against a weight packed once: `a [m, k] @ b [k, n]` where `b` is a param,
//! its columns laid out as the micro-kernel reads them when the param is set (and again
//! only when it changes), instead of by the `gemm` crate on every call.
//!
//! Why: the skinny products of an MLP, an encoder or a prefill chunk (m = 1..256 rows
//! against a large weight) spent as long packing the weight as multiplying: the MLP
//! 768-3072-768 at batch 32 ran at 63 GFLOP/s through the `gemm` crate and 1024^3 at 100
//! (AMD EPYC, one thread). onnxruntime packs its weights at session start the same way.
//! Products of more rows take this path too (they had used the `gemm` crate up to
//! 2026-12-04): as fast or faster at every size measured, and a row's bits no longer
//! depend on how many rows share its product. The character transformer's training step
//! (1024-row products against 128-wide weights) went 34.5-36.0 -> 26.7-27.2 ms.
//!
//! Layout: `Panels` holds the weight in column panels of `NR` (two AVX-512 vectors),
//! each panel its `k` rows one after another (`NR` floats a row, zeros past `n`). A tile
//! reads its rows of `a` where they lie when their elements are contiguous (otherwise a
//! call packs them first, in blocks of a tile's height). AVX-512 tiles are up to 8 rows by
//! a panel on AMD and up to 12 on Intel (see [`Avx512Tile`]), AVX2 tiles up to 6 rows by
//! half a panel. Each output element is one FMA chain over
//! `p = 0..k` in order, whatever `m`, the row block it falls in, or the thread that
//! computes its panel: results are bit-identical for every batch size and thread count.

use super::SharedOut;
use crate::arena::Arena;
use crate::features::Arm;
use rayon::prelude::*;
use rlx_ir::{Error, Result};

/// Columns per panel: two 16-float vectors.
pub const NR: usize = 32;
/// The AVX-512 register tile, per CPU family (as tract picks its kernels per CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Avx512Tile {
    /// 8 rows of `a` (2 accumulators each), no prefetch: AMD Zen 4 issues one 512-bit FMA
    /// a cycle, 16 accumulators keep it busy (12 or 16 rows measured 15-40% slower on the
    /// MLP's second product), and its prefetcher follows the panel.
    Amd,
    /// 12 rows (24 accumulators, 27 of the 32 registers), the panel fetched
    /// [`INTEL_PREFETCH`] steps ahead: Intel's cores issue two 512-bit FMAs a cycle, and
    /// the L2 streamer does not bring the panel in time. Intel Xeon (AMX, 2 cores), one
    /// thread, GFLOP/s, 8 rows -> 8 rows prefetched -> 12 rows prefetched: 32 x 768 x 3072
    /// 111-130 -> 130-141 -> 137-162, 32 x 3072 x 768 115-129 -> 127-141 -> 133-158, 1024^3
    /// 126-128 -> 144-149 -> 151-156 (the `gemm` crate 150-162).
    Intel,
}

/// Steps of `k` (2 KiB of panel) the Intel tile prefetches ahead; the AMD tile none.
const INTEL_PREFETCH: usize = 16;
const NO_PREFETCH: usize = 0;

impl Avx512Tile {
    pub fn for_this_cpu() -> Avx512Tile {
        if crate::features::features().amd { Avx512Tile::Amd } else { Avx512Tile::Intel }
    }

    /// Rows of `a` per tile.
    pub fn rows(self) -> usize {
        match self {
            Avx512Tile::Amd => 8,
            Avx512Tile::Intel => 12,
        }
    }
}

/// Rows per AVX2 tile, by half panels (6 x 2 accumulators, 2 weight vectors and a
/// broadcast: 15 of the 16 vector registers). `a` is packed in blocks of this height
/// there: blocks of 8 split 6 + 2 ran the 2-row tiles at half rate (latency-bound).
const AVX2_MR: usize = 6;
/// On AVX2, products over more than `AVX2_WHOLE_K` steps of k go by runs of about
/// `AVX2_KC` steps: each output's chain stored in `c` between runs and taken up again (the
/// same FMAs in the same order), a run of a strip (32 KiB) past all of a task's row
/// blocks from L1 instead of a whole strip from L3 or DRAM for each block. AMD EPYC Zen 3,
/// one thread, GFLOP/s, runs of all k -> 512: 32 x 3072 x 768 73-77 -> 84-86, 128 x 3072
/// x 768 80-83 -> 88-90, 32 x 2048 x 2048 76-77 -> 82-85; runs of 256 cost 2-5% at k =
/// 768 and 1024 (shorter streams for the prefetchers), where a whole strip stays in L2.
const AVX2_KC: usize = 512;
const AVX2_WHOLE_K: usize = 1024;
/// A `[k, n]` f32 weight in column panels of [`NR`], 64-byte aligned.
pub struct Panels {
    k: usize,
    n: usize,
    /// The arena's start (the arena owns the bytes and never moves them).
    start: *const f32,
    _data: Arena,
}

// SAFETY: the panels are written once, in `pack`, and only read after.
unsafe impl Send for Panels {}
unsafe impl Sync for Panels {}

impl std::fmt::Debug for Panels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Panels({} x {} in {}-column panels)", self.k, self.n, NR)
    }
}

impl Panels {
    /// Packs `b [k, n]` read with (row, column) element strides `(rs, cs)`.
    pub fn pack(b: &[f32], (k, n): (usize, usize), (rs, cs): (usize, usize)) -> Result<Panels> {
        if k > 0 && n > 0 && (k - 1) * rs + (n - 1) * cs >= b.len() {
            return Err(Error::internal(format!("packing a [{k}, {n}] weight from {} values", b.len())));
        }
        let floats = n.div_ceil(NR) * k * NR;
        let mut data = Arena::new(floats * 4)?;
        let base = data.base().0.cast::<f32>();
        // SAFETY: the arena holds `floats` zeroed, 64-byte aligned f32 slots, owned here.
        let out = unsafe { std::slice::from_raw_parts_mut(base, floats) };
        for (j, panel) in out.chunks_exact_mut(k.max(1) * NR).enumerate() {
            let width = NR.min(n - j * NR);
            for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
                for (c, v) in row[..width].iter_mut().enumerate() {
                    *v = b[p * rs + (j * NR + c) * cs];
                }
            }
        }
        Ok(Panels { k, n, start: base, _data: data })
    }

    pub fn dims(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    fn floats(&self) -> &[f32] {
        let len = self.n.div_ceil(NR) * self.k * NR;
        // SAFETY: `pack` wrote `len` f32 values at the arena's 64-byte-aligned start; the
        // arena is never written after.
        unsafe { std::slice::from_raw_parts(self.start, len) }
    }
}

/// Whether packed products run on `arm` on this CPU (AVX-512 and AVX2 tiles; elsewhere the
/// `gemm` crate's path stays).
pub fn available(arm: Arm) -> bool {
    arm >= Arm::Avx2 && arm <= Arm::best()
}

/// Which tiles packed products take on this host, and why, for `rlx info`.
pub fn arm_reason() -> String {
    let arm = Arm::best();
    if !available(arm) {
        return "none (no AVX2: the gemm crate packs the weight on every call)".into();
    }
    if arm == Arm::Avx2 {
        return format!("avx2 ({AVX2_MR} x 16 register tiles)");
    }
    match Avx512Tile::for_this_cpu() {
        Avx512Tile::Amd => "avx512 (8 x 32 register tiles: AMD issues one 512-bit FMA a cycle)".into(),
        Avx512Tile::Intel => format!(
            "avx512 (12 x 32 register tiles, the panel prefetched {INTEL_PREFETCH} steps ahead: \
             two 512-bit FMAs a cycle off AMD)"
        ),
    }
}

/// `c = a @ panels` for `a [m, k]` read with element strides `sa`, into `c [m, n]` with
/// rows `c_row` apart, on up to `threads` workers (whole panels each), with `arm`'s tiles
/// (on AVX-512, of the shape `tile`: [`Avx512Tile::for_this_cpu`], or any for tests).
/// Every arm and tile gives the same bits (the same FMA chain per output).
///
/// # Panics
/// If `arm` is not [`available`].
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    (arm, tile): (Arm, Avx512Tile),
    m: usize,
    a: &[f32],
    sa: (usize, usize),
    panels: &Panels,
    c: &mut [f32],
    c_row: usize,
    threads: usize,
) {
    gemm_then((arm, tile), m, (a, sa), panels, (c, c_row), threads, None)
}

/// What a product's tasks do to the output they computed: `epilogue(first column,
/// segment)` on each row's columns a task wrote, while they are in its core's cache (a
/// fused bias and activation), instead of a pass over the whole output after the
/// product: one parallel region fewer, and no row read on another core than wrote it.
pub type Epilogue<'a> = dyn Fn(usize, &mut [f32]) + Sync + 'a;

/// [`gemm`], then `epilogue` on every element of `c [m, n]`, by row segments.
///
/// # Panics
/// If `arm` is not [`available`].
pub fn gemm_then(
    (arm, tile): (Arm, Avx512Tile),
    m: usize,
    (a, sa): (&[f32], (usize, usize)),
    panels: &Panels,
    (c, c_row): (&mut [f32], usize),
    threads: usize,
    epilogue: Option<&Epilogue>,
) {
    assert!(available(arm), "packed gemm: the {} arm is not available on this CPU", arm.name());
    let (k, n) = (panels.k, panels.n);
    if m == 0 || n == 0 {
        return;
    }
    // The tiles store through raw pointers: the output must hold every row.
    assert!(c_row >= n && c.len() >= (m - 1) * c_row + n, "packed gemm output too small");
    if k == 0 {
        for row in c.chunks_mut(c_row).take(m) {
            row[..n].fill(0.0);
            if let Some(epilogue) = epilogue {
                epilogue(0, &mut row[..n]);
            }
        }
        return;
    }
    // The tiles also read `a` through raw pointers, in place.
    assert!(a.len() > (m - 1) * sa.0 + (k - 1) * sa.1, "packed gemm: a too small for {m} x {k}");
    let mr = if arm == Arm::Avx512 { tile.rows() } else { AVX2_MR };
    // Rows of `a` with contiguous elements are read where they lie; others are packed
    // first, in blocks of mr rows, each block k steps of mr floats. Packing ran on the
    // calling thread before the split: the MLP 768-3072-768 at batch 32, 2 threads, went
    // 173-196 -> 205-210 GFLOP/s reading its rows in place (1 thread 93-104 -> 102-105;
    // AMD EPYC). Same values, same FMA chains: the same bits.
    let in_place = sa.1 == 1;
    // Whole blocks, at least one.
    let pass = (PASS_BYTES / 4 / k / mr).max(1) * mr;
    crate::threads::with_scratch::<f32, _>(if in_place { 0 } else { pass.min(m).div_ceil(mr) * k * mr }, |packed_a| {
        for first in (0..m).step_by(pass) {
            let rows = pass.min(m - first);
            let a = &a[first * sa.0..];
            if !in_place {
                pack_rows(RowBlocks::new(rows, mr, arm), k, a, sa, packed_a);
            }
            let packed_a = &*packed_a;
            let blocks = RowBlocks::new(rows, mr, arm);
            // Block r's first element and its (row, step) strides.
            let block = |r: usize| {
                if in_place { (&a[blocks.at(r).0 * sa.0..], (sa.0, 1)) } else { (&packed_a[r * k * mr..], (1, mr)) }
            };
            let c = SharedOut::new(&mut c[first * c_row..]);
            panels_times_rows((arm, tile), RowBlocks::new(rows, mr, arm), block, panels, (c, c_row), threads, epilogue);
        }
    })
}

/// Bytes of `a` per pass over the panels: a pass's rows stay in L2 while every panel
/// streams past them, whatever `m` (256 rows at k = 1024, 2048 at k = 128). The pass
/// length changes no FMA chain. One pass of all rows against passes of 256, 4096 x 2048 x
/// 1024: 104-107 -> 110-112 GFLOP/s on 1 thread, 209 -> 219-222 on 2 (AMD EPYC).
const PASS_BYTES: usize = 1 << 20;

/// How a pass's rows split into register tiles: blocks of `mr` rows, except on AVX2 a
/// last block of fewer than [`AVX2_EVEN_BELOW`] rows, which shares the rows of the block
/// before it evenly: a tile of 1 to 3 rows holds 2 to 6 FMA chains, too few to cover
/// AVX2's FMA latency, and runs at up to half rate. AMD EPYC Zen 3, one thread, in-process
/// A/B: 32 x 768 x 3072 as 6 x 5 + 2 -> 6 x 4 + 4 x 2 rows +4% (89-92 -> 93-95 GFLOP/s),
/// 32 x 3072 x 768 +4%, 14 rows (6 + 6 + 2 -> 6 + 4 + 4) +9%, 8 rows +4%.
#[derive(Clone, Copy)]
struct RowBlocks {
    rows: usize,
    mr: usize,
    /// Rows of the second-to-last block when the last two share evenly, else 0.
    evened: usize,
}

/// See [`RowBlocks`]: 4 rows are 8 FMA chains, two FMA units' 4-cycle latency.
const AVX2_EVEN_BELOW: usize = 4;

impl RowBlocks {
    fn new(rows: usize, mr: usize, arm: Arm) -> RowBlocks {
        let tail = rows % mr;
        let even = arm != Arm::Avx512 && rows > mr && tail > 0 && tail < AVX2_EVEN_BELOW;
        RowBlocks { rows, mr, evened: if even { (mr + tail).div_ceil(2) } else { 0 } }
    }

    fn count(self) -> usize {
        self.rows.div_ceil(self.mr)
    }

    /// Block r's first row and height.
    fn at(self, r: usize) -> (usize, usize) {
        let last = self.count() - 1;
        match r {
            _ if self.evened > 0 && r + 1 == last => (r * self.mr, self.evened),
            _ if self.evened > 0 && r == last => {
                ((r - 1) * self.mr + self.evened, self.rows - (r - 1) * self.mr - self.evened)
            }
            _ => (r * self.mr, self.mr.min(self.rows - r * self.mr)),
        }
    }
}

/// Packs the rows of `a` (element strides `sa`) block by block, each block k steps of
/// `mr` floats (its height used).
fn pack_rows(blocks: RowBlocks, k: usize, a: &[f32], sa: (usize, usize), packed_a: &mut [f32]) {
    let mr = blocks.mr;
    for (r, block) in packed_a.chunks_exact_mut(k * mr).take(blocks.count()).enumerate() {
        let (start, height) = blocks.at(r);
        for i in 0..height {
            let row = &a[(start + i) * sa.0..];
            for p in 0..k {
                block[p * mr + i] = row[p * sa.1];
            }
        }
    }
}

/// `c = a @ panels` for the rows of `a` in `blocks` (`block(r)`: block r's first element
/// and its (row, step) strides), on up to `threads` workers, each task then running
/// `epilogue` on what it wrote.
fn panels_times_rows<'a>(
    (arm, shape): (Arm, Avx512Tile),
    row_blocks: RowBlocks,
    block: impl Fn(usize) -> (&'a [f32], (usize, usize)) + Sync,
    panels: &Panels,
    (out, c_row): (SharedOut, usize),
    threads: usize,
    epilogue: Option<&Epilogue>,
) {
    let (k, n) = (panels.k, panels.n);
    let (rows, columns, blocks) = (row_blocks.rows, n.div_ceil(NR), row_blocks.count());
    // A tile's columns: a panel on AVX-512, half of one on AVX2 (16 registers).
    let strip = if arm == Arm::Avx512 { NR } else { NR / 2 };
    let avx2 = arm != Arm::Avx512;
    let depth = if avx2 && k > AVX2_WHOLE_K { k.div_ceil(k.div_ceil(AVX2_KC)) } else { k };
    // Panels js times row blocks rs, by units of `depth` steps of k of one panel, each
    // strip of a unit past all of the blocks while it is in L1.
    let run = |js: std::ops::Range<usize>, rs: std::ops::Range<usize>| {
        let (first, last) = (js.start * NR, n.min(js.end * NR));
        let floats = panels.floats();
        for j in js.clone() {
            for k0 in (0..k).step_by(depth) {
                let steps = depth.min(k - k0);
                let here = j * k * NR + k0 * NR;
                // On AVX2 the unit after this one (the panel's next steps, or the next
                // panel's first ones, which lie right after it) is fetched into L2 while
                // this one runs, a few lines by each tile: a cold weight otherwise streams
                // from DRAM at a tile's pace in the first row block only, faster than DRAM
                // serves it. AMD EPYC Zen 3, one thread, weights cycled through 37 MiB
                // (past L3): 32 x 768 x 3072 72 -> 86 GFLOP/s, 32 x 3072 x 768 67 -> 75;
                // within 3% either way with one weight in L3.
                let next_steps = if k0 + steps < k {
                    depth.min(k - k0 - steps)
                } else if j + 1 < js.end {
                    depth.min(k)
                } else {
                    0
                };
                let strips = NR.min(n - j * NR).div_ceil(strip);
                let tiles = strips * rs.len();
                let lines = if avx2 { (next_steps * NR * 4 / 64).div_ceil(tiles) } else { 0 };
                let every = steps.checked_div(lines).map_or(usize::MAX, |e| e.max(1));
                let mut t = 0;
                for s in (0..NR.min(n - j * NR)).step_by(strip) {
                    let width = strip.min(n - j * NR - s);
                    let panel = &floats[here + s..];
                    for r in rs.clone() {
                        let (start, height) = row_blocks.at(r);
                        let (a, (ri, rp)) = block(r);
                        let ahead = floats.as_ptr().wrapping_add(here + steps * NR + t * lines * 16).cast::<i8>();
                        t += 1;
                        // SAFETY: rows start.. of c, columns j*NR+s.. (width of them), lie
                        // inside `c` (the caller checked m rows of c_row >= n); each (strip,
                        // block) tile is written by one worker only; the block's rows hold
                        // steps k0..k0+steps in `a` or the packed rows, the panel's slice
                        // `steps` rows of NR from column s.
                        unsafe {
                            tile(
                                (arm, shape),
                                height,
                                (steps, k0 > 0),
                                (&a[k0 * rp..], (ri, rp)),
                                panel,
                                out.at(start * c_row + j * NR + s),
                                c_row,
                                width,
                                (ahead, lines, every),
                            )
                        }
                    }
                }
            }
        }
        if let Some(epilogue) = epilogue {
            for i in row_blocks.at(rs.start).0..row_blocks.at(rs.end - 1).0 + row_blocks.at(rs.end - 1).1 {
                // SAFETY: columns first..last of row i lie inside `c` and were written by
                // this task alone, just above.
                epilogue(first, unsafe { std::slice::from_raw_parts_mut(out.at(i * c_row + first), last - first) });
            }
        }
    };
    // A task takes whole panels (and reads every row of `a`) when the weight is the
    // larger operand of the pass, else whole row blocks (and reads every panel): what a
    // task reads is then at most a fraction of the larger one. 1024 x 512 x 128 on 2
    // threads, by panels 158-163 GFLOP/s (median), the `gemm` crate 181-186.
    //
    // ~CHUNKS_PER_THREAD tasks a worker, taken as workers free up: one task a worker left
    // the product as slow as its slowest core. This VM's second core runs at a fraction of
    // the first's speed in some phases, where the MLP 768-3072-768 at batch 32 took longer
    // on 2 threads than on 1 (3.0-3.4 against 2.4-3.3 ms, onnxruntime 1.7-2.0 in the same
    // runs); the quantized products split into chunks for the same reason. 8 a worker
    // against 4, the MLP on 2 threads, best of 3 runs, 11 alternating pairs: 8 faster in
    // 9 (1.07-1.27 ms against 1.07-1.60 where the phase was slow), within 1% in quiet ones.
    if threads <= 1 {
        run(0..columns, 0..blocks);
    } else if n >= rows && columns > 1 {
        let per = columns.div_ceil(threads * CHUNKS_PER_THREAD);
        (0..columns.div_ceil(per)).into_par_iter().for_each(|t| run(t * per..columns.min((t + 1) * per), 0..blocks));
    } else {
        let per = blocks.div_ceil(threads * CHUNKS_PER_THREAD);
        (0..blocks.div_ceil(per)).into_par_iter().for_each(|t| run(0..columns, t * per..blocks.min((t + 1) * per)));
    }
}

/// Tasks per worker a product is split into (whole panels or whole row blocks each).
const CHUNKS_PER_THREAD: usize = 8;

/// A tile's rows of `a`: the first element, and the (row, step) strides of the others.
type Rows = (*const f32, (usize, usize));

/// One register tile: `rows` rows of `c` (a block of `a`: up to [`Avx512Tile::rows`]
/// on AVX-512, [`AVX2_MR`] on AVX2, element `(i, p)` at `a[i * ri + p * rp]`) times a
/// strip of one panel (a panel on AVX-512, 16 columns on AVX2), over `steps` steps of k:
/// each output's FMA chain starts from zero, or when `accumulate` goes on from the value
/// `c` holds (the chain's earlier steps, stored exactly in f32).
///
/// # Safety
/// `available(arm)`; `a` holds `rows` rows of `steps` steps at its strides, `panel`
/// `steps` rows of `NR` floats from its start; `c` addresses `rows` rows of `width` (<= the
/// strip) writable floats, `c_row` apart.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    (arm, shape): (Arm, Avx512Tile),
    rows: usize,
    (steps, accumulate): (usize, bool),
    (a, strides): (&[f32], (usize, usize)),
    panel: &[f32],
    c: *mut f32,
    c_row: usize,
    width: usize,
    pf: Fetch,
) {
    let (a, panel) = (a.as_ptr(), panel.as_ptr());
    let c = (c, c_row, width);
    macro_rules! rows {
        ($kernel:ident::<R, $pf:ident>, $($r:literal)*) => {
            match rows {
                // SAFETY: the caller's contract; `available` checked the arm's features.
                $($r => unsafe { $kernel::<$r, $pf>((steps, accumulate), (a, strides), panel, c, pf) },)*
                _ => unreachable!("a tile of {rows} rows"),
            }
        };
        ($kernel:ident::<R>, $($r:literal)*) => {
            match rows {
                // SAFETY: as above.
                $($r => unsafe { $kernel::<$r>((steps, accumulate), (a, strides), panel, c, pf) },)*
                _ => unreachable!("a tile of {rows} rows"),
            }
        };
    }
    match (arm, shape) {
        (Arm::Avx512, Avx512Tile::Amd) => rows!(tile_avx512::<R, NO_PREFETCH>, 1 2 3 4 5 6 7 8),
        (Arm::Avx512, Avx512Tile::Intel) => rows!(tile_avx512::<R, INTEL_PREFETCH>, 1 2 3 4 5 6 7 8 9 10 11 12),
        _ => rows!(tile_avx2::<R>, 1 2 3 4 5 6),
    }
}

/// A tile's output: its first element, the row stride and the columns stored.
type Out = (*mut f32, usize, usize);
/// Lines a tile fetches into L2 for the tiles after it: the first, how many, one every
/// so many steps.
type Fetch = (*const i8, usize, usize);

/// [`tile`] on AVX2: `R` rows (from `a` at its strides) by 16 columns (from `panel`, `NR`
/// floats a step), `width` of them stored, `pf`'s lines fetched into L2 along the way.
///
/// # Safety
/// The host has AVX2 and FMA; `a` and `panel` hold `steps` steps; `c` addresses `R` rows
/// of `width` (<= 16) writable floats, `c_row` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize>(
    (steps, accumulate): (usize, bool),
    (a, (ri, rp)): Rows,
    panel: *const f32,
    (c, c_row, width): Out,
    (ahead, lines, every): Fetch,
) {
    use std::arch::x86_64::*;
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    if accumulate {
        for i in 0..R {
            let mut row = [0f32; 16];
            // SAFETY: row i of c holds `width` (<= 16) floats; `row` 16.
            unsafe {
                let from = if width == 16 {
                    c.add(i * c_row).cast_const()
                } else {
                    std::ptr::copy_nonoverlapping(c.add(i * c_row), row.as_mut_ptr(), width);
                    row.as_ptr()
                };
                lo[i] = _mm256_loadu_ps(from);
                hi[i] = _mm256_loadu_ps(from.add(8));
            }
        }
    }
    let (mut fetched, mut fetch_at) = (0, 0);
    for p in 0..steps {
        if p == fetch_at && fetched < lines {
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(fetched * 64));
            fetched += 1;
            fetch_at += every;
        }
        // SAFETY: p < steps, i < R: inside the panel and the tile's rows of `a`.
        unsafe {
            let b0 = _mm256_loadu_ps(panel.add(p * NR));
            let b1 = _mm256_loadu_ps(panel.add(p * NR + 8));
            for i in 0..R {
                let ai = _mm256_set1_ps(*a.add(i * ri + p * rp));
                lo[i] = _mm256_fmadd_ps(ai, b0, lo[i]);
                hi[i] = _mm256_fmadd_ps(ai, b1, hi[i]);
            }
        }
    }
    for i in 0..R {
        let mut row = [0f32; 16];
        // SAFETY: `row` holds 16 floats; row i of c holds `width` of them.
        unsafe {
            let to = if width == 16 { c.add(i * c_row) } else { row.as_mut_ptr() };
            _mm256_storeu_ps(to, lo[i]);
            _mm256_storeu_ps(to.add(8), hi[i]);
            if width < 16 {
                std::ptr::copy_nonoverlapping(row.as_ptr(), c.add(i * c_row), width);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_avx2<const R: usize>(_: (usize, bool), _: Rows, _: *const f32, _: Out, _: Fetch) {
    unreachable!("packed products run only where available() (x86-64 AVX2 or AVX-512)")
}

/// [`tile`] on AVX-512: `R` rows by a panel, the panel prefetched `PF` steps ahead (none
/// when 0).
///
/// # Safety
/// As [`tile`]'s, with the host's AVX-512 checked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
unsafe fn tile_avx512<const R: usize, const PF: usize>(
    (steps, accumulate): (usize, bool),
    (a, (ri, rp)): Rows,
    panel: *const f32,
    (c, c_row, width): Out,
    _: Fetch,
) {
    use std::arch::x86_64::*;
    let mask = |w: usize| if w >= 16 { 0xffff } else { ((1u32 << w) - 1) as u16 };
    let (m0, m1) = (mask(width), mask(width.saturating_sub(16)));
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    if accumulate {
        for i in 0..R {
            // SAFETY: row i < rows of c, its first `width` floats (masked loads).
            unsafe {
                lo[i] = _mm512_maskz_loadu_ps(m0, c.add(i * c_row));
                hi[i] = _mm512_maskz_loadu_ps(m1, c.add(i * c_row + 16));
            }
        }
    }
    for p in 0..steps {
        if PF > 0 {
            // A prefetch never faults, past the panel's end too (hence wrapping_add).
            let ahead = panel.wrapping_add((p + PF) * NR).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(ahead);
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
        }
        // SAFETY: p < steps, i < R: inside the panel and the tile's rows of `a`.
        unsafe {
            let b0 = _mm512_loadu_ps(panel.add(p * NR));
            let b1 = _mm512_loadu_ps(panel.add(p * NR + 16));
            for i in 0..R {
                let ai = _mm512_set1_ps(*a.add(i * ri + p * rp));
                lo[i] = _mm512_fmadd_ps(ai, b0, lo[i]);
                hi[i] = _mm512_fmadd_ps(ai, b1, hi[i]);
            }
        }
    }
    for i in 0..R {
        // SAFETY: row i < rows of c, its first `width` floats (masked stores).
        unsafe {
            _mm512_mask_storeu_ps(c.add(i * c_row), m0, lo[i]);
            _mm512_mask_storeu_ps(c.add(i * c_row + 16), m1, hi[i]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_avx512<const R: usize, const PF: usize>(_: (usize, bool), _: Rows, _: *const f32, _: Out, _: Fetch) {
    unreachable!("packed products run only where available() (x86-64 AVX2 or AVX-512)")
}
