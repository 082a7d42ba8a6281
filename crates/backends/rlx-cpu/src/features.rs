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
    /// AMX tiles with bf16 dot products, enabled by the OS for this process (Linux grants
    /// tile state on request: `arch_prctl(ARCH_REQ_XCOMP_PERM)`, asked once here).
    pub amx_bf16: bool,
    /// CPUID's vendor is AuthenticAMD: where an instruction's speed differs by vendor
    /// (`vdpbf16ps`: 1.6-2x the FMA rate on Zen 4, half of it on Sapphire Rapids).
    pub amd: bool,
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
            ("amx-bf16", self.amx_bf16),
        ]
    }
}

/// The host's features, detected on first use and cached. `RLX_ISA=portable` (or `avx2`,
/// or `avx512`: everything but AMX) caps what the kernels may use, so every arm can be
/// exercised on one machine.
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
            amx_bf16: false,
            ..f
        },
        Some("avx512") => Features { amx_bf16: false, ..f },
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
        amx_bf16: amx_bf16_granted(),
        amd: vendor_is_amd(),
    }
}

#[cfg(target_arch = "x86_64")]
fn vendor_is_amd() -> bool {
    // CPUID leaf 0 exists on every x86-64 CPU. The vendor string is EBX, EDX, ECX: "Auth" "enti" "cAMD".
    let r = std::arch::x86_64::__cpuid(0);
    [r.ebx, r.edx, r.ecx] == [0x6874_7541, 0x6974_6e65, 0x444d_4163]
}

/// CPUID reports AMX-TILE and AMX-BF16, the OS saves tile state (XCR0 bits 17 and 18),
/// and Linux grants this process the tile data permission.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_bf16_granted() -> bool {
    use std::arch::x86_64::__cpuid_count;
    // CPUID is baseline on x86-64; leaf 7 is read only when leaf 0 says it exists.
    if __cpuid_count(0, 0).eax < 7 {
        return false;
    }
    let (leaf1, leaf7) = (__cpuid_count(1, 0), __cpuid_count(7, 0));
    let (amx_tile, amx_bf16, osxsave) = (leaf7.edx >> 24 & 1 == 1, leaf7.edx >> 22 & 1 == 1, leaf1.ecx >> 27 & 1 == 1);
    if !(amx_tile && amx_bf16 && osxsave) {
        return false;
    }
    let (lo, _hi): (u32, u32);
    // SAFETY: XGETBV is available when CPUID.1:ECX.OSXSAVE is set (checked above).
    unsafe { std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") _hi, options(nomem, nostack)) };
    if lo >> 17 & 3 != 3 {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    const SYS_ARCH_PRCTL: i64 = 158;
    let ret: i64;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) only asks the kernel for a
    // permission; it reads and writes no user memory.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        )
    };
    ret == 0
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn amx_bf16_granted() -> bool {
    false
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
