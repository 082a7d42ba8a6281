//! `cargo xtask fuzz [TARGET|all] [--runs N] [--seconds S] [--merge] [--no-build|--build-only]`:
//! builds the libFuzzer targets of fuzz/ on the stable toolchain and runs them over
//! their committed corpora.
//!
//! The build is what cargo-fuzz does (src/project.rs, `FuzzProject::cargo`), minus the
//! parts that need a nightly: `RUSTC_BOOTSTRAP=1` lets libfuzzer-sys and the sancov
//! flags through stable rustc; no sanitizer is enabled (ASan needs `-Zsanitizer`, and
//! this code is safe Rust: the bugs sought are panics, overflows and bad bounds, which
//! debug assertions and overflow checks turn into crashes). The explicit `--target`
//! keeps RUSTFLAGS off build scripts and proc macros, and target/fuzz keeps the
//! instrumented artifacts from invalidating the normal build.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const TARGETS: [&str; 6] = ["gguf", "graph_json", "npy", "safetensors", "graph_run", "onnx"];
const TRIPLE: &str = "x86_64-unknown-linux-gnu";
const TARGET_DIR: &str = "target/fuzz";
const USAGE: &str = "usage: cargo xtask fuzz [TARGET|all] [--runs N] [--seconds S] [--merge] [--no-build|--build-only]\n\
    targets: gguf graph_json npy safetensors graph_run onnx";

/// cargo-fuzz's flags (sancov module pass with 8-bit counters, PC table, comparison
/// tracing, stack depth, no branch folding, `--cfg fuzzing`), plus debug assertions and
/// overflow checks so arithmetic overflow is a crash. Not `-Clink-dead-code` (cargo-fuzz's
/// `--strip-dead-code` off): it codegens pulp's (gemm's) unused SIMD casts, whose
/// compile-time size assertions then fail.
const RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    -Cllvm-args=-sanitizer-coverage-stack-depth \
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
    --cfg fuzzing \
    -Cdebug-assertions \
    -Coverflow-checks";

#[derive(Debug)]
struct Options {
    targets: Vec<&'static str>,
    runs: Option<u64>,
    seconds: Option<u64>,
    merge: bool,
    build: bool,
    /// Build and stop: lets a caller hold a build lock for the build alone.
    run: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { targets: TARGETS.to_vec(), runs: None, seconds: None, merge: false, build: true, run: true };
    let mut it = args.iter();
    let number = |flag: &str, v: Option<&String>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        v.parse().map_err(|_| format!("{flag}: '{v}' is not a count\n{USAGE}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => o.runs = Some(number("--runs", it.next())?),
            "--seconds" => o.seconds = Some(number("--seconds", it.next())?),
            "--merge" => o.merge = true,
            "--no-build" => o.build = false,
            "--build-only" => o.run = false,
            "all" => o.targets = TARGETS.to_vec(),
            t => {
                let t =
                    TARGETS.iter().find(|&&x| x == t).ok_or_else(|| format!("unknown fuzz target '{t}'\n{USAGE}"))?;
                o.targets = vec![t];
            }
        }
    }
    if o.runs.is_none() && o.seconds.is_none() && !o.merge {
        // An unbounded run is never what a command line meant by default.
        o.seconds = Some(60);
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let root = repo_root()?;
    if o.build {
        build(&root)?;
    }
    if !o.run {
        return Ok(());
    }
    let mut failed = Vec::new();
    let mut reports = Vec::new();
    for t in &o.targets {
        let report = if o.merge { merge(&root, t)? } else { fuzz(&root, t, &o)? };
        println!("{report}");
        if report.crashes > 0 || !report.ok {
            failed.push(*t);
        }
        reports.push(report);
    }
    if reports.len() > 1 {
        // libFuzzer's output scrolls the per-target lines away: repeat them together.
        println!("summary:");
        reports.iter().for_each(|r| println!("  {r}"));
    }
    if failed.is_empty() { Ok(()) } else { Err(format!("fuzz targets with crashes: {}", failed.join(" "))) }
}

fn repo_root() -> Result<PathBuf, String> {
    // xtask/ is one level below the root.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).ok_or_else(|| "xtask has no parent directory".into())
}

/// Builds every fuzz target (one cargo invocation: the dependencies are shared).
pub fn build(root: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["build", "--release", "--bins", "--manifest-path", "fuzz/Cargo.toml", "--target", TRIPLE])
        .args(["--target-dir", TARGET_DIR])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", RUSTFLAGS)
        // The workspace's own RUSTFLAGS sources must not leak in and change the flags.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building the fuzz targets failed".into());
    }
    Ok(())
}

