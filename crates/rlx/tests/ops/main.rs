//! Every op, every dtype it accepts, against an independent f64 oracle written here:
//! odd sizes, broadcasting, empty dims, NaN and infinities; integer and bool ops exact.

mod common;

mod attention;
mod casts;
mod conv;
mod elementwise;
mod gather;
mod kv_cache;
mod layout;
mod loss;
mod matmul;
mod norm;
mod reduce;
mod rope;
mod softmax;
