//! Optional OpenBLAS, used as the benchmark anchor and as an outside oracle in tests.
//!
//! Probed on every Linux target, x86-64 included, and linked only when found: a missing
//! library is never a link error. `RLX_NO_OPENBLAS=1` skips the probe (for artifacts that
//! must not depend on libopenblas.so at run time). Found means: a libopenblas in a usual
//! library directory (or `OPENBLAS_LIB_DIR`), or the C compiler resolving `-lopenblas`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rlx_openblas)");
    println!("cargo::rerun-if-env-changed=RLX_NO_OPENBLAS");
    println!("cargo::rerun-if-env-changed=OPENBLAS_LIB_DIR");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" || std::env::var_os("RLX_NO_OPENBLAS").is_some_and(|v| v != "0") {
        return;
    }
    if let Some(dir) = find_library_dir().or_else(compiler_resolves) {
        if !dir.as_os_str().is_empty() {
            println!("cargo::rustc-link-search=native={}", dir.display());
        }
        println!("cargo::rustc-link-lib=dylib=openblas");
        println!("cargo::rustc-cfg=rlx_openblas");
    }
}

fn find_library_dir() -> Option<PathBuf> {
    let triple_dir = |arch: &str| format!("/usr/lib/{arch}-linux-gnu");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::var_os("OPENBLAS_LIB_DIR").map(PathBuf::from).into_iter().collect();
    dirs.extend(
        [
            triple_dir(&arch),
            "/usr/lib64".into(),
            "/usr/lib".into(),
            "/usr/local/lib".into(),
            "/opt/OpenBLAS/lib".into(),
        ]
        .into_iter()
        .map(PathBuf::from),
    );
    dirs.into_iter().find(|d| d.join("libopenblas.so").exists() || d.join("libopenblas.a").exists())
}

/// Asks the C compiler whether `-lopenblas` links (covers distro-specific paths).
fn compiler_resolves() -> Option<PathBuf> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    let src = out.join("probe_openblas.c");
    std::fs::write(&src, "void cblas_sgemm(void); int main(void) { cblas_sgemm(); return 0; }\n").ok()?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(cc)
        .arg(&src)
        .arg("-o")
        .arg(out.join("probe_openblas"))
        .arg("-lopenblas")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| Path::new("").to_path_buf())
}
