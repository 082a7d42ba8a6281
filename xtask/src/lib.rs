//! Project automation behind `cargo xtask`.

pub mod fuzz;
pub mod isa;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `objdump -d -C --no-show-raw-insn` of `binary`.
pub fn disassemble(binary: &Path) -> Result<String, String> {
    let out = Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(binary)
        .output()
        .map_err(|e| format!("cannot run objdump ({e}); install binutils"))?;
    if !out.status.success() {
        return Err(format!("objdump {} failed: {}", binary.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs cargo with `args` plus `--message-format=json` and returns the executables it built.
pub fn cargo_executables(args: &[&str]) -> Result<Vec<PathBuf>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .arg("--message-format=json")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let Some(exe) = msg.get("executable").and_then(|e| e.as_str()) {
            exes.push(PathBuf::from(exe));
        }
    }
    Ok(exes)
}
