//! The batching loop: one thread owns the model and its cache slots, admits queued
//! requests into free slots between steps, and advances every running request by one
//! token per step through [`Llama::decode_batch`].
//!
//! A request's tokens do not depend on what else runs: its prompt is prefilled in its own
//! slot by the same graphs `rlx generate` uses, each decode row computes what a solo
//! decode would (bit for bit, see `Llama::build_batch_graph`), and it samples from its
//! own seeded sampler.
//!
//! An embeddings request holds a slot while its inputs run through it one after another,
//! in prompt pieces like any prompt, and never joins the decode batch.

use rlx_models::{BatchRow, FinishReason, Llama, Sampler, SamplerConfig, SlotPiece, TextOut, TokenId};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Prompt tokens prefilled per pass, and in all between two decode steps: a longer
/// prompt goes in pieces of this size, so running streams pause for one piece at a time
/// (~0.5 s on SmolLM2 135M, 2 cores), not for the whole prompt. A multiple of the CPU
/// attention's row block (64): the pieces give the bits `rlx generate`'s one pass gives
/// (ARCHITECTURE.md, rlx-models' invariants). Several requests' pieces run
/// between two steps while they fit in this many tokens together: requests that arrive
/// together start decoding together, instead of joining a growing batch one step at a
/// time (8 clients, two 64-token answers each to ~11-token prompts: 134 -> 128 steps).
pub const PREFILL_CHUNK: usize = 256;

/// A request as the engine takes it (already tokenized and checked).
pub struct Job {
    pub id: u64,
    pub route: &'static str,
    pub task: Task,
    pub events: UnboundedSender<Event>,
    pub received: Instant,
}

/// What a request asks of the model.
pub enum Task {
    /// Up to `max_tokens` tokens after `prompt`; `stream`: text events as tokens come,
    /// else one with the whole text at the end.
    /// `cache_prompt`: the prompt may start from rows an earlier prompt left in a slot.
    Generate {
        prompt: Vec<TokenId>,
        max_tokens: usize,
        sampler: SamplerConfig,
        stops: Vec<String>,
        stream: bool,
        cache_prompt: bool,
    },
    /// One embedding per input: the mean over its tokens of the last hidden state (after
    /// the final norm, what the output head reads), scaled to unit length, as
    /// llama-server's mean pooling with its default L2 normalization gives.
    Embed { inputs: Vec<Vec<TokenId>> },
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
        /// Prompt tokens whose cache rows an earlier prompt left (not run again).
        cached_tokens: usize,
    },
    /// An embeddings request's vectors, one per input in order.
    Embeddings { vectors: Vec<Vec<f32>>, prompt_tokens: usize },
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
    id: u64,
    route: &'static str,
    events: UnboundedSender<Event>,
    received: Instant,
    slot: usize,
    /// Tokens of the prompt now running that are prefilled.
    prefilled: usize,
    /// Tokens in the slot's cache.
    pos: usize,
    work: Work,
    /// Ended (finished, failed or its client gone): the slot frees after this step.
    ended: bool,
}

/// A running request's own state.
enum Work {
    Generate {
        prompt_tokens: usize,
        /// Leading prompt tokens whose cache rows were reused (see `run`).
        cached: usize,
        max_tokens: usize,
        /// The last token sampled, not yet in the cache.
        pending: Option<TokenId>,
        /// The prompt and the tokens generated (the repetition penalty's window).
        history: Vec<TokenId>,
        generated: usize,
        /// Boxed: its buffers would make every `Work` as large as this variant.
        sampler: Box<Sampler>,
        out: TextOut,
        /// The text so far of a request that does not stream: its handler wakes once,
        /// not once a token on the tokio worker that shares the cores with the model's
        /// (8 clients: one wake-up a row every step).
        held: Option<String>,
        first_token: Option<Duration>,
        decode_start: Option<Instant>,
    },
    Embed {
        inputs: Vec<Vec<TokenId>>,
        /// Inputs pooled so far (the one running is `inputs[done]`).
        done: usize,
        /// The running input's hidden states summed over its tokens so far.
        sum: Vec<f64>,
        vectors: Vec<Vec<f32>>,
    },
}

