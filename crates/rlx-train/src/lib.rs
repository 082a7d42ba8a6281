//! Training with RLX: the UCI digits data (`data`), networks (`models`: MLP, CNN,
//! character transformer), the loop (`trainer`: a compiled gradient graph and an
//! optimizer), and loss-curve charts (`plot`). `rlx train` and `rlx demo` drive it.
//!
//! Architecture invariant: networks are IR graphs differentiated by rlx-autodiff and run
//! through rlx-runtime; nothing here calls a kernel.

pub mod checkpoint;
pub mod data;
pub mod distributed;
pub mod metrics;
pub mod models;
pub mod plot;
pub mod run;
pub mod trainer;

pub use data::{ArrayData, Digits, Rng, char_windows};
pub use distributed::{Collective, DataParallel, ReduceStats, Solo};
pub use models::{Network, TransformerConfig, accuracy, char_transformer, cnn, mlp};
pub use run::{Epoch, Progress, RunConfig, RunControl, StepReport, train, train_digits};
pub use trainer::{GraphTrainer, Trainer};
