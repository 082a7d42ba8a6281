//! ONNX's own node conformance suite (onnx 1.22.0, `tools/fetch_onnx_tests.sh`), run the
//! way ONNX's backend runner does: the test's inputs fed as runtime inputs, every output
//! compared for dtype, shape and `|a - b| <= 1e-7 + 1e-3 |b|` with NaN positions equal.
//!
//! A test that fails strictly is tried again with its integer inputs frozen to their
//! values (shape-like operands then fold), and counted apart. The run prints a per-op
//! table and `N passed, N failed`, and fails when a test listed in
//! `tests/node_expected.txt` fails or any test panics. `RLX_ONNX_UPDATE_EXPECTED=1` adds
//! the tests that pass now to the list (it only grows). `RLX_ONNX_NODE_FILTER=substr`
//! runs the matching tests only.

use prost::Message;
use rlx_ir::HostTensor;
use rlx_onnx::OnnxModel;
use rlx_onnx::proto::TensorProto;
use rlx_onnx::tensor::{ExternalData, to_host};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const EXPECTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node_expected.txt");

fn node_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("RLX_ONNX_NODE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var("RLX_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/rlx"));
    let dir = base.join("onnx-1.22.0/node");
    dir.is_dir().then_some(dir)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Pass,
    /// Passes through the API, with the program specialized on the values of small inputs.
    PassSpecialized,
    /// Passes only with integer inputs frozen to constants.
    PassFolded,
    Fail,
    Panic,
}

fn read_pb(path: &Path) -> Result<HostTensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = TensorProto::decode(bytes.as_slice()).map_err(|e| format!("{}: {e}", path.display()))?;
    to_host(&t, &ExternalData::default()).map_err(|e| e.to_string())
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    (0..).map(|k| dir.join(format!("{prefix}_{k}.pb"))).take_while(|p| p.exists()).collect()
}

fn compare(k: usize, got: &HostTensor, want: &HostTensor) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.dims() != want.dims() {
        return Err(format!(
            "output {k}: got {:?}{:?}, expected {:?}{:?}",
            got.dtype(),
            got.dims(),
            want.dtype(),
            want.dims()
        ));
    }
    if want.dtype().is_float() {
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        for (j, (&a, &b)) in g.iter().zip(&w).enumerate() {
            let ok = if b.is_nan() || a.is_nan() {
                a.is_nan() && b.is_nan()
            } else {
                a == b || (a - b).abs() <= 1e-7 + 1e-3 * b.abs()
            };
            if !ok {
                return Err(format!("output {k}: element {j} is {a}, expected {b}"));
            }
        }
    } else if got.bytes() != want.bytes() {
        let (g, w) = (got.to_i64_vec(), want.to_i64_vec());
        let j = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("output {k}: element {j} is {}, expected {}", g[j], w[j]));
    }
    Ok(())
}

/// One run: load, optionally freeze integer inputs, run, compare.
fn attempt(dir: &Path, fold: bool) -> Result<bool, String> {
    let mut model = OnnxModel::load(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let data = dir.join("test_data_set_0");
    let inputs = numbered(&data, "input").iter().map(|p| read_pb(p)).collect::<Result<Vec<_>, _>>()?;
    let want = numbered(&data, "output").iter().map(|p| read_pb(p)).collect::<Result<Vec<_>, _>>()?;
    let names: Vec<String> = model.inputs().iter().map(|i| i.name.clone()).collect();
    if names.len() != inputs.len() {
        return Err(format!("the model has {} inputs, the test feeds {}", names.len(), inputs.len()));
    }
    let mut feed: Vec<(String, HostTensor)> = names.into_iter().zip(inputs).collect();
    if fold {
        let (frozen, runtime): (Vec<_>, Vec<_>) = feed.into_iter().partition(|(_, t)| t.dtype().is_int());
        if frozen.is_empty() {
            return Err("no integer input to fold".into());
        }
        for (name, t) in frozen {
            model.freeze_input(&name, t).map_err(|e| e.to_string())?;
        }
        feed = runtime;
    }
    let named: Vec<(&str, &HostTensor)> = feed.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let got = model.run(&named).map_err(|e| e.to_string())?;
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    got.iter().zip(&want).enumerate().try_for_each(|(k, (g, w))| compare(k, g, w))?;
    Ok(!model.specialized_inputs().is_empty())
}

fn run_one(dir: &Path) -> (Outcome, String) {
    let guarded = |fold| std::panic::catch_unwind(|| attempt(dir, fold));
    match guarded(false) {
        Ok(Ok(false)) => (Outcome::Pass, String::new()),
        Ok(Ok(true)) => (Outcome::PassSpecialized, String::new()),
        Err(_) => (Outcome::Panic, "panicked".into()),
        Ok(Err(strict)) => match guarded(true) {
            Ok(Ok(_)) => (Outcome::PassFolded, strict),
            Err(_) => (Outcome::Panic, "panicked (folded)".into()),
            Ok(Err(_)) => (Outcome::Fail, strict),
        },
    }
}

/// The op type of a test's first node (the op under test; `_expanded` tests count apart).
fn op_of(dir: &Path, name: &str) -> String {
    if name.contains("_expanded") {
        return "(expanded)".into();
    }
    let Ok(bytes) = std::fs::read(dir.join("model.onnx")) else { return "?".into() };
    rlx_onnx::proto::ModelProto::decode(bytes.as_slice())
        .ok()
        .and_then(|m| m.graph)
        .and_then(|g| g.node.first().map(|n| n.op_type().to_string()))
        .unwrap_or_else(|| "?".into())
}

fn read_expected() -> BTreeMap<String, bool> {
    std::fs::read_to_string(EXPECTED)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next().unwrap_or_default().to_string();
            (name, parts.next() == Some("folded"))
        })
        .collect()
}

