//! `rlx bench`.

use rlx::prelude::*;
use rlx::runtime::cpu::bench;

pub fn bench(what: &str) -> Result<()> {
    match what {
        "kernels" => kernels(),
        other => Err(Error::input(format!("unknown benchmark '{other}' (available: kernels)"))),
    }
}

fn kernels() -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("note: a debug build; run `cargo run --release -p rlx-cli -- bench kernels` for real figures");
    }
    println!("rlx bench kernels: 1 thread unless stated, 1M f32 elements; anchors measured in this run");
    println!();
    let sgemm = |dim: usize, threads: usize| -> f64 { sgemm_through_graph(dim, threads).unwrap_or(f64::NAN) };
    let rows = bench::kernel_suite(&sgemm);
    print!("{}", bench::render(&rows));
    Ok(())
}

/// GFLOP/s of a [dim, dim] x [dim, dim] matmul graph compiled for `threads`.
fn sgemm_through_graph(dim: usize, threads: usize) -> Result<f64> {
    let mut g = Graph::new("sgemm");
    let a = g.input("a", DType::F32, &[dim, dim])?;
    let b = g.param("b", DType::F32, &[dim, dim])?;
    let c = g.matmul(a, b)?;
    g.set_outputs(&[c])?;
    let mut compiled = Session::new(Device::Cpu)?.compile_with(&g, &CompileOptions::default().with_threads(threads))?;
    let values: Vec<f32> = (0..dim * dim).map(|i| (i % 17) as f32 * 0.01).collect();
    compiled.set_param("b", &values)?;
    let input = HostTensor::from_f32(&[dim, dim], &values)?;
    let mut failed = None;
    let secs = bench::seconds_per_call(|| {
        if let Err(e) = compiled.run_typed(&[("a", &input)]) {
            failed = Some(e);
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(2.0 * (dim as f64).powi(3) / secs / 1e9),
    }
}