impl Running {
    /// The request `job` in `slot`, whose first `reused` prompt tokens' rows are there.
    fn new(job: Job, slot: usize, reused: usize) -> Result<Running, String> {
        let work = match job.task {
            Task::Generate { prompt, max_tokens, sampler, stops, stream, .. } => Work::Generate {
                prompt_tokens: prompt.len(),
                cached: reused,
                max_tokens,
                pending: None,
                history: prompt,
                generated: 0,
                sampler: Box::new(Sampler::new(sampler).map_err(|e| e.to_string())?),
                out: TextOut::new(&stops).map_err(|e| e.to_string())?,
                held: (!stream).then(String::new),
                first_token: None,
                decode_start: None,
            },
            Task::Embed { inputs } => Work::Embed { inputs, done: 0, sum: Vec::new(), vectors: Vec::new() },
        };
        Ok(Running {
            id: job.id,
            route: job.route,
            events: job.events,
            received: job.received,
            slot,
            prefilled: reused,
            pos: reused,
            work,
            ended: false,
        })
    }

    /// The prompt tokens whose rows this request's prefill wrote (or reused) in its slot:
    /// what a later prompt may reuse. Rows decode steps wrote are not a prefill's.
    fn prompt_rows(&self) -> &[TokenId] {
        match &self.work {
            Work::Generate { history, prompt_tokens, .. } => &history[..self.prefilled.min(*prompt_tokens)],
            // An embeddings request's inputs each start again from row 0.
            Work::Embed { .. } => &[],
        }
    }

    /// The prompt whose prefill has not ended, if any.
    fn unfilled_prompt(&self) -> Option<&[TokenId]> {
        let prompt = match &self.work {
            Work::Generate { history, prompt_tokens, .. } => &history[..*prompt_tokens],
            Work::Embed { inputs, done, .. } => inputs.get(*done)?,
        };
        (self.prefilled < prompt.len() && !self.ended).then_some(prompt)
    }

    /// The tokens of the next piece of the unfilled prompt (0 when none is left).
    fn next_piece(&self) -> usize {
        self.unfilled_prompt().map_or(0, |prompt| PREFILL_CHUNK.min(prompt.len() - self.prefilled))
    }