#[test]
fn onnx_node_suite() {
    let Some(root) = node_dir() else {
        assert!(
            std::env::var("RLX_REQUIRE_MODEL").is_err(),
            "the ONNX node suite is missing: run tools/fetch_onnx_tests.sh"
        );
        eprintln!("skipped: ONNX node suite not found (tools/fetch_onnx_tests.sh)");
        return;
    };
    // Failing tests print their error; the default hook would print every panic twice.
    std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    let filter = std::env::var("RLX_ONNX_NODE_FILTER").ok();
    let mut tests: Vec<String> = std::fs::read_dir(&root)
        .expect("node dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| filter.as_ref().is_none_or(|f| n.contains(f.as_str())))
        .collect();
    tests.sort();
    let expected = read_expected();
    let verbose = std::env::var("RLX_ONNX_VERBOSE").is_ok();
    let mut per_op: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    let (mut passed, mut folded, mut failed) = (Vec::new(), Vec::new(), 0usize);
    let mut specialized = Vec::new();
    let mut regressions = Vec::new();
    let mut panics = Vec::new();
    for name in &tests {
        let dir = root.join(name);
        let (outcome, why) = run_one(&dir);
        let op = op_of(&dir, name);
        let row = per_op.entry(op).or_default();
        match outcome {
            Outcome::Pass | Outcome::PassSpecialized => {
                row[0] += 1;
                passed.push(name.clone());
                if outcome == Outcome::PassSpecialized {
                    specialized.push(name.clone());
                }
            }
            Outcome::PassFolded => {
                row[1] += 1;
                folded.push(name.clone());
            }
            Outcome::Fail | Outcome::Panic => {
                row[2] += 1;
                failed += 1;
                if verbose {
                    eprintln!("FAIL {name}: {why}");
                }
            }
        }
        if outcome == Outcome::Panic {
            panics.push(name.clone());
        }
        match (expected.get(name), outcome) {
            (Some(false), Outcome::Pass | Outcome::PassSpecialized)
            | (Some(true), Outcome::Pass | Outcome::PassSpecialized | Outcome::PassFolded)
            | (None, _) => {}
            _ => regressions.push(format!("{name}: {why}")),
        }
    }
    println!("{:<36} {:>6} {:>6} {:>6}", "op", "pass", "folded", "fail");
    for (op, [p, f, x]) in &per_op {
        println!("{op:<36} {p:>6} {f:>6} {x:>6}");
    }
    println!(
        "{} passed ({} strictly, {} only with integer inputs folded to constants), {failed} failed",
        passed.len() + folded.len(),
        passed.len(),
        folded.len()
    );
    println!(
        "of the strict passes, {} compile per value of a small input that reaches a compile-time operand: {}",
        specialized.len(),
        specialized.join(" ")
    );
    println!("only with folding: {}", folded.join(" "));
    if std::env::var("RLX_ONNX_UPDATE_EXPECTED").is_ok() && filter.is_none() {
        let mut list: BTreeMap<String, bool> = expected.clone();
        for n in &passed {
            list.insert(n.clone(), false);
        }
        for n in &folded {
            list.entry(n.clone()).or_insert(true);
        }
        let body: String =
            list.iter().map(|(n, f)| if *f { format!("{n} folded\n") } else { format!("{n}\n") }).collect();
        std::fs::write(
            EXPECTED,
            format!("# Node tests that must pass (`folded`: with integer inputs frozen). Only grows.\n{body}"),
        )
        .expect("write expected list");
    }
    let names: BTreeSet<&str> = tests.iter().map(String::as_str).collect();
    let missing: Vec<&String> =
        if filter.is_none() { expected.keys().filter(|n| !names.contains(n.as_str())).collect() } else { vec![] };
    assert!(panics.is_empty(), "{} tests panicked: {panics:?}", panics.len());
    assert!(missing.is_empty(), "listed tests missing from the suite: {missing:?}");
    assert!(regressions.is_empty(), "{} expected passes failed:\n{}", regressions.len(), regressions.join("\n"));
}
