//! The GPU backend against the CPU: the compiler corpus (with and without fusion, f32
//! and the low-precision family, a gradient graph) within tolerances derived from each
//! case's accumulation depth and magnitude; the harness rejects a perturbed result;
//! the probe reports a missing Vulkan loader instead of failing later.
//!
//! Without a usable GPU every test here skips, unless `RLX_REQUIRE_DEVICE=1` (CI sets it
//! after installing Mesa's software Vulkan driver), which turns the skip into a failure.

use rlx::prelude::*;
use rlx_corpus::{Case, cases, every_value_as_output, low_precision_cases, narrowest_unit_roundoff, tolerance};

mod kernels;
mod large;
mod llm;
mod onnx;

/// Whether the GPU runs here; panics instead of skipping under `RLX_REQUIRE_DEVICE=1`.
pub fn gpu_or_skip(test: &str) -> bool {
    if is_available(Device::Gpu) {
        return true;
    }
    let why = rlx::runtime::availability(Device::Gpu).err().unwrap_or_default();
    if std::env::var("RLX_REQUIRE_DEVICE").is_ok_and(|v| v == "1") {
        panic!("{test}: RLX_REQUIRE_DEVICE=1 but the GPU is unavailable: {why}");
    }
    eprintln!("{test}: skipped, no GPU ({why})");
    false
}

pub fn run_on(device: Device, case: &Case, options: &CompileOptions) -> Result<Vec<HostTensor>> {
    let mut c = Session::new(device)?.compile_with(&case.graph, options)?;
    for (name, t) in &case.params {
        c.set_param_typed(name, t)?;
    }
    let feed: Vec<(&str, &HostTensor)> = case.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    c.run_typed(&feed)
}

/// The largest magnitude any float value of the case reaches (on the CPU).
pub fn magnitude(case: &Case) -> f64 {
    let all = Case { graph: every_value_as_output(&case.graph).expect("a graph with outputs"), ..case.clone() };
    let values = run_on(Device::Cpu, &all, &CompileOptions::default()).expect("the CPU runs the case");
    values.iter().flat_map(|t| t.to_f64_vec()).filter(|v| v.is_finite()).fold(1.0, |m, v| m.max(v.abs()))
}

/// Compares GPU outputs with CPU ones: floats within twice the case's tolerance (each
/// side may be that far from exact), integers and bools exactly, NaN with NaN, an
/// infinity with itself.
/// `u` is the unit roundoff of the narrowest format the computation rounds to.
pub fn compare(
    case: &Case,
    cpu: &[HostTensor],
    gpu: &[HostTensor],
    (u, magnitude): (f64, f64),
) -> std::result::Result<(), String> {
    let tol = 2.0 * tolerance(u, case.depth.max(1), magnitude);
    for (k, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        if (c.dtype(), c.dims()) != (g.dtype(), g.dims()) {
            return Err(format!(
                "{} output {k}: {:?}{:?} vs {:?}{:?}",
                case.name,
                c.dtype(),
                c.dims(),
                g.dtype(),
                g.dims()
            ));
        }
        if !c.dtype().is_float() {
            if c.to_i64_vec() != g.to_i64_vec() {
                return Err(format!("{} output {k}: integers differ", case.name));
            }
            continue;
        }
        for (i, (a, b)) in c.to_f64_vec().into_iter().zip(g.to_f64_vec()).enumerate() {
            let same = a == b || (a.is_nan() && b.is_nan());
            let within = (a - b).abs() <= tol;
            if !same && !within {
                return Err(format!("{} output {k} element {i}: cpu {a:e}, gpu {b:e} (tolerance {tol:e})", case.name));
            }
        }
    }
    Ok(())
}

/// The unit roundoff a case's values round to under `options`.
fn unit_roundoff(case: &Case, options: &CompileOptions) -> f64 {
    let policy = options.precision.half().map_or(0.0, |h| h.unit_roundoff());
    narrowest_unit_roundoff(&case.graph).max(policy).max(f32::EPSILON as f64 / 2.0)
}

