//! The OpenAI wire format: request fields read and checked one by one (an error names the
//! field and what it holds), and the response bodies and stream chunks.
//!
//! Fields RLX does not use are ignored, as OpenAI's own server does with fields it does
//! not know; fields it cannot honour (`n` > 1, penalties, logprobs) are errors rather than
//! silently dropped.

use rlx_models::{FinishReason, Message, SamplerConfig, TokenId};
use serde_json::{Map, Value, json};

/// A 4xx (or 5xx) answer: status, message, offending field, OpenAI error type and code.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub param: Option<String>,
    pub kind: &'static str,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            param: Some(param.to_string()),
            kind: "invalid_request_error",
            code: None,
        }
    }

    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// What a completion request asks for, whichever endpoint it came through.
pub struct Params {
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub stops: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the token counts.
    pub include_usage: bool,
    /// `ignore_eos` (llama-server's extension): end-of-generation tokens are never
    /// sampled, so the text runs to `max_tokens` or a stop string.
    pub ignore_eos: bool,
    /// `cache_prompt` (llama-server's extension, default true): the prompt may start from
    /// the rows an earlier prompt with the same beginning left in a free slot.
    pub cache_prompt: bool,
}

/// The JSON object of a request body.
pub fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("body", format!("the body is not valid JSON: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::invalid("body", format!("the body must be a JSON object, got {}", kind(&other)))),
    }
}

/// A JSON value's type, as a message names it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field `name` unless absent or null.
fn field<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

fn number(o: &Map<String, Value>, name: &str, default: f64, lo: f64, hi: f64) -> Result<f64, ApiError> {
    match field(o, name) {
        None => Ok(default),
        Some(v) => match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(x),
            Some(x) => Err(ApiError::invalid(name, format!("'{name}' must be between {lo} and {hi}, got {x}"))),
            None => Err(ApiError::invalid(name, format!("'{name}' must be a number, got {}", kind(v)))),
        },
    }
}

fn integer(o: &Map<String, Value>, name: &str) -> Result<Option<i64>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(v) => match (v.as_i64(), v.as_f64()) {
            (Some(x), _) => Ok(Some(x)),
            // Integers past 64 bits arrive as floats.
            (None, Some(x)) if x.fract() == 0.0 => Err(ApiError::invalid(name, format!("'{name}' is too large: {v}"))),
            _ => Err(ApiError::invalid(name, format!("'{name}' must be an integer, got {} ({v})", kind(v)))),
        },
    }
}

fn boolean(o: &Map<String, Value>, name: &str) -> Result<bool, ApiError> {
    boolean_or(o, name, false)
}

fn boolean_or(o: &Map<String, Value>, name: &str, default: bool) -> Result<bool, ApiError> {
    match field(o, name) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::invalid(name, format!("'{name}' must be a boolean, got {}", kind(v)))),
    }
}

/// The `model` field: absent, or the served model's id.
pub fn check_model(o: &Map<String, Value>, model_id: &str) -> Result<(), ApiError> {
    match field(o, "model") {
        None => Ok(()),
        Some(Value::String(m)) if m == model_id => Ok(()),
        Some(Value::String(m)) => Err(ApiError {
            status: 404,
            message: format!("the model '{m}' does not exist: this server serves '{model_id}'"),
            param: Some("model".into()),
            kind: "invalid_request_error",
            code: Some("model_not_found"),
        }),
        Some(v) => Err(ApiError::invalid("model", format!("'model' must be a string, got {}", kind(v)))),
    }
}

