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
    let sgemm = |dim: usize, threads: usize| bench::sgemm_program_gflops(dim, threads).unwrap_or(f64::NAN);
    print!("{}", bench::render(&bench::kernel_suite(&sgemm)));
    Ok(())
}
