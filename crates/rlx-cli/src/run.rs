//! `rlx run`.

use rlx::ir::shape::fmt_type;
use rlx::prelude::*;
use std::path::Path;

/// Runs a graph JSON (with `--param`s) or an ONNX model (its weights are in the file).
pub fn run(graph: &Path, inputs: &[String], params: &[String], out: Option<&Path>, device: Device) -> Result<()> {
    let named: Vec<(String, HostTensor)> = inputs.iter().map(|s| load_named("--input", s)).collect::<Result<_>>()?;
    let outputs = if crate::onnx::is_onnx(graph) {
        if let Some(p) = params.first() {
            return Err(Error::input(format!("--param {p}: an ONNX model's weights are its initializers")));
        }
        crate::onnx::run(graph, &named, device)?
    } else {
        let g = crate::load_graph(graph)?;
        let mut compiled = Session::new(device)?.compile(&g)?;
        for spec in params {
            let (name, t) = load_named("--param", spec)?;
            compiled.set_param_typed(&name, &t)?;
        }
        let refs: Vec<(&str, &HostTensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        compiled.run_typed(&refs)?
    };
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("{}: {e}", dir.display())))?;
            for (i, t) in outputs.iter().enumerate() {
                let path = dir.join(format!("output_{i}.npy"));
                rlx::io::save_npy(&path, t)?;
                println!("output {i}: {} -> {}", fmt_type(t.dtype(), t.dims()), path.display());
            }
        }
        None => {
            for (i, t) in outputs.iter().enumerate() {
                let more = if t.len() > PREVIEW { ", ..." } else { "" };
                println!("output {i}: {} [{}{more}]", fmt_type(t.dtype(), t.dims()), preview(t)?.join(", "));
            }
        }
    }
    Ok(())
}

/// Values `rlx run` prints per output.
const PREVIEW: usize = 8;

/// The first `PREVIEW` values, each exactly as its dtype holds it (i64 beyond 2^53
/// included); only those are converted, whatever the tensor's size.
fn preview(t: &HostTensor) -> Result<Vec<String>> {
    let k = t.len().min(PREVIEW);
    let head = HostTensor::from_bytes(t.dtype(), &[k], t.bytes()[..k * t.dtype().size_bytes()].to_vec())?;
    Ok(match t.dtype() {
        DType::F64 => head.to_f64_vec().iter().map(|v| v.to_string()).collect(),
        d if d.is_float() => head.to_f32_vec().iter().map(|v| v.to_string()).collect(),
        DType::Bool => head.to_i64_vec().iter().map(|&v| (v != 0).to_string()).collect(),
        _ => head.to_i64_vec().iter().map(|v| v.to_string()).collect(),
    })
}

/// `NAME=FILE.npy` -> (NAME, tensor).
fn load_named(flag: &str, spec: &str) -> Result<(String, HostTensor)> {
    let (name, file) = spec
        .split_once('=')
        .filter(|(n, f)| !n.is_empty() && !f.is_empty())
        .ok_or_else(|| Error::input(format!("{flag} '{spec}' is not NAME=FILE.npy")))?;
    Ok((name.to_string(), rlx::io::load_npy(file).map_err(|e| e.context(format!("{flag} {name}")))?))
}
