//! Batched matmul (semantics in `rlx_ir::ops::matmul`).
//!
//! f32 and f64 go through the `gemm` crate's packed kernels, which pick AVX-512 /
//! AVX2+FMA / SSE2 micro-kernels at run time: measured here at 1024^3 on one thread,
//! ~172 GFLOP/s against OpenBLAS 0.3.21's ~164 and matrixmultiply's ~150; f32 products
//! with few outputs over a long inner dimension take a dot product per output instead
//! (`few_long_dots`), and f32 products against a param weight `packed_gemm`. f16/bf16
//! operands, widened or packed, go through `half_gemm` (AMX, or panels widened to f32).
//! Integer matmuls keep the plain loop (exact, wrapping).
//!
//! Either operand may be stored transposed (the compiler folds a transpose of the last
//! two axes into the matmul): the plan then reads it with swapped strides.
//!
//! Threads split either the batch (many small matrices, each on one thread) or one large
//! product by output tiles; neither changes any element's accumulation order, so the
//! result is bit-identical for every thread count.

use super::half_gemm::{self, Operand, Product, Tiles};
use super::packed_gemm::{self, Avx512Tile, Epilogue, Panels};
use super::rows::{LANES as DOT_LANES, fold_lanes};
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Num};
use crate::features::Arm;
use crate::threads::MIN_PARALLEL_ELEMS;
use rayon::prelude::*;
use rlx_ir::shape::{broadcast_strides, numel};
use rlx_ir::{DType, Error, Result};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct MatMulPlan {
    m: usize,
    k: usize,
    n: usize,
    /// Per output batch entry, the element offsets of its `a` and `b` matrices.
    batches: Vec<(usize, usize)>,
    /// Element (row, column) strides of the logical `a [m, k]` and `b [k, n]`.
    a_strides: (usize, usize),
    b_strides: (usize, usize),
    threads: usize,
    /// The operands' dtype when it is f16 or bf16 (the half GEMM's arms).
    half: Option<DType>,
    /// Per `b` operand (its index among the step's inputs), the param weight packed for
    /// `packed_gemm`; set by the program before each run (see [`MatMulPlan::packable`]).
    packed: Vec<(usize, Arc<Panels>)>,
    /// The same for a bf16 weight and the half GEMM's tiled arms
    /// ([`MatMulPlan::tiles_packable`]).
    tiles: Vec<(usize, Arc<Tiles>)>,
}

/// Multiply-adds below which a product runs on one thread (~64^3: the split's
/// synchronisation outweighs the work).
const MIN_PARALLEL_MACS: usize = 1 << 18;

