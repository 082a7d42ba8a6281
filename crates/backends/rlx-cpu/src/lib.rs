//! RLX's CPU backend.
//!
//! [`CpuProgram::compile`] turns a verified [`rlx_ir::Graph`] into steps: one kernel call
//! per node with its plan resolved. [`CpuProgram::run`] walks them.
//!
//! Architecture invariant: this crate depends on `rlx-ir` only. It does not know the
//! runtime's `Session` or any other backend; the runtime adapts it to its backend trait.

pub mod arch;
pub mod arena;
pub mod bench;
pub mod blas;
pub mod buffer;
pub mod features;
pub mod kernels;
pub mod param;
pub mod profile;
mod program;
pub mod threads;
pub mod vmath;

pub use param::{PageRelease, ParamBuffer, SharedBytes};
pub use program::{CpuProgram, Leaf};

/// Which code path each kernel family takes on this host, for `rlx info`.
pub fn kernel_arms() -> Vec<(&'static str, String)> {
    let arm = features::Arm::best();
    let f = features::features();
    let gemm = if f.avx512f {
        "gemm crate, AVX-512 micro-kernels (x86-v4)"
    } else if f.has_avx2_fma() {
        "gemm crate, AVX2+FMA micro-kernels"
    } else {
        "gemm crate, portable micro-kernels"
    };
    vec![
        ("vmath (f32 unary functions)", arm.name().to_string()),
        ("row kernels (softmax, norms, swiglu, bias_gelu)", arm.name().to_string()),
        ("gemm f32/f64", gemm.to_string()),
        ("gemm f32 against a param weight (packed once)", kernels::packed_gemm::arm_reason()),
        ("gemm bf16 (16+ rows)", kernels::half_gemm::arm_reason(rlx_ir::DType::BF16).to_string()),
        ("gemm f16", kernels::half_gemm::arm_reason(rlx_ir::DType::F16).to_string()),
        ("quantized matmul, 8-bit activation dots", kernels::quant_matmul::q8_arm_name().to_string()),
        ("quantized matmul, 16-bit activations", kernels::quant_matmul::q16_arm_name().to_string()),
        ("quantized matmul, f32 activations", format!("{} (decode + gemm crate)", arm.name())),
        ("integer matmul, f64 non-gemm ops", "portable loops".to_string()),
        (
            "openblas (bench anchor only)",
            if blas::AVAILABLE { "linked" } else { "not found at build time" }.to_string(),
        ),
        ("threads (RLX_THREADS)", threads::default_threads().to_string()),
    ]
}
