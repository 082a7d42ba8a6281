//! The batching loop: one thread owns the model and its cache slots, admits queued
//! requests into free slots between steps, and advances every running request by one
//! token per step through [`Llama::decode_batch`].
//!
//! A request's tokens do not depend on what else runs: its prompt is prefilled in its own
//! slot by the same graphs `rlx generate` uses, each decode row computes what a solo
//! decode would (bit for bit, see `Llama::build_batch_graph`), and it samples from its
//! own seeded sampler.

use rlx_models::{BatchRow, FinishReason, Llama, Sampler, SamplerConfig, TextOut, TokenId};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Prompt tokens prefilled per pass between two decode steps: a longer prompt goes in
/// pieces of this size, so running streams pause for one piece at a time (~0.5 s on
/// SmolLM2 135M, 2 cores), not for the whole prompt. A prompt up to this long is one
/// pass, exactly as `rlx generate` prefills it.
pub const PREFILL_CHUNK: usize = 256;

/// A request as the engine takes it (already tokenized and checked).
pub struct Job {
    pub id: u64,
    pub route: &'static str,
    pub prompt: Vec<TokenId>,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub stops: Vec<String>,
    pub events: UnboundedSender<Event>,
    pub received: Instant,
}

/// What a request's handler hears from the engine.
#[derive(Debug)]
pub enum Event {
    /// The next piece of text (never empty).
    Text(String),
    Done {
        finish: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// The model failed (an internal error: the request ends with a 500).
    Failed(String),
}

/// Counters the HTTP side reads.
#[derive(Default)]
pub struct Load {
    /// Requests sent to the engine and not yet admitted.
    pub queued: AtomicUsize,
    /// Requests holding a slot.
    pub running: AtomicUsize,
}

/// A request holding a slot.
struct Running {
    job: Job,
    slot: usize,
    /// Prompt tokens prefilled so far.
    prefilled: usize,
    /// Tokens in the slot's cache.
    pos: usize,
    /// The last token sampled, not yet in the cache.
    pending: Option<TokenId>,
    history: Vec<TokenId>,
    generated: usize,
    sampler: Sampler,
    out: TextOut,
    first_token: Option<Duration>,
    decode_start: Option<Instant>,
    /// Ended (finished, failed or its client gone): the slot frees after this step.
    ended: bool,
}

impl Running {
    fn new(job: Job, slot: usize) -> Result<Running, String> {
        let sampler = Sampler::new(job.sampler.clone()).map_err(|e| e.to_string())?;
        let out = TextOut::new(&job.stops).map_err(|e| e.to_string())?;
        Ok(Running {
            history: job.prompt.clone(),
            job,
            slot,
            prefilled: 0,
            pos: 0,
            pending: None,
            generated: 0,
            sampler,
            out,
            first_token: None,
            decode_start: None,
            ended: false,
        })
    }

    /// Sends `event`; a client that has gone ends the request.
    fn send(&mut self, event: Event) {
        if !self.ended && self.job.events.send(event).is_err() {
            self.disconnected();
        }
    }

    fn disconnected(&mut self) {
        self.log("client disconnected");
        self.ended = true;
    }

    /// Samples the token that follows `logits` and streams its text; ends the request at
    /// its end (end of generation, a stop string, `max_tokens`, a full context).
    fn advance(&mut self, llama: &Llama, logits: &[f32]) {
        let token = match self.sampler.sample(logits, &self.history) {
            Ok(t) => t,
            Err(e) => return self.fail(e.to_string()),
        };
        if self.first_token.is_none() {
            self.first_token = Some(self.job.received.elapsed());
            self.decode_start = Some(Instant::now());
        }
        self.history.push(token);
        self.generated += 1;
        match self.out.token(&llama.tokenizer, token) {
            Ok(text) if !text.is_empty() => self.send(Event::Text(text)),
            Ok(_) => {}
            Err(e) => return self.fail(e.to_string()),
        }
        let finish = if self.out.finish_reason().is_some() || llama.tokenizer.ends_generation(token) {
            Some(FinishReason::Stop)
        } else if self.generated >= self.job.max_tokens || self.pos >= llama.context() {
            Some(FinishReason::Length)
        } else {
            None
        };
        match finish {
            Some(reason) => self.finish(reason),
            None => self.pending = Some(token),
        }
    }

