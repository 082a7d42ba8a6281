//! The kernel benchmark suite behind `rlx bench kernels` and `cargo bench -p rlx-cpu`:
//! each kernel timed next to its anchors in the same run, with the ratio printed.
//!
//! Anchors: glibc's scalar libm loop (what an f32 `exp()` per element costs), NumPy's
//! float32 ufuncs (vectorized SIMD math; spawned via `$RLX_PYTHON` or python3 when numpy is present),
//! OpenBLAS sgemm (when linked) and the machine's FMA peak measured here.

use crate::features::Arm;
use crate::kernels::{matmul::Gemm, rows};
use crate::vmath;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One measured kernel and its anchors.
#[derive(Clone, Debug)]
pub struct Row {
    pub name: String,
    /// "Melem/s" or "GFLOP/s".
    pub unit: &'static str,
    pub ours: f64,
    pub anchors: Vec<Anchor>,
}

/// A reference rate, and the ratio ours / anchor the project aims for.
#[derive(Clone, Debug)]
pub struct Anchor {
    pub name: String,
    pub value: Option<f64>,
    pub goal: Option<f64>,
}

impl Anchor {
    fn new(name: &str, value: Option<f64>, goal: Option<f64>) -> Anchor {
        Anchor { name: name.to_string(), value, goal }
    }
}

/// Seconds per call of `f`: the best of several runs of at least 30 ms each.
pub fn seconds_per_call(mut f: impl FnMut()) -> f64 {
    f(); // warm caches and pools
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let (mut calls, start) = (0u32, Instant::now());
        while start.elapsed() < Duration::from_millis(30) {
            f();
            calls += 1;
        }
        best = best.min(start.elapsed().as_secs_f64() / calls as f64);
    }
    best
}

/// Peak single-thread f32 FMA rate in GFLOP/s: independent FMA chains in the widest
/// vector unit the host has (mul + add where it has no FMA).
pub fn fma_peak_gflops() -> f64 {
    const ITERS: usize = 1 << 16;
    let (lanes, run): (f64, fn(usize) -> f32) = peak_kernel();
    let secs = seconds_per_call(|| {
        black_box(run(black_box(ITERS)));
    });
    (ITERS * CHAINS) as f64 * lanes * 2.0 / secs / 1e9
}

const CHAINS: usize = 12;

fn peak_kernel() -> (f64, fn(usize) -> f32) {
    #[cfg(target_arch = "x86_64")]
    {
        let f = crate::features::features();
        if f.avx512f {
            // SAFETY: AVX-512F detected.
            return (16.0, |n| unsafe { peak_avx512(n) });
        }
        if f.has_avx2_fma() {
            // SAFETY: AVX2 and FMA detected.
            return (8.0, |n| unsafe { peak_avx2(n) });
        }
    }
    (4.0, peak_portable)
}

fn peak_portable(iters: usize) -> f32 {
    let mut acc = [[0f32; 4]; CHAINS];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            for v in a.iter_mut() {
                *v = *v * 0.999_999 + 1e-7;
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn peak_avx2(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let (m, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_setzero_ps(); CHAINS];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, m, c);
        }
    }
    let mut out = [0f32; 8];
    let total = acc.iter().fold(_mm256_setzero_ps(), |s, &a| _mm256_add_ps(s, a));
    // SAFETY: `out` holds 8 f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), total) };
    out.iter().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn peak_avx512(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let (m, c) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_setzero_ps(); CHAINS];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = _mm512_fmadd_ps(*a, m, c);
        }
    }
    _mm512_reduce_add_ps(acc.iter().fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a)))
}

/// Bytes the DRAM read probe streams: past the last-level cache of most parts (not of
/// every one: an Intel Xeon with 300 MiB of L3 read it at 12.9 GB/s on one core, a 92 MiB
/// buffer at 25-30).
pub const DRAM_PROBE_BYTES: usize = 256 << 20;

