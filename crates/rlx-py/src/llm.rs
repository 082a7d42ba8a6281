//! `rlx.load_gguf` and `rlx.Llama`: GGUF files and LLM generation, over rlx-models'
//! `Llama` and `Completion` (the same code path as `rlx generate`, so greedy text is
//! the CLI's text).

use crate::array::tensor_to_py;
use crate::{detached, lock, threads_arg};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rlx::gguf::{Gguf, Value};
use rlx::models::{Completion, GenerateStats, Llama, LlamaOptions, Sampler, SamplerConfig, StopStrings, TokenId};
use rlx::prelude::*;
use std::sync::{Arc, Mutex};

/// A GGUF file, mapped: its metadata and tensors (dequantized to f32 on request).
#[pyclass(module = "rlx", name = "GgufFile", frozen)]
struct PyGguf {
    gguf: Gguf,
}

fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::U8(x) => x.into_pyobject(py)?.into_any(),
        Value::I8(x) => x.into_pyobject(py)?.into_any(),
        Value::U16(x) => x.into_pyobject(py)?.into_any(),
        Value::I16(x) => x.into_pyobject(py)?.into_any(),
        Value::U32(x) => x.into_pyobject(py)?.into_any(),
        Value::I32(x) => x.into_pyobject(py)?.into_any(),
        Value::U64(x) => x.into_pyobject(py)?.into_any(),
        Value::I64(x) => x.into_pyobject(py)?.into_any(),
        Value::F32(x) => x.into_pyobject(py)?.into_any(),
        Value::F64(x) => x.into_pyobject(py)?.into_any(),
        Value::Bool(x) => x.into_pyobject(py)?.to_owned().into_any(),
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(items) => {
            PyList::new(py, items.iter().map(|i| value_to_py(py, i)).collect::<PyResult<Vec<_>>>()?)?.into_any()
        }
    })
}

#[pymethods]
impl PyGguf {
    /// Every metadata key and its value (arrays as lists).
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.gguf.metadata {
            d.set_item(k, value_to_py(py, v)?)?;
        }
        Ok(d)
    }

    /// Tensor names, in file order.
    #[getter]
    fn tensor_names(&self) -> Vec<String> {
        self.gguf.tensors.iter().map(|t| t.name.clone()).collect()
    }

    /// (name, format, shape) of every tensor (shape row-major, as `tensor` returns it).
    #[getter]
    fn tensor_info(&self) -> Vec<(String, &'static str, Vec<usize>)> {
        self.gguf.tensors.iter().map(|t| (t.name.clone(), t.scheme.name(), t.shape())).collect()
    }

    /// Tensor `name` as an f32 array (quantized formats dequantized as llama.cpp does).
    fn tensor<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let gguf = &self.gguf;
        let t = detached(py, || {
            let info = gguf.tensor(name).ok_or_else(|| rlx::Error::input(format!("gguf: no tensor '{name}'")))?;
            HostTensor::from_f32(&info.shape(), &gguf.dequantize(name)?)
        })?;
        tensor_to_py(py, t)
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.GgufFile(v{}, {} metadata keys, {} tensors)",
            self.gguf.version,
            self.gguf.metadata.len(),
            self.gguf.tensors.len()
        )
    }
}

