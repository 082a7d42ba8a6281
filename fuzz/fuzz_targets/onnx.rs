#![no_main]
//! See `rlx_fuzz::onnx_check::onnx`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rlx_fuzz::onnx_check::onnx(data));