fn binary(root: &Path, target: &str) -> PathBuf {
    root.join(TARGET_DIR).join(TRIPLE).join("release").join(target)
}

/// Per-target libFuzzer limits: graph documents are larger than the binary formats'
/// interesting prefixes; a mutated graph run gets a longer per-input timeout.
fn limits(target: &str) -> [&'static str; 3] {
    match target {
        "graph_json" => ["-max_len=32768", "-timeout=10", "-rss_limit_mb=2048"],
        "graph_run" => ["-max_len=256", "-timeout=20", "-rss_limit_mb=2048"],
        _ => ["-max_len=8192", "-timeout=10", "-rss_limit_mb=2048"],
    }
}

/// A merged corpus is capped so replaying it stays a matter of seconds and the
/// repository stays small; crash repros live in fuzz/regressions, which is never capped.
const MAX_CORPUS_FILES: usize = 400;
const MAX_CORPUS_BYTES: u64 = 3 << 20;

struct Report {
    target: String,
    execs: u64,
    crashes: usize,
    corpus: usize,
    ok: bool,
    note: String,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "fuzz {}: {} executions, {} crashes, corpus {} files{}",
            self.target, self.execs, self.crashes, self.corpus, self.note
        )
    }
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// One libFuzzer process on one core (no -jobs / -workers: the machine is shared).
fn fuzz(root: &Path, target: &str, o: &Options) -> Result<Report, String> {
    let corpus = root.join("fuzz/corpus").join(target);
    let artifacts = root.join("fuzz/artifacts").join(target);
    for d in [&corpus, &artifacts] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let before = files_in(&artifacts).len();
    let mut cmd = Command::new(binary(root, target));
    cmd.arg(&corpus);
    // Crash repros of fixed bugs: libFuzzer reads every corpus dir and writes only the first.
    let regressions = root.join("fuzz/regressions").join(target);
    if regressions.is_dir() {
        cmd.arg(&regressions);
    }
    cmd.arg(format!("-artifact_prefix={}/", artifacts.display())).args(limits(target)).arg("-print_final_stats=1");
    if let Some(n) = o.runs {
        cmd.arg(format!("-runs={n}"));
    }
    if let Some(s) = o.seconds {
        cmd.arg(format!("-max_total_time={s}"));
    }
    println!("fuzz {target}: {}", describe(&cmd));
    let out = cmd
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {} (build it first): {e}", binary(root, target).display()))?;
    let log = String::from_utf8_lossy(&out.stderr);
    // Show what libFuzzer says apart from its periodic progress and new-function lines.
    for line in log.lines().filter(|l| !is_progress(l) && !l.trim_start().starts_with("NEW_FUNC")) {
        eprintln!("  {line}");
    }
    let new_artifacts: Vec<PathBuf> = files_in(&artifacts).into_iter().skip(before).collect();
    let crashed = !out.status.success();
    let note = if crashed {
        format!(" (libFuzzer exited with {}; artifacts in {})", out.status, artifacts.display())
    } else {
        String::new()
    };
    Ok(Report {
        target: target.into(),
        execs: executions(&log),
        crashes: new_artifacts.len().max(crashed as usize),
        corpus: files_in(&corpus).len(),
        ok: !crashed,
        note,
    })
}

