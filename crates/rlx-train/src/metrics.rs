//! A run's metrics as JSON lines: one object per step (`"kind": "step"`: step, epoch,
//! loss, lr, examples/s, and the gradient exchange's bytes and seconds when
//! data-parallel) and one per epoch (`"kind": "epoch"`: train loss, held-out loss and
//! accuracy). Any JSON-lines reader (pandas' `read_json(lines=True)`, `jq`) takes it.

use crate::run::{Epoch, StepReport};
use rlx_ir::{Error, Result};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct MetricsLog {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl MetricsLog {
    /// Creates (or, when `append`, continues) the file at `path`.
    pub fn create(path: &Path, append: bool) -> Result<MetricsLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        Ok(MetricsLog { path: path.to_path_buf(), file: std::io::BufWriter::new(file) })
    }

    fn line(&mut self, value: serde_json::Value) -> Result<()> {
        writeln!(self.file, "{value}").map_err(|e| Error::io(format!("{}: {e}", self.path.display())))
    }

    pub fn step(&mut self, s: &StepReport) -> Result<()> {
        let mut line = json!({
            "kind": "step",
            "step": s.step,
            "epoch": s.epoch + 1,
            "loss": s.loss,
            "lr": s.lr,
            "examples_per_s": s.examples as f64 / s.seconds.max(1e-12),
        });
        if let Some(r) = &s.reduce {
            line["allreduce_bytes"] = r.bytes.into();
            line["allreduce_s"] = r.seconds.into();
        }
        self.line(line)
    }

    /// An epoch that ended at global step `step`.
    pub fn epoch(&mut self, e: &Epoch, step: usize) -> Result<()> {
        self.line(json!({
            "kind": "epoch",
            "step": step,
            "epoch": e.epoch + 1,
            "train_loss": e.train_loss(),
            "held_out_loss": e.held_out_loss,
            "held_out_accuracy": e.held_out_accuracy,
        }))?;
        self.file.flush().map_err(|e| Error::io(format!("{}: {e}", self.path.display())))
    }
}
