//! The fuzz targets' check functions (see `checks`), shared with the corpus replay in
//! the normal test suite.

pub mod checks;
pub mod onnx_check;
