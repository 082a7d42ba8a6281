//! `rlx bench`.

use rlx::prelude::*;
use rlx::runtime::cpu::bench;

pub fn bench(what: &str) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("note: a debug build; run `cargo run --release -p rlx-cli -- bench {what}` for real figures");
    }
    match what {
        "kernels" => kernels(),
        "transformer" => transformer(),
        other => Err(Error::input(format!("unknown benchmark '{other}' (available: kernels, transformer)"))),
    }
}

/// A SmolLM2-shaped block: fused vs unfused latency, arena with and without reuse, and
/// the compile time of a 24-layer stack.
fn transformer() -> Result<()> {
    use rlx_corpus::{Case, TransformerConfig, transformer_block, transformer_stack};
    let cfg = TransformerConfig::smol();
    let threads = rlx::runtime::cpu::default_threads();
    println!(
        "rlx bench transformer: one block, seq {} hidden {} heads {}/{} ffn {}, {threads} threads",
        cfg.seq, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn
    );
    println!();
    let case = Case::new("block", transformer_block(&cfg)?, 1, 1, -0.1, 0.1, cfg.seq as i64)?;
    println!("{:<28} {:>12} {:>14} {:>11}", "configuration", "latency", "arena", "dispatches");
    let mut latencies = Vec::new();
    for (fusion, reuse) in [(true, true), (false, true), (true, false), (false, false)] {
        let options = CompileOptions::default().with_fusion(fusion).with_memory_reuse(reuse);
        let mut c = Session::new(Device::Cpu)?.compile_with(&case.graph, &options)?;
        for (name, t) in &case.params {
            c.set_param_typed(name, t)?;
        }
        let feed: Vec<(&str, &HostTensor)> = case.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let mut failed = None;
        let secs = bench::seconds_per_call(|| {
            if let Err(e) = c.run_typed(&feed) {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let dispatches = rlx::compile::compile(&case.graph, &rlx::compile::Target::CPU, &options)?.budget().dispatches;
        let label = format!("fusion {}, reuse {}", on(fusion), on(reuse));
        println!("{label:<28} {:>9.3} ms {:>11.1} KiB {dispatches:>11}", secs * 1e3, c.arena_bytes() as f64 / 1024.0);
        latencies.push(secs);
    }
    println!();
    println!("fused / unfused latency (reuse on): {:.2}x faster", latencies[1] / latencies[0]);
    let stack = transformer_stack(&cfg, 24)?;
    let start = std::time::Instant::now();
    let compiled = Session::new(Device::Cpu)?.compile(&stack)?;
    println!(
        "compile time, 24-layer stack ({} nodes): {:.1} ms, arena {:.1} MiB",
        stack.len(),
        start.elapsed().as_secs_f64() * 1e3,
        compiled.arena_bytes() as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn kernels() -> Result<()> {
    println!("rlx bench kernels: 1 thread unless stated, 1M f32 elements; anchors measured in this run");
    println!();
    let sgemm = |dim: usize, threads: usize| bench::sgemm_program_gflops(dim, threads).unwrap_or(f64::NAN);
    print!("{}", bench::render(&bench::kernel_suite(&sgemm)));
    Ok(())
}
