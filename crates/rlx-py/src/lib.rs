//! `rlx._rlx`: the native half of the `rlx` Python package (the contract is
//! shared/spec/python.md; `python/rlx/__init__.py` re-exports this module and adds the
//! pure-Python conveniences).
//!
//! Every RLX error becomes `rlx.Error` carrying the Rust error's one-line message; wrong
//! Python types raise `TypeError`. Work that may take long (compiling, running,
//! generating, a training step) runs with the GIL released. A panic in the Rust core is
//! caught at the call and raised as `rlx.Error` ("internal error: ..."), never unwinding
//! into the interpreter.

mod array;
mod compiled;
mod graph;
mod llm;
mod onnx;
mod train;

use pyo3::prelude::*;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

pyo3::create_exception!(
    rlx,
    Error,
    pyo3::exceptions::PyException,
    "An error from RLX: its message names the tensor, node, shape, dtype, field or byte offset at fault."
);

/// `rlx::Error` as `rlx.Error`, with the message on one line.
pub(crate) fn to_py(e: rlx::Error) -> PyErr {
    Error::new_err(e.to_string().replace('\n', " "))
}

/// Runs `f` with the GIL released; an `rlx::Error` becomes `rlx.Error`, a panic becomes
/// `rlx.Error` too (the Rust core does not panic on user input; if it ever does, Python
/// gets an exception it can catch, not an abort).
pub(crate) fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> rlx::Result<T> + Send) -> PyResult<T> {
    py.detach(|| guarded(f))
}

/// [`detached`] without releasing the GIL (for calls too short to be worth it).
pub(crate) fn guarded<T>(f: impl FnOnce() -> rlx::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(to_py),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            Err(Error::new_err(format!("internal error: {what} (please report this)")))
        }
    }
}

/// The state behind a Python object. A panic while it was locked was caught and
/// reported where it happened; the state is still usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A `threads` argument: None (RLX_THREADS or every core) or at least 1.
pub(crate) fn threads_arg(threads: Option<usize>) -> rlx::Result<Option<usize>> {
    if threads == Some(0) {
        return Err(rlx::Error::input("threads must be at least 1"));
    }
    Ok(threads)
}

/// The native module: classes, builders, the error type and the dtype objects.
#[pymodule]
fn _rlx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    array::register(m)?;
    graph::register(m)?;
    compiled::register(m)?;
    llm::register(m)?;
    onnx::register(m)?;
    train::register(m)?;
    Ok(())
}
