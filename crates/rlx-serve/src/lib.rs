//! `rlx serve`: an OpenAI-compatible HTTP server over a GGUF model, with continuous
//! batching.
//!
//! Two halves joined by a bounded queue:
//! - the HTTP side (axum on a small tokio runtime) reads and checks each request
//!   ([`api`]), tokenizes it, and queues it; a full queue is a 503 at once. It answers
//!   with the whole text, or streams it as server-sent events in OpenAI's chunk format;
//! - the engine ([`engine`]) owns the model on a thread of its own and steps every
//!   running request together, one token each per step, admitting queued ones into free
//!   cache slots between steps.
//!
//! A client that goes away drops its event channel; the engine sees it at the next step
//! and frees the slot. Ctrl-C (or SIGTERM) stops accepting connections, lets running
//! requests finish, and returns.
//!
//! Routes: `GET /health`, `GET /v1/models`, `POST /v1/completions`,
//! `POST /v1/chat/completions`, `POST /v1/embeddings` (each input's last hidden states,
//! mean-pooled and scaled to unit length: see [`engine::Task::Embed`]).

pub mod api;
pub mod bench;
pub mod engine;

use api::{ApiError, Endpoint, Envelope};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use engine::{Event, Job, Load, Task};
use rlx_ir::{DType, Error, Result};
use rlx_models::{BatchRow, ChatTemplate, Llama, LlamaOptions, TokenId, Tokenizer};
use serde_json::json;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub model: PathBuf,
    pub host: String,
    /// 0 picks a free port (the log line says which).
    pub port: u16,
    /// Requests decoded together (each holds a KV cache slot).
    pub parallel: usize,
    /// Tokens of context per slot; 0 = min(the model's, 2048).
    pub context: usize,
    /// Requests waiting for a slot beyond which the server answers 503.
    pub queue: usize,
    pub threads: Option<usize>,
    pub cache_type: Option<DType>,
    /// The model's name in the API (default: the file's stem).
    pub alias: Option<String>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            model: rlx_models::default_model_path(),
            host: "127.0.0.1".into(),
            port: 8080,
            parallel: 8,
            context: 0,
            queue: 64,
            threads: None,
            cache_type: None,
            alias: None,
        }
    }
}

/// What the handlers share.
struct App {
    model_id: String,
    tokenizer: Arc<Tokenizer>,
    /// The model's chat template, or why it has none.
    template: std::result::Result<ChatTemplate, String>,
    /// The tokens `ignore_eos` bans.
    end_of_generation: Vec<TokenId>,
    context: usize,
    /// The length of an embedding (the model's hidden size).
    dimensions: usize,
    slots: usize,
    queue: usize,
    jobs: SyncSender<Job>,
    load: Arc<Load>,
    next_id: AtomicU64,
}

/// Batch sizes compiled before the server listens; larger ones compile when a batch
/// first grows to them. A batch graph has ~14 nodes per row and layer (its own cache
/// append and attention), so each size costs time and memory in proportion to its rows
/// (SmolLM2, 2 cores: 8 rows 25 ms and ~6 MiB, 16 rows 47 ms and ~11 MiB, 64 rows 0.33 s
/// and ~40 MiB): every size up to 64 would take 11.5 s and over 1 GiB before the first
/// request.
const WARM_BATCH_ROWS: usize = 16;

