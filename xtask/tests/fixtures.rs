//! The gate has teeth: a deliberately ungated AVX2 function fails it, a `target-cpu=native`
//! build is recognized as such, and a properly named runtime-gated arm passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use xtask::{disassemble, isa};

const FIXTURE: &str = r#"
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
fn NAME(x: &[i32]) -> i32 {
    x.iter().copied().fold(0i32, |a, b| a.wrapping_add(b.wrapping_mul(3)))
}

fn main() {
    let v: Vec<i32> = (0..std::env::args().count() as i32 * 1000).collect();
    let mut total = v.iter().sum::<i32>();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        total = total.wrapping_add(unsafe { NAME(&v) });
    }
    println!("{}", total);
}
"#;

fn build(dir: &Path, name: &str, fn_name: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.rs"));
    std::fs::write(&src, FIXTURE.replace("NAME", fn_name)).unwrap();
    let out = dir.join(name);
    let status = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["-O", "--edition", "2021", "-A", "non_snake_case"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("rustc");
    assert!(status.success(), "fixture {name} did not compile");
    out
}

#[test]
#[cfg(target_arch = "x86_64")]
fn the_gate_fails_ungated_code_and_recognizes_native_builds() {
    let dir = std::env::temp_dir().join(format!("rlx-isa-fixtures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let ungated = isa::scan(&disassemble(&build(&dir, "ungated", "sum_fast", &[])).unwrap());
    assert!(!ungated.passed(), "an AVX2 function not named as a gated arm must fail");
    assert!(ungated.findings.iter().any(|f| f.symbol.contains("sum_fast")), "{:?}", ungated.findings);
    assert!(!ungated.looks_native());

    let gated = isa::scan(&disassemble(&build(&dir, "gated", "sum_avx2", &[])).unwrap());
    assert!(gated.passed(), "a *_avx2 arm reached after the CPUID check passes: {:?}", gated.findings);
    assert!(gated.gated_symbols >= 1);

    let native = isa::scan(&disassemble(&build(&dir, "native", "sum_avx2", &["-C", "target-cpu=x86-64-v3"])).unwrap());
    assert!(!native.passed() && native.looks_native(), "a v3 build smears AVX over std: {:?}", native.findings.len());
    let _ = std::fs::remove_dir_all(&dir);
}
