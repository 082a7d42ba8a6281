//! Compile options, settable in code or from the environment.

use rlx_ir::{DType, Error, Result};

/// How a graph's float math is carried out. Graph inputs and outputs always keep their
/// declared dtypes whatever the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PrecisionPolicy {
    /// Every op in its declared dtype.
    #[default]
    F32,
    /// Matmuls, convs and elementwise ops on bf16 storage, f32 accumulation.
    AutoMixedBf16,
    /// The same with f16.
    AutoMixedF16,
}

impl PrecisionPolicy {
    /// Parses `f32`, `bf16` / `auto_mixed_bf16`, `f16` / `auto_mixed_f16` (any case).
    pub fn parse(text: &str) -> Result<PrecisionPolicy> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "f32" => Ok(PrecisionPolicy::F32),
            "bf16" | "auto_mixed_bf16" | "automixedbf16" => Ok(PrecisionPolicy::AutoMixedBf16),
            "f16" | "auto_mixed_f16" | "automixedf16" => Ok(PrecisionPolicy::AutoMixedF16),
            other => Err(Error::input(format!("unknown precision policy '{other}' (expected f32, bf16 or f16)"))),
        }
    }

    /// The half format a mixed policy computes in (None for `F32`).
    pub fn half(self) -> Option<DType> {
        match self {
            PrecisionPolicy::F32 => None,
            PrecisionPolicy::AutoMixedBf16 => Some(DType::BF16),
            PrecisionPolicy::AutoMixedF16 => Some(DType::F16),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub precision: PrecisionPolicy,
    /// Fusion passes on (the default) or off.
    pub fusion: bool,
    /// Reuse dead buffers' arena space (the default). Off, every value gets its own bytes:
    /// the reference the planner is tested against.
    pub memory_reuse: bool,
    /// Print what each fusion pass looked at and what it fused or declined (`RLX_FUSION_LOG=1`).
    pub fusion_log: bool,
    /// Worker threads; `None` is `RLX_THREADS`, else every core. Results are
    /// bit-identical for every value.
    pub threads: Option<usize>,
    /// Host bytes a compiled graph may hold (arena + params + outputs of one run); a plan
    /// above it is refused at compile. `None`: `RLX_MEMORY_LIMIT`, else the runtime asks
    /// the machine (available memory, cgroup and address-space limits).
    pub memory_limit: Option<u64>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            precision: PrecisionPolicy::F32,
            fusion: true,
            memory_reuse: true,
            fusion_log: false,
            threads: None,
            memory_limit: None,
        }
    }
}

impl CompileOptions {
    /// Defaults overridden by `RLX_PRECISION` (f32 | bf16 | f16), `RLX_NO_FUSION=1`,
    /// `RLX_NO_REUSE=1` and `RLX_FUSION_LOG=1`.
    pub fn from_env() -> Result<CompileOptions> {
        let mut options = CompileOptions::default();
        if let Ok(p) = std::env::var("RLX_PRECISION") {
            options.precision = PrecisionPolicy::parse(&p).map_err(|e| e.context("RLX_PRECISION"))?;
        }
        let flag = |name: &str| std::env::var(name).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
        options.fusion = !flag("RLX_NO_FUSION");
        options.memory_reuse = !flag("RLX_NO_REUSE");
        options.fusion_log = flag("RLX_FUSION_LOG");
        if let Ok(limit) = std::env::var("RLX_MEMORY_LIMIT") {
            options.memory_limit = Some(parse_bytes(&limit).map_err(|e| e.context("RLX_MEMORY_LIMIT"))?);
        }
        Ok(options)
    }

    pub fn with_memory_reuse(mut self, reuse: bool) -> Self {
        self.memory_reuse = reuse;
        self
    }

    pub fn with_precision(mut self, precision: PrecisionPolicy) -> Self {
        self.precision = precision;
        self
    }

    pub fn with_fusion(mut self, fusion: bool) -> Self {
        self.fusion = fusion;
        self
    }

    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }
}

/// A byte count: digits with an optional K / M / G / T suffix (powers of 1024, an
/// optional `B` or `iB` after it), e.g. `4G`, `512MiB`, `1000000`.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let body = upper.strip_suffix("IB").or_else(|| upper.strip_suffix('B')).unwrap_or(&upper);
    let (digits, shift) = match body.chars().last() {
        Some('K') => (&body[..body.len() - 1], 10),
        Some('M') => (&body[..body.len() - 1], 20),
        Some('G') => (&body[..body.len() - 1], 30),
        Some('T') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| Error::input(format!("'{t}' is not a byte count (e.g. 4G, 512M, 1000000)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse() {
        assert_eq!(PrecisionPolicy::parse("BF16").unwrap(), PrecisionPolicy::AutoMixedBf16);
        assert_eq!(PrecisionPolicy::parse("auto-mixed-f16").unwrap(), PrecisionPolicy::AutoMixedF16);
        assert!(PrecisionPolicy::parse("fp8").unwrap_err().message().contains("fp8"));
    }
}