/// Loads the model, allocates every slot's KV cache, and serves until Ctrl-C or SIGTERM.
pub fn serve(options: &ServeOptions) -> Result<()> {
    if options.parallel == 0 {
        return Err(Error::input("--parallel must be at least 1"));
    }
    let llama_options = LlamaOptions {
        context: options.context,
        threads: options.threads,
        cache_type: options.cache_type,
        ..LlamaOptions::default()
    };
    let mut llama = Llama::load(&options.model, &llama_options)?;
    llama.set_slots(options.parallel)?;
    let model_id = options
        .alias
        .clone()
        .unwrap_or_else(|| options.model.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned()));
    eprintln!(
        "rlx serve: {model_id}: {} slots x {} tokens of {} KV cache = {:.1} MiB, allocated once",
        llama.slots(),
        llama.context(),
        llama.cache_type(),
        llama.cache_bytes() as f64 / (1 << 20) as f64
    );
    // Batch sizes up to WARM_BATCH_ROWS compiled and run once before the first request:
    // a batch that grows to a size it has not run stalls every stream in it while the
    // graph compiles (SmolLM2, 2 cores: 9-25 ms a size up to 8 rows), and the first
    // step of all repacks the weights (~140 ms). Each slot's first cache row is written
    // here and rewritten by the slot's first prompt.
    let start = Instant::now();
    let warm = llama.slots().min(WARM_BATCH_ROWS);
    for rows in 1..=warm {
        let batch: Vec<BatchRow> = (0..rows).map(|slot| BatchRow { slot, pos: 0, token: 0 }).collect();
        llama.decode_batch_with(&batch, |_| ())?;
    }
    eprintln!(
        "rlx serve: decode steps of 1 to {warm} rows compiled and run once in {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let (jobs, queued) = std::sync::mpsc::sync_channel(options.queue);
    let load = Arc::new(Load::default());
    let app = Arc::new(App {
        model_id,
        tokenizer: llama.tokenizer.clone(),
        template: llama.chat_template().map_err(|e| e.to_string()),
        end_of_generation: llama.tokenizer.end_of_generation_ids(),
        context: llama.context(),
        dimensions: llama.config.d_model,
        slots: llama.slots(),
        queue: options.queue,
        jobs,
        load: load.clone(),
        next_id: AtomicU64::new(1),
    });
    let engine = std::thread::Builder::new()
        .name("rlx-engine".into())
        .spawn(move || engine::run(llama, queued, load))
        .map_err(|e| Error::runtime(format!("cannot start the engine thread: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::runtime(format!("cannot start the HTTP runtime: {e}")))?;
    let address = (options.host.clone(), options.port);
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| Error::input(format!("cannot listen on {}:{}: {e}", address.0, address.1)))?;
        let bound = listener.local_addr().map_err(|e| Error::runtime(e.to_string()))?;
        eprintln!("rlx serve: listening on http://{bound}");
        axum::serve(listener, router(app))
            .with_graceful_shutdown(shutdown())
            .await
            .map_err(|e| Error::runtime(format!("server: {e}")))
    });
    // The router (and with it the queue's sender) is gone: the engine finishes what it
    // holds and returns.
    drop(runtime);
    engine.join().map_err(|_| Error::internal("the engine thread panicked"))?;
    eprintln!("rlx serve: stopped");
    served
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/embeddings", post(embeddings))
        .fallback(unknown_route)
        .with_state(app)
}

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => drop(s.recv().await),
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    eprintln!("rlx serve: stopping: finishing the running requests");
}

fn error_response(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.body())).into_response()
}

async fn unknown_route(method: Method, uri: Uri) -> Response {
    error_response(ApiError {
        status: 404,
        message: format!("no route {method} {}", uri.path()),
        param: None,
        kind: "invalid_request_error",
        code: Some("not_found"),
    })
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let (running, queued) = (app.load.running.load(Ordering::Relaxed), app.load.queued.load(Ordering::Relaxed));
    Json(json!({"status": "ok", "slots": app.slots, "running": running, "queued": queued})).into_response()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(app): State<Arc<App>>) -> Response {
    Json(json!({"object": "list", "data": [{"id": app.model_id, "object": "model", "created": unix_now(),
        "owned_by": "rlx", "context_length": app.context, "parallel": app.slots}]}))
    .into_response()
}

async fn completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    request(app, Endpoint::Completions, &body).await.unwrap_or_else(error_response)
}

async fn chat_completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    request(app, Endpoint::Chat, &body).await.unwrap_or_else(error_response)
}

/// Checks, tokenizes and queues a request; answers with its text or its stream.
async fn request(app: Arc<App>, endpoint: Endpoint, body: &[u8]) -> std::result::Result<Response, ApiError> {
    let received = Instant::now();
    let o = api::object(body)?;
    api::check_model(&o, &app.model_id)?;
    let chat = endpoint == Endpoint::Chat;
    let mut params = api::params(&o, app.context, chat)?;
    if params.ignore_eos {
        params.sampler.suppressed = app.end_of_generation.clone();
    }
    let (prompt, field) = if chat {
        let messages = api::messages(&o)?;
        let template = app.template.as_ref().map_err(|e| ApiError::invalid("messages", e.clone()))?;
        (template.encode(&app.tokenizer, &messages, true, false), "messages")
    } else {
        (app.tokenizer.encode_prompt(&api::prompt(&o)?, false), "prompt")
    };
    let prompt = prompt.map_err(|e| ApiError::invalid(field, e.to_string()))?;
    if prompt.is_empty() {
        return Err(ApiError::invalid(field, format!("'{field}' is empty")));
    }
    if prompt.len() >= app.context {
        return Err(ApiError::invalid(
            field,
            format!(
                "the prompt is {} tokens, but the context holds {} (the prompt and at least one generated token)",
                prompt.len(),
                app.context
            ),
        ));
    }
    let route = if chat { "/v1/chat/completions" } else { "/v1/completions" };
    let task = Task::Generate {
        prompt,
        max_tokens: params.max_tokens,
        sampler: params.sampler,
        stops: params.stops,
        stream: params.stream,
        cache_prompt: params.cache_prompt,
    };
    let (id, mut answers) = submit(&app, route, task, received)?;
    let envelope = Envelope {
        endpoint,
        id: format!("{}-{id}", if chat { "chatcmpl" } else { "cmpl" }),
        created: unix_now(),
        model: app.model_id.clone(),
    };
    if params.stream {
        return Ok(stream(envelope, answers, params.include_usage));
    }
    let mut text = String::new();
    while let Some(event) = answers.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Done { finish, prompt_tokens, completion_tokens, cached_tokens } => {
                let usage = api::usage(prompt_tokens, completion_tokens, cached_tokens);
                return Ok(Json(envelope.response(&text, finish, usage)).into_response());
            }
            Event::Failed(message) => return Err(internal(message)),
            Event::Embeddings { .. } => break,
        }
    }
    Err(internal("the engine stopped before the request ended".into()))
}