fn check_cases(test: &str, cases: &[Case], options: &CompileOptions) {
    let mut failures = Vec::new();
    for case in cases {
        let fallbacks = rlx::runtime::gpu::host_fallbacks(&case.graph, options).unwrap();
        assert!(fallbacks.is_empty(), "{}: steps without a GPU kernel: {fallbacks:?}", case.name);
        let cpu = run_on(Device::Cpu, case, options).unwrap_or_else(|e| panic!("{}: cpu: {e}", case.name));
        match run_on(Device::Gpu, case, options) {
            Ok(gpu) => {
                if let Err(e) = compare(case, &cpu, &gpu, (unit_roundoff(case, options), magnitude(case))) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(format!("{}: gpu: {e}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{test}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_matches_the_cpu() {
    if gpu_or_skip("corpus_matches_the_cpu") {
        check_cases("corpus", &cases().unwrap(), &CompileOptions::default());
    }
}

#[test]
fn corpus_matches_the_cpu_unfused() {
    if gpu_or_skip("corpus_matches_the_cpu_unfused") {
        let options = CompileOptions { fusion: false, ..CompileOptions::default() };
        check_cases("corpus unfused", &cases().unwrap(), &options);
    }
}

#[test]
fn low_precision_corpus_matches_the_cpu() {
    if gpu_or_skip("low_precision_corpus_matches_the_cpu") {
        check_cases("low precision", &low_precision_cases().unwrap(), &CompileOptions::default());
    }
}

#[test]
fn mixed_precision_policies_match_the_cpu() {
    if gpu_or_skip("mixed_precision_policies_match_the_cpu") {
        for precision in [PrecisionPolicy::AutoMixedBf16, PrecisionPolicy::AutoMixedF16] {
            let options = CompileOptions { precision, ..CompileOptions::default() };
            check_cases(&format!("{precision:?}"), &cases().unwrap(), &options);
        }
    }
}

#[test]
fn parity_harness_rejects_a_perturbed_result() {
    if !gpu_or_skip("parity_harness_rejects_a_perturbed_result") {
        return;
    }
    let case = rlx_corpus::mlp().unwrap();
    let options = CompileOptions::default();
    let cpu = run_on(Device::Cpu, &case, &options).unwrap();
    let mut gpu = run_on(Device::Gpu, &case, &options).unwrap();
    let m = (f32::EPSILON as f64 / 2.0, magnitude(&case));
    compare(&case, &cpu, &gpu, m).expect("the unperturbed result passes");
    // One logit moved by three tolerances: the harness must notice.
    let tol = 2.0 * tolerance(m.0, case.depth, m.1);
    let mut logits = gpu[1].to_f32_vec();
    logits[17] += (3.0 * tol) as f32;
    gpu[1] = HostTensor::from_f32(gpu[1].dims(), &logits).unwrap();
    let err = compare(&case, &cpu, &gpu, m).expect_err("a perturbed logit must be rejected");
    assert!(err.contains("output 1 element 17"), "{err}");
}

/// The gradient of a corpus case's mean first output with respect to its params.
fn gradient_case(base: Case, extra_depth: usize) -> Case {
    let mut g = base.graph.clone();
    let out = g.outputs()[0];
    let axes: Vec<usize> = (0..g.dims(out).len()).collect();
    let loss = g.reduce(ReduceOp::Mean, out, &axes, false).unwrap();
    g.set_outputs(&[loss]).unwrap();
    let names: Vec<String> = base.params.iter().map(|(n, _)| n.clone()).collect();
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    let grads = rlx::autodiff::grad_with_loss(&g, &wrt).unwrap();
    let mut case = Case::new(&format!("{}_grad", base.name), grads, base.depth * extra_depth, 5, -0.5, 0.5, 1).unwrap();
    case.params = base.params.clone();
    for (name, t) in &base.inputs {
        if let Some(slot) = case.inputs.iter_mut().find(|(n, _)| n == name) {
            slot.1 = t.clone();
        }
    }
    case
}

/// Backward graphs: matmul, conv, max and average pooling gradients (the MLP and the
/// CNN), and an embedding's scatter-add with a cross-entropy loss.
#[test]
fn gradient_graphs_match_the_cpu() {
    if !gpu_or_skip("gradient_graphs_match_the_cpu") {
        return;
    }
    let mut g = Graph::new("embed_ce");
    let ids = g.input("ids", DType::I64, &[6]).unwrap();
    let labels = g.input("labels", DType::I32, &[6]).unwrap();
    let table = g.param("table", DType::F32, &[9, 5]).unwrap();
    let w = g.param("w", DType::F32, &[5, 7]).unwrap();
    let rows = g.gather(table, ids).unwrap();
    let logits = g.matmul(rows, w).unwrap();
    let loss = g.cross_entropy(logits, labels).unwrap();
    g.set_outputs(&[loss]).unwrap();
    let grads = rlx::autodiff::grad_with_loss(&g, &["table", "w"]).unwrap();
    let embed = Case::new("embed_ce_grad", grads, 40, 6, -1.0, 1.0, 7).unwrap();
    let cases = [gradient_case(rlx_corpus::mlp().unwrap(), 3), gradient_case(rlx_corpus::cnn().unwrap(), 3), embed];
    check_cases("grad", &cases, &CompileOptions::default());
}

/// A child process with the Vulkan loader pointed at nothing: the probe says no, and
/// `Session::new` says why.
#[cfg(target_os = "linux")]
#[test]
fn probe_reports_a_missing_vulkan_driver() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "probe_child_without_vulkan", "--nocapture"])
        .env("VK_ICD_FILENAMES", "/nonexistent/rlx-no-icd.json")
        .env("VK_DRIVER_FILES", "/nonexistent/rlx-no-icd.json")
        .env("RLX_PROBE_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child test did not run:\n{text}");
}

#[test]
#[ignore = "run by probe_reports_a_missing_vulkan_driver in a child process"]
fn probe_child_without_vulkan() {
    assert_eq!(std::env::var("RLX_PROBE_CHILD").as_deref(), Ok("1"), "run through the parent test");
    assert!(!is_available(Device::Gpu));
    assert_eq!(fastest_device(), Device::Cpu);
    let err = Session::new(Device::Gpu).err().expect("no GPU without a Vulkan driver");
    let msg = err.to_string();
    assert!(msg.contains("no usable GPU") && msg.contains("VK_ICD_FILENAMES"), "{msg}");
    // The CPU is unaffected.
    assert!(is_available(Device::Cpu));
}

#[test]
fn software_adapters_are_never_the_fastest_device() {
    if gpu_or_skip("software_adapters_are_never_the_fastest_device") {
        let software = rlx::runtime::gpu::describe().unwrap().contains("software");
        assert_eq!(fastest_device() == Device::Gpu, !software);
    }
}

/// The digits MLP trained for two epochs on the GPU and on the CPU, from the same seed
/// and batches: per-step losses agree to rounding, and so does held-out accuracy.
#[test]
fn training_on_the_gpu_tracks_the_cpu() {
    if !gpu_or_skip("training_on_the_gpu_tracks_the_cpu") {
        return;
    }
    use rlx::train::{RunConfig, mlp, train_digits};
    let run = |device| {
        let cfg = RunConfig { epochs: 2, device, ..RunConfig::mlp() };
        train_digits(mlp(64), &cfg, &CompileOptions::default(), |_, _, _| {}, |_| {}).unwrap().1
    };
    let (cpu, gpu) = (run(Device::Cpu), run(Device::Gpu));
    let worst = cpu
        .iter()
        .zip(&gpu)
        .flat_map(|(c, g)| c.step_losses.iter().zip(&g.step_losses).take(20))
        .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
        .fold(0.0, f32::max);
    // lavapipe: 1.3e-7 (an ulp or two of the loss); the bound leaves room for rounding
    // that compounds differently on other drivers.
    eprintln!("worst relative loss difference over the compared steps: {worst:e} (bound 2e-6)");
    for (c, g) in cpu.iter().zip(&gpu) {
        // Rounding differences compound over the steps; early ones must agree closely.
        for (step, (a, b)) in c.step_losses.iter().zip(&g.step_losses).take(20).enumerate() {
            assert!((a - b).abs() <= 2e-6 * a.abs().max(1.0), "epoch {} step {step}: cpu {a}, gpu {b}", c.epoch);
        }
        let (a, b) = (c.held_out_accuracy, g.held_out_accuracy);
        assert!((a - b).abs() <= 0.01, "epoch {}: held-out accuracy cpu {a}, gpu {b}", c.epoch);
    }
}
