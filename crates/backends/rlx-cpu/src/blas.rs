//! OpenBLAS, when the build found it (see build.rs): the benchmark anchor and an outside
//! oracle for the GEMM tests. RLX's own GEMM never depends on it.

/// Whether this build linked OpenBLAS.
pub const AVAILABLE: bool = cfg!(rlx_openblas);

#[cfg(rlx_openblas)]
mod ffi {
    unsafe extern "C" {
        #[allow(clippy::too_many_arguments)]
        pub fn cblas_sgemm(
            layout: i32,
            trans_a: i32,
            trans_b: i32,
            m: i32,
            n: i32,
            k: i32,
            alpha: f32,
            a: *const f32,
            lda: i32,
            b: *const f32,
            ldb: i32,
            beta: f32,
            c: *mut f32,
            ldc: i32,
        );
        pub fn openblas_set_num_threads(n: i32);
        pub fn openblas_get_corename() -> *const std::ffi::c_char;
    }
}

/// The kernel family OpenBLAS picked for this CPU (its `openblas_get_corename`), or None
/// without OpenBLAS. A library older than the CPU falls back to generic kernels: Debian's
/// 0.3.21 named an Intel Xeon of CPUID model 207 "Prescott" and ran 1024^3 at 19-33
/// GFLOP/s on one thread, 151-156 with `OPENBLAS_CORETYPE=SKYLAKEX` (or COOPERLAKE).
#[cfg(rlx_openblas)]
pub fn core_name() -> Option<String> {
    // SAFETY: OpenBLAS returns a pointer to a static NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(ffi::openblas_get_corename()) };
    Some(name.to_string_lossy().into_owned())
}

/// Without OpenBLAS: None.
#[cfg(not(rlx_openblas))]
pub fn core_name() -> Option<String> {
    None
}

/// `c = a b` (row-major, `a [m, k]`, `b [k, n]`) with OpenBLAS on `threads` of its own
/// threads; `false` when this build has no OpenBLAS or a size does not fit its `i32` API.
pub fn sgemm(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32], threads: usize) -> bool {
    let fits = [m, k, n].iter().all(|&d| i32::try_from(d.max(1)).is_ok());
    if !AVAILABLE || !fits || a.len() != m * k || b.len() != k * n || c.len() != m * n {
        return false;
    }
    #[cfg(rlx_openblas)]
    // SAFETY: the slices hold exactly m*k, k*n and m*n elements; leading dimensions are
    // the row lengths (at least 1, as BLAS requires).
    unsafe {
        ffi::openblas_set_num_threads(threads.max(1) as i32);
        const ROW_MAJOR: i32 = 101;
        const NO_TRANS: i32 = 111;
        let (m, k, n) = (m as i32, k as i32, n as i32);
        ffi::cblas_sgemm(
            ROW_MAJOR,
            NO_TRANS,
            NO_TRANS,
            m,
            n,
            k,
            1.0,
            a.as_ptr(),
            k.max(1),
            b.as_ptr(),
            n.max(1),
            0.0,
            c.as_mut_ptr(),
            n.max(1),
        );
    }
    let _ = threads;
    true
}