/// Queues `task`; a full queue is a 503. Returns the request's id and its events.
fn submit(
    app: &App,
    route: &'static str,
    task: Task,
    received: Instant,
) -> std::result::Result<(u64, UnboundedReceiver<Event>), ApiError> {
    let (events, answers) = unbounded_channel();
    let id = app.next_id.fetch_add(1, Ordering::Relaxed);
    app.load.queued.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = app.jobs.try_send(Job { id, route, task, events, received }) {
        app.load.queued.fetch_sub(1, Ordering::Relaxed);
        let message = match e {
            TrySendError::Full(_) => format!(
                "the server is busy: {} requests are running and {} waiting, as many as it queues; retry later",
                app.load.running.load(Ordering::Relaxed),
                app.queue
            ),
            TrySendError::Disconnected(_) => "the server is shutting down".into(),
        };
        return Err(ApiError { status: 503, message, param: None, kind: "server_error", code: Some("overloaded") });
    }
    Ok((id, answers))
}

async fn embeddings(State(app): State<Arc<App>>, body: Bytes) -> Response {
    embed(app, &body).await.unwrap_or_else(error_response)
}

/// Checks and tokenizes each input, and answers with their vectors.
async fn embed(app: Arc<App>, body: &[u8]) -> std::result::Result<Response, ApiError> {
    let received = Instant::now();
    let o = api::object(body)?;
    api::check_model(&o, &app.model_id)?;
    let base64 = api::embedding_format(&o, app.dimensions)?;
    let inputs = api::embedding_inputs(&o, app.tokenizer.vocab_size())?;
    let many = inputs.len() > 1;
    let inputs = inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let at = if many { format!("input[{i}]") } else { "input".into() };
            let tokens = match input {
                api::EmbeddingInput::Text(text) => {
                    app.tokenizer.encode_prompt(&text, false).map_err(|e| ApiError::invalid(&at, e.to_string()))?
                }
                api::EmbeddingInput::Tokens(ids) => ids,
            };
            if tokens.is_empty() {
                return Err(ApiError::invalid(&at, format!("'{at}' has no tokens")));
            }
            if tokens.len() > app.context {
                return Err(ApiError::invalid(
                    &at,
                    format!("'{at}' is {} tokens, more than the context of {} tokens", tokens.len(), app.context),
                ));
            }
            Ok(tokens)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let (_, mut answers) = submit(&app, "/v1/embeddings", Task::Embed { inputs }, received)?;
    match answers.recv().await {
        Some(Event::Embeddings { vectors, prompt_tokens }) => {
            Ok(Json(api::embeddings(&app.model_id, &vectors, base64, prompt_tokens)).into_response())
        }
        Some(Event::Failed(message)) => Err(internal(message)),
        _ => Err(internal("the engine stopped before the request ended".into())),
    }
}

fn internal(message: String) -> ApiError {
    ApiError { status: 500, message, param: None, kind: "server_error", code: None }
}

/// The request's events as server-sent events: chat's role chunk, a chunk per piece of
/// text, the finish chunk, the usage chunk when asked, then `[DONE]`. A task forwards
/// them; when the client goes, the response stream and then the task's receiver drop,
/// which the engine sees.
fn stream(envelope: Envelope, mut answers: UnboundedReceiver<Event>, include_usage: bool) -> Response {
    let (out, chunks) = tokio::sync::mpsc::channel::<std::result::Result<SseEvent, Infallible>>(16);
    tokio::spawn(async move {
        let data = |v: serde_json::Value| Ok(SseEvent::default().data(v.to_string()));
        if envelope.endpoint == Endpoint::Chat && out.send(data(envelope.chunk(true, None, None))).await.is_err() {
            return;
        }
        while let Some(event) = answers.recv().await {
            let sent = match event {
                Event::Text(t) => out.send(data(envelope.chunk(false, Some(&t), None))).await,
                Event::Done { finish, prompt_tokens, completion_tokens, cached_tokens } => {
                    let _ = out.send(data(envelope.chunk(false, None, Some(finish)))).await;
                    if include_usage {
                        let usage = api::usage(prompt_tokens, completion_tokens, cached_tokens);
                        let _ = out.send(data(envelope.usage_chunk(usage))).await;
                    }
                    let _ = out.send(Ok(SseEvent::default().data("[DONE]"))).await;
                    return;
                }
                Event::Failed(message) => {
                    let _ = out.send(data(internal(message).body())).await;
                    return;
                }
                Event::Embeddings { .. } => return,
            };
            if sent.is_err() {
                return;
            }
        }
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(chunks)).keep_alive(KeepAlive::default()).into_response()
}