impl MatMulPlan {
    /// Multiply-adds times 2, over every batch entry.
    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.k * self.n * self.batches.len()) as f64
    }

    /// Plan for operands stored with dims `a` and `b`; `ta` / `tb` say an operand is stored
    /// as the transpose (last two axes swapped) of what the product reads.
    pub fn new(a: &[usize], b: &[usize], out: &[usize], ta: bool, tb: bool, threads: usize) -> MatMulPlan {
        let (ra, rb, ro) = (a.len(), b.len(), out.len());
        let (m, k) = if ta { (a[ra - 1], a[ra - 2]) } else { (a[ra - 2], a[ra - 1]) };
        let n = if tb { b[rb - 2] } else { b[rb - 1] };
        let batch_dims = &out[..ro - 2];
        // Strides in units of whole matrices, 0 along broadcast batch axes.
        let sa = broadcast_strides(&a[..ra - 2], batch_dims);
        let sb = broadcast_strides(&b[..rb - 2], batch_dims);
        let mut batches = Vec::with_capacity(numel(batch_dims));
        let mut index = vec![0usize; batch_dims.len()];
        for _ in 0..numel(batch_dims) {
            let ma: usize = index.iter().zip(&sa).map(|(i, s)| i * s).sum();
            let mb: usize = index.iter().zip(&sb).map(|(i, s)| i * s).sum();
            batches.push((ma * m * k, mb * k * n));
            for axis in (0..index.len()).rev() {
                index[axis] += 1;
                if index[axis] < batch_dims[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
        // One `b` for every batch entry against `a` matrices one after another, rows
        // contiguous: a single product of all their rows (as the output's rows lie), so
        // the weight is packed once and the workers split one large product. The char
        // transformer's bf16 training step packed each weight 16 times a product.
        let stacked = !ta && batches.iter().enumerate().all(|(i, &(oa, ob))| ob == 0 && oa == i * m * k);
        let (m, batches) = if stacked && batches.len() > 1 { (m * batches.len(), vec![(0, 0)]) } else { (m, batches) };
        let a_strides = if ta { (1, m) } else { (k, 1) };
        let b_strides = if tb { (1, k) } else { (n, 1) };
        MatMulPlan {
            m,
            k,
            n,
            batches,
            a_strides,
            b_strides,
            threads,
            half: None,
            packed: Vec::new(),
            tiles: Vec::new(),
        }
    }

    /// The plan for operands of `dtype` (f16/bf16 take the half GEMM).
    pub fn with_dtype(mut self, dtype: DType) -> MatMulPlan {
        self.half = dtype.is_half().then_some(dtype);
        self
    }

    /// How a param `b` operand would be packed for `packed_gemm` (`[k, n]` and its
    /// strides), when this product can take that path: f32, one `b` for every batch
    /// entry, on a CPU with the kernel.
    pub fn packable(&self) -> Option<((usize, usize), (usize, usize))> {
        let shared_b = self.batches.iter().all(|&(_, ob)| ob == 0);
        (self.half.is_none() && shared_b && packed_gemm::available(Arm::best()))
            .then_some(((self.k, self.n), self.b_strides))
    }

    /// How a param `b` operand would be packed as bf16 [`Tiles`] (`[k, n]` and its
    /// strides), when this product takes a tiled arm of the half GEMM: bf16, one `b` for
    /// every batch entry.
    pub fn tiles_packable(&self) -> Option<((usize, usize), (usize, usize))> {
        let shared_b = self.batches.iter().all(|&(_, ob)| ob == 0);
        (self.half == Some(DType::BF16) && shared_b && half_gemm::tiled_for(DType::BF16, self.m))
            .then_some(((self.k, self.n), self.b_strides))
    }

    /// Reads operand `b` from `panels` from now on (the program calls this before each run
    /// with the param's current packing).
    pub fn set_packed(&mut self, b: usize, panels: Arc<Panels>) {
        set_operand(&mut self.packed, b, panels)
    }

    /// [`MatMulPlan::set_packed`] for bf16 [`Tiles`].
    pub fn set_tiles(&mut self, b: usize, tiles: Arc<Tiles>) {
        set_operand(&mut self.tiles, b, tiles)
    }

    fn packed_operand(&self, b: usize) -> Option<&Panels> {
        self.packed.iter().find(|(operand, _)| *operand == b).map(|(_, p)| &**p)
    }

    fn tiles_operand(&self, b: usize) -> Option<&Tiles> {
        self.tiles.iter().find(|(operand, _)| *operand == b).map(|(_, t)| &**t)
    }

    /// (m, k, n) and the number of products.
    pub fn dims(&self) -> (usize, usize, usize, usize) {
        (self.m, self.k, self.n, self.batches.len())
    }
}

pub fn matmul(plan: &MatMulPlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    if plan.half.is_some() || !plan.packed.is_empty() {
        return product_into(plan, ins, (0, 1), out_mut(out)?, None);
    }
    match class {
        Class::F32 => gemm_batched::<f32>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?),
        Class::F64 => gemm_batched::<f64>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?),
        Class::I8 => loops::<i8>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?),
        Class::I32 => loops::<i32>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?),
        Class::I64 => loops::<i64>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?),
        Class::U8 => loops::<u8>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?),
        packed @ (Class::F16 | Class::BF16) => {
            Err(Error::internal(format!("matmul planned for f32/f64 reads {packed:?} storage")))
        }
    }
}

/// Operand `i` of a float matmul as its slot stores it: widened f32 words or packed halves.
fn operand<'a>(ins: &Args<'a>, i: usize) -> Result<Operand<'a>> {
    Ok(match ins.slot(i)?.class {
        Class::F16 => Operand::F16(ins.get(i)?),
        Class::BF16 => Operand::BF16(ins.get(i)?),
        _ => Operand::Wide(ins.get(i)?),
    })
}

/// The f32 product of `plan` of operands `ins[a] @ ins[b]` into `out` (f32 words), then
/// `epilogue` on every row's columns (by each task of a packed product on what it wrote,
/// else over the output after): the matmul kernel, and the fused kernels that work on
/// `out` afterwards.
pub fn product_into(
    plan: &MatMulPlan,
    ins: &Args,
    (a, b): (usize, usize),
    out: &mut [f32],
    epilogue: Option<&Epilogue>,
) -> Result<()> {
    let MatMulPlan { m, k, n, .. } = *plan;
    let (sa, sb) = (plan.a_strides, plan.b_strides);
    if let (None, Some(panels)) = (plan.half, plan.packed_operand(b)) {
        let a: &[f32] = ins.get(a)?;
        if panels.dims() != (k, n) {
            return Err(Error::internal("packed weight of another shape"));
        }
        return for_each_product(plan, (a.len(), k * n), out, |oa, _, c, threads| {
            let tile = (Arm::best(), Avx512Tile::for_this_cpu());
            packed_gemm::gemm_then(tile, m, (&a[oa..], sa), panels, (c, n), threads, epilogue)
        });
    }
    match plan.half {
        Some(dtype) => {
            let tiles = plan.tiles_operand(b);
            let (a, b) = (operand(ins, a)?, operand(ins, b)?);
            for_each_product(plan, (a.len(), b.len()), out, |oa, ob, c, threads| {
                let p = Product { dims: (m, k, n), a: a.from(oa), sa, b: b.from(ob), sb };
                half_gemm::gemm(dtype, p, tiles, c, n, threads)
            })
        }
        None => gemm_batched::<f32>(plan, ins.get(a)?, ins.get(b)?, out),
    }?;
    if let Some(epilogue) = epilogue {
        crate::threads::par_rows_mut(out, n, |rows| rows.chunks_exact_mut(n.max(1)).for_each(|row| epilogue(0, row)));
    }
    Ok(())
}