/// The read rate in GB/s of a buffer of `bytes` on `threads` threads: each thread sums its
/// contiguous part with wide loads, best of 6 passes after two that warm the caches.
/// With [`DRAM_PROBE_BYTES`] this is the DRAM roof of a decode step, which reads every
/// weight once; with a token's weight bytes, the roof where the caches hold them (`rlx
/// bench llm` prints both).
pub fn read_bandwidth_gbs(threads: usize, bytes: usize) -> rlx_ir::Result<f64> {
    use rayon::prelude::*;
    let pool = crate::threads::pool(threads)?;
    // Written (not only allocated) so every page is mapped before timing, and with
    // distinct words so that no page can be shared with another (one run over a buffer
    // of equal words read 51 GB/s on 2 threads, twice any other run's rate).
    let words: Vec<u64> = (0..bytes.max(8) as u64 / 8).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    let part = words.len().div_ceil(threads.max(1));
    let mut best = f64::MAX;
    // Each pass with and without software prefetch, the better counted: AMD's hardware
    // prefetcher streams alone, while one Intel Xeon core read 13.7-14.3 -> 16.0-16.7 GB/s
    // from DRAM and 18.6-26.4 -> 28.8-29.3 from its L3 with lines fetched 4 KiB ahead.
    for pass in 0..8 {
        let start = Instant::now();
        let prefetch = pass % 2 == 1;
        let sum: u64 = pool.install(|| words.par_chunks(part).map(|c| sum_words(black_box(c), prefetch)).sum());
        if pass > 1 {
            best = best.min(start.elapsed().as_secs_f64());
        }
        black_box(sum);
    }
    Ok((words.len() * 8) as f64 / best / 1e9)
}

/// The wrapping sum of `x`: wide loads into four accumulators on AVX2 (the compiler's
/// own vectorization of an 8-lane loop streamed 4-5 GB/s here, a fifth of the DRAM rate),
/// with each line prefetched 4 KiB ahead when asked.
fn sum_words(x: &[u64], prefetch: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if Arm::best() >= Arm::Avx2 {
        // SAFETY: AVX2 was detected.
        return unsafe { if prefetch { sum_words_avx2::<4096>(x) } else { sum_words_avx2::<0>(x) } };
    }
    let _ = prefetch;
    x.iter().fold(0, |a, v| a.wrapping_add(*v))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_words_avx2<const AHEAD_BYTES: usize>(x: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    let blocks = x.chunks_exact(16);
    let tail: u64 = blocks.remainder().iter().fold(0, |a, v| a.wrapping_add(*v));
    for b in blocks {
        if AHEAD_BYTES > 0 {
            // A prefetch never faults, past the buffer too (hence wrapping_add).
            let ahead = b.as_ptr().cast::<i8>().wrapping_add(AHEAD_BYTES);
            _mm_prefetch::<_MM_HINT_T0>(ahead);
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
        }
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: each chunk holds 16 words: four loads of four.
            *a = _mm256_add_epi64(*a, unsafe { _mm256_loadu_si256(b[4 * k..].as_ptr().cast()) });
        }
    }
    let mut lanes = [0u64; 16];
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: `lanes` has room for four stores of four words.
        unsafe { _mm256_storeu_si256(lanes[4 * k..].as_mut_ptr().cast(), *a) };
    }
    lanes.iter().fold(tail, |a, v| a.wrapping_add(*v))
}

/// The OpenBLAS anchor of the 1-thread SGEMM row: its label names the kernels OpenBLAS
/// chose, and its goal is dropped when those are pre-AVX kernels on a CPU with AVX2 (a
/// library older than the CPU: no RLX figure should be judged against them;
/// `OPENBLAS_CORETYPE` overrides the choice).
fn openblas_anchor(rate: Option<f64>) -> Anchor {
    const PRE_AVX: [&str; 6] = ["Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom"];
    match crate::blas::core_name() {
        Some(core) if Arm::best() >= Arm::Avx2 && PRE_AVX.contains(&core.as_str()) => {
            Anchor::new(&format!("OpenBLAS 1 thread ({core}: generic, set OPENBLAS_CORETYPE)"), rate, None)
        }
        Some(core) => Anchor::new(&format!("OpenBLAS 1 thread ({core})"), rate, Some(1.05)),
        None => Anchor::new("OpenBLAS 1 thread", rate, Some(1.05)),
    }
}