    /// The next piece of the unfilled prompt (at most [`PREFILL_CHUNK`] tokens), as the
    /// model runs it.
    fn piece(&self) -> Option<SlotPiece<'_>> {
        let prompt = self.unfilled_prompt()?;
        let end = self.prefilled + self.next_piece();
        let hidden = matches!(self.work, Work::Embed { .. });
        Some(SlotPiece { slot: self.slot, pos: self.prefilled, tokens: &prompt[self.prefilled..end], hidden })
    }

    /// Takes what the model gave for [`Running::piece`].
    fn prefilled(&mut self, llama: &Llama, run: rlx_ir::Result<Vec<f32>>) {
        let end = self.prefilled + self.next_piece();
        let whole = self.unfilled_prompt().is_some_and(|prompt| end == prompt.len());
        let out = match run {
            Ok(out) => out,
            Err(e) => return self.fail(e.to_string()),
        };
        self.prefilled = end;
        self.pos = end;
        match &mut self.work {
            Work::Generate { .. } => {
                if whole {
                    let token = self.sample(&out);
                    self.advance(llama, token);
                }
            }
            Work::Embed { inputs, done, sum, vectors } => {
                let d = llama.config.d_model;
                sum.resize(d, 0.0);
                for row in out.chunks_exact(d) {
                    sum.iter_mut().zip(row).for_each(|(s, &v)| *s += f64::from(v));
                }
                if whole {
                    vectors.push(pooled(sum));
                    sum.clear();
                    *done += 1;
                    self.prefilled = 0;
                    self.pos = 0;
                    if *done == inputs.len() {
                        let prompt_tokens = inputs.iter().map(Vec::len).sum();
                        let vectors = std::mem::take(vectors);
                        self.send(Event::Embeddings { vectors, prompt_tokens });
                        if !self.ended {
                            self.log("done");
                            self.ended = true;
                        }
                    }
                }
            }
        }
    }

    /// Sends `event`; a client that has gone ends the request.
    fn send(&mut self, event: Event) {
        if !self.ended && self.events.send(event).is_err() {
            self.disconnected();
        }
    }

    fn disconnected(&mut self) {
        self.log("client disconnected");
        self.ended = true;
    }

    /// The token that follows `logits`, from this request's sampler.
    fn sample(&mut self, logits: &[f32]) -> rlx_ir::Result<TokenId> {
        match &mut self.work {
            Work::Generate { sampler, history, .. } => sampler.sample(logits, history),
            Work::Embed { .. } => Err(rlx_ir::Error::internal("an embeddings request has no token to sample")),
        }
    }

    /// Takes `token` (what [`Running::sample`] chose) and streams its text; ends the
    /// request at its end (end of generation, a stop string, `max_tokens`, a full context).
    fn advance(&mut self, llama: &Llama, token: rlx_ir::Result<TokenId>) {
        let pos = self.pos;
        let Work::Generate {
            prompt_tokens,
            cached,
            max_tokens,
            pending,
            history,
            generated,
            out,
            held,
            first_token,
            decode_start,
            ..
        } = &mut self.work
        else {
            return;
        };
        let token = match token {
            Ok(t) => t,
            Err(e) => return self.fail(e.to_string()),
        };
        if first_token.is_none() {
            *first_token = Some(self.received.elapsed());
            *decode_start = Some(Instant::now());
        }
        history.push(token);
        *generated += 1;
        let text = match out.token(&llama.tokenizer, token) {
            Ok(text) => text,
            Err(e) => return self.fail(e.to_string()),
        };
        let finish = if out.finish_reason().is_some() || llama.tokenizer.ends_generation(token) {
            Some(FinishReason::Stop)
        } else if *generated >= *max_tokens || pos >= llama.context() {
            Some(FinishReason::Length)
        } else {
            None
        };
        let (prompt_tokens, completion_tokens, cached_tokens) = (*prompt_tokens, *generated, *cached);
        let mut texts = vec![text];
        let finish = finish.map(|reason| {
            texts.push(out.end(reason));
            out.finish_reason().unwrap_or(reason)
        });
        *pending = finish.is_none().then_some(token);
        if let Some(held) = held {
            held.extend(texts.drain(..));
            if finish.is_some() {
                texts.push(std::mem::take(held));
            }
        }
        for text in texts.into_iter().filter(|t| !t.is_empty()) {
            self.send(Event::Text(text));
        }
        if let Some(finish) = finish {
            self.send(Event::Done { finish, prompt_tokens, completion_tokens, cached_tokens });
            if !self.ended {
                self.log(finish.name());
                self.ended = true;
            }
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
        let what = match &self.work {
            Work::Generate { prompt_tokens, cached, generated, first_token, decode_start, .. } => {
                let ttft = first_token.map_or("-".into(), |d| format!("{:.1} ms", d.as_secs_f64() * 1e3));
                let rate = match decode_start {
                    Some(t) if *generated > 1 => {
                        format!("{:.1} tok/s", (generated - 1) as f64 / t.elapsed().as_secs_f64().max(1e-9))
                    }
                    _ => "-".into(),
                };
                format!(
                    "prompt {prompt_tokens} tokens ({cached} cached), generated {generated}, first token {ttft}, {rate}"
                )
            }
            Work::Embed { inputs, done, .. } => format!(
                "{done} of {} inputs embedded, {} tokens, {:.1} ms",
                inputs.len(),
                inputs.iter().map(Vec::len).sum::<usize>(),
                self.received.elapsed().as_secs_f64() * 1e3
            ),
        };
        eprintln!("rlx serve: request {} {} slot {}: {what}, {end}", self.id, self.route, self.slot);
    }

    /// The token this request runs in the next decode step, if any.
    fn pending(&self) -> Option<TokenId> {
        match &self.work {
            Work::Generate { pending, .. } if !self.ended && !self.events.is_closed() => *pending,
            _ => None,
        }
    }
}

/// The mean of summed vectors scaled to unit Euclidean length: the sum's direction (the
/// mean's 1/count would cancel), computed in f64 and rounded once. A zero sum stays zero.
fn pooled(sum: &[f64]) -> Vec<f32> {
    let norm = sum.iter().map(|s| s * s).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    sum.iter().map(|&s| (s * scale) as f32).collect()
}