/// Sets operand `b`'s entry of a per-operand list.
fn set_operand<P>(list: &mut Vec<(usize, Arc<P>)>, b: usize, packed: Arc<P>) {
    match list.iter_mut().find(|(operand, _)| *operand == b) {
        Some(entry) => entry.1 = packed,
        None => list.push((b, packed)),
    }
}

fn gemm_batched<T: Gemm>(plan: &MatMulPlan, a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
    let MatMulPlan { m, k, n, .. } = *plan;
    let (sa, sb) = (plan.a_strides, plan.b_strides);
    let (mk, kn) = (m * k, k * n);
    for_each_product(plan, (a.len(), b.len()), out, |oa, ob, c, threads| {
        T::gemm(m, k, n, &a[oa..oa + mk], sa, &b[ob..ob + kn], sb, c, n, threads)
    })
}

/// Calls `product(a offset, b offset, output matrix, threads)` for every batch entry:
/// the batch split across threads (many small products, one thread each) or each
/// product given every thread.
fn for_each_product<T: Send>(
    plan: &MatMulPlan,
    (a_len, b_len): (usize, usize),
    out: &mut [T],
    product: impl Fn(usize, usize, &mut [T], usize) + Sync,
) -> Result<()> {
    let MatMulPlan { m, k, n, .. } = *plan;
    let (mk, kn, mn) = (m * k, k * n, m * n);
    if mn == 0 {
        return Ok(());
    }
    for &(oa, ob) in &plan.batches {
        if oa + mk > a_len || ob + kn > b_len {
            return Err(Error::internal("matmul plan reads past an operand"));
        }
    }
    let macs = mk * n;
    let workers = plan.threads.min(crate::threads::current());
    let parallel_batches = workers > 1 && plan.batches.len() >= workers && macs < MIN_PARALLEL_MACS * 4;
    if parallel_batches && plan.batches.len() * mn >= MIN_PARALLEL_ELEMS / 8 {
        out.par_chunks_mut(mn).zip(plan.batches.par_iter()).for_each(|(c, &(oa, ob))| product(oa, ob, c, 1));
    } else {
        let threads = if macs >= MIN_PARALLEL_MACS { workers } else { 1 };
        for (c, &(oa, ob)) in out.chunks_mut(mn).zip(&plan.batches) {
            product(oa, ob, c, threads);
        }
    }
    Ok(())
}

/// A float type the `gemm` crate multiplies.
pub trait Gemm: Copy + Send + Sync + 'static {
    /// `c = a b` for `a [m, k]` and `b [k, n]` read with (row, column) element strides
    /// `sa` / `sb` (row-major is `(k, 1)` and `(n, 1)`; a transposed operand swaps them),
    /// into `c [m, n]` with rows `c_row` elements apart, on `threads` workers of the
    /// current pool.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: &[Self],
        sa: (usize, usize),
        b: &[Self],
        sb: (usize, usize),
        c: &mut [Self],
        c_row: usize,
        threads: usize,
    ) {
        Self::gemm_acc(m, k, n, a, sa, b, sb, c, c_row, threads, false)
    }

    /// `c = a b`, or `c += a b` when `accumulate`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_acc(
        m: usize,
        k: usize,
        n: usize,
        a: &[Self],
        sa: (usize, usize),
        b: &[Self],
        sb: (usize, usize),
        c: &mut [Self],
        c_row: usize,
        threads: usize,
        accumulate: bool,
    );

    /// Row-major `c = a b`.
    fn gemm_rows(m: usize, k: usize, n: usize, a: &[Self], b: &[Self], c: &mut [Self], threads: usize) {
        Self::gemm(m, k, n, a, (k, 1), b, (n, 1), c, n, threads)
    }
}

/// Whether `(rs, cs)` strides address a `rows x cols` matrix inside `len` elements.
fn fits(rows: usize, cols: usize, (rs, cs): (usize, usize), len: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < len
}

