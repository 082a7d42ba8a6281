#![no_main]
//! See `rlx_fuzz::checks::gguf`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rlx_fuzz::checks::gguf(data));
