//! Recurrent layers through the IR's scan: LSTM, GRU.

use super::OpDef;

pub const OPS: &[OpDef] = &[];