/// Sampling, length, stop and stream fields; `max_tokens` may not exceed `context`.
pub fn params(o: &Map<String, Value>, context: usize, chat: bool) -> Result<Params, ApiError> {
    // The chat endpoint's newer name for the same limit wins when both are given.
    let limit_name =
        if chat && field(o, "max_completion_tokens").is_some() { "max_completion_tokens" } else { "max_tokens" };
    // OpenAI's defaults: 16 tokens for a completion; a chat answer runs to its end.
    let default_limit = if chat { context } else { 16 };
    let max_tokens = match integer(o, limit_name)? {
        None => default_limit,
        Some(n) if n < 1 => {
            return Err(ApiError::invalid(limit_name, format!("'{limit_name}' must be at least 1, got {n}")));
        }
        Some(n) if n as u64 > context as u64 => {
            return Err(ApiError::invalid(
                limit_name,
                format!("'{limit_name}' is {n}, more than the context of {context} tokens"),
            ));
        }
        Some(n) => n as usize,
    };
    if let Some(n) = integer(o, "n")?
        && n != 1
    {
        return Err(ApiError::invalid("n", format!("'n' must be 1 (one choice per request), got {n}")));
    }
    for name in ["frequency_penalty", "presence_penalty"] {
        if number(o, name, 0.0, -2.0, 2.0)? != 0.0 {
            return Err(ApiError::invalid(name, format!("'{name}' is not supported (use 'repeat_penalty')")));
        }
    }
    if field(o, "logprobs").is_some_and(|v| v != &Value::Bool(false)) {
        return Err(ApiError::invalid("logprobs", "'logprobs' is not supported"));
    }
    let temperature = number(o, "temperature", 1.0, 0.0, 2.0)? as f32;
    let top_p = number(o, "top_p", 1.0, 0.0, 1.0)? as f32;
    if top_p == 0.0 {
        return Err(ApiError::invalid("top_p", "'top_p' must be greater than 0"));
    }
    let top_k = match integer(o, "top_k")? {
        None => 0,
        Some(k) if k >= 0 => k as usize,
        Some(k) => return Err(ApiError::invalid("top_k", format!("'top_k' must be >= 0, got {k}"))),
    };
    let repetition_penalty = number(o, "repeat_penalty", 1.0, f64::MIN_POSITIVE, 10.0)? as f32;
    // No seed: a fresh one per request, as OpenAI draws.
    let seed = match integer(o, "seed")? {
        Some(s) => s as u64,
        None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
    };
    let stops = match field(o, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            if items.len() > 4 {
                return Err(ApiError::invalid("stop", format!("'stop' holds at most 4 strings, got {}", items.len())));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, s)| match s {
                    Value::String(s) => Ok(s.clone()),
                    v => Err(ApiError::invalid("stop", format!("'stop'[{i}] must be a string, got {}", kind(v)))),
                })
                .collect::<Result<_, _>>()?
        }
        Some(v) => {
            return Err(ApiError::invalid("stop", format!("'stop' must be a string or an array, got {}", kind(v))));
        }
    };
    if let Some(i) = stops.iter().position(String::is_empty) {
        return Err(ApiError::invalid("stop", format!("'stop'[{i}] is empty")));
    }
    let stream = boolean(o, "stream")?;
    let include_usage = match field(o, "stream_options") {
        None => false,
        Some(Value::Object(opts)) => boolean(opts, "include_usage").map_err(|mut e| {
            e.param = Some("stream_options.include_usage".into());
            e
        })?,
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("'stream_options' must be an object, got {}", kind(v)),
            ));
        }
    };
    let ignore_eos = boolean(o, "ignore_eos")?;
    let cache_prompt = boolean_or(o, "cache_prompt", true)?;
    let sampler = SamplerConfig { temperature, top_k, top_p, repetition_penalty, seed, ..SamplerConfig::default() };
    Ok(Params { max_tokens, sampler, stops, stream, include_usage, ignore_eos, cache_prompt })
}

/// The `prompt` of a completion request: a string, or an array of one string.
pub fn prompt(o: &Map<String, Value>) -> Result<String, ApiError> {
    match field(o, "prompt") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            Ok(items[0].as_str().unwrap_or_default().to_string())
        }
        Some(Value::Array(items)) => Err(ApiError::invalid(
            "prompt",
            format!(
                "'prompt' as an array must hold exactly one string (one choice per request), got {} items",
                items.len()
            ),
        )),
        Some(v) => Err(ApiError::invalid("prompt", format!("'prompt' must be a string, got {}", kind(v)))),
        None => Err(ApiError::invalid("prompt", "'prompt' is required")),
    }
}