/// The free slot (an index into `free`) to run `task` in, and how many of its prompt's
/// rows that slot's cache holds already: where a slot keeps the prompt rows of its last
/// request (`kept`), a new prompt with the same beginning reuses as many of them as
/// [`Llama::reusable_prompt_rows`] allows (prompt caching: a conversation's next turn
/// runs only what it adds, give or take a row block). The slot that reuses most, else
/// the lowest: few distinct slots stay in use, and their cache rows warm.
fn pick_slot(free: &[usize], kept: &[Vec<TokenId>], task: &Task, llama: &Llama) -> (usize, usize) {
    let reuse = |slot: usize| match task {
        Task::Generate { prompt, cache_prompt: true, .. } => {
            let common = kept[slot].iter().zip(prompt).take_while(|(a, b)| a == b).count();
            // The prompt's last token runs in any case: its logits start the generation.
            llama.reusable_prompt_rows(common.min(prompt.len().saturating_sub(1)))
        }
        _ => 0,
    };
    let best = (0..free.len()).max_by_key(|&i| (reuse(free[i]), std::cmp::Reverse(free[i]))).expect("a free slot");
    (best, reuse(free[best]))
}

/// Runs until `jobs` is closed and every admitted request has ended.
pub fn run(mut llama: Llama, jobs: Receiver<Job>, load: Arc<Load>) {
    let mut free: Vec<usize> = (0..llama.slots()).rev().collect();
    // Per slot, the prompt tokens whose rows its cache holds from its last request.
    let mut kept: Vec<Vec<TokenId>> = vec![Vec::new(); llama.slots()];
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
            let (at, reused) = pick_slot(&free, &kept, &job.task, &llama);
            let slot = free.swap_remove(at);
            kept[slot].clear();
            match Running::new(job, slot, reused) {
                Ok(r) => running.push(r),
                Err(e) => {
                    free.push(slot);
                    eprintln!("rlx serve: request rejected: {e}");
                }
            }
        }
        load.running.store(running.len(), Ordering::Relaxed);
        // Prompt pieces of the requests still prefilling, oldest first, up to
        // PREFILL_CHUNK tokens in all (the first piece always runs), side by side where
        // the model can (`Llama::run_slots`).
        let mut prefilling = Vec::new();
        let mut prefilled = 0;
        for (i, r) in running.iter().enumerate() {
            let piece = r.next_piece();
            if piece == 0 || (prefilled > 0 && prefilled + piece > PREFILL_CHUNK) {
                continue;
            }
            prefilling.push(i);
            prefilled += piece;
        }
        if !prefilling.is_empty() {
            let pieces: Vec<SlotPiece> =
                prefilling.iter().map(|&i| running[i].piece().expect("a piece to run: an unfilled prompt")).collect();
            let outs = llama.run_slots(&pieces);
            for (&i, out) in prefilling.iter().zip(outs) {
                running[i].prefilled(&llama, out);
            }
        }
        // One decode step for every request with a token to run, in slot order (the
        // batch's own order: its logits come back without a reordering copy).
        let mut rows: Vec<(usize, BatchRow)> = running
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.pending().map(|token| (i, BatchRow { slot: r.slot, pos: r.pos, token })))
            .collect();
        rows.sort_unstable_by_key(|(_, row)| row.slot);
        if !rows.is_empty() {
            let batch: Vec<BatchRow> = rows.iter().map(|&(_, row)| row).collect();
            // Each row samples from the logits where the step left them.
            let sampled = llama.decode_batch_with(&batch, |logits| {
                let vocab = logits.len() / rows.len();
                let row = |k: usize| &logits[k * vocab..][..vocab];
                rows.iter().enumerate().map(|(k, &(i, _))| running[i].sample(row(k))).collect::<Vec<_>>()
            });
            match sampled {
                Ok(tokens) => {
                    for (&(i, _), token) in rows.iter().zip(tokens) {
                        let r = &mut running[i];
                        r.pos += 1;
                        r.advance(&llama, token);
                    }
                }
                Err(e) => rows.iter().for_each(|&(i, _)| running[i].fail(e.to_string())),
            }
        }
        for r in running.iter_mut().filter(|r| !r.ended && r.events.is_closed()) {
            r.disconnected();
        }
        running.retain(|r| {
            if r.ended {
                kept[r.slot] = r.prompt_rows().to_vec();
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
