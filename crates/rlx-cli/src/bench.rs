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
        "train" => train(),
        other => {
            Err(Error::input(format!("unknown benchmark '{other}' (available: kernels, transformer, train, llm)")))
        }
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
    print!("{}", bench::render(&bench::kernel_suite()));
    Ok(())
}

/// Median seconds of `reps` calls after `warm` untimed ones.
fn median_seconds(warm: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warm {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = std::time::Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[reps / 2])
}

/// The training step (forward, backward, AdamW update) of the digits MLP and of a
/// 2-layer character transformer, beside JAX's jitted step (tools/bench/jax_train_bench.py)
/// measured in the same run.
fn train() -> Result<()> {
    use rlx::optim::{Rule, Schedule};
    use rlx::train::{Trainer, TransformerConfig, char_transformer, mlp};
    let threads = rlx::runtime::cpu::default_threads();
    println!("rlx bench train: one training step (forward, backward, AdamW), f32, {threads} threads, median");
    let options = CompileOptions { threads: Some(threads), ..CompileOptions::default() };
    let mut rng = rlx::train::Rng::new(5);
    let mut uniform = |n: usize| (0..n).map(|_| rng.uniform() as f32).collect::<Vec<f32>>();
    // Digits MLP 64 -> 512 -> 10, batch 64.
    let mut t = Trainer::new(mlp(512), 64, Rule::adamw(0.05), Schedule::Constant(1e-3), 1, &options)?;
    let x = HostTensor::from_f32(&[64, 64], &uniform(64 * 64))?;
    let y = HostTensor::from_i64(&[64], &(0..64).map(|i| i % 10).collect::<Vec<i64>>())?;
    let mlp_s = median_seconds(5, 200, || t.step(&x, &y).map(|_| ()))?;
    // Character transformer: vocab 64, sequence 64, width 128, 4 heads, 2 blocks, batch 16.
    let cfg = TransformerConfig { vocab: 64, seq: 64, dim: 128, heads: 4, layers: 2 };
    let mut t = Trainer::new(char_transformer(cfg), 16, Rule::adamw(0.05), Schedule::Constant(1e-3), 1, &options)?;
    let ids: Vec<i64> = (0..16 * 64).map(|i| (i * 37 % 64) as i64).collect();
    let x = HostTensor::from_i64(&[16, 64], &ids)?;
    let tf_s = median_seconds(3, 20, || t.step(&x, &x).map(|_| ()))?;
    let jax = jax_train(threads);
    println!();
    println!("{:<36} {:>12} {:>12} {:>10}", "step", "rlx", "jax", "jax / rlx");
    for (name, ours, key) in [
        ("digits MLP 64-512-10, batch 64", mlp_s, "mlp_step_seconds"),
        ("char transformer 2x128, batch 16x64", tf_s, "transformer_step_seconds"),
    ] {
        let theirs = jax.as_ref().ok().and_then(|j| j[key].as_f64());
        let (t, ratio) = match theirs {
            Some(j) => (format!("{:.3} ms", j * 1e3), format!("{:.2}x", j / ours)),
            None => ("-".into(), "-".into()),
        };
        println!("{name:<36} {:>9.3} ms {t:>12} {ratio:>10}", ours * 1e3);
    }
    match jax {
        Ok(j) => println!(
            "\nanchor: {} in the same run (jax / rlx > 1: RLX is faster)",
            j["engine"].as_str().unwrap_or("jax")
        ),
        Err(why) => println!("\nJAX not measured: {why} (pip install jax optax)"),
    }
    Ok(())
}

/// Runs tools/bench/jax_train_bench.py with the system python, if it has JAX.
fn jax_train(threads: usize) -> std::result::Result<serde_json::Value, String> {
    let dir = std::env::temp_dir().join(format!("rlx-bench-jax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let script = dir.join("jax_train_bench.py");
    std::fs::write(&script, include_str!("../../../tools/bench/jax_train_bench.py")).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args(["--threads", &threads.to_string()])
        .output()
        .map_err(|e| format!("python3: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("the JAX script failed").to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("JAX output: {e}"))
}