    fn finish(&mut self, reason: FinishReason) {
        let tail = self.out.end(reason);
        if !tail.is_empty() {
            self.send(Event::Text(tail));
        }
        let finish = self.out.finish_reason().unwrap_or(reason);
        self.send(Event::Done { finish, prompt_tokens: self.job.prompt.len(), completion_tokens: self.generated });
        if !self.ended {
            self.log(finish.name());
            self.ended = true;
        }
    }

    fn fail(&mut self, message: String) {
        self.send(Event::Failed(message.clone()));
        if !self.ended {
            self.log(&format!("error: {message}"));
            self.ended = true;
        }
    }

    /// The request's log line.
    fn log(&self, end: &str) {
        let ttft = self.first_token.map_or("-".into(), |d| format!("{:.1} ms", d.as_secs_f64() * 1e3));
        let rate = match self.decode_start {
            Some(t) if self.generated > 1 => {
                format!("{:.1} tok/s", (self.generated - 1) as f64 / t.elapsed().as_secs_f64().max(1e-9))
            }
            _ => "-".into(),
        };
        eprintln!(
            "rlx serve: request {} {} slot {}: prompt {} tokens, generated {}, first token {ttft}, {rate}, {end}",
            self.job.id,
            self.job.route,
            self.slot,
            self.job.prompt.len(),
            self.generated
        );
    }
}

/// Runs until `jobs` is closed and every admitted request has ended.
pub fn run(mut llama: Llama, jobs: Receiver<Job>, load: Arc<Load>) {
    let mut free: Vec<usize> = (0..llama.slots()).rev().collect();
    let mut running: Vec<Running> = Vec::new();
    let mut open = true;
    while open || !running.is_empty() {
        // Admit queued requests into free slots; wait for one only when idle.
        while open && !free.is_empty() {
            let job = if running.is_empty() {
                match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => {
                        open = false;
                        break;
                    }
                }
            } else {
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            };
            load.queued.fetch_sub(1, Ordering::Relaxed);
            if job.events.is_closed() {
                continue; // its client left while it waited
            }
            let slot = free.pop().expect("a free slot");
            match Running::new(job, slot) {
                Ok(r) => running.push(r),
                Err(e) => {
                    free.push(slot);
                    eprintln!("rlx serve: request rejected: {e}");
                }
            }
        }
        load.running.store(running.len(), Ordering::Relaxed);
        // One prompt piece for one request still prefilling.
        if let Some(r) = running.iter_mut().find(|r| r.prefilled < r.job.prompt.len() && !r.ended) {
            let end = (r.prefilled + PREFILL_CHUNK).min(r.job.prompt.len());
            match llama.prefill_slot(r.slot, r.prefilled, &r.job.prompt[r.prefilled..end]) {
                Ok(logits) => {
                    r.prefilled = end;
                    r.pos = end;
                    if end == r.job.prompt.len() {
                        r.advance(&llama, &logits);
                    }
                }
                Err(e) => r.fail(e.to_string()),
            }
        }
        // One decode step for every request with a token to run, in slot order (the
        // batch's own order: its logits come back without a reordering copy).
        let mut rows: Vec<(usize, BatchRow)> = running
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.ended && !r.job.events.is_closed())
            .filter_map(|(i, r)| r.pending.map(|token| (i, BatchRow { slot: r.slot, pos: r.pos, token })))
            .collect();
        rows.sort_unstable_by_key(|(_, row)| row.slot);
        if !rows.is_empty() {
            let batch: Vec<BatchRow> = rows.iter().map(|&(_, row)| row).collect();
            match llama.decode_batch(&batch) {
                Ok(logits) => {
                    let vocab = logits.len() / rows.len();
                    for (k, &(i, _)) in rows.iter().enumerate() {
                        let r = &mut running[i];
                        r.pos += 1;
                        r.pending = None;
                        r.advance(&llama, &logits[k * vocab..][..vocab]);
                    }
                }
                Err(e) => rows.iter().for_each(|&(i, _)| running[i].fail(e.to_string())),
            }
        }
        for r in running.iter_mut().filter(|r| !r.ended && r.job.events.is_closed()) {
            r.disconnected();
        }
        running.retain(|r| {
            if r.ended {
                free.push(r.slot);
            }
            !r.ended
        });
        load.running.store(running.len(), Ordering::Relaxed);
        // Lowest slots first, so that few distinct slots stay in use.
        free.sort_unstable_by(|a, b| b.cmp(a));
    }
    load.running.store(0, Ordering::Relaxed);
}
