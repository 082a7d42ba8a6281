//! The ISA portability gate: attributes every above-baseline x86-64 instruction in a
//! disassembly to its enclosing symbol and flags every symbol that is not a runtime-gated
//! arm. Baseline is x86-64 (SSE2): AVX, AVX2, FMA, F16C, AVX-512 and BMI are not.

/// An above-baseline instruction found in a symbol that is not a gated arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub symbol: String,
    pub extension: &'static str,
    pub instruction: String,
    pub count: usize,
}

/// The verdict on one binary.
#[derive(Debug, Default)]
pub struct Report {
    /// Symbols with above-baseline code that are recognized gated arms.
    pub gated_symbols: usize,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }

    /// Above-baseline code in the standard library or in many ordinary symbols means the
    /// whole artifact was compiled for a newer CPU (`-C target-cpu=native`): no runtime
    /// dispatch can make that binary portable.
    pub fn looks_native(&self) -> bool {
        let in_std = self.findings.iter().any(|f| {
            ["core::", "alloc::", "std::", "<core::", "<alloc::", "<std::"].iter().any(|p| f.symbol.starts_with(p))
        });
        in_std || self.findings.len() > 20
    }
}

/// Classifies one instruction (AT&T syntax, as objdump prints it).
pub fn extension_of(instruction: &str) -> Option<&'static str> {
    let mnemonic = instruction.split_whitespace().next().unwrap_or("");
    let operands = instruction.get(mnemonic.len()..).unwrap_or("");
    if operands.contains("%zmm") || has_mask_register(operands) {
        return Some("AVX-512");
    }
    // AMX: tile configuration, loads/stores and the tile dot products.
    if mnemonic.ends_with("tilecfg") || mnemonic.starts_with("tile") || mnemonic.starts_with("tdp") {
        return Some("AMX");
    }
    if mnemonic.starts_with("vfmadd") || mnemonic.starts_with("vfmsub") || mnemonic.starts_with("vfnm") {
        return Some("FMA");
    }
    if mnemonic.starts_with("vcvtph2ps") || mnemonic.starts_with("vcvtps2ph") {
        return Some("F16C");
    }
    if operands.contains("%ymm") {
        return Some("AVX/AVX2");
    }
    if mnemonic.starts_with('v') && mnemonic != "verr" && mnemonic != "verw" {
        return Some("AVX");
    }
    // Not `tzcnt`: LLVM emits it as `rep bsf` for baseline code, which pre-BMI CPUs run as
    // `bsf` (same result for a non-zero input); std's memchr and gimli do this.
    const BMI: [&str; 14] = [
        "andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "pdep", "pext", "rorx", "sarx", "shlx", "shrx", "mulx",
        "lzcnt",
    ];
    let base = mnemonic.trim_end_matches(['l', 'q', 'w']);
    if BMI.contains(&mnemonic) || BMI.contains(&base) {
        return Some("BMI");
    }
    None
}

fn has_mask_register(operands: &str) -> bool {
    operands
        .match_indices("%k")
        .any(|(i, _)| operands[i + 2..].chars().next().is_some_and(|c| c.is_ascii_digit() && c <= '7'))
}

