#![no_main]
//! See `rlx_fuzz::checks::safetensors`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rlx_fuzz::checks::safetensors(data));
