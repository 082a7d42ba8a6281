//! Multiversioning: a kernel body written once, compiled three times — for the target's
//! baseline (SSE2 on x86-64), for AVX2+FMA and for AVX-512 — and picked by the caller once
//! per kernel call with an [`Arm`].
//!
//! The wider arms run the *same* arithmetic in the same order (Rust never contracts
//! `a * b + c` into an FMA, and bodies keep explicit accumulator lanes), so every arm
//! returns bit-identical results; only the vector width differs. The `#[target_feature]`
//! copies are the nested functions `avx2` and `avx512` of each kernel, reached only when
//! `features()` reports the feature; the ISA gate (`cargo xtask check-isa`) allows
//! above-baseline instructions in exactly those symbols.

pub use crate::features::Arm;

/// Defines `fn $name(arm: Arm, args...) -> R` running `$body` compiled for `arm`.
/// An arm the host lacks falls back to the next narrower one the host has.
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name(arm: $crate::arch::Arm, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
            fn avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }

            let arm = arm.min($crate::arch::Arm::best());
            #[cfg(target_arch = "x86_64")]
            match arm {
                // SAFETY: `arm <= Arm::best()`: features() detected AVX-512 F/BW/VL/DQ + AVX2 + FMA.
                $crate::arch::Arm::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: `arm <= Arm::best()`: features() detected AVX2 and FMA.
                $crate::arch::Arm::Avx2 => unsafe { avx2($($arg),*) },
                $crate::arch::Arm::Portable => body($($arg),*),
            }
            #[cfg(not(target_arch = "x86_64"))]
            { let _ = arm; body($($arg),*) }
        }
    };
}

/// Like [`multiversion!`], for a body generic over `$O: vmath::Ops`: the portable arm
/// runs it with `Exact` (separate multiply and add), the AVX2 and AVX-512 arms with
/// `Fused` (one FMA instruction), so the wide arms may differ from the portable one in
/// the last bits (each is checked against the f64 oracle).
#[macro_export]
macro_rules! multiversion_ops {
    ($(#[$meta:meta])* $vis:vis fn $name:ident<$O:ident>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name(arm: $crate::arch::Arm, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body<$O: $crate::vmath::Ops>($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) $(-> $ret)? { body::<$crate::vmath::Fused>($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
            fn avx512($($arg: $ty),*) $(-> $ret)? { body::<$crate::vmath::Fused>($($arg),*) }

            let arm = arm.min($crate::arch::Arm::best());
            #[cfg(target_arch = "x86_64")]
            match arm {
                // SAFETY: `arm <= Arm::best()`: features() detected AVX-512 F/BW/VL/DQ + AVX2 + FMA.
                $crate::arch::Arm::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: `arm <= Arm::best()`: features() detected AVX2 and FMA.
                $crate::arch::Arm::Avx2 => unsafe { avx2($($arg),*) },
                $crate::arch::Arm::Portable => body::<$crate::vmath::Exact>($($arg),*),
            }
            #[cfg(not(target_arch = "x86_64"))]
            { let _ = arm; body::<$crate::vmath::Exact>($($arg),*) }
        }
    };
}
