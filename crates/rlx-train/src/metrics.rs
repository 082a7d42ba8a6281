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

/// TensorBoard event files (what `tensorboard --logdir DIR` reads): TFRecord framing
/// (length, masked CRC-32C of it, an `Event` protocol buffer, masked CRC-32C of that), a
/// version event first, then one scalar summary event per value. Protocol buffers are
/// written by hand: an Event is `wall_time` (1, double), `step` (2, int64),
/// `file_version` (3, string) or `summary` (5); a Summary holds `value`s (1) of `tag`
/// (1, string) and `simple_value` (2, float).
pub struct TensorBoard {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl TensorBoard {
    /// A new event file in `dir` (created if missing), named as TensorFlow names them.
    pub fn create(dir: &Path) -> Result<TensorBoard> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("{}: {e}", dir.display())))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
        let name = format!("events.out.tfevents.{}.{}.{}", now.as_secs(), host.trim(), std::process::id());
        let path = dir.join(name);
        let file = std::fs::File::create(&path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        let mut tb = TensorBoard { path, file: std::io::BufWriter::new(file) };
        let mut event = Vec::new();
        proto::double(&mut event, 1, now.as_secs_f64());
        proto::bytes(&mut event, 3, b"brain.Event:2");
        tb.record(&event)?;
        Ok(tb)
    }

    /// Scalars `(tag, value)` at `step`.
    pub fn scalars(&mut self, step: usize, values: &[(&str, f64)]) -> Result<()> {
        let mut summary = Vec::new();
        for &(tag, v) in values {
            let mut value = Vec::new();
            proto::bytes(&mut value, 1, tag.as_bytes());
            proto::float(&mut value, 2, v as f32);
            proto::bytes(&mut summary, 1, &value);
        }
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut event = Vec::new();
        proto::double(&mut event, 1, wall.as_secs_f64());
        proto::varint_field(&mut event, 2, step as u64);
        proto::bytes(&mut event, 5, &summary);
        self.record(&event)
    }

    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(format!("{}: {e}", self.path.display())))
    }

    fn record(&mut self, data: &[u8]) -> Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        let mut out = Vec::with_capacity(data.len() + 16);
        out.extend_from_slice(&len);
        out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
        self.file.write_all(&out).map_err(|e| Error::io(format!("{}: {e}", self.path.display())))
    }
}

/// TFRecord's checksum: CRC-32C (Castagnoli), rotated right by 15 bits plus a constant.
fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// CRC-32C, bit-reflected polynomial 0x82F63B78, one table lookup per byte.
pub fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            }
            *slot = c;
        }
        t
    });
    !data.iter().fold(!0u32, |c, &b| table[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8))
}

/// The few protocol-buffer encodings an event needs.
mod proto {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    pub fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
        varint(out, (field as u64) << 3);
        varint(out, v);
    }
    pub fn double(out: &mut Vec<u8>, field: u32, v: f64) {
        varint(out, ((field as u64) << 3) | 1);
        out.extend_from_slice(&v.to_le_bytes());
    }
    pub fn float(out: &mut Vec<u8>, field: u32, v: f32) {
        varint(out, ((field as u64) << 3) | 5);
        out.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
        varint(out, ((field as u64) << 3) | 2);
        varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }
}
