//! `cargo bench -p rlx-cpu`: criterion timings of the vmath functions, the row kernels and
//! SGEMM, then the anchor table (glibc, NumPy, OpenBLAS, FMA peak) from the same run.

use criterion::{Criterion, Throughput};
use rlx_cpu::bench::{kernel_suite, render};
use rlx_cpu::features::Arm;
use rlx_cpu::kernels::{matmul::Gemm, rows};
use rlx_cpu::vmath;
use std::hint::black_box;

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let arm = Arm::best();
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| ((i % 4093) as f32 / 4093.0) * 4.0 + 0.1).collect();
    let mut out = vec![0f32; n];

    let mut g = c.benchmark_group("vmath");
    g.throughput(Throughput::Elements(n as u64));
    for &(name, kernel, ..) in vmath::SLICE_FUNCTIONS {
        g.bench_function(name, |b| b.iter(|| kernel(arm, black_box(&x), &mut out)));
    }
    g.bench_function("exp (glibc scalar)", |b| {
        b.iter(|| out.iter_mut().zip(black_box(&x)).for_each(|(o, v)| *o = v.exp()))
    });
    g.finish();

    let mut g = c.benchmark_group("rows");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("softmax 1024", |b| b.iter(|| rows::softmax_rows(arm, black_box(&x), &mut out, 1024)));
    g.bench_function("layer_norm 1024", |b| {
        b.iter(|| rows::layer_norm_rows(arm, black_box(&x), &mut out, 1024, 1e-5, None, None))
    });
    g.bench_function("swiglu", |b| b.iter(|| rows::swiglu_rows(arm, black_box(&x), &x, &mut out)));
    g.finish();

    let mut g = c.benchmark_group("sgemm");
    let dim = 512;
    g.throughput(Throughput::Elements(2 * (dim * dim * dim) as u64));
    let a: Vec<f32> = x[..dim * dim].to_vec();
    let mut cm = vec![0f32; dim * dim];
    g.bench_function("512^3 (gemm crate, 1 thread)", |b| {
        b.iter(|| f32::gemm_rows(dim, dim, dim, black_box(&a), &a, &mut cm, 1))
    });
    g.finish();
    c.final_summary();

    // The anchor table. The SGEMM rows go through a compiled graph (rlx-cpu's program).
    println!("\n{}", render(&kernel_suite()));
}