/// Why a symbol may hold above-baseline code: it is only reached after a CPUID check.
/// Each rule names the code it admits; keep this list short and justified.
/// (why the code is gated, whether a demangled symbol is such code).
pub type GatedRule = (&'static str, fn(&str) -> bool);

pub const GATED_ARMS: &[GatedRule] = &[
    (
        "rlx multiversion arms (arch::multiversion: nested fns `avx2` / `avx512`) and `*_avx2` / `*_avx512` / `*_f16c` / `*_amx` intrinsics",
        |s| {
            segments(s).any(|seg| {
                matches!(seg, "avx2" | "avx512")
                    || seg.ends_with("_avx2")
                    || seg.ends_with("_avx512")
                    || seg.ends_with("_f16c")
                    || seg.ends_with("_amx")
            })
        },
    ),
    ("gemm crate micro-kernels, dispatched by gemm-common's runtime CPU detection", |s| {
        (s.starts_with("gemm_")
            && s.contains("::microkernel::")
            && (s.contains("::avx512f::") || s.contains("::fma::")))
            || s.starts_with("gemm_common::simd::x86::V3")
            || s.starts_with("gemm_common::simd::x86::V4")
    }),
    ("memchr's AVX2 arms, dispatched by its runtime detection", |s| {
        s.starts_with("memchr::arch::x86_64::") && s.contains("avx2")
    }),
    ("half's F16C conversions, dispatched by is_x86_feature_detected", |s| {
        s.starts_with("half::") && s.ends_with("_f16c")
    }),
    // Reached through `f32::mul_add` in naga (wgpu's shader compiler); libm picks the arm
    // once from CPUID (`select_once!` in libm's arch/x86/fma.rs).
    ("compiler_builtins' libm fma / fmaf FMA and FMA4 arms, dispatched by CPUID", |s| {
        s.starts_with("compiler_builtins::math::libm_math::arch::x86::fma::")
            && (s.ends_with("_with_fma") || s.ends_with("_with_fma4"))
    }),
];

/// Path segments of a demangled symbol, generic arguments and closures aside.
fn segments(symbol: &str) -> impl Iterator<Item = &str> {
    symbol.split("::").map(|seg| seg.split(['<', '>', ' ', '{']).next().unwrap_or(""))
}

pub fn is_gated(symbol: &str) -> bool {
    GATED_ARMS.iter().any(|(_, rule)| rule(symbol))
}

/// Scans `objdump -d -C --no-show-raw-insn` output.
pub fn scan(disassembly: &str) -> Report {
    let mut report = Report::default();
    let mut symbol = String::new();
    let mut first: Option<(&'static str, String)> = None;
    let mut count = 0usize;
    let flush = |symbol: &str, first: &mut Option<(&'static str, String)>, count: &mut usize, report: &mut Report| {
        if let Some((extension, instruction)) = first.take() {
            if is_gated(symbol) {
                report.gated_symbols += 1;
            } else {
                report.findings.push(Finding { symbol: symbol.to_string(), extension, instruction, count: *count });
            }
        }
        *count = 0;
    };
    for line in disassembly.lines() {
        if let Some(name) = symbol_header(line) {
            flush(&symbol, &mut first, &mut count, &mut report);
            symbol = name.to_string();
            continue;
        }
        // Instruction lines: "  401000:\tvmovups %ymm0,(%rax)".
        let Some((_, instruction)) = line.split_once(":\t") else { continue };
        let instruction = instruction.trim();
        if let Some(ext) = extension_of(instruction) {
            count += 1;
            first.get_or_insert((ext, instruction.to_string()));
        }
    }
    flush(&symbol, &mut first, &mut count, &mut report);
    report
}

/// `0000000000401000 <name>:` -> `name`.
fn symbol_header(line: &str) -> Option<&str> {
    let (addr, rest) = line.split_once(" <")?;
    if !addr.chars().all(|c| c.is_ascii_hexdigit()) || addr.is_empty() {
        return None;
    }
    rest.strip_suffix(">:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_instructions() {
        assert_eq!(extension_of("vmovups %ymm0,(%rax)"), Some("AVX/AVX2"));
        assert_eq!(extension_of("vaddps %zmm1,%zmm2,%zmm3"), Some("AVX-512"));
        assert_eq!(extension_of("vaddps %xmm1,%xmm2,%xmm3{%k1}"), Some("AVX-512"));
        assert_eq!(extension_of("vfmadd231ps %xmm1,%xmm2,%xmm3"), Some("FMA"));
        assert_eq!(extension_of("vcvtph2ps %xmm0,%xmm1"), Some("F16C"));
        assert_eq!(extension_of("tdpbf16ps %tmm6,%tmm4,%tmm0"), Some("AMX"));
        assert_eq!(extension_of("tileloadd (%rax,%rcx,1),%tmm4"), Some("AMX"));
        assert_eq!(extension_of("ldtilecfg (%rdi)"), Some("AMX"));
        assert!(is_gated("rlx_cpu::kernels::half_gemm::tiled::block_amx"));
        assert!(!is_gated("rlx_cpu::kernels::half_gemm::tiled::gemm::{{closure}}"));
        assert_eq!(extension_of("shlx %rax,%rbx,%rcx"), Some("BMI"));
        assert_eq!(extension_of("lzcnt %eax,%ecx"), Some("BMI"));
        assert_eq!(extension_of("tzcnt %eax,%ecx"), None);
        assert_eq!(extension_of("addps %xmm1,%xmm0"), None);
        assert_eq!(extension_of("movq %rax,%rbx"), None);
        assert_eq!(extension_of("shl %cl,%rax"), None);
    }

    #[test]
    fn attributes_to_symbols_and_honours_gated_arms() {
        let dis = "\
0000000000001000 <rlx_cpu::kernels::rows::softmax_rows::avx2>:
    1000:\tvmovups %ymm0,(%rax)
0000000000001010 <plain_function>:
    1010:\taddps %xmm1,%xmm0
0000000000001020 <my_crate::sum_ungated>:
    1020:\tvpaddd %ymm1,%ymm2,%ymm3
    1024:\tvpaddd %ymm1,%ymm2,%ymm3
";
        let r = scan(dis);
        assert_eq!(r.gated_symbols, 1);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].symbol, "my_crate::sum_ungated");
        assert_eq!(r.findings[0].count, 2);
        assert!(!r.looks_native());
        let native = scan("0000000000002000 <core::fmt::write>:\n    2000:\tvmovdqu (%rsi),%ymm0\n");
        assert!(native.looks_native());
    }
}
