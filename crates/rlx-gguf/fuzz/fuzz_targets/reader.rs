#![no_main]
//! Any bytes: the reader returns Ok or Err, never panics or reads out of bounds, and
//! every tensor it accepts lies inside the file.

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = rlx_gguf::Gguf::parse(Arc::new(data.to_vec())) {
        for t in &g.tensors {
            assert_eq!(g.tensor_data(t).len(), t.bytes);
        }
    }
});