/// Opens a GGUF file (memory-mapped; tensors are read on request).
#[pyfunction]
fn load_gguf(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PyGguf> {
    detached(py, || Gguf::open(&path)).map(|gguf| PyGguf { gguf })
}

/// The model and a count of the generations started on it: a stream whose generation
/// was superseded by a later call stops with an error instead of reading a cache that
/// now holds another prompt.
struct Model {
    llama: Llama,
    generation: u64,
    last_stats: Option<(GenerateStats, Option<&'static str>)>,
}

type Shared = Arc<Mutex<Model>>;

/// What a generate / stream call asked for.
struct Request {
    prompt: String,
    max_tokens: usize,
    sampler: SamplerConfig,
    chat: bool,
    system: Option<String>,
    stop: Vec<String>,
    special: bool,
}

/// Starts `r` on a fresh cache; returns the completion and its generation number. A
/// request that fails its checks leaves the model (and a stream on it) as it was.
fn begin(model: &mut Model, r: &Request) -> rlx::Result<(Completion, u64)> {
    let prompt = model.llama.encode_request(&r.prompt, r.chat, r.system.as_deref(), r.special)?;
    let sampler = Sampler::new(r.sampler.clone())?;
    StopStrings::new(&r.stop)?;
    model.generation += 1;
    model.llama.reset();
    Ok((Completion::begin(&mut model.llama, &prompt, r.max_tokens, sampler, &r.stop)?, model.generation))
}

fn stats_dict<'py>(py: Python<'py>, s: &GenerateStats, finish: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("prompt_tokens", s.prompt_tokens)?;
    d.set_item("prompt_seconds", s.prompt_seconds)?;
    d.set_item("generated_tokens", s.generated_tokens)?;
    d.set_item("generate_seconds", s.generate_seconds)?;
    d.set_item("compile_seconds", s.compile_seconds)?;
    d.set_item("prompt_tokens_per_second", s.prompt_tokens_per_second())?;
    d.set_item("generate_tokens_per_second", s.generate_tokens_per_second())?;
    d.set_item("finish_reason", finish)?;
    Ok(d)
}

/// A Llama-family LLM from a GGUF file (weights mapped, never copied).
#[pyclass(module = "rlx", name = "Llama", frozen)]
struct PyLlama {
    model: Shared,
    // What never changes, read without the lock (a getter must not wait, GIL held, for
    // a generation on another thread).
    context: usize,
    vocab_size: usize,
    eos: Option<TokenId>,
    bos: Option<TokenId>,
    description: String,
}

#[allow(clippy::too_many_arguments)]
fn request(
    prompt: String,
    max_tokens: usize,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    seed: u64,
    chat: bool,
    stop: Option<Vec<String>>,
    system: Option<String>,
    repeat_penalty: f32,
    special: bool,
) -> Request {
    Request {
        prompt,
        max_tokens,
        sampler: SamplerConfig {
            temperature,
            top_k,
            top_p,
            repetition_penalty: repeat_penalty,
            seed,
            ..Default::default()
        },
        chat,
        system,
        stop: stop.unwrap_or_default(),
        special,
    }
}

#[pymethods]
impl PyLlama {
    /// Loads `path`. `threads`: worker threads (default RLX_THREADS or every core);
    /// `ctx`: KV cache rows (0: the model's context, at most 2048); `f32_decode`: keep
    /// activations f32 instead of quantizing them for integer dot products (16 bits in
    /// prompts, 8 in decode); `device`: "cpu" or "gpu".
    #[new]
    #[pyo3(signature = (path, threads = None, ctx = 0, f32_decode = false, device = "cpu"))]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        threads: Option<usize>,
        ctx: usize,
        f32_decode: bool,
        device: &str,
    ) -> PyResult<PyLlama> {
        let llama = detached(py, || {
            let options = LlamaOptions {
                context: ctx,
                threads: threads_arg(threads)?,
                q8_decode: !f32_decode,
                device: Device::from_name(device)?,
                cache_type: None,
            };
            Llama::load(&path, &options)
        })?;
        let c = &llama.config;
        let description = format!(
            "rlx.Llama({} layers, d_model {}, {} heads, vocab {}, context {})",
            c.n_layer,
            c.d_model,
            c.n_head,
            c.vocab,
            llama.context()
        );
        Ok(PyLlama {
            context: llama.context(),
            vocab_size: llama.tokenizer.vocab_size(),
            eos: llama.tokenizer.eos,
            bos: llama.tokenizer.bos,
            description,
            model: Arc::new(Mutex::new(Model { llama, generation: 0, last_stats: None })),
        })
    }

    /// Token ids of `text`; `add_special` adds the tokens the model puts before a prompt
    /// (BOS when its metadata asks); `special` parses control-token strings in the text.
    #[pyo3(signature = (text, add_special = true, special = false))]
    fn tokenize(&self, py: Python<'_>, text: &str, add_special: bool, special: bool) -> PyResult<Vec<u32>> {
        let model = &self.model;
        detached(py, || {
            let m = lock(model);
            let ids = if add_special {
                m.llama.tokenizer.encode_prompt(text, special)?
            } else {
                m.llama.tokenizer.encode(text, special)?
            };
            Ok(ids)
        })
    }

    /// The text of token ids (invalid UTF-8 becomes U+FFFD).
    fn detokenize(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        let model = &self.model;
        detached(py, || {
            let m = lock(model);
            m.llama.tokenizer.decode(&ids)
        })
    }

    /// The continuation of `prompt` (the prompt itself is not included). Greedy at
    /// temperature 0 (the text `rlx generate --temp 0` prints after the prompt); else
    /// temperature, top-k, top-p and a repetition penalty from a seeded generator. Ends at
    /// end of sequence, `max_tokens`, a full context, or the first `stop` string (not
    /// included). `chat` wraps the prompt in the model's chat template as the user's turn
    /// (after `system`, if given).
    #[pyo3(signature = (prompt, max_tokens = 128, temperature = 0.0, top_k = 40, top_p = 0.95, seed = 0,
                        chat = false, stop = None, system = None, repeat_penalty = 1.0, special = false))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: String,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        chat: bool,
        stop: Option<Vec<String>>,
        system: Option<String>,
        repeat_penalty: f32,
        special: bool,
    ) -> PyResult<String> {
        let r =
            request(prompt, max_tokens, temperature, top_k, top_p, seed, chat, stop, system, repeat_penalty, special);
        let model = &self.model;
        detached(py, || {
            let mut m = lock(model);
            let (mut c, _) = begin(&mut m, &r)?;
            let text = c.rest(&mut m.llama)?;
            m.last_stats = Some((c.generation.stats.clone(), c.finish_reason().map(|f| f.name())));
            Ok(text)
        })
    }

    /// `generate` as an iterator of text pieces, each yielded as soon as it is known not
    /// to be part of a stop string; they join to exactly `generate`'s text. Starting
    /// another generation on this model ends the stream (its next step raises).
    #[pyo3(signature = (prompt, max_tokens = 128, temperature = 0.0, top_k = 40, top_p = 0.95, seed = 0,
                        chat = false, stop = None, system = None, repeat_penalty = 1.0, special = false))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        prompt: String,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        chat: bool,
        stop: Option<Vec<String>>,
        system: Option<String>,
        repeat_penalty: f32,
        special: bool,
    ) -> PyResult<PyStream> {
        let r =
            request(prompt, max_tokens, temperature, top_k, top_p, seed, chat, stop, system, repeat_penalty, special);
        let model = &self.model;
        let (completion, generation) = detached(py, || begin(&mut lock(model), &r))?;
        Ok(PyStream { model: model.clone(), state: Mutex::new(Some(completion)), generation })
    }

    /// Timings of the last finished generation: prompt_tokens, prompt_seconds,
    /// generated_tokens, generate_seconds, compile_seconds, the two rates and
    /// finish_reason ("stop" or "length"); None before the first.
    #[getter]
    fn last_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let model = &self.model;
        let stats = py.detach(|| lock(model).last_stats.clone());
        stats.map(|(s, f)| stats_dict(py, &s, f)).transpose()
    }

    /// KV cache rows: the most tokens prompt and continuation can hold together.
    #[getter]
    fn context(&self) -> usize {
        self.context
    }

    /// Tokens in the vocabulary.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The end-of-sequence token id, if the model has one.
    #[getter]
    fn eos_token(&self) -> Option<u32> {
        self.eos
    }

    /// The beginning-of-sequence token id, if the model has one.
    #[getter]
    fn bos_token(&self) -> Option<u32> {
        self.bos
    }

    fn __repr__(&self) -> String {
        self.description.clone()
    }
}

/// Text pieces of one generation (`Llama.stream`).
#[pyclass(module = "rlx", name = "Stream")]
struct PyStream {
    model: Shared,
    /// `None` once finished.
    state: Mutex<Option<Completion>>,
    generation: u64,
}

#[pymethods]
impl PyStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let (model, state, generation) = (&self.model, &self.state, self.generation);
        detached(py, || {
            let mut state = lock(state);
            let Some(completion) = state.as_mut() else { return Ok(None) };
            let mut m = lock(model);
            if m.generation != generation {
                *state = None;
                return Err(rlx::Error::input(
                    "this stream was ended by a later generate or stream call on the same model",
                ));
            }
            // The generation ends with an error too (Llama::next_token).
            let piece = completion.next_text(&mut m.llama);
            if let Ok(None) = piece {
                m.last_stats =
                    Some((completion.generation.stats.clone(), completion.finish_reason().map(|f| f.name())));
            }
            if !matches!(piece, Ok(Some(_))) {
                *state = None;
            }
            let piece = piece?;
            Ok(piece)
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGguf>()?;
    m.add_class::<PyLlama>()?;
    m.add_class::<PyStream>()?;
    m.add_function(wrap_pyfunction!(load_gguf, m)?)?;
    Ok(())
}
