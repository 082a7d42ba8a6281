//! `rlx quantize`: a GGUF model re-encoded at another type, with llama.cpp's rules for
//! which tensors keep more precision, so the file loads in llama.cpp and in RLX and is
//! the file `llama-quantize` would write up to the encoders' rounding choices:
//! - 1-D tensors (norms), tensors whose name does not end in `weight` and `*_norm.weight`
//!   keep their type and bytes;
//! - the output head (`output.weight`, or `token_embd.weight` when the embedding is tied)
//!   is Q6_K, or Q8_0 when the type is Q8_0 or the rows do not split into its blocks;
//! - `q4_k` and `q5_k` are llama.cpp's Q4_K_M and Q5_K_M: `attn_v` and `ffn_down` of the
//!   layers `use_more_bits` picks (the first and last eighth, every third between) are Q6_K;
//! - `q3_k` is Q3_K_M: `attn_v` Q5_K in the first two layers and Q4_K after, `ffn_down`
//!   Q5_K in the first sixteenth of the layers and Q4_K after, `attn_output` Q4_K;
//! - `q2_k`: `attn_v` Q4_K when 4 or more query heads share a KV head and Q3_K otherwise,
//!   `ffn_down` and `attn_output` Q3_K;
//! - a row length that does not split into a type's blocks falls back as llama.cpp's does
//!   (Q2_K / Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16).
//!
//! Sources may be F32, F16, BF16 or already quantized (decoded to f32 first: quality is
//! then bounded by the source).

use rlx_gguf::{Gguf, GgufStream, TensorHeader, TensorInfo, Value};
use rlx_ir::quant::QuantScheme;
use rlx_ir::{Error, Result};
use std::io::Write;

/// A target type of `rlx quantize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    /// llama.cpp's Q2_K.
    Q2K,
    /// llama.cpp's Q3_K_M.
    Q3K,
    /// llama.cpp's Q4_K_M.
    Q4K,
    /// llama.cpp's Q5_K_M.
    Q5K,
    Q6K,
}

impl QuantType {
    pub fn parse(name: &str) -> Result<QuantType> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "q4_0" => QuantType::Q4_0,
            "q4_1" => QuantType::Q4_1,
            "q5_0" => QuantType::Q5_0,
            "q5_1" => QuantType::Q5_1,
            "q8_0" => QuantType::Q8_0,
            "q2_k" => QuantType::Q2K,
            "q3_k" | "q3_k_m" => QuantType::Q3K,
            "q4_k" | "q4_k_m" => QuantType::Q4K,
            "q5_k" | "q5_k_m" => QuantType::Q5K,
            "q6_k" => QuantType::Q6K,
            _ => {
                return Err(Error::input(format!(
                    "quantization type '{}': implemented are q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k (= q3_k_m), \
                     q4_k (= q4_k_m), q5_k (= q5_k_m), q6_k",
                    name.escape_debug()
                )));
            }
        })
    }

    /// The type most tensors get.
    fn default_scheme(self) -> QuantScheme {
        match self {
            QuantType::Q4_0 => QuantScheme::Q4_0,
            QuantType::Q4_1 => QuantScheme::Q4_1,
            QuantType::Q5_0 => QuantScheme::Q5_0,
            QuantType::Q5_1 => QuantScheme::Q5_1,
            QuantType::Q8_0 => QuantScheme::Q8_0,
            QuantType::Q2K => QuantScheme::Q2K,
            QuantType::Q3K => QuantScheme::Q3K,
            QuantType::Q4K => QuantScheme::Q4K,
            QuantType::Q5K => QuantScheme::Q5K,
            QuantType::Q6K => QuantScheme::Q6K,
        }
    }

    /// llama.cpp's `general.file_type` (its `llama_ftype`).
    fn file_type(self) -> u32 {
        match self {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q8_0 => 7,
            QuantType::Q5_0 => 8,
            QuantType::Q5_1 => 9,
            QuantType::Q2K => 10,
            QuantType::Q3K => 12,
            QuantType::Q4K => 15,
            QuantType::Q5K => 17,
            QuantType::Q6K => 18,
        }
    }
}

/// llama.cpp's choice of layers that get more bits in the `_M` types: the first and last
/// eighth, and every third layer between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// `scheme`, or what llama.cpp falls back to when rows of `cols` do not split into its
/// blocks.
fn fit(scheme: QuantScheme, cols: u64) -> QuantScheme {
    let fits = |s: QuantScheme| cols.is_multiple_of(s.block_size() as u64);
    if fits(scheme) {
        return scheme;
    }
    let fallback = match scheme {
        QuantScheme::Q2K | QuantScheme::Q3K => QuantScheme::Q4_0,
        QuantScheme::Q4K => QuantScheme::Q5_0,
        QuantScheme::Q5K => QuantScheme::Q5_1,
        QuantScheme::Q6K => QuantScheme::Q8_0,
        _ => QuantScheme::F16,
    };
    if fits(fallback) { fallback } else { QuantScheme::F16 }
}

