//! `cargo xtask check-isa [BINARY...]` — the ISA portability gate.
//! `cargo xtask qemu-test [--cpu MODEL]` — the CPU test suite on an emulated pre-AVX CPU.
//! `cargo xtask fuzz [TARGET|all] [--runs N] [--seconds S]` — the libFuzzer targets of fuzz/.
//! `cargo xtask onnx-proto` — regenerates rlx-onnx's committed prost code from its .proto.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use xtask::{cargo_executables, disassemble, isa};

const USAGE: &str = "usage: cargo xtask check-isa [BINARY...] | cargo xtask qemu-test [--cpu MODEL] | \
                     cargo xtask fuzz [TARGET|all] [--runs N] [--seconds S] [--merge] [--no-build|--build-only] | \
                     cargo xtask onnx-proto";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("check-isa") => check_isa(&args[1..]),
        Some("qemu-test") => qemu_test(&args[1..]),
        Some("fuzz") => xtask::fuzz::run(&args[1..]),
        Some("onnx-proto") => onnx_proto(),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs tools/protogen (outside the workspace, so protox and prost-build never enter the
/// main build), which rewrites crates/rlx-onnx/src/proto/onnx.rs.
fn onnx_proto() -> Result<(), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["run", "--quiet", "--release", "--manifest-path"])
        .arg(root.join("tools/protogen/Cargo.toml"))
        .arg("--")
        .arg(&root)
        .env("CARGO_TARGET_DIR", root.join("target/protogen-build"))
        .status()
        .map_err(|e| format!("running tools/protogen: {e}"))?;
    if !status.success() {
        return Err(format!("tools/protogen failed: {status}"));
    }
    Ok(())
}

/// Scans the given binaries, or builds and scans the release `rlx` and the release test
/// binaries of the workspace.
fn check_isa(paths: &[String]) -> Result<(), String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("check-isa knows the x86-64 baseline only".into());
    }
    let binaries: Vec<PathBuf> = if paths.is_empty() {
        let mut b = cargo_executables(&["build", "--release", "-p", "rlx-cli"])?;
        b.extend(cargo_executables(&["test", "--release", "--no-run", "--workspace", "--exclude", "xtask"])?);
        b.sort();
        b.dedup();
        b
    } else {
        paths.iter().map(PathBuf::from).collect()
    };
    println!("ISA gate: baseline x86-64 (SSE2); gated arms are:");
    for (why, _) in isa::GATED_ARMS {
        println!("  - {why}");
    }
    let mut failed = 0;
    for bin in &binaries {
        let report = isa::scan(&disassemble(bin)?);
        let name = bin.file_name().map_or_else(|| bin.display().to_string(), |n| n.to_string_lossy().into_owned());
        if report.passed() {
            println!("ok    {name}: {} gated arm symbols, no ungated above-baseline code", report.gated_symbols);
            continue;
        }
        failed += 1;
        println!(
            "FAIL  {name}: {} symbols use above-baseline instructions without a runtime gate",
            report.findings.len()
        );
        if report.looks_native() {
            println!(
                "      above-baseline code is smeared over ordinary and std symbols: this artifact was built for a"
            );
            println!(
                "      newer CPU (-C target-cpu=native or target-feature); no runtime dispatch can make it portable"
            );
        }
        for f in report.findings.iter().take(12) {
            println!("      {} ({} x{}, e.g. `{}`)", f.symbol, f.extension, f.count, f.instruction);
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {} binaries fail the ISA gate", binaries.len()));
    }
    println!("ISA gate passed on {} binaries", binaries.len());
    Ok(())
}

/// Runs the CPU crate's and the op/API test binaries under qemu-user with a CPU model
/// that has no AVX, so the portable arms are the ones exercised.
fn qemu_test(args: &[String]) -> Result<(), String> {
    let cpu = match args {
        [] => "Denverton-v2".to_string(), // Goldmont-class Atom: SSE4.2, no AVX
        [flag, model] if flag == "--cpu" => model.clone(),
        _ => return Err(USAGE.into()),
    };
    let qemu = "qemu-x86_64";
    if Command::new(qemu).arg("--version").output().is_err() {
        return Err(format!("{qemu} not found: install Debian's qemu-user"));
    }
    let exes = cargo_executables(&["test", "--no-run", "-p", "rlx-cpu", "-p", "rlx", "-p", "rlx-ir"])?;
    println!("running {} test binaries under `{qemu} -cpu {cpu}`", exes.len());
    let emulated = |exe: &Path| {
        let mut cmd = Command::new(qemu);
        cmd.args(["-cpu", &cpu])
            .arg(exe)
            .env("RLX_EXPECT_ARM", "portable")
            // Tests of what the host kernel does with a request (madvise) skip: qemu-user
            // answers such advice itself.
            .env("RLX_EMULATED", "qemu-user")
            // This run is the CPU suite on an old core; the GPU suite runs natively (a
            // software Vulkan driver JIT-compiling under an emulator adds nothing).
            .env("VK_ICD_FILENAMES", "/nonexistent/rlx-qemu.json")
            .env("VK_DRIVER_FILES", "/nonexistent/rlx-qemu.json")
            .env("RLX_REQUIRE_DEVICE", "0")
            // OpenBLAS (the GEMM oracle) on one thread and a pinned pre-AVX core: its
            // choice and its thread pool then depend on nothing of the host's (a CI run
            // died of SIGILL in the one test binary that links it; not reproduced on AMD).
            .env("OPENBLAS_CORETYPE", "Nehalem")
            .env("OPENBLAS_NUM_THREADS", "1");
        cmd
    };
    for exe in &exes {
        let out = emulated(exe).stdout(std::process::Stdio::inherit()).output().map_err(|e| format!("{qemu}: {e}"))?;
        // TCG lists each CPUID bit of the model it cannot emulate (irrelevant here).
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            if !line.contains("TCG doesn't support requested feature") {
                eprintln!("{line}");
            }
        }
        if !out.status.success() {
            // A signal kills the harness before it names the test: rerun one at a time.
            eprintln!("{}: rerunning one test at a time to name the failing one", exe.display());
            let _ = emulated(exe).args(["--test-threads", "1"]).status();
            return Err(format!("{} failed under {qemu} -cpu {cpu}", exe.display()));
        }
    }
    println!("qemu-test: all test binaries passed on an emulated {cpu}");
    Ok(())
}