/// The Python the anchors run under: `$RLX_PYTHON`, else `python3` on the PATH.
pub fn anchor_python() -> std::ffi::OsString {
    std::env::var_os("RLX_PYTHON").unwrap_or_else(|| "python3".into())
}

/// NumPy float32 ufunc rates (Melem/s) over `n` elements, or None without python3+numpy.
pub fn numpy_rates(functions: &[&str], n: usize) -> Option<Vec<f64>> {
    let script = format!(
        "import numpy as np, timeit\n\
         x = (np.random.default_rng(0).random({n}, dtype=np.float32) * 4 + 0.1).astype(np.float32)\n\
         o = np.empty_like(x)\n\
         for f in {functions:?}:\n\
         \x20   fn = getattr(np, f)\n\
         \x20   t = min(timeit.repeat(lambda: fn(x, out=o), number=20, repeat=5)) / 20\n\
         \x20   print({n} / t / 1e6)\n"
    );
    let out = std::process::Command::new(anchor_python()).args(["-c", &script]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let rates: Vec<f64> = String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
    (rates.len() == functions.len()).then_some(rates)
}

/// NumPy's float32 `x.sum()` (pairwise, SIMD) rate in Melem/s over `n` elements.
fn numpy_sum_rate(n: usize) -> Option<f64> {
    let script = format!(
        "import numpy as np, timeit\n\
         x = np.random.default_rng(0).random({n}, dtype=np.float32)\n\
         print({n} / (min(timeit.repeat(lambda: x.sum(), number=50, repeat=5)) / 50) / 1e6)\n"
    );
    let out = std::process::Command::new(anchor_python()).args(["-c", &script]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok().filter(|_| out.status.success())
}

/// Melem/s of a compiled `reduce_sum` over a param of `n` f32, or over `unary` of it
/// (one output; fused, the unary's result is never written).
pub fn sum_program_melems(n: usize, unary: Option<rlx_ir::Unary>) -> rlx_ir::Result<f64> {
    use rlx_ir::{DType, Graph, HostTensor, ReduceOp};
    let mut g = Graph::new("sum");
    let mut x = g.param("x", DType::F32, &[n])?;
    if let Some(u) = unary {
        x = g.unary(u, x)?;
    }
    let s = g.reduce(ReduceOp::Sum, x, &[0], false)?;
    g.set_outputs(&[s])?;
    let mut program = crate::CpuProgram::compile(&g, &rlx_compile::CompileOptions::default(), 1)?;
    let values: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    program.set_param(0, &HostTensor::from_f32(&[n], &values)?)?;
    let mut failed = None;
    let secs = seconds_per_call(|| {
        if let Err(e) = program.run(&[]) {
            failed = Some(e);
        }
    });
    failed.map_or(Ok(n as f64 / secs / 1e6), Err)
}

/// Melem/s of `kernel` over `x`.
fn melems(x: &[f32], mut kernel: impl FnMut(&[f32], &mut [f32])) -> f64 {
    let mut out = vec![0f32; x.len()];
    let secs = seconds_per_call(|| kernel(black_box(x), black_box(&mut out)));
    x.len() as f64 / secs / 1e6
}

/// GFLOP/s of a `[dim, dim] x [dim, dim]` matmul graph of `dtype` (input times a param
/// weight, which an f16/bf16 graph keeps packed) compiled for `threads` workers.
pub fn gemm_program_gflops(dtype: rlx_ir::DType, dim: usize, threads: usize) -> rlx_ir::Result<f64> {
    use rlx_ir::{Graph, HostTensor};
    let mut g = Graph::new("gemm");
    let a = g.input("a", dtype, &[dim, dim])?;
    let b = g.param("b", dtype, &[dim, dim])?;
    let c = g.matmul(a, b)?;
    g.set_outputs(&[c])?;
    let mut program = crate::CpuProgram::compile(&g, &rlx_compile::CompileOptions::default(), threads)?;
    let values: Vec<f32> = (0..dim * dim).map(|i| (i % 17) as f32 * 0.01).collect();
    let t = HostTensor::from_f32_as(dtype, &[dim, dim], &values)?;
    program.set_param(0, &t)?;
    let mut failed = None;
    let secs = seconds_per_call(|| {
        if let Err(e) = program.run(&[t.view()]) {
            failed = Some(e);
        }
    });
    failed.map_or(Ok(2.0 * (dim as f64).powi(3) / secs / 1e9), Err)
}

/// Alternating measurements of the MLP row, each side's best kept.
const MLP_ROUNDS: usize = 3;

/// The MLP row's shape: x[32, 768] -> 3072 (GELU) -> 768, 302 MFLOP a forward pass; the
/// same network as tools/bench/ort_mlp_bench.py.
const MLP: (usize, usize, usize) = (32, 768, 3072);

/// GFLOP/s of the MLP forward pass (two matmuls with bias, the first with GELU) compiled
/// for `threads` workers.
pub fn mlp_program_gflops(threads: usize) -> rlx_ir::Result<f64> {
    use rlx_ir::{DType, Graph, HostTensor, Unary};
    let (b, d, h) = MLP;
    let mut g = Graph::new("mlp");
    let x = g.input("x", DType::F32, &[b, d])?;
    let w1 = g.param("w1", DType::F32, &[d, h])?;
    let b1 = g.param("b1", DType::F32, &[h])?;
    let w2 = g.param("w2", DType::F32, &[h, d])?;
    let b2 = g.param("b2", DType::F32, &[d])?;
    let mm = g.matmul(x, w1)?;
    let pre = g.add(mm, b1)?;
    let hidden = g.unary(Unary::Gelu, pre)?;
    let mm = g.matmul(hidden, w2)?;
    let y = g.add(mm, b2)?;
    g.set_outputs(&[y])?;
    let mut program = crate::CpuProgram::compile(&g, &rlx_compile::CompileOptions::default(), threads)?;
    let values =
        |n: usize, scale: f32| (0..n).map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * scale).collect::<Vec<_>>();
    for (index, dims, scale) in [(0, vec![d, h], 0.07), (1, vec![h], 0.1), (2, vec![h, d], 0.036), (3, vec![d], 0.1)] {
        program.set_param(index, &HostTensor::from_f32(&dims, &values(dims.iter().product(), scale))?)?;
    }
    let input = HostTensor::from_f32(&[b, d], &values(b * d, 1.0))?;
    let mut failed = None;
    let secs = seconds_per_call(|| {
        if let Err(e) = program.run(&[input.view()]) {
            failed = Some(e);
        }
    });
    failed.map_or(Ok(mlp_flops() / secs / 1e9), Err)
}

fn mlp_flops() -> f64 {
    let (b, d, h) = MLP;
    4.0 * (b * d * h) as f64
}

/// onnxruntime's GFLOP/s on the same MLP at 1 and 2 threads (tools/bench/ort_mlp_bench.py
/// under [`anchor_python`]), or None without onnx + onnxruntime.
fn onnxruntime_mlp_gflops() -> Option<[f64; 2]> {
    let script = include_str!("../../../../tools/bench/ort_mlp_bench.py");
    let out = std::process::Command::new(anchor_python()).args(["-c", script, "--threads", "1", "2"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let ms = |t: &str| -> Option<f64> {
        let at = text.find(&format!("\"{t}\": "))? + t.len() + 4;
        text[at..].split([',', '}']).next()?.trim().parse().ok()
    };
    out.status.success().then_some(())?;
    Some([mlp_flops() / ms("1")? / 1e6, mlp_flops() / ms("2")? / 1e6])
}

/// The vmath functions the suite measures: (name, NumPy ufunc or "", our slice kernel,
/// the libm scalar anchor).
type VmathEntry = (&'static str, &'static str, fn(Arm, &[f32], &mut [f32]), fn(f32) -> f32);

const VMATH: &[VmathEntry] = &[
    ("exp", "exp", vmath::exp_slice, f32::exp),
    ("log", "log", vmath::log_slice, f32::ln),
    ("ln_1p", "log1p", vmath::ln_1p_slice, f32::ln_1p),
    ("tanh", "tanh", vmath::tanh_slice, f32::tanh),
    ("sin", "sin", vmath::sin_slice, f32::sin),
    ("cos", "cos", vmath::cos_slice, f32::cos),
    ("tan", "tan", vmath::tan_slice, f32::tan),
    ("atan", "arctan", vmath::atan_slice, f32::atan),
    ("erf", "", vmath::erf_slice, libm::erff),
    ("sigmoid", "", vmath::sigmoid_slice, |x| 1.0 / (1.0 + (-x).exp())),
    ("gelu", "", vmath::gelu_slice, |x| 0.5 * x * libm::erfcf(-x * std::f32::consts::FRAC_1_SQRT_2)),
    ("silu", "", vmath::silu_slice, |x| x / (1.0 + (-x).exp())),
];

/// Runs the whole suite on one thread (plus the 2-thread GEMM rows) and returns its rows.
pub fn kernel_suite() -> Vec<Row> {
    use rlx_ir::DType;
    let gemm_graph =
        |dtype: DType, dim: usize, threads: usize| gemm_program_gflops(dtype, dim, threads).unwrap_or(f64::NAN);
    let arm = Arm::best();
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| ((i % 4093) as f32 / 4093.0) * 4.0 + 0.1).collect();
    let numpy_names: Vec<&str> = VMATH.iter().map(|v| v.1).filter(|n| !n.is_empty()).collect();
    let numpy = numpy_rates(&numpy_names, n);
    let mut table = Vec::new();
    for &(name, numpy_name, ours, libm) in VMATH {
        let rate = melems(&x, |x, o| ours(arm, x, o));
        let scalar = melems(&x, |x, o| o.iter_mut().zip(x).for_each(|(o, &v)| *o = libm(v)));
        table.push(Row {
            name: format!("vmath {name} ({})", arm.name()),
            unit: "Melem/s",
            ours: rate,
            anchors: if numpy_name.is_empty() {
                vec![Anchor::new("glibc scalar", Some(scalar), None)]
            } else {
                let at = numpy_names.iter().position(|n| *n == numpy_name);
                vec![
                    Anchor::new("glibc scalar", Some(scalar), None),
                    Anchor::new(
                        &format!("NumPy f32 {numpy_name}"),
                        numpy.as_ref().zip(at).map(|(r, i)| r[i]),
                        Some(1.0),
                    ),
                ]
            },
        });
    }

    // SwiGLU: up * silu(gate), against a scalar libm loop.
    let up: Vec<f32> = x.iter().map(|v| v - 2.0).collect();
    let mut out = vec![0f32; n];
    let ours = n as f64 / seconds_per_call(|| rows::swiglu_rows(arm, black_box(&x), &up, &mut out)) / 1e6;
    let scalar = n as f64
        / seconds_per_call(|| {
            for ((o, &g), &u) in out.iter_mut().zip(black_box(&x)).zip(&up) {
                *o = u * g / (1.0 + (-g).exp());
            }
        })
        / 1e6;
    table.push(Row {
        name: format!("swiglu ({})", arm.name()),
        unit: "Melem/s",
        ours,
        anchors: vec![Anchor::new("scalar libm loop", Some(scalar), Some(3.0))],
    });

    // Softmax over 1024 rows of 1024.
    let len = 1024;
    let ours = n as f64 / seconds_per_call(|| rows::softmax_rows(arm, black_box(&x), &mut out, len)) / 1e6;
    let scalar = n as f64
        / seconds_per_call(|| {
            for (row, o) in black_box(&x).chunks_exact(len).zip(out.chunks_exact_mut(len)) {
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let mut s = 0.0;
                for (o, &v) in o.iter_mut().zip(row) {
                    *o = (v - m).exp();
                    s += *o;
                }
                o.iter_mut().for_each(|v| *v /= s);
            }
        })
        / 1e6;
    table.push(Row {
        name: format!("softmax rows 1024 ({})", arm.name()),
        unit: "Melem/s",
        ours,
        anchors: vec![Anchor::new("scalar libm loop", Some(scalar), Some(2.5))],
    });

    // A float sum in the pairwise order, against NumPy's pairwise sum and one running
    // f32 sum (the order RLX used before, whose error grows with n).
    let running = n as f64
        / seconds_per_call(|| {
            black_box(black_box(&x).iter().fold(0f32, |a, &v| a + v));
        })
        / 1e6;
    table.push(Row {
        name: "sum of 1M f32 (param -> reduce, pairwise)".into(),
        unit: "Melem/s",
        ours: sum_program_melems(n, None).unwrap_or(f64::NAN),
        anchors: vec![
            Anchor::new("NumPy f32 x.sum()", numpy_sum_rate(n), Some(1.0)),
            Anchor::new("running f32 sum loop", Some(running), None),
        ],
    });

    // exp fused into the sum: the exp values are summed block by block as they are made,
    // never written; against the exp kernel alone (which writes them).
    table.push(Row {
        name: "param -> exp -> sum, 1M f32 (fused)".into(),
        unit: "Melem/s",
        ours: sum_program_melems(n, Some(rlx_ir::Unary::Exp)).unwrap_or(f64::NAN),
        anchors: vec![Anchor::new(
            "exp kernel alone",
            Some(melems(&x, |x, o| vmath::exp_slice(arm, x, o))),
            Some(1.0 / 1.3),
        )],
    });

    // SGEMM 1024^3 through a compiled graph.
    let dim = 1024;
    let one = gemm_graph(DType::F32, dim, 1);
    let a: Vec<f32> = (0..dim * dim).map(|i| (i % 17) as f32 * 0.01).collect();
    let mut c = vec![0f32; dim * dim];
    let flops = 2.0 * (dim as f64).powi(3);
    let blas = crate::blas::AVAILABLE.then(|| {
        flops
            / seconds_per_call(|| {
                crate::blas::sgemm(dim, dim, dim, &a, &a, &mut c, 1);
            })
            / 1e9
    });
    let gemm_crate = flops / seconds_per_call(|| f32::gemm_rows(dim, dim, dim, &a, &a, &mut c, 1)) / 1e9;
    table.push(Row {
        name: "sgemm 1024^3, 1 thread, compiled graph".into(),
        unit: "GFLOP/s",
        ours: one,
        anchors: vec![
            openblas_anchor(blas),
            Anchor::new("FMA peak", Some(fma_peak_gflops()), Some(0.85)),
            Anchor::new("gemm crate direct", Some(gemm_crate), None),
        ],
    });
    let two = gemm_graph(DType::F32, dim, 2);
    table.push(Row {
        name: "sgemm 1024^3, 2 threads, compiled graph".into(),
        unit: "GFLOP/s",
        ours: two,
        anchors: vec![Anchor::new("rlx 1 thread", Some(one), Some(1.8))],
    });

    // Half GEMM: a packed f16/bf16 weight (half the bytes of f32) times a half input,
    // f32 sums; against the f32 graph above. The bf16 goal holds where the CPU has a
    // bf16 dot instruction (AMX, AVX512_BF16); elsewhere bf16 widens into the f32 GEMM.
    let features = crate::features::features();
    let bf16_dot = features.amx_bf16 || features.avx512bf16;
    for (dtype, goal) in [(DType::BF16, bf16_dot.then_some(1.3)), (DType::F16, None)] {
        let arm = crate::kernels::half_gemm::arm_for(dtype, dim);
        for (threads, f32_rate) in [(1, one), (2, two)] {
            table.push(Row {
                name: format!("{dtype} gemm 1024^3, {threads} thr, packed ({arm})"),
                unit: "GFLOP/s",
                ours: gemm_graph(dtype, dim, threads),
                anchors: vec![Anchor::new(&format!("rlx f32 {threads} thread(s)"), Some(f32_rate), goal)],
            });
        }
    }

    // A skinny GEMM pair: the MLP beside onnxruntime (goal: <= 0.9x its latency). Each
    // side's best of MLP_ROUNDS alternating measurements: this VM's speed moves by 30%
    // within seconds (one command read 81 and 152 GFLOP/s for the same RLX binary), and
    // one measurement a side compared whichever phases each happened to land in.
    let (mut ours, mut ort) = ([f64::NAN; 2], None::<[f64; 2]>);
    for _ in 0..MLP_ROUNDS {
        for (k, threads) in [1, 2].into_iter().enumerate() {
            ours[k] = ours[k].max(mlp_program_gflops(threads).unwrap_or(f64::NAN));
        }
        if let Some(round) = onnxruntime_mlp_gflops() {
            ort = Some(ort.map_or(round, |best| [best[0].max(round[0]), best[1].max(round[1])]));
        }
    }
    for (k, threads) in [1, 2].into_iter().enumerate() {
        table.push(Row {
            name: format!("MLP 768-3072-768 batch 32, {threads} thr"),
            unit: "GFLOP/s",
            ours: ours[k],
            anchors: vec![Anchor::new(&format!("onnxruntime {threads} thread(s)"), ort.map(|r| r[k]), Some(1.0 / 0.9))],
        });
    }
    table
}

/// The suite as a text table: rate, each anchor, the ratio and whether it meets the goal.
pub fn render(rows: &[Row]) -> String {
    let mut s = format!("{:<42} {:>10} {:<26} {:>10} {:>7}  goal\n", "kernel", "rate", "anchor", "anchor", "ratio");
    for r in rows {
        for (i, a) in r.anchors.iter().enumerate() {
            let (name, rate) =
                if i == 0 { (r.name.as_str(), format!("{:.0} {}", r.ours, r.unit)) } else { ("", String::new()) };
            let (value, ratio, goal) = match a.value {
                Some(v) => {
                    let ratio = r.ours / v;
                    let verdict = a
                        .goal
                        .map_or(String::new(), |g| format!(">= {g:.2}x {}", if ratio >= g { "met" } else { "MISSED" }));
                    (format!("{v:.0}"), format!("{ratio:.2}x"), verdict)
                }
                None => ("n/a".into(), "-".into(), a.goal.map_or(String::new(), |g| format!(">= {g:.2}x (no anchor)"))),
            };
            s.push_str(&format!("{name:<42} {rate:>10} {:<26} {value:>10} {ratio:>7}  {goal}\n", a.name));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    /// The probe's sum, with and without prefetch, is the plain wrapping sum at odd
    /// lengths (vector tails) and with carries out of the top bit.
    #[test]
    fn sum_words_is_the_wrapping_sum() {
        for n in [0, 1, 3, 17, 1000] {
            let x: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
            let want = x.iter().fold(0u64, |a, v| a.wrapping_add(*v));
            for prefetch in [false, true] {
                assert_eq!(super::sum_words(&x, prefetch), want, "n = {n}, prefetch {prefetch}");
            }
        }
    }
}