/// The layer of a `blk.N.` tensor.
fn layer(name: &str) -> Option<usize> {
    name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|l| l.parse().ok())
}

/// What [`choose`] reads of the model: whether the head is the embedding, the layer
/// count, the number of `attn_v` tensors (llama.cpp counts them in layer order, so a
/// tensor's index among them is its layer) and the query heads per KV head.
#[derive(Clone, Copy)]
struct Shape {
    tied: bool,
    n_layer: usize,
    n_wv: usize,
    n_gqa: usize,
}

/// The type of tensor `t` in a file quantized to `to` (`None`: kept as it is), as
/// llama.cpp's `llama_tensor_get_type` picks it for these types.
fn choose(t: &TensorInfo, to: QuantType, shape: &Shape) -> Option<QuantScheme> {
    let name = t.name.as_str();
    if t.dims.len() < 2 || !name.ends_with("weight") || name.contains("_norm.weight") {
        return None;
    }
    let cols = t.dims[0];
    let base = to.default_scheme();
    let Shape { tied, n_layer, n_wv, n_gqa } = *shape;
    let more_bits = |n: usize| layer(name).is_some_and(|l| use_more_bits(l, n));
    let scheme = if name == "output.weight" || (tied && name == "token_embd.weight") {
        if !cols.is_multiple_of(base.block_size() as u64) || to == QuantType::Q8_0 {
            QuantScheme::Q8_0
        } else {
            QuantScheme::Q6K
        }
    } else if name.contains("attn_v.weight") {
        match to {
            QuantType::Q2K if n_gqa >= 4 => QuantScheme::Q4K,
            QuantType::Q2K => QuantScheme::Q3K,
            QuantType::Q3K if layer(name).is_some_and(|l| l < 2) => QuantScheme::Q5K,
            QuantType::Q3K => QuantScheme::Q4K,
            QuantType::Q4K | QuantType::Q5K if more_bits(n_wv) => QuantScheme::Q6K,
            _ => base,
        }
    } else if name.contains("ffn_down") {
        match to {
            QuantType::Q2K => QuantScheme::Q3K,
            QuantType::Q3K if layer(name).is_some_and(|l| l < n_layer / 16) => QuantScheme::Q5K,
            QuantType::Q3K => QuantScheme::Q4K,
            QuantType::Q4K | QuantType::Q5K if more_bits(n_layer) => QuantScheme::Q6K,
            _ => base,
        }
    } else if name.contains("attn_output.weight") {
        match to {
            QuantType::Q2K => QuantScheme::Q3K,
            QuantType::Q3K => QuantScheme::Q4K,
            _ => base,
        }
    } else {
        base
    };
    Some(fit(scheme, cols))
}

