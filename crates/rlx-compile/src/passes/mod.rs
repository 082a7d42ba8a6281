//! The IR passes, one file each.

pub mod const_fold;
mod cse;
mod dce;
mod precision;
mod simplify;

pub use const_fold::ConstFold;
pub use cse::Cse;
pub use dce::Dce;
pub use precision::{MixedPrecision, params_stored_as};
pub use simplify::Simplify;
