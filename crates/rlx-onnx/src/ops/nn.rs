//! Convolution and pooling (NCHW; 1-D through the 2-D ops): Conv, ConvTranspose,
//! MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Resize.

use super::OpDef;

pub const OPS: &[OpDef] = &[];