/// What [`quantize`] did.
#[derive(Clone, Debug, Default)]
pub struct QuantizeReport {
    /// Bytes of tensor data before and after.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Tensors per output type (by name), and how many were kept as they were.
    pub by_type: Vec<(&'static str, usize)>,
    pub kept: usize,
}

/// Values re-encoded per piece: a tensor is converted a few rows at a time, so
/// quantizing needs memory for one piece, not for the model (Gemma 3's 262144-row
/// embedding alone is 640 MiB as f32).
const PIECE_VALUES: usize = 1 << 20;

/// `gguf` with its weights re-encoded as `to`, written to `out` front to back;
/// `on_tensor(i, n, name)` before each tensor.
pub fn quantize<W: Write>(
    gguf: &Gguf,
    to: QuantType,
    out: W,
    mut on_tensor: impl FnMut(usize, usize, &str),
) -> Result<(W, QuantizeReport)> {
    let arch = gguf.get("general.architecture").and_then(Value::as_str).unwrap_or("llama").to_string();
    let n_layer = gguf.get(&format!("{arch}.block_count")).and_then(Value::as_u64).ok_or_else(|| {
        Error::parse(format!("gguf: missing '{arch}.block_count' (needed to pick layers for more bits)"))
    })? as usize;
    let head_count = |key: &str| gguf.get(&format!("{arch}.attention.{key}")).and_then(Value::as_u64);
    let n_gqa = match (head_count("head_count"), head_count("head_count_kv")) {
        (Some(q), Some(kv)) if kv > 0 => (q / kv) as usize,
        _ => 1,
    };
    let tied = gguf.tensor("output.weight").is_none();
    let mut metadata: Vec<(String, Value)> = gguf
        .metadata
        .iter()
        .filter(|(k, _)| *k != "general.file_type" && *k != "general.quantization_version")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.push(("general.quantization_version".into(), Value::U32(2)));
    metadata.push(("general.file_type".into(), Value::U32(to.file_type())));
    let n_wv = gguf.tensors.iter().filter(|t| t.name.contains("attn_v.weight")).count();
    let shape = Shape { tied, n_layer, n_wv, n_gqa };
    // Each tensor's new type (None: kept as it is).
    let plan: Vec<Option<QuantScheme>> =
        gguf.tensors.iter().map(|t| choose(t, to, &shape).filter(|&s| s != t.scheme)).collect();
    let headers: Vec<TensorHeader> = gguf
        .tensors
        .iter()
        .zip(&plan)
        .map(|(t, s)| TensorHeader { name: t.name.clone(), dims: t.dims.clone(), scheme: s.unwrap_or(t.scheme) })
        .collect();
    let mut stream = GgufStream::begin(out, &metadata, &headers)?;
    let mut report = QuantizeReport::default();
    let mut values = Vec::new();
    let threads = rlx_runtime::cpu::default_threads();
    for (i, (t, scheme)) in gguf.tensors.iter().zip(&plan).enumerate() {
        on_tensor(i, gguf.tensors.len(), &t.name);
        let data = gguf.tensor_data(t);
        report.bytes_in += data.len() as u64;
        let Some(scheme) = *scheme else {
            stream.write(data)?;
            report.kept += 1;
            report.bytes_out += data.len() as u64;
            continue;
        };
        // Whole rows per piece: every block of both encodings lies inside one row.
        let cols = t.dims[0] as usize;
        let row_bytes = t.scheme.row_bytes(cols).map_err(|e| e.context(&t.name))?;
        let rows_per_piece = (PIECE_VALUES / cols.max(1)).max(1);
        for rows in data.chunks((rows_per_piece * row_bytes).max(1)) {
            values.resize(rows.len() / row_bytes * cols, 0f32);
            rlx_ir::quant::dequantize(t.scheme, rows, &mut values).map_err(|e| e.context(&t.name))?;
            let encoded = encode_rows(scheme, &values, cols, threads).map_err(|e| e.context(&t.name))?;
            report.bytes_out += encoded.len() as u64;
            stream.write(&encoded)?;
        }
        match report.by_type.iter_mut().find(|(n, _)| *n == scheme.name()) {
            Some((_, c)) => *c += 1,
            None => report.by_type.push((scheme.name(), 1)),
        }
    }
    Ok((stream.finish()?, report))
}

/// `values` (whole rows of `cols`) encoded in `scheme`, the rows split across `threads`
/// scoped threads: blocks are encoded independently, so the bytes are one call's. (The
/// fitted K-quant grids made encoding the larger share of a run: Gemma 3 270M's F32 copy
/// to q4_k took 6.9 s on one thread.)
fn encode_rows(scheme: QuantScheme, values: &[f32], cols: usize, threads: usize) -> Result<Vec<u8>> {
    let rows = values.len() / cols.max(1);
    if threads <= 1 || rows < 2 {
        return rlx_ir::quant::quantize(scheme, values);
    }
    let part_rows = rows.div_ceil(threads);
    let parts: Vec<Result<Vec<u8>>> = std::thread::scope(|s| {
        let tasks: Vec<_> = values
            .chunks(part_rows * cols)
            .map(|part| s.spawn(move || rlx_ir::quant::quantize(scheme, part)))
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut out = Vec::with_capacity(scheme.row_bytes(values.len())?);
    for part in parts {
        out.extend_from_slice(&part?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows split across threads (evenly, unevenly, more threads than rows) encode to the
    /// bytes of one call.
    #[test]
    fn rows_split_across_threads_encode_as_one_call() {
        let cols = 512;
        let values: Vec<f32> = (0..7 * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        for scheme in [QuantScheme::Q4K, QuantScheme::Q3K, QuantScheme::Q8_0] {
            let whole = rlx_ir::quant::quantize(scheme, &values).unwrap();
            for threads in [1, 2, 3, 16] {
                assert!(encode_rows(scheme, &values, cols, threads).unwrap() == whole, "{scheme:?}, {threads} threads");
            }
        }
    }
}
