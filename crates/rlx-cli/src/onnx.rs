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

/// `rlx bench onnx MODEL --shape NAME=AxB ... --threads 1,2`: warm median latency of RLX
/// and, in the same run, of onnxruntime (tools/onnx/bench_ort.py in a cached virtualenv).
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
    println!("{} at {} ({runs} warm runs, median)", path.display(), shape_text.join(" "));
    println!("{:>7} {:>11} {:>12} {:>18} {:>7}", "threads", "compile ms", "rlx ms", "onnxruntime ms", "ratio");
    for &t in threads {
        model.set_threads(t);
        model.run(&refs)?;
        let compile = model.last_compile_time().map_or(0.0, |d| d.as_secs_f64() * 1e3);
        for _ in 0..2 {
            model.run(&refs)?;
        }
        let times: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                model.run(&refs).map(|_| start.elapsed().as_secs_f64() * 1e3)
            })
            .collect::<Result<_>>()?;
        let rlx = median(times);
        let anchor = match &ort {
            Ok(python) => ort_median(python, path, &shape_text, t, runs),
            Err(why) => Err(why.clone()),
        };
        match anchor {
            Ok(a) => println!("{t:>7} {compile:>11.1} {rlx:>12.2} {a:>18.2} {:>6.2}x", rlx / a),
            Err(why) => println!("{t:>7} {compile:>11.1} {rlx:>12.2} {:>18} {:>7}   ({why})", "-", "-"),
        }
    }
    println!("ratio: RLX time / onnxruntime time (below 1 is faster); same inputs' shapes, threads, warm");
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

fn ort_median(
    python: &str,
    model: &Path,
    shapes: &[String],
    threads: usize,
    runs: usize,
) -> std::result::Result<f64, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/onnx/bench_ort.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script).arg(model).args(["--threads", &threads.to_string(), "--runs", &runs.to_string()]);
    for s in shapes {
        cmd.args(["--shape", s]);
    }
    let out = cmd.output().map_err(|e| format!("{python}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "bench_ort.py failed: {}",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        ));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value =
        serde_json::from_str(line.lines().last().unwrap_or("")).map_err(|e| format!("bench_ort.py output: {e}"))?;
    doc["median_ms"].as_f64().ok_or_else(|| "bench_ort.py printed no median_ms".to_string())
}
