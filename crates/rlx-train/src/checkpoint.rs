//! Checkpoints: a directory holding
//! - `params.safetensors`: the f32 master params by name (loads in the `safetensors`
//!   Python package, PyTorch and JAX tools);
//! - `optimizer.safetensors`: each moment buffer (`moment{k}/{param}`: SGD's velocity,
//!   Adam's m and v, Lion's m);
//! - `meta.json`: the format and its version, every param's dims, the optimizer's rule,
//!   schedule, clipping and step count, and the training loop's own state (its epoch,
//!   RNG, configuration), which the loop reads back on resume.
//!
//! Files are written as `*.part` and renamed, `meta.json` last; both safetensors files
//! carry the step they were written at, which must equal meta.json's, so a save cut off
//! between renames is refused on resume instead of mixing two steps.

use rlx_io::{SafeTensors, load_safetensors, save_safetensors};
use rlx_ir::shape::{fmt_dims, fmt_type};
use rlx_ir::{DType, Error, HostTensor, Result};
use rlx_optim::Optimizer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

pub const FORMAT: &str = "rlx-checkpoint";
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Meta {
    format: String,
    version: u32,
    /// The loss graph's name (informative: the params decide what fits).
    model: String,
    params: Vec<(String, Vec<usize>)>,
    /// Rule, schedule, clipping and step count; the moments are in optimizer.safetensors.
    optimizer: Optimizer,
    /// What the training loop saved alongside.
    run: Value,
}

/// The params (f32 masters with their names and dims) and optimizer of a trainer.
pub(crate) struct State<'a> {
    pub model: &'a str,
    pub names: &'a [String],
    pub dims: &'a [Vec<usize>],
    pub params: &'a [Vec<f32>],
    pub optimizer: &'a Optimizer,
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{}: {e}", path.display()))
}

fn write_renamed(dir: &Path, name: &str, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let part = dir.join(format!("{name}.part"));
    write(&part)?;
    std::fs::rename(&part, dir.join(name)).map_err(|e| io(&part, e))
}

pub(crate) fn save(dir: &Path, s: &State<'_>, run: &Value) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let step = s.optimizer.state.step.to_string();
    let tensors = |values: &[Vec<f32>]| -> Result<Vec<HostTensor>> {
        values.iter().zip(s.dims).map(|(v, d)| HostTensor::from_f32(d, v)).collect()
    };
    let params = tensors(s.params)?;
    write_renamed(dir, "params.safetensors", |p| {
        let named: Vec<(&str, &HostTensor)> = s.names.iter().map(String::as_str).zip(&params).collect();
        save_safetensors(p, &named, &[("format", "rlx"), ("step", &step)])
    })?;
    let mut moment_names = Vec::new();
    let mut moments = Vec::new();
    for (k, buffers) in s.optimizer.state.moments.iter().enumerate() {
        moment_names.extend(s.names.iter().map(|n| format!("moment{k}/{n}")));
        moments.extend(tensors(buffers)?);
    }
    write_renamed(dir, "optimizer.safetensors", |p| {
        let named: Vec<(&str, &HostTensor)> = moment_names.iter().map(String::as_str).zip(&moments).collect();
        save_safetensors(p, &named, &[("format", "rlx"), ("step", &step)])
    })?;
    let mut optimizer = s.optimizer.clone();
    optimizer.state.moments.clear();
    let meta = Meta {
        format: FORMAT.into(),
        version: VERSION,
        model: s.model.into(),
        params: s.names.iter().cloned().zip(s.dims.iter().cloned()).collect(),
        optimizer,
        run: run.clone(),
    };
    let text = serde_json::to_string_pretty(&meta).map_err(|e| Error::internal(format!("checkpoint meta: {e}")))?;
    write_renamed(dir, "meta.json", |p| std::fs::write(p, text).map_err(|e| io(p, e)))
}