macro_rules! impl_gemm {
    ($t:ty, $long_dots:expr) => {
        impl Gemm for $t {
            fn gemm_acc(
                m: usize,
                k: usize,
                n: usize,
                a: &[Self],
                sa: (usize, usize),
                b: &[Self],
                sb: (usize, usize),
                c: &mut [Self],
                c_row: usize,
                threads: usize,
                accumulate: bool,
            ) {
                // Rows of c must not overlap (threads write them concurrently).
                assert!(
                    fits(m, k, sa, a.len())
                        && fits(k, n, sb, b.len())
                        && fits(m, n, (c_row, 1), c.len())
                        && (m <= 1 || c_row >= n),
                    "gemm operand sizes"
                );
                if $long_dots((m, k, n), (a, sa), (b, sb), (&mut *c, c_row), accumulate) {
                    return;
                }
                let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
                // SAFETY: every element the strides address lies inside the slices (checked
                // above).
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        c.as_mut_ptr(),
                        1,
                        c_row as isize,
                        accumulate,
                        a.as_ptr(),
                        sa.1 as isize,
                        sa.0 as isize,
                        b.as_ptr(),
                        sb.1 as isize,
                        sb.0 as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        parallelism,
                    )
                }
            }
        }
    };
}
impl_gemm!(f32, few_long_dots);
impl_gemm!(f64, |_, _, _, _, _| false);

/// Most outputs, and fewest inner steps, of a product [`few_long_dots`] takes.
const DOT_MAX_OUTPUTS: usize = 512;
const DOT_MIN_K: usize = 256;

/// Products with few outputs over a long inner dimension, `a`'s rows and `b`'s columns
/// both contiguous along it (the weight gradient `col @ grad^T` of a conv with few
/// channels): one dot product per output in [`DOT_LANES`] lanes, folded in the
/// reductions' lane order. The `gemm` crate packed all of `b` on every call: the
/// digits CNN's first conv gradient, 9 x 4096 x 32, took 0.32 ms (7.3 GFLOP/s). Runs the
/// product and returns true when its shape is one of these.
fn few_long_dots(
    (m, k, n): (usize, usize, usize),
    (a, sa): (&[f32], (usize, usize)),
    (b, sb): (&[f32], (usize, usize)),
    (c, c_row): (&mut [f32], usize),
    accumulate: bool,
) -> bool {
    if m * n > DOT_MAX_OUTPUTS || k < DOT_MIN_K || sa.1 != 1 || sb.0 != 1 {
        return false;
    }
    long_dots(Arm::best(), m, k, n, a, sa.0, b, sb.1, c, c_row, accumulate);
    true
}

crate::multiversion! {
    /// [`few_long_dots`]: `c[i][j] (+)= sum_p a[i a_row + p] b[j b_col + p]`.
    #[allow(clippy::too_many_arguments)]
    fn long_dots(
        m: usize,
        k: usize,
        n: usize,
        a: &[f32],
        a_row: usize,
        b: &[f32],
        b_col: usize,
        c: &mut [f32],
        c_row: usize,
        accumulate: bool,
    ) {
        for i in 0..m {
            let ai = &a[i * a_row..][..k];
            for j in 0..n {
                let bj = &b[j * b_col..][..k];
                let mut lanes = [0f32; DOT_LANES];
                let (mut xs, mut ys) = (ai.chunks_exact(DOT_LANES), bj.chunks_exact(DOT_LANES));
                for (x, y) in (&mut xs).zip(&mut ys) {
                    for ((l, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
                        *l += x * y;
                    }
                }
                for ((l, &x), &y) in lanes.iter_mut().zip(xs.remainder()).zip(ys.remainder()) {
                    *l += x * y;
                }
                let dot = fold_lanes(lanes);
                let o = &mut c[i * c_row + j];
                *o = if accumulate { *o + dot } else { dot };
            }
        }
    }
}

/// out[i, j] = sum over p in increasing order of a[i, p] * b[p, j], wrapping.
fn loops<T: Num>(plan: &MatMulPlan, a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
    let MatMulPlan { m, k, n, a_strides: (ars, acs), b_strides: (brs, bcs), .. } = *plan;
    for (bi, &(oa, ob)) in plan.batches.iter().enumerate() {
        let c = &mut out[bi * m * n..(bi + 1) * m * n];
        c.fill(T::ZERO);
        for i in 0..m {
            let row = &mut c[i * n..(i + 1) * n];
            for p in 0..k {
                let aip = a[oa + i * ars + p * acs];
                for (j, o) in row.iter_mut().enumerate() {
                    *o = o.add(aip.mul(b[ob + p * brs + j * bcs]));
                }
            }
        }
    }
    Ok(())
}