/// The `messages` of a chat request: roles system / user / assistant, content a string or
/// an array of text parts.
pub fn messages(o: &Map<String, Value>) -> Result<Vec<Message>, ApiError> {
    let items = match field(o, "messages") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "'messages' is empty")),
        Some(v) => return Err(ApiError::invalid("messages", format!("'messages' must be an array, got {}", kind(v)))),
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let at = |part: &str| format!("messages[{i}].{part}");
            let m = m.as_object().ok_or_else(|| {
                ApiError::invalid(&format!("messages[{i}]"), format!("'messages[{i}]' must be an object, got {}", kind(m)))
            })?;
            let role = match m.get("role") {
                Some(Value::String(r)) if ["system", "developer", "user", "assistant"].contains(&r.as_str()) => {
                    // OpenAI's newer name for the system role.
                    if r == "developer" { "system" } else { r.as_str() }
                }
                Some(Value::String(r)) => {
                    return Err(ApiError::invalid(
                        &at("role"),
                        format!("'{}' is '{r}': one of system, developer, user, assistant", at("role")),
                    ));
                }
                Some(v) => {
                    return Err(ApiError::invalid(&at("role"), format!("'{}' must be a string, got {}", at("role"), kind(v))));
                }
                None => return Err(ApiError::invalid(&at("role"), format!("'{}' is required", at("role")))),
            };
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .enumerate()
                    .map(|(j, p)| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => Ok(t),
                        _ => Err(ApiError::invalid(
                            &format!("messages[{i}].content[{j}]"),
                            format!("'messages[{i}].content[{j}]' must be a text part ({{\"type\": \"text\", \"text\": ...}})"),
                        )),
                    })
                    .collect::<Result<String, _>>()?,
                Some(v) => {
                    return Err(ApiError::invalid(
                        &at("content"),
                        format!("'{}' must be a string or an array of text parts, got {}", at("content"), kind(v)),
                    ));
                }
                None => return Err(ApiError::invalid(&at("content"), format!("'{}' is required", at("content")))),
            };
            Ok(Message::new(role, &content))
        })
        .collect()
}

/// One input of an embeddings request: text, or token ids as given.
pub enum EmbeddingInput {
    Text(String),
    Tokens(Vec<TokenId>),
}

/// An embeddings request's `input`: a string, an array of strings, an array of token ids
/// or an array of such arrays (at most 2048 inputs, as OpenAI takes); token ids must be
/// below `vocab`.
pub fn embedding_inputs(o: &Map<String, Value>, vocab: usize) -> Result<Vec<EmbeddingInput>, ApiError> {
    let tokens = |at: &str, items: &[Value]| -> Result<EmbeddingInput, ApiError> {
        if items.is_empty() {
            return Err(ApiError::invalid(at, format!("'{at}' is empty")));
        }
        items
            .iter()
            .enumerate()
            .map(|(j, v)| match v.as_u64() {
                Some(id) if id < vocab as u64 => Ok(id as TokenId),
                _ => Err(ApiError::invalid(
                    at,
                    format!("'{at}'[{j}] must be a token id from 0 to {}, got {v}", vocab - 1),
                )),
            })
            .collect::<Result<_, _>>()
            .map(EmbeddingInput::Tokens)
    };
    let text = |at: &str, s: &str| {
        if s.is_empty() {
            Err(ApiError::invalid(at, format!("'{at}' is empty")))
        } else {
            Ok(EmbeddingInput::Text(s.to_string()))
        }
    };
    match field(o, "input") {
        None => Err(ApiError::invalid("input", "'input' is required")),
        Some(Value::String(s)) => Ok(vec![text("input", s)?]),
        Some(Value::Array(items)) if items.is_empty() => Err(ApiError::invalid("input", "'input' is empty")),
        Some(Value::Array(items)) if items.len() > 2048 => {
            Err(ApiError::invalid("input", format!("'input' holds at most 2048 inputs, got {}", items.len())))
        }
        Some(Value::Array(items)) if items[0].is_number() => Ok(vec![tokens("input", items)?]),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("input[{i}]");
                match item {
                    Value::String(s) => text(&at, s),
                    Value::Array(ids) => tokens(&at, ids),
                    v => Err(ApiError::invalid(
                        &at,
                        format!("'{at}' must be a string or an array of token ids, got {}", kind(v)),
                    )),
                }
            })
            .collect(),
        Some(v) => Err(ApiError::invalid(
            "input",
            format!("'input' must be a string, an array of strings or an array of token ids, got {}", kind(v)),
        )),
    }
}

