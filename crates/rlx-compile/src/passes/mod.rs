//! The IR passes, one file each.

mod const_fold;
mod cse;
mod dce;
mod simplify;

pub use const_fold::ConstFold;
pub use cse::Cse;
pub use dce::Dce;
pub use simplify::Simplify;