/// Reads the checkpoint in `dir` into `params` and `optimizer` (whose params must have
/// the same names and dims); returns the loop's state saved with it.
pub(crate) fn load(
    dir: &Path,
    names: &[String],
    dims: &[Vec<usize>],
    params: &mut [Vec<f32>],
    optimizer: &mut Optimizer,
) -> Result<Value> {
    let meta_path = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta_path).map_err(|e| io(&meta_path, e))?;
    let meta: Meta = serde_json::from_str(&text)
        .map_err(|e| Error::parse(format!("{}: not an RLX checkpoint: {e}", meta_path.display())))?;
    if meta.format != FORMAT || meta.version != VERSION {
        return Err(Error::parse(format!(
            "{}: format '{}' version {}, expected '{FORMAT}' version {VERSION}",
            meta_path.display(),
            meta.format,
            meta.version
        )));
    }
    let here: Vec<(String, Vec<usize>)> = names.iter().cloned().zip(dims.iter().cloned()).collect();
    if meta.params != here {
        return Err(Error::input(format!(
            "{} is a checkpoint of another model ('{}'): {}",
            dir.display(),
            meta.model,
            param_difference(&meta.params, &here)
        )));
    }
    let step = meta.optimizer.state.step.to_string();
    let read = |file: &str| -> Result<SafeTensors> {
        let path = dir.join(file);
        let st = load_safetensors(&path)?;
        let at = st.metadata.iter().find(|(k, _)| k == "step").map(|(_, v)| v.as_str());
        if at != Some(step.as_str()) {
            return Err(Error::parse(format!(
                "{}: written at step {}, meta.json at step {step} (a save was cut off: use an earlier checkpoint)",
                path.display(),
                at.unwrap_or("?")
            )));
        }
        Ok(st)
    };
    let take = |st: &SafeTensors, file: &str, name: &str, d: &[usize]| -> Result<Vec<f32>> {
        let t = st.get(name).ok_or_else(|| Error::parse(format!("{}/{file}: no tensor '{name}'", dir.display())))?;
        f32_values(&dir.join(file), name, t, d)
    };
    let st = read("params.safetensors")?;
    let loaded: Vec<Vec<f32>> =
        names.iter().zip(dims).map(|(n, d)| take(&st, "params.safetensors", n, d)).collect::<Result<_>>()?;
    let st = read("optimizer.safetensors")?;
    let mut moments = Vec::new();
    for k in 0..meta.optimizer.rule.moments() {
        moments.push(
            names
                .iter()
                .zip(dims)
                .map(|(n, d)| take(&st, "optimizer.safetensors", &format!("moment{k}/{n}"), d))
                .collect::<Result<Vec<_>>>()?,
        );
    }
    params.iter_mut().zip(loaded).for_each(|(p, l)| *p = l);
    *optimizer = meta.optimizer;
    optimizer.state.moments = moments;
    Ok(meta.run)
}

/// The values of tensor `name` of the file at `path`, which must be f32 of `dims` (the
/// param it fills).
pub(crate) fn f32_values(path: &Path, name: &str, t: &HostTensor, dims: &[usize]) -> Result<Vec<f32>> {
    if t.dtype() != DType::F32 || t.dims() != dims {
        return Err(Error::input(format!(
            "{}: tensor '{name}' is {}, the param is {}",
            path.display(),
            fmt_type(t.dtype(), t.dims()),
            fmt_type(DType::F32, dims)
        )));
    }
    Ok(t.to_f32_vec())
}

/// The first way `saved` and `here` differ, in words.
fn param_difference(saved: &[(String, Vec<usize>)], here: &[(String, Vec<usize>)]) -> String {
    for (name, d) in here {
        match saved.iter().find(|(n, _)| n == name) {
            None => return format!("it has no param '{name}'"),
            Some((_, s)) if s != d => {
                return format!("param '{name}' is {} there, {} here", fmt_dims(s), fmt_dims(d));
            }
            Some(_) => {}
        }
    }
    match saved.iter().find(|(n, _)| !here.iter().any(|(h, _)| h == n)) {
        Some((name, _)) => format!("it has a param '{name}' this model lacks"),
        None => "its params are in another order".into(),
    }
}
