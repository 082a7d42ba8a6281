//! CPU feature detection, once per process. Every `#[target_feature]` function in RLX is
//! reached only through a check of these flags (the ISA gate, `cargo xtask check-isa`,
//! verifies no above-baseline code escapes that rule).

use std::sync::OnceLock;

/// Instruction-set extensions RLX's kernels can use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub avx: bool,
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub bmi2: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512dq: bool,
    pub avx512vnni: bool,
    pub avx512bf16: bool,
    pub avx512fp16: bool,
}

impl Features {
    /// AVX2 + FMA (x86-64-v3): the 8-lane arms.
    pub fn has_avx2_fma(&self) -> bool {
        self.avx2 && self.fma
    }

    /// AVX-512 F/BW/VL/DQ (x86-64-v4): the 16-lane arms.
    pub fn has_avx512(&self) -> bool {
        self.avx512f && self.avx512bw && self.avx512vl && self.avx512dq && self.has_avx2_fma()
    }

    /// The features as `name: yes/no` pairs, for `rlx info`.
    pub fn list(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("avx", self.avx),
            ("avx2", self.avx2),
            ("fma", self.fma),
            ("f16c", self.f16c),
            ("bmi2", self.bmi2),
            ("avx512f", self.avx512f),
            ("avx512bw", self.avx512bw),
            ("avx512vl", self.avx512vl),
            ("avx512dq", self.avx512dq),
            ("avx512vnni", self.avx512vnni),
            ("avx512bf16", self.avx512bf16),
            ("avx512fp16", self.avx512fp16),
        ]
    }
}

/// The host's features, detected on first use and cached. `RLX_ISA=portable` (or `avx2`)
/// caps what the kernels may use, so every arm can be exercised on one machine.
pub fn features() -> &'static Features {
    static CACHE: OnceLock<Features> = OnceLock::new();
    CACHE.get_or_init(|| cap(detect(), std::env::var("RLX_ISA").ok().as_deref()))
}

fn cap(f: Features, limit: Option<&str>) -> Features {
    match limit {
        Some("portable") | Some("sse2") => Features::default(),
        Some("avx2") => Features {
            avx512f: false,
            avx512bw: false,
            avx512vl: false,
            avx512dq: false,
            avx512vnni: false,
            avx512bf16: false,
            avx512fp16: false,
            ..f
        },
        _ => f,
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Features {
    use std::arch::is_x86_feature_detected as has;
    Features {
        avx: has!("avx"),
        avx2: has!("avx2"),
        fma: has!("fma"),
        f16c: has!("f16c"),
        bmi2: has!("bmi2"),
        avx512f: has!("avx512f"),
        avx512bw: has!("avx512bw"),
        avx512vl: has!("avx512vl"),
        avx512dq: has!("avx512dq"),
        avx512vnni: has!("avx512vnni"),
        avx512bf16: has!("avx512bf16"),
        avx512fp16: has!("avx512fp16"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Features {
    Features::default()
}

/// Which code path a kernel family takes on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arm {
    /// Plain Rust, auto-vectorized for the target's baseline (SSE2 on x86-64, NEON on aarch64).
    Portable,
    /// The same code compiled for AVX2 + FMA, 8 lanes.
    Avx2,
    /// The same code compiled for AVX-512, 16 lanes.
    Avx512,
}

impl Arm {
    /// The widest arm this host runs.
    pub fn best() -> Arm {
        let f = features();
        if f.has_avx512() {
            Arm::Avx512
        } else if f.has_avx2_fma() {
            Arm::Avx2
        } else {
            Arm::Portable
        }
    }

    /// Every arm this host can run, narrowest first (tests run them all).
    pub fn available() -> Vec<Arm> {
        let best = Arm::best();
        [Arm::Portable, Arm::Avx2, Arm::Avx512].into_iter().filter(|&a| a <= best).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Arm::Portable => "portable",
            Arm::Avx2 => "avx2+fma",
            Arm::Avx512 => "avx512",
        }
    }
}

impl PartialOrd for Arm {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Arm {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self as u8).cmp(&(*other as u8))
    }
}
