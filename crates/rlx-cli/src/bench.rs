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

/// `rlx bench --device gpu`: GEMM GFLOP/s on the GPU against the CPU in the same run.
pub fn bench_gpu(what: &str) -> Result<()> {
    if what != "kernels" {
        return Err(Error::input(format!("--device gpu benchmarks `kernels` and `llm`, not '{what}'")));
    }
    let adapter = rlx::runtime::gpu::describe().map_err(Error::unsupported)?;
    println!("rlx bench kernels --device gpu: {adapter}");
    println!("f32 GEMM, n x n x n, {CHAIN} chained products per run (A, B resident; one row-sum read back)");
    println!();
    println!("{:>6} {:>14} {:>14} {:>10}", "n", "gpu GFLOP/s", "cpu GFLOP/s", "gpu / cpu");
    for n in [128, 256, 512, 1024, 2048] {
        let g = gemm_chain(n)?;
        let mut rates = Vec::new();
        for device in [Device::Gpu, Device::Cpu] {
            let mut c = Session::new(device)?.compile(&g)?;
            // Values in [-1/n, 1/n): the chained products stay bounded.
            let values: Vec<f32> = (0..n * n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
            let values: Vec<f32> = values.iter().map(|v| v / n as f32).collect();
            c.set_param("a", &values)?;
            c.set_param("b", &values)?;
            let mut failed = None;
            let secs = bench::seconds_per_call(|| {
                if let Err(e) = c.run(&[]) {
                    failed = Some(e);
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            rates.push(CHAIN as f64 * 2.0 * (n as f64).powi(3) / secs / 1e9);
        }
        println!("{n:>6} {:>14.1} {:>14.1} {:>9.2}x", rates[0], rates[1], rates[0] / rates[1]);
    }
    Ok(())
}

/// Products per `gemm_chain` run: enough to hide a submission and a readback.
const CHAIN: usize = 4;

/// `sum(a b b b ..., axis 1)`: `CHAIN` GEMMs, a small result.
fn gemm_chain(n: usize) -> Result<Graph> {
    let mut g = Graph::new(&format!("gemm_{n}"));
    let a = g.param("a", DType::F32, &[n, n])?;
    let b = g.param("b", DType::F32, &[n, n])?;
    let mut x = g.matmul(a, b)?;
    for _ in 1..CHAIN {
        x = g.matmul(x, b)?;
    }
    let rows = g.reduce(ReduceOp::Sum, x, &[1], false)?;
    g.set_outputs(&[rows])?;
    Ok(g)
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
/// 2-layer character transformer in f32 and in bf16 (bf16 params and compute, f32 master
/// weights), beside JAX's jitted f32 step (tools/bench/jax_train_bench.py) and the f32 /
/// bf16 / f16 GEMM rates, all measured in the same run.
fn train() -> Result<()> {
    use rlx::optim::{Rule, Schedule};
    use rlx::train::{Network, Trainer, TransformerConfig, char_transformer, cnn, mlp};
    let threads = rlx::runtime::cpu::default_threads();
    println!("rlx bench train: one training step (forward, backward, AdamW), {threads} threads, median");
    let mut rng = rlx::train::Rng::new(5);
    let mut uniform = |n: usize| (0..n).map(|_| rng.uniform() as f32).collect::<Vec<f32>>();
    let digits_x = HostTensor::from_f32(&[64, 64], &uniform(64 * 64))?;
    let images = HostTensor::from_f32(&[64, 1, 8, 8], &uniform(64 * 64))?;
    let digits_y = HostTensor::from_i64(&[64], &(0..64).map(|i| i % 10).collect::<Vec<i64>>())?;
    let ids: Vec<i64> = (0..16 * 64).map(|i| (i * 37 % 64) as i64).collect();
    let chars = HostTensor::from_i64(&[16, 64], &ids)?;
    // (step seconds, param bytes) of a network at a precision.
    let measure =
        |network: Network, batch: usize, policy: PrecisionPolicy, (x, y): (&HostTensor, &HostTensor), reps: usize| {
            let options = CompileOptions { threads: Some(threads), ..CompileOptions::default() }.with_precision(policy);
            let mut t = Trainer::new(network, batch, Rule::adamw(0.05), Schedule::Constant(1e-3), 1, &options)?;
            let seconds = median_seconds(3, reps, || t.step(x, y).map(|_| ()))?;
            Ok::<_, Error>((seconds, t.param_bytes()))
        };
    // Character transformer: vocab 64, sequence 64, width 128, 4 heads, 2 blocks, batch 16.
    let cfg = TransformerConfig { vocab: 64, seq: 64, dim: 128, heads: 4, layers: 2 };
    let mut rows = Vec::new();
    for policy in [PrecisionPolicy::F32, PrecisionPolicy::AutoMixedBf16] {
        let m = measure(mlp(512), 64, policy, (&digits_x, &digits_y), 200)?;
        let t = measure(char_transformer(cfg), 16, policy, (&chars, &chars), 20)?;
        let c = measure(cnn(32, 64), 64, policy, (&images, &digits_y), 50)?;
        rows.push((policy, [m, t, c]));
    }
    let jax = jax_train(threads);
    println!();
    println!(
        "{:<36} {:>10} {:>12} {:>12} {:>10} {:>12}",
        "step", "precision", "rlx", "jax f32", "jax / rlx", "param bytes"
    );
    for (k, (name, key)) in [
        ("digits MLP 64-512-10, batch 64", "mlp_step_seconds"),
        ("char transformer 2x128, batch 16x64", "transformer_step_seconds"),
        ("digits CNN 32-64 3x3, batch 64", "cnn_step_seconds"),
    ]
    .into_iter()
    .enumerate()
    {
        let theirs = jax.as_ref().ok().and_then(|j| j[key].as_f64());
        for (policy, steps) in &rows {
            let (ours, bytes) = steps[k];
            let (t, ratio) = match theirs {
                Some(j) => (format!("{:.3} ms", j * 1e3), format!("{:.2}x", j / ours)),
                None => ("-".into(), "-".into()),
            };
            let precision = if *policy == PrecisionPolicy::F32 { "f32" } else { "bf16" };
            println!("{name:<36} {precision:>10} {:>9.3} ms {t:>12} {ratio:>10} {bytes:>12}", ours * 1e3);
        }
    }
    match jax {
        Ok(j) => println!(
            "\nanchor: {} in the same run (jax / rlx > 1: RLX is faster)",
            j["engine"].as_str().unwrap_or("jax")
        ),
        Err(why) => println!("\nJAX not measured: {why} (pip install jax optax)"),
    }
    println!();
    let f32_rate = bench::gemm_program_gflops(DType::F32, 1024, 1)?;
    println!("GEMM 1024^3, 1 thread, weight stored as the dtype: f32 {f32_rate:.0} GFLOP/s");
    for dtype in [DType::BF16, DType::F16] {
        let rate = bench::gemm_program_gflops(dtype, 1024, 1)?;
        println!("  {dtype:<5} {rate:>6.0} GFLOP/s  {:.2}x f32  (weight bytes 0.50x)", rate / f32_rate);
    }
    Ok(())
}

/// Runs tools/bench/jax_train_bench.py with the anchors' Python (`$RLX_PYTHON` or
/// python3), if it has JAX.
fn jax_train(threads: usize) -> std::result::Result<serde_json::Value, String> {
    let dir = std::env::temp_dir().join(format!("rlx-bench-jax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let script = dir.join("jax_train_bench.py");
    std::fs::write(&script, include_str!("../../../tools/bench/jax_train_bench.py")).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(bench::anchor_python())
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

/// Steps each distributed run trains, and the first ones left out of the rate (graph
/// compilation and cold caches).
const DISTRIBUTED_STEPS: usize = 230;
const DISTRIBUTED_WARMUP: usize = 30;

/// `rlx bench train --distributed`: `rlx train char` (global batches of 32 and 64) under
/// `mpirun -np 1` and `-np 2`, one thread per rank; steps/s from each step's wall time in the rank-0
/// metrics file, and the gradient allreduce's time and share of a step.
pub fn train_distributed() -> Result<()> {
    let exe = std::env::current_exe().map_err(|e| Error::io(format!("the rlx executable: {e}")))?;
    let scratch = std::env::temp_dir().join(format!("rlx-bench-train-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| Error::io(format!("{}: {e}", scratch.display())))?;
    println!("rlx bench train --distributed: {}", cpu_model());
    println!(
        "char transformer 2x64 (108k params), windows of 32 characters, {DISTRIBUTED_STEPS} steps (first {DISTRIBUTED_WARMUP} not timed), 1 thread per rank, MPI over shared memory"
    );
    println!();
    println!(
        "{:>6} {:>6} {:>8} {:>10} {:>9} {:>16} {:>15} {:>8}",
        "batch", "ranks", "threads", "steps/s", "speedup", "allreduce/step", "allreduce time", "share"
    );
    // Each batch's 1-rank rate, which its 2-rank run is compared with.
    let mut one_rank = 0.0;
    for (batch, ranks) in [(32, 1), (32, 2), (64, 1), (64, 2)] {
        let metrics = scratch.join(format!("ranks{ranks}.jsonl"));
        let out = std::process::Command::new("mpirun")
            .args(["--oversubscribe", "-np", &ranks.to_string()])
            .arg(&exe)
            .args(["train", "char", "--distributed", "--threads", "1", "--batch", &batch.to_string()])
            .args(["--steps", &DISTRIBUTED_STEPS.to_string()])
            .arg("--metrics")
            .arg(&metrics)
            .arg("--plot")
            .arg(scratch.join("plot.png"))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()
            .map_err(|e| Error::io(format!("mpirun: {e} (install Open MPI: apt-get install openmpi-bin)")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(Error::internal(format!("mpirun -np {ranks} failed: {}", err.trim().replace('\n', " "))));
        }
        let text = std::fs::read_to_string(&metrics).map_err(|e| Error::io(format!("{}: {e}", metrics.display())))?;
        let steps: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["kind"] == "step")
            .skip(DISTRIBUTED_WARMUP)
            .collect();
        let field = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        let seconds: f64 = steps.iter().map(|v| batch as f64 / field(v, "examples_per_s")).sum();
        let reduce: f64 = steps.iter().map(|v| field(v, "allreduce_s")).sum();
        let bytes = steps.first().map_or(0.0, |v| field(v, "allreduce_bytes"));
        let rate = steps.len() as f64 / seconds;
        if ranks == 1 {
            one_rank = rate;
        }
        let speedup = rate / one_rank;
        let per = reduce / steps.len().max(1) as f64;
        println!(
            "{batch:>6} {ranks:>6} {:>8} {rate:>10.1} {speedup:>8.2}x {:>12.2} MiB {:>12.3} ms {:>7.1}%",
            1,
            bytes / (1 << 20) as f64,
            per * 1e3,
            100.0 * reduce / seconds
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    println!("\nsteps/s counts each step's wall time on rank 0: gather, forward + backward, allreduce, update");
    Ok(())
}

/// The CPU's model name, from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
