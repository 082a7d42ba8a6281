//! `rlx inspect | run | check | bench onnx` on ONNX files.

use rlx::prelude::*;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Whether `path` names an ONNX file (by extension).
pub fn is_onnx(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

pub fn inspect(path: &Path) -> Result<()> {
    let model = OnnxModel::load(path)?;
    let opsets: Vec<String> =
        model.opsets().iter().map(|(d, v)| format!("{}:{v}", if d.is_empty() { "ai.onnx" } else { d })).collect();
    let (params, bytes) = model.param_stats();
    println!("{}: ONNX IR version {}, opsets {}", path.display(), model.ir_version(), opsets.join(", "));
    println!("{params} initializers, {bytes} bytes");
    println!();
    println!("inputs:");
    for i in model.inputs() {
        println!("  {}", i.describe());
    }
    println!("outputs:");
    for o in model.outputs() {
        println!("  {}", o.describe());
    }
    let counts = model.op_counts();
    let nodes: usize = counts.iter().map(|(_, c)| c).sum();
    println!();
    println!("{nodes} nodes in the main graph:");
    for (op, count) in &counts {
        println!("  {op:<28} {count:>6}");
    }
    let unsupported = model.unsupported_ops();
    println!();
    if unsupported.is_empty() {
        println!("every op has an importer at this opset");
    } else {
        println!("{} unsupported nodes:", unsupported.len());
        for u in &unsupported {
            println!("  {u}");
        }
    }
    Ok(())
}

/// `rlx run MODEL.onnx --input NAME=FILE.npy ... [--out DIR]`.
pub fn run(path: &Path, inputs: &[(String, HostTensor)], device: Device) -> Result<Vec<HostTensor>> {
    let mut model = OnnxModel::load(path)?;
    model.set_device(device)?;
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    model.run(&refs)
}

/// `NAME=2x128` flags -> the model's input shapes in order; an input with only fixed
/// dims needs no flag.
fn shapes_for(model: &OnnxModel, specs: &[String]) -> Result<Vec<Vec<usize>>> {
    let mut given: Vec<(String, Vec<usize>)> = specs.iter().map(|s| parse_shape(s)).collect::<Result<_>>()?;
    let mut shapes = Vec::new();
    for info in model.inputs() {
        let dims = match given.iter().position(|(n, _)| *n == info.name) {
            Some(k) => given.remove(k).1,
            None => info.dims.iter().copied().collect::<Option<Vec<usize>>>().ok_or_else(|| {
                Error::input(format!("input {} has symbolic dims: pass --shape {}=AxB...", info.describe(), info.name))
            })?,
        };
        if dims.len() != info.dims.len() {
            return Err(Error::input(format!(
                "--shape {}: rank {}, the model declares {}",
                info.name,
                dims.len(),
                info.describe()
            )));
        }
        shapes.push(dims);
    }
    if let Some((name, _)) = given.first() {
        return Err(Error::input(format!("--shape {name}: the model has no such input")));
    }
    Ok(shapes)
}

/// `NAME=1x128` (or `NAME=scalar`).
fn parse_shape(spec: &str) -> Result<(String, Vec<usize>)> {
    let bad = || Error::input(format!("--shape '{spec}' is not NAME=AxBxC"));
    let (name, dims) = spec.split_once('=').filter(|(n, d)| !n.is_empty() && !d.is_empty()).ok_or_else(bad)?;
    if dims == "scalar" {
        return Ok((name.to_string(), vec![]));
    }
    let dims = dims.split('x').map(|d| d.parse::<usize>().map_err(|_| bad())).collect::<Result<_>>()?;
    Ok((name.to_string(), dims))
}

/// The IR graph `rlx check` plans: the model imported at the given shapes.
pub fn graph_for(path: &Path, specs: &[String]) -> Result<Graph> {
    let model = OnnxModel::load(path)?;
    let shapes = shapes_for(&model, specs)?;
    model.graph_for(&shapes).map_err(|e| e.context(path.display()))
}

/// Deterministic inputs for a benchmark: ids in [1000, 2000) (masks all ones), floats
/// standard-normal-ish, like tools/onnx/bench_ort.py.
fn bench_inputs(model: &OnnxModel, shapes: &[Vec<usize>]) -> Result<Vec<(String, HostTensor)>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    model
        .inputs()
        .iter()
        .zip(shapes)
        .map(|(info, dims)| {
            let n: usize = dims.iter().product();
            let dtype = info.dtype.ok_or_else(|| Error::unsupported(format!("input {}", info.describe())))?;
            let values: Vec<f64> = if !dtype.is_float() {
                let mask = info.name.to_lowercase().contains("mask");
                (0..n).map(|_| if mask { 1.0 } else { (1000 + next() % 1000) as f64 }).collect()
            } else {
                (0..n).map(|_| (next() % 20_000) as f64 / 10_000.0 - 1.0).collect()
            };
            Ok((info.name.clone(), HostTensor::from_f64_as(dtype, dims, &values)?))
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs per round of `rlx bench onnx`: RLX's rounds and onnxruntime's alternate, so each
/// pair of medians comes from the same few milliseconds. This VM's speed moves by 30% from
/// one 60 ms stretch to the next (rounds of 30 runs read ratios 0.63-1.34x in one
/// command); rounds of 3 pair the two sides within a few runs.
const RUNS_PER_ROUND: usize = 3;

/// How long each side runs untimed before each of its rounds. onnxruntime's workers spin
/// for ~50 ms after a run before they block (one core stayed busy 40-60 ms after 3 runs of
/// the MLP at 2 threads): RLX rounds run beside that spin took 1.6-1.8x onnxruntime's time
/// at 2 threads. Running meanwhile, rather than sleeping, keeps the caches and this VM's
/// cores warm: after a 100 ms sleep the first runs read ~1.5x the warm ones.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// `rlx bench onnx MODEL --shape NAME=AxB ... --threads 1,2`: warm latency of RLX and, in
/// the same run, of onnxruntime (tools/onnx/bench_ort.py in a cached virtualenv, one
/// session kept open per thread count): `runs` timed runs a side in alternating rounds of
/// [`RUNS_PER_ROUND`]; the table gives each side's median run, the median of the rounds'
/// ratios and their middle half.
pub fn bench(path: &Path, specs: &[String], threads: &[usize], runs: usize) -> Result<()> {
    let mut model = OnnxModel::load(path)?;
    let shapes = shapes_for(&model, specs)?;
    let inputs = bench_inputs(&model, &shapes)?;
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let ort = ort_python();
    let shape_text: Vec<String> = model
        .inputs()
        .iter()
        .zip(&shapes)
        .map(|(i, d)| format!("{}={}", i.name, d.iter().map(usize::to_string).collect::<Vec<_>>().join("x")))
        .collect();
    println!(
        "{} at {} ({runs} warm runs a side, alternating in rounds of {RUNS_PER_ROUND})",
        path.display(),
        shape_text.join(" ")
    );
    println!(
        "{:>7} {:>11} {:>12} {:>18} {:>7}  rounds' middle half",
        "threads", "compile ms", "rlx ms", "onnxruntime ms", "ratio"
    );
    for &t in threads {
        model.set_threads(t);
        model.run(&refs)?;
        let compile = model.last_compile_time().map_or(0.0, |d| d.as_secs_f64() * 1e3);
        for _ in 0..2 {
            model.run(&refs)?;
        }
        let mut timed = |count: usize| -> Result<Vec<f64>> {
            (0..count)
                .map(|_| {
                    let start = Instant::now();
                    model.run(&refs).map(|_| start.elapsed().as_secs_f64() * 1e3)
                })
                .collect()
        };
        let mut anchor = match &ort {
            Ok(python) => OrtSession::start(python, path, &shape_text, t),
            Err(why) => Err(why.clone()),
        };
        let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for first in (0..runs).step_by(RUNS_PER_ROUND) {
            let count = RUNS_PER_ROUND.min(runs - first);
            let settle = Instant::now();
            while settle.elapsed() < SETTLE {
                timed(1)?;
            }
            let round = timed(count)?;
            let rlx = median(round.clone());
            ours.extend(round);
            match anchor.as_mut().map(|session| session.times(count, SETTLE)) {
                Ok(Ok(round)) => {
                    ratios.push(rlx / median(round.clone()));
                    theirs.extend(round);
                }
                Ok(Err(why)) => anchor = Err(why),
                Err(_) => {}
            }
        }
        let rlx = median(ours);
        match anchor {
            Ok(_) => {
                let ort = median(theirs);
                ratios.sort_by(f64::total_cmp);
                let (lo, hi) = (ratios[ratios.len() / 4], ratios[(3 * ratios.len()) / 4]);
                let ratio = median(ratios);
                println!("{t:>7} {compile:>11.1} {rlx:>12.2} {ort:>18.2} {ratio:>6.2}x  {lo:.2}-{hi:.2}x");
            }
            Err(why) => println!("{t:>7} {compile:>11.1} {rlx:>12.2} {:>18} {:>7}   ({why})", "-", "-"),
        }
    }
    println!("ratio: the median of the rounds' RLX / onnxruntime medians (below 1 is faster); same inputs' shapes,");
    println!("threads, warm");
    Ok(())
}

/// The python of the cached onnxruntime virtualenv (tools/onnx/ort_env.sh builds it).
fn ort_python() -> std::result::Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/onnx/ort_env.sh");
    let out = Command::new("bash").arg(&script).output().map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("onnxruntime unavailable: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// An onnxruntime session on the model, open in `bench_ort.py --serve` until dropped.
struct OrtSession {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl OrtSession {
    /// Starts the session for `threads` and waits for its warm-up.
    fn start(python: &str, model: &Path, shapes: &[String], threads: usize) -> std::result::Result<Self, String> {
        use std::process::Stdio;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/onnx/bench_ort.py");
        let mut cmd = Command::new(python);
        cmd.arg(&script).arg(model).args(["--threads", &threads.to_string(), "--serve"]);
        for s in shapes {
            cmd.args(["--shape", s]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Its errors (a Python traceback) go where this command's go; a pipe nobody
            // reads could fill and stall the session.
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{python}: {e}"))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, std::io::BufReader::new(o)),
            _ => return Err("bench_ort.py: no pipes".to_string()),
        };
        let mut session = OrtSession { child, stdin, stdout };
        session.reply()?;
        Ok(session)
    }

    /// The milliseconds of each of `runs` runs, after running untimed for `settle`.
    fn times(&mut self, runs: usize, settle: std::time::Duration) -> std::result::Result<Vec<f64>, String> {
        use std::io::Write;
        writeln!(self.stdin, "{runs} {}", settle.as_millis())
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("bench_ort.py: {e}"))?;
        let reply = self.reply()?;
        let times = reply["times_ms"].as_array().ok_or_else(|| "bench_ort.py printed no times_ms".to_string())?;
        times.iter().map(|t| t.as_f64().ok_or_else(|| format!("bench_ort.py: time {t}"))).collect()
    }

    /// The session's next JSON line.
    fn reply(&mut self) -> std::result::Result<serde_json::Value, String> {
        use std::io::BufRead;
        let mut line = String::new();
        let read = self.stdout.read_line(&mut line).map_err(|e| format!("bench_ort.py: {e}"))?;
        if read == 0 {
            return Err("bench_ort.py ended (its error above)".to_string());
        }
        serde_json::from_str(&line).map_err(|e| format!("bench_ort.py output: {e}"))
    }
}

impl Drop for OrtSession {
    fn drop(&mut self) {
        // Its loop would end when stdin closes; a kill ends it at once, mid-run too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