/// Minimizes a target's corpus: `-merge=1` into a fresh directory, which then replaces
/// the committed one (the replay in the test suite reads every file, so it stays small).
fn merge(root: &Path, target: &str) -> Result<Report, String> {
    let corpus = root.join("fuzz/corpus").join(target);
    let fresh = root.join(TARGET_DIR).join(format!("merge-{target}"));
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir_all(&fresh).map_err(|e| format!("{}: {e}", fresh.display()))?;
    let out = Command::new(binary(root, target))
        .arg("-merge=1")
        .args(limits(target))
        .arg(&fresh)
        .arg(&corpus)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", binary(root, target).display()))?;
    if !out.status.success() {
        return Err(format!("merging {target} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let before = files_in(&corpus).len();
    for f in files_in(&corpus) {
        std::fs::remove_file(&f).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    for f in files_in(&fresh) {
        let to = corpus.join(f.file_name().unwrap_or_default());
        std::fs::rename(&f, &to).map_err(|e| format!("{} -> {}: {e}", f.display(), to.display()))?;
    }
    // The replay in the test suite reads every file: past the cap, keep the smallest
    // (libFuzzer's merge took inputs smallest first, so these carry most features).
    let mut kept = files_in(&corpus);
    kept.sort_by_key(|f| std::fs::metadata(f).map_or(u64::MAX, |m| m.len()));
    let mut bytes = 0;
    for (i, f) in kept.iter().enumerate() {
        bytes += std::fs::metadata(f).map_or(0, |m| m.len());
        if i >= MAX_CORPUS_FILES || bytes > MAX_CORPUS_BYTES {
            std::fs::remove_file(f).map_err(|e| format!("{}: {e}", f.display()))?;
        }
    }
    let after = files_in(&corpus).len();
    Ok(Report {
        target: target.into(),
        execs: 0,
        crashes: 0,
        corpus: after,
        ok: true,
        note: format!(" (merged from {before})"),
    })
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// libFuzzer's `#N\tpulse ...` / `#N\tNEW ...` status lines.
fn is_progress(line: &str) -> bool {
    line.starts_with('#') && line[1..].split('\t').next().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
}

/// Executions run: `Done N runs` at a normal end, `stat::number_of_executed_units: N`
/// from -print_final_stats, else the last status line (a crash ends without either).
fn executions(log: &str) -> u64 {
    let stat = log.lines().find_map(|l| l.strip_prefix("stat::number_of_executed_units:")?.trim().parse().ok());
    let done = log.lines().find_map(|l| l.strip_prefix("Done ")?.split(' ').next()?.parse().ok());
    let last = log.lines().rev().filter(|l| is_progress(l)).find_map(|l| l[1..].split('\t').next()?.parse().ok());
    stat.or(done).or(last).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets_and_limits() {
        let o = parse(&["npy".into(), "--runs".into(), "1000".into()]).unwrap();
        assert_eq!((o.targets, o.runs, o.seconds), (vec!["npy"], Some(1000), None));
        assert_eq!(parse(&[]).unwrap().targets, TARGETS.to_vec());
        assert!(parse(&["protobuf".into()]).unwrap_err().contains("unknown fuzz target 'protobuf'"));
        assert!(parse(&["--runs".into(), "x".into()]).unwrap_err().contains("--runs: 'x'"));
    }

    #[test]
    fn counts_executions() {
        let log = "#2\tINITED cov: 10\n#4096\tpulse  cov: 12\nDone 5000 runs in 3 second(s)\n";
        assert_eq!(executions(log), 5000);
        assert_eq!(executions("#2\tINITED\n#77\tNEW cov: 3\n==1== ERROR: libFuzzer: deadly signal\n"), 77);
        assert_eq!(executions("stat::number_of_executed_units: 123\n"), 123);
        assert!(!is_progress("#![no_main]"));
    }
}