/// How an embeddings request wants its vectors: `encoding_format` "float" (default) or
/// "base64" (the little-endian f32 bytes, as the `openai` client asks by default); a
/// `dimensions` other than the model's is an error (the vectors are not truncated).
pub fn embedding_format(o: &Map<String, Value>, dimensions: usize) -> Result<bool, ApiError> {
    if let Some(n) = integer(o, "dimensions")?
        && n != dimensions as i64
    {
        return Err(ApiError::invalid(
            "dimensions",
            format!("'dimensions' is {n}: this model's embeddings have {dimensions} dimensions"),
        ));
    }
    match field(o, "encoding_format") {
        None => Ok(false),
        Some(Value::String(f)) if f == "float" => Ok(false),
        Some(Value::String(f)) if f == "base64" => Ok(true),
        Some(v) => Err(ApiError::invalid(
            "encoding_format",
            format!("'encoding_format' must be \"float\" or \"base64\", got {v}"),
        )),
    }
}

/// The body of an embeddings response.
pub fn embeddings(model: &str, vectors: &[Vec<f32>], base64: bool, prompt_tokens: usize) -> Value {
    use base64::Engine;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "data": data, "model": model,
           "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}})
}

/// `usage` of a response; `cached_tokens`: the prompt's tokens whose rows came from the
/// prompt cache (OpenAI's `prompt_tokens_details.cached_tokens`).
pub fn usage(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens,
           "prompt_tokens_details": {"cached_tokens": cached_tokens}})
}

/// Which endpoint a response belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// What every response and chunk of one request carries.
pub struct Envelope {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    fn wrap(&self, object: &str, choices: Value) -> Value {
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }

    /// The whole answer of a non-streaming request.
    pub fn response(&self, text: &str, finish: FinishReason, usage: Value) -> Value {
        let mut v = match self.endpoint {
            Endpoint::Chat => self.wrap(
                "chat.completion",
                json!([{"index": 0, "message": {"role": "assistant", "content": text},
                        "logprobs": null, "finish_reason": finish.name()}]),
            ),
            Endpoint::Completions => self.wrap(
                "text_completion",
                json!([{"index": 0, "text": text, "logprobs": null, "finish_reason": finish.name()}]),
            ),
        };
        v["usage"] = usage;
        v
    }

    /// A stream chunk: the role (chat's first chunk), a piece of text, or the end.
    pub fn chunk(&self, role: bool, text: Option<&str>, finish: Option<FinishReason>) -> Value {
        let finish = finish.map(FinishReason::name);
        match self.endpoint {
            Endpoint::Chat => {
                let mut delta = Map::new();
                if role {
                    delta.insert("role".into(), "assistant".into());
                    delta.insert("content".into(), "".into());
                }
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                self.wrap(
                    "chat.completion.chunk",
                    json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
                )
            }
            Endpoint::Completions => self.wrap(
                "text_completion",
                json!([{"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}]),
            ),
        }
    }

    /// The last chunk when usage was asked for: no choices, the counts.
    pub fn usage_chunk(&self, usage: Value) -> Value {
        let object = if self.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" };
        let mut v = self.wrap(object, json!([]));
        v["usage"] = usage;
        v
    }
}
