//! `rlx generate`, `rlx chat`, `rlx perplexity`, `rlx quantize`, `rlx inspect FILE.gguf`
//! and `rlx bench llm`.

use rlx::gguf::Gguf;
use rlx::models::{BatchRow, Completion, Llama, LlamaOptions, Message, Sampler, SamplerConfig, TokenId};
use rlx::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which model to load and how to run it.
pub struct ModelChoice {
    pub path: Option<PathBuf>,
    pub threads: Option<usize>,
    pub context: usize,
    pub f32_decode: bool,
    pub device: Device,
    /// The KV cache's type (None: the device's default).
    pub cache_type: Option<DType>,
}

/// `--cache-type f32|f16|bf16`.
pub fn cache_type(name: Option<&str>) -> Result<Option<DType>> {
    name.map(|n| match n {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        _ => Err(Error::input(format!("--cache-type '{}': f32, f16 or bf16", n.escape_debug()))),
    })
    .transpose()
}

impl ModelChoice {
    fn load(&self) -> Result<(Llama, PathBuf)> {
        let path = model_path(self.path.as_deref())?;
        let options = LlamaOptions {
            context: self.context,
            threads: self.threads,
            q8_decode: !self.f32_decode,
            device: self.device,
            cache_type: self.cache_type,
        };
        Ok((Llama::load(&path, &options)?, path))
    }

    fn describe(&self, model: &Llama) -> String {
        format!(
            "{} threads, {} activations, {} KV cache",
            self.threads.unwrap_or_else(rlx::runtime::cpu::default_threads),
            if self.f32_decode { "f32" } else { "16-bit prompt / 8-bit decode" },
            model.cache_type()
        )
    }
}

/// What `rlx generate` was asked for.
pub struct GenerateArgs {
    pub model: ModelChoice,
    pub prompt: String,
    pub max_new: usize,
    pub sampler: SamplerConfig,
    pub chat: bool,
    pub system: Option<String>,
    /// Parse control-token strings in the user's text as control tokens (`--special`).
    pub special: bool,
    /// Stop strings (OpenAI's semantics: the first occurrence ends the text, unprinted).
    pub stops: Vec<String>,
    /// Keep the tail of a prompt longer than the context.
    pub truncate: bool,
    /// One JSON object instead of streamed text.
    pub json: bool,
}

/// The prompt from `-p TEXT`, `-p -` (standard input) or `-f FILE`.
pub fn read_prompt(prompt: Option<&str>, file: Option<&Path>) -> Result<String> {
    match (prompt, file) {
        (Some("-"), _) => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| Error::io(format!("reading the prompt from standard input: {e}")))?;
            Ok(text)
        }
        (Some(text), _) => Ok(text.to_string()),
        (None, Some(path)) => {
            let bytes = std::fs::read(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
            String::from_utf8(bytes).map_err(|e| {
                Error::input(format!("{}: not UTF-8 text (byte {})", path.display(), e.utf8_error().valid_up_to()))
            })
        }
        (None, None) => Err(Error::input("no prompt: give -p TEXT, -p - (standard input) or -f FILE")),
    }
}

/// The model path given, or the default one, which must exist.
pub fn model_path(given: Option<&Path>) -> Result<PathBuf> {
    let path = given.map_or_else(rlx::models::default_model_path, Path::to_path_buf);
    if !path.exists() {
        let hint = if given.is_none() { " (fetch it with tools/fetch_model.sh)" } else { "" };
        return Err(Error::io(format!("model {} not found{hint}", path.display())));
    }
    Ok(path)
}

/// A prompt that fits the context: an error naming both lengths, or with `truncate` its
/// last tokens (BOS kept first), leaving room for `max_new` tokens (at most half the
/// context).
fn fit_prompt(model: &Llama, mut prompt: Vec<TokenId>, max_new: usize, truncate: bool) -> Result<Vec<TokenId>> {
    let context = model.context();
    if prompt.len() <= context {
        return Ok(prompt);
    }
    if !truncate {
        return Err(Error::input(format!(
            "the prompt is {} tokens, longer than the context of {context} tokens (raise --ctx, or --truncate keeps its end)",
            prompt.len()
        )));
    }
    let keep = context - max_new.clamp(1, context / 2).min(context - 1);
    let bos: Vec<TokenId> =
        model.tokenizer.prompt_start().into_iter().filter(|&b| prompt.first() == Some(&b)).collect();
    let tail = prompt.split_off(prompt.len() - (keep - bos.len()));
    eprintln!("note: the prompt of {} tokens is cut to its last {keep} (context {context})", prompt.len() + tail.len());
    Ok([bos, tail].concat())
}

/// A rate for the summary line (`-` when nothing ran).
fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.1}"))
}

/// `rlx generate`. Control-token strings (`<|im_start|>` ...) typed in the prompt or the
/// system message are plain text unless `args.special`: only the chat template's own
/// markers are control tokens, so a message cannot open a turn of its own.
pub fn generate(args: &GenerateArgs) -> Result<()> {
    let (mut model, path) = args.model.load()?;
    let prompt = model
        .encode_request(&args.prompt, args.chat, args.system.as_deref(), args.special)
        .map_err(|e| e.context(path.display()))?;
    let prompt = fit_prompt(&model, prompt, args.max_new, args.truncate)?;
    let sampler = Sampler::new(args.sampler.clone())?;
    let start = Instant::now();
    let mut completion = Completion::begin(&mut model, &prompt, args.max_new, sampler, &args.stops)?;
    let mut stdout = std::io::stdout();
    let mut out = |text: &str| {
        write!(stdout, "{text}").and_then(|_| stdout.flush()).map_err(|e| Error::io(format!("stdout: {e}")))
    };
    if !args.chat && !args.json {
        out(&args.prompt)?;
    }
    let mut text = String::new();
    while let Some(piece) = completion.next_text(&mut model)? {
        if !args.json {
            out(&piece)?;
        }
        text.push_str(&piece);
    }
    let (tokens, stats) = (&completion.generation.tokens, &completion.generation.stats);
    let full = completion.generation.filled_context();
    if args.json {
        let report = serde_json::json!({
            "text": text,
            "model": path.display().to_string(),
            "prompt_tokens": stats.prompt_tokens,
            "generated_tokens": tokens.len(),
            "finish_reason": completion.finish_reason().map(|f| f.name()),
            "context": model.context(),
            "context_full": full,
            "timings": {
                "compile_seconds": stats.compile_seconds,
                "prompt_seconds": stats.prompt_seconds,
                "generate_seconds": stats.generate_seconds,
                "total_seconds": start.elapsed().as_secs_f64(),
                "prompt_tokens_per_second": stats.prompt_tokens_per_second(),
                "generate_tokens_per_second": stats.generate_tokens_per_second(),
            },
        });
        println!("{report}");
        return Ok(());
    }
    println!();
    eprintln!();
    if full {
        eprintln!("note: the context of {} tokens is full: generation ended (raise --ctx for more)", model.context());
    }
    eprintln!(
        "prompt: {} tokens, {} tok/s | generation: {} tokens, {} tok/s | compile and pack {:.0} ms ({})",
        stats.prompt_tokens,
        rate(stats.prompt_tokens_per_second()),
        tokens.len(),
        rate(stats.generate_tokens_per_second()),
        stats.compile_seconds * 1e3,
        args.model.describe(&model)
    );
    Ok(())
}

/// `rlx chat`: a conversation in the terminal. Each turn prefills only what is new: the
/// cache keeps the longest prefix of the new prompt it already holds; when the context
/// fills up, the oldest turns are dropped (with a notice) and the rest is prefilled again.
pub fn chat(choice: &ModelChoice, sampler: SamplerConfig, system: Option<String>, max_new: usize) -> Result<()> {
    let (mut model, path) = choice.load()?;
    let template = model.chat_template().map_err(|e| e.context(path.display()))?;
    let mut system = system;
    let mut history: Vec<Message> = Vec::new();
    // The tokens the cache holds.
    let mut cached: Vec<TokenId> = Vec::new();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let interactive = std::io::IsTerminal::is_terminal(&stdin);
    eprintln!(
        "rlx chat: {} (context {} tokens, {}). /reset starts over, /system TEXT sets the system message, /quit leaves.",
        path.display(),
        model.context(),
        choice.describe(&model)
    );
    loop {
        if interactive {
            write!(stdout, "> ").and_then(|_| stdout.flush()).map_err(|e| Error::io(format!("stdout: {e}")))?;
        }
        let mut line = String::new();
        let read = stdin.read_line(&mut line).map_err(|e| Error::io(format!("stdin: {e}")))?;
        if read == 0 {
            return Ok(());
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.split_once(' ').map_or((line, ""), |(c, rest)| (c, rest)) {
            ("/quit" | "/exit", _) => return Ok(()),
            ("/reset", _) => {
                history.clear();
                cached.clear();
                model.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            ("/system", text) => {
                system = Some(text.to_string()).filter(|t| !t.is_empty());
                history.clear();
                cached.clear();
                model.reset();
                eprintln!("(system message set; conversation cleared)");
                continue;
            }
            _ if line.trim().is_empty() => continue,
            _ => {}
        }
        history.push(Message::new("user", line));
        let turn = Turn { template: &template, system: system.as_deref(), max_new, sampler: &sampler };
        match turn.run(&mut model, &mut history, &mut cached, &mut stdout) {
            Ok(reply) => history.push(Message::new("assistant", &reply)),
            // A message that cannot run (longer than the context, say) is refused and the
            // conversation goes on without it.
            Err(e) => {
                history.pop();
                cached.clear();
                model.reset();
                eprintln!("error: {}", e.to_string().replace('\n', " "));
            }
        }
    }
}

/// One reply of `rlx chat`.
struct Turn<'a> {
    template: &'a rlx::models::ChatTemplate,
    system: Option<&'a str>,
    max_new: usize,
    sampler: &'a SamplerConfig,
}

impl Turn<'_> {
    /// Prefills what the cache lacks of the conversation, streams the reply to `out` and
    /// returns it; `cached` is kept equal to the tokens the cache holds.
    fn run(
        &self,
        model: &mut Llama,
        history: &mut Vec<Message>,
        cached: &mut Vec<TokenId>,
        out: &mut impl Write,
    ) -> Result<String> {
        let io = |e: std::io::Error| Error::io(format!("stdout: {e}"));
        loop {
            let mut messages: Vec<Message> = self.system.iter().map(|s| Message::new("system", s)).collect();
            messages.extend(history.iter().cloned());
            let ids = self.template.encode(&model.tokenizer, &messages, true, false)?;
            // Room for the reply: drop the oldest exchange while it does not fit.
            if ids.len() + self.max_new.min(model.context() / 2) > model.context() && history.len() > 1 {
                let drop = history.iter().skip(1).position(|m| m.role == "user").map_or(history.len() - 1, |i| i + 1);
                history.drain(..drop);
                eprintln!("(the context is full: the oldest turns were dropped)");
                continue;
            }
            // The cache keeps the longest prefix it shares with the new prompt (at least
            // one token is run, for the logits that follow).
            let shared = cached.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
            model.rewind(shared)?;
            cached.truncate(shared);
            let sampler = Sampler::new(self.sampler.clone())?;
            let mut completion = Completion::begin(model, &ids[shared..], self.max_new, sampler, &[])?;
            let mut reply = String::new();
            while let Some(piece) = completion.next_text(model)? {
                write!(out, "{piece}").and_then(|_| out.flush()).map_err(io)?;
                reply.push_str(&piece);
            }
            writeln!(out).map_err(io)?;
            if completion.generation.filled_context() {
                eprintln!("(the context of {} tokens is full: the reply was cut)", model.context());
            }
            let mut all = [&ids[..], &completion.generation.tokens[..]].concat();
            all.truncate(model.position());
            *cached = all;
            return Ok(reply);
        }
    }
}

/// `rlx perplexity`: prints llama-perplexity's running values and final estimate.
pub fn perplexity(choice: &ModelChoice, file: &Path, chunks: Option<usize>) -> Result<()> {
    let mut text = read_prompt(None, Some(file))?;
    if text.ends_with('\n') {
        text.pop();
    }
    let (mut model, path) = choice.load()?;
    let tokens = model.tokenizer.encode_prompt(&text, false)?;
    let ctx = choice.context;
    eprintln!(
        "perplexity: {} on {} ({} tokens), chunks of {ctx} tokens scored on their second half ({})",
        path.display(),
        file.display(),
        tokens.len(),
        choice.describe(&model)
    );
    let start = Instant::now();
    let progress = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{bar:30} chunk {pos}/{len} {msg} ({elapsed}, eta {eta})")
            .map_err(|e| Error::internal(e.to_string()))?,
    );
    let result = rlx::models::perplexity(&mut model, &tokens, ctx, chunks, |i, n, ppl| {
        progress.set_length(n as u64);
        progress.set_position(i as u64 + 1);
        progress.set_message(format!("ppl {ppl:.4}"));
    });
    progress.finish_and_clear();
    let p = result?;
    let running: Vec<String> = p.running.iter().enumerate().map(|(i, v)| format!("[{}]{v:.4}", i + 1)).collect();
    println!("{}", running.join(","));
    println!("Final estimate: PPL = {:.4} +/- {:.5}", p.ppl, p.error);
    eprintln!(
        "{} tokens scored in {} chunks, {:.1} s ({:.1} tok/s)",
        p.tokens_scored,
        p.running.len(),
        start.elapsed().as_secs_f64(),
        (p.running.len() * ctx) as f64 / start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `rlx quantize IN OUT --type T`.
pub fn quantize(input: &Path, output: &Path, kind: &str) -> Result<()> {
    let to = rlx::models::quantize::QuantType::parse(kind)?;
    let gguf = Gguf::open(input)?;
    let start = Instant::now();
    let progress = indicatif::ProgressBar::new(gguf.tensors.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} tensors {msg}")
            .map_err(|e| Error::internal(e.to_string()))?,
    );
    // Written beside OUT and renamed at the end: a failure leaves no half file, and OUT
    // may be IN (whose bytes stay mapped until the rename).
    let part = output
        .with_file_name(format!(".{}.part", output.file_name().map_or("quantized".into(), |n| n.to_string_lossy())));
    let io = |e: std::io::Error, p: &Path| Error::io(format!("{}: {e}", p.display()));
    let file = std::fs::File::create(&part).map_err(|e| io(e, &part))?;
    let result = rlx::models::quantize::quantize(&gguf, to, std::io::BufWriter::new(file), |i, _, name| {
        progress.set_position(i as u64);
        progress.set_message(name.to_string());
    });
    progress.finish_and_clear();
    let report = match result {
        Ok((_, report)) => report,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(e.context(input.display()));
        }
    };
    std::fs::rename(&part, output).map_err(|e| io(e, output))?;
    let types: Vec<String> = report.by_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    println!(
        "{} -> {} ({kind}): {:.1} MiB of tensors -> {:.1} MiB; {}, {} kept as they were; {:.1} s",
        input.display(),
        output.display(),
        report.bytes_in as f64 / (1 << 20) as f64,
        report.bytes_out as f64 / (1 << 20) as f64,
        types.join(", "),
        report.kept,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `rlx inspect FILE.gguf`: metadata and tensors.
pub fn inspect_gguf(path: &Path) -> Result<()> {
    let g = Gguf::open(path)?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: GGUF v{}, {} metadata keys, {} tensors, {bytes} bytes, data from byte {} (alignment {})",
        path.display(),
        g.version,
        g.metadata.len(),
        g.tensors.len(),
        g.data_offset,
        g.alignment
    );
    println!();
    println!("metadata:");
    for (key, value) in &g.metadata {
        // Escaped: a key's bytes are the file's, and must not drive the terminal.
        println!("  {:<44} {}", key.escape_debug().to_string(), value.summary());
    }
    println!();
    println!("{:<36} {:<6} {:<16} {:>12} {:>12}", "tensor", "type", "shape", "bytes", "offset");
    // u128 sums: tensors may share bytes, so totals are not bounded by the file size
    // and u64 / usize sums could wrap.
    let mut by_scheme: std::collections::BTreeMap<&str, (u128, u128)> = Default::default();
    for t in &g.tensors {
        let shape = format!("{:?}", t.shape());
        println!("{:<36} {:<6} {:<16} {:>12} {:>12}", t.name.escape_debug(), t.scheme.name(), shape, t.bytes, t.offset);
        let e = by_scheme.entry(t.scheme.name()).or_default();
        e.0 += t.bytes as u128;
        e.1 += t.numel() as u128;
    }
    println!();
    for (scheme, (bytes, elems)) in by_scheme {
        println!(
            "{scheme:<6} {elems:>12} values {bytes:>12} bytes ({:.2} bits/value)",
            bytes as f64 * 8.0 / elems.max(1) as f64
        );
    }
    Ok(())
}

/// One measured configuration.
struct Row {
    threads: usize,
    test: String,
    rlx: f64,
    anchor: Option<f64>,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Peak and current resident set of this process, KiB (Linux `/proc`; 0 elsewhere).
fn rss_kib(field: &str) -> u64 {
    status_kib(Path::new("/proc/self/status"), field)
}

/// Lowers this process's peak resident set (VmHWM) to its current one (Linux 4.0+; a
/// no-op elsewhere), so that a later peak covers only what ran after.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A KiB field of a `/proc/PID/status` file (0 when absent).
fn status_kib(status: &Path, field: &str) -> u64 {
    std::fs::read_to_string(status)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(&format!("{field}:")))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

const PP: usize = 512;
const TG: usize = 128;
const CONTEXT: usize = 1024;
const REPS: usize = 3;
/// Cache rows filled before the `tg128@d896` row's decode: the context less the tokens
/// decoded, where attention over the cache is a third of a token (SmolLM2).
const DEPTH: usize = CONTEXT - TG;

/// `rlx bench llm`: pp512 and tg128 at each thread count, and the decode roof: the DRAM
/// read rate over the bytes a token reads. With `llama_cpp`, the same on llama.cpp in the
/// same run: `llama-bench` right after RLX at each thread count when
/// tools/llm/build_llama_cpp.sh has built it (or `$LLAMA_BENCH` names it), else
/// llama-cpp-python (built by tools/bench/llama_cpp_env.sh) after all of RLX's runs.
pub fn bench_llm(
    model: Option<&Path>,
    threads: &[usize],
    batch: &[usize],
    llama_cpp: bool,
    device: Device,
) -> Result<()> {
    if let Some(&bad) = batch.iter().find(|&&b| b == 0 || b > 64) {
        return Err(Error::input(format!("--batch {bad}: sequences decoded together must be 1 to 64")));
    }
    let path = model_path(model)?;
    let baseline_kib = rss_kib("VmRSS");
    println!(
        "rlx bench llm: {} ({} bytes), pp{PP} / tg{TG}, context {CONTEXT}, median of {REPS} after a warm-up, on {device}",
        path.display(),
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
    );
    if device == Device::Gpu {
        println!("gpu: {}", rlx::runtime::gpu::describe().map_err(Error::unsupported)?);
    }
    // Host threads only matter on the CPU.
    let threads = if device == Device::Cpu { threads } else { &threads[..threads.len().min(1)] };
    let llama_bench = if llama_cpp { llama_bench_path()? } else { None };
    let token_bytes = decode_bytes(&Gguf::open(&path)?);
    let mut rows = Vec::new();
    let mut llama_bench_peak_kib = 0;
    let mut llama_bench_repack_off = false;
    // Peak RSS over the tests llama-bench also runs, and over all of them: the batched
    // tests hold a KV cache per slot (8 x 23 MiB for SmolLM2 at context 1024).
    let (mut peak_kib, mut batched_peak_kib) = (0, 0);
    for &t in threads {
        reset_peak_rss();
        peak_kib = peak_kib.max(measure_rlx(&path, t, batch, device, &mut rows)?);
        batched_peak_kib = batched_peak_kib.max(rss_kib("VmHWM"));
        if let Some(bin) = &llama_bench {
            let run = run_llama_bench(bin, &path, t)?;
            llama_bench_peak_kib = llama_bench_peak_kib.max(run.peak_kib);
            llama_bench_repack_off |= run.repack_off;
            for (test, rate) in run.rates {
                if let Some(row) = rows.iter_mut().find(|row| row.threads == t && row.test == test) {
                    row.anchor = Some(rate);
                }
            }
        }
    }
    // After the peaks are read: the probes' buffers are not the model's memory. One reads
    // past the last-level cache (the DRAM roof), one a token's weight bytes (the roof
    // where the caches hold the weights, as a 300 MiB L3 does).
    let bandwidth = if device == Device::Cpu {
        let probe = |t, bytes| rlx::runtime::cpu::bench::read_bandwidth_gbs(t, bytes);
        threads
            .iter()
            .map(|&t| Ok((t, probe(t, rlx::runtime::cpu::bench::DRAM_PROBE_BYTES)?, probe(t, token_bytes as usize)?)))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let mut anchor_rss = None;
    let mut engine = String::new();
    if llama_cpp && llama_bench.is_none() {
        let report = run_llama_cpp(&path, threads)?;
        engine = report["engine"].as_str().unwrap_or("llama.cpp").to_string();
        for r in report["results"].as_array().into_iter().flatten() {
            let (t, test) = (r["threads"].as_u64().unwrap_or(0) as usize, r["test"].as_str().unwrap_or(""));
            if let Some(row) = rows.iter_mut().find(|row| row.threads == t && row.test == test) {
                row.anchor = r["tokens_per_second"].as_f64();
            }
        }
        anchor_rss =
            Some((report["peak_rss_kib"].as_u64().unwrap_or(0), report["baseline_rss_kib"].as_u64().unwrap_or(0)));
    }
    println!();
    println!("{:>7}  {:<10} {:>12} {:>16} {:>8}", "threads", "test", "rlx tok/s", "llama.cpp tok/s", "ratio");
    for r in &rows {
        let (anchor, ratio) = match r.anchor {
            Some(a) => (format!("{a:.1}"), format!("{:.2}x", r.rlx / a)),
            None => ("-".into(), "-".into()),
        };
        println!("{:>7}  {:<10} {:>12.1} {:>16} {:>8}", r.threads, r.test, r.rlx, anchor, ratio);
    }
    println!();
    let mib = |kib: u64| kib as f64 / 1024.0;
    if !bandwidth.is_empty() {
        let token_mib = token_bytes as f64 / (1 << 20) as f64;
        println!(
            "decode roof: a token reads {token_mib:.1} MiB of weights; read rates of a {} MiB buffer (DRAM) and of a {token_mib:.0} MiB one",
            rlx::runtime::cpu::bench::DRAM_PROBE_BYTES >> 20
        );
        println!(
            "{:>7}  {:>10} {:>11} {:>8}  {:>10} {:>11} {:>8}  {:>8}",
            "threads", "DRAM GB/s", "roof tok/s", "of roof", "GB/s", "roof tok/s", "of roof", "tg tok/s"
        );
        for &(t, dram, weights) in &bandwidth {
            let roof = |gbs: f64| gbs * 1e9 / token_bytes.max(1) as f64;
            if let Some(tg) = rows.iter().find(|r| r.threads == t && r.test == format!("tg{TG}")) {
                let share = |gbs| format!("{:.0}%", 100.0 * tg.rlx / roof(gbs));
                println!(
                    "{t:>7}  {dram:>10.1} {:>11.1} {:>8}  {weights:>10.1} {:>11.1} {:>8}  {:>8.1}",
                    roof(dram),
                    share(dram),
                    roof(weights),
                    share(weights),
                    tg.rlx
                );
            }
        }
        println!();
    }
    println!("peak RSS: rlx {:.1} MiB (process before loading: {:.1} MiB)", mib(peak_kib), mib(baseline_kib));
    if !batch.is_empty() {
        println!("          {:.1} MiB with the batched tests' KV caches (one a slot)", mib(batched_peak_kib));
    }
    if llama_bench.is_some() {
        println!(
            "          llama-bench {:.1} MiB; rlx / llama-bench: {:.2}x",
            mib(llama_bench_peak_kib),
            peak_kib as f64 / llama_bench_peak_kib.max(1) as f64
        );
        println!(
            "          anchor: llama-bench (llama.cpp built for this CPU: its defaults{}, f16 KV cache), same threads",
            if llama_bench_repack_off { " but --repack 0, as its AMX kernels died of SIGILL" } else { "" }
        );
    } else if let Some((peak, base)) = anchor_rss {
        println!(
            "          llama.cpp {:.1} MiB (python process before loading: {:.1} MiB); rlx / llama.cpp: {:.2}x total, {:.2}x above each baseline",
            mib(peak),
            mib(base),
            peak_kib as f64 / peak as f64,
            (peak_kib - baseline_kib.min(peak_kib)) as f64 / (peak - base.min(peak)).max(1) as f64
        );
        println!("          anchor: {engine}, llama.cpp built for this CPU, same token ids, threads and context");
    } else {
        println!("(add --llama-cpp to measure llama.cpp in the same run; its first build takes ~9 minutes)");
    }
    Ok(())
}

/// RLX's rows at `t` threads: pp512, tg128 and each `tg128 xN` of `batch`. Returns the
/// peak RSS (KiB) before the batched tests.
fn measure_rlx(path: &Path, t: usize, batch: &[usize], device: Device, rows: &mut Vec<Row>) -> Result<u64> {
    let mut m =
        Llama::load(path, &LlamaOptions { context: CONTEXT, threads: Some(t), device, ..LlamaOptions::default() })?;
    let vocab = m.config.vocab;
    // The ids llama_cpp_bench.py uses.
    let prompt: Vec<TokenId> = (0..PP).map(|i| ((i * 7919) % vocab) as TokenId).collect();
    let generated: Vec<TokenId> = (0..TG).map(|i| ((i * 104729 + 13) % vocab) as TokenId).collect();
    let mut pp = || -> Result<f64> {
        m.reset();
        let start = Instant::now();
        m.prefill(&prompt)?;
        Ok(PP as f64 / start.elapsed().as_secs_f64())
    };
    pp()?;
    let runs = (0..REPS).map(|_| pp()).collect::<Result<Vec<_>>>()?;
    rows.push(Row { threads: t, test: format!("pp{PP}"), rlx: median(runs), anchor: None });
    // tg128 from an empty cache, then after DEPTH cache rows (llama-bench's `-d`), whose
    // prefill is not timed.
    let filled: Vec<TokenId> = (0..DEPTH).map(|i| ((i * 7919) % vocab) as TokenId).collect();
    let mut tg_after = |filled: &[TokenId]| -> Result<f64> {
        m.reset();
        if !filled.is_empty() {
            m.prefill(filled)?;
        }
        let start = Instant::now();
        for &id in &generated {
            m.decode(id)?;
        }
        Ok(TG as f64 / start.elapsed().as_secs_f64())
    };
    for (test, filled) in [(format!("tg{TG}"), &[][..]), (format!("tg{TG}@d{DEPTH}"), &filled[..])] {
        tg_after(filled)?;
        let runs = (0..REPS).map(|_| tg_after(filled)).collect::<Result<Vec<_>>>()?;
        rows.push(Row { threads: t, test, rlx: median(runs), anchor: None });
    }
    let peak_kib = rss_kib("VmHWM");
    for &b in batch {
        // `b` sequences, each after a 16-token prompt of its own, decoded together:
        // tokens of all of them per second.
        m.set_slots(b)?;
        let mut tg_batch = || -> Result<f64> {
            for slot in 0..b {
                m.prefill_slot(slot, 0, &prompt[slot..slot + 16])?;
            }
            let start = Instant::now();
            for (i, &id) in generated.iter().enumerate() {
                let step: Vec<BatchRow> = (0..b).map(|slot| BatchRow { slot, pos: 16 + i, token: id }).collect();
                // As `rlx serve` steps: the logits seen where the step left them.
                m.decode_batch_with(&step, |_| ())?;
            }
            Ok((b * TG) as f64 / start.elapsed().as_secs_f64())
        };
        tg_batch()?;
        let runs = (0..REPS).map(|_| tg_batch()).collect::<Result<Vec<_>>>()?;
        rows.push(Row { threads: t, test: format!("tg{TG}x{b}"), rlx: median(runs), anchor: None });
    }
    Ok(peak_kib)
}

/// Bytes of weights a decode step reads: every tensor but the token embedding, which a
/// step only gathers one row of, unless it is also the (tied) output head.
fn decode_bytes(g: &Gguf) -> u64 {
    let tied = g.tensor("output.weight").is_none();
    g.tensors.iter().filter(|t| tied || t.name != "token_embd.weight").map(|t| t.bytes as u64).sum()
}

/// `$LLAMA_BENCH`, or where tools/llm/build_llama_cpp.sh builds llama-bench, if present.
fn llama_bench_path() -> Result<Option<PathBuf>> {
    if let Some(path) = std::env::var_os("LLAMA_BENCH").map(PathBuf::from) {
        // Named on purpose: a wrong path is an error, not a quiet fall-back.
        if !path.exists() {
            return Err(Error::input(format!("LLAMA_BENCH names {}, which does not exist", path.display())));
        }
        return Ok(Some(path));
    }
    let path = rlx::models::models_dir().join("llama.cpp/build/bin/llama-bench");
    Ok(path.exists().then_some(path))
}

/// llama-bench's pp512, tg128 and tg128@d896 tokens/s at `threads`, as (test, rate), and
/// its peak resident set in KiB (sampled from /proc while it runs).
fn run_llama_bench(bin: &Path, model: &Path, threads: usize) -> Result<LlamaBenchRun> {
    eprintln!("running llama-bench at {threads} threads...");
    let run_one = |extra: &[&str]| -> Result<(std::process::ExitStatus, String, u64)> {
        let mut child = std::process::Command::new(bin)
            .args(["-m", &model.display().to_string()])
            .args(["-t", &threads.to_string(), "-r", &REPS.to_string(), "-o", "jsonl"])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| Error::io(format!("{}: {e}", bin.display())))?;
        let mut stdout = child.stdout.take().ok_or_else(|| Error::internal("llama-bench: no stdout pipe"))?;
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
        });
        let status_file = PathBuf::from(format!("/proc/{}/status", child.id()));
        let mut peak_kib = 0;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| Error::io(format!("{}: {e}", bin.display())))? {
                break status;
            }
            peak_kib = peak_kib.max(status_kib(&status_file, "VmHWM"));
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let text = reader
            .join()
            .map_err(|_| Error::internal("llama-bench: the output reader panicked"))?
            .map_err(|e| Error::io(format!("llama-bench output: {e}")))?;
        Ok((status, text, peak_kib))
    };
    // pp512 and tg128, then tg128 after DEPTH rows (one run each: no pp512 at that depth).
    let (pp, tg, depth) = (PP.to_string(), TG.to_string(), DEPTH.to_string());
    let tests = [["-p", pp.as_str(), "-n", &tg, "-d", "0"], ["-p", "0", "-n", &tg, "-d", &depth]];
    let run = |extra: &[&str]| -> Result<(std::process::ExitStatus, String, u64)> {
        let (status, mut text, peak_kib) = run_one(&[tests[0].as_slice(), extra].concat())?;
        if !status.success() {
            return Ok((status, text, peak_kib));
        }
        let (status, deep, deep_kib) = run_one(&[tests[1].as_slice(), extra].concat())?;
        text.push_str(&deep);
        Ok((status, text, peak_kib.max(deep_kib)))
    };
    let (mut status, mut text, mut peak_kib) = run(&[])?;
    // ggml's AMX kernels (used through its weight repacking) raise SIGILL in some VMs that
    // grant AMX to other programs (an Intel Xeon here, 2026-12-05: `tilezero` in
    // tinygemm_kernel_amx); its other CPU kernels are what runs there.
    let sigill = {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(4)
    };
    if sigill {
        eprintln!("llama-bench died of SIGILL in its AMX kernels; running it again with --repack 0");
        (status, text, peak_kib) = run(&["--repack", "0"])?;
    }
    if !status.success() {
        return Err(Error::runtime(format!("{} failed ({status}) on {}", bin.display(), model.display())));
    }
    // One JSON object a line (`-o jsonl`), one line a test.
    let mut rates = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: serde_json::Value =
            serde_json::from_str(line).map_err(|e| Error::parse(format!("llama-bench output: {e}: {line}")))?;
        let field = |name: &str| r[name].as_u64();
        if let (Some(pp), Some(tg), Some(rate)) = (field("n_prompt"), field("n_gen"), r["avg_ts"].as_f64()) {
            let test = if pp > 0 { format!("pp{pp}") } else { format!("tg{tg}") };
            let depth = field("n_depth").unwrap_or(0);
            rates.push((if depth > 0 { format!("{test}@d{depth}") } else { test }, rate));
        }
    }
    Ok(LlamaBenchRun { rates, peak_kib, repack_off: sigill })
}

/// What one llama-bench run gave: tok/s per test, its peak RSS, and whether its weight
/// repacking had to be turned off.
struct LlamaBenchRun {
    rates: Vec<(String, f64)>,
    peak_kib: u64,
    repack_off: bool,
}

/// Runs tools/bench/llama_cpp_bench.py in the cached llama.cpp virtualenv.
fn run_llama_cpp(model: &Path, threads: &[usize]) -> Result<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("rlx-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("{}: {e}", dir.display())))?;
    let env_script = dir.join("llama_cpp_env.sh");
    let bench_script = dir.join("llama_cpp_bench.py");
    let write = |p: &Path, text: &str| std::fs::write(p, text).map_err(|e| Error::io(format!("{}: {e}", p.display())));
    write(&env_script, include_str!("../../../tools/bench/llama_cpp_env.sh"))?;
    write(&bench_script, include_str!("../../../tools/bench/llama_cpp_bench.py"))?;
    eprintln!("preparing llama.cpp (cached virtualenv; the first build takes ~9 minutes)...");
    let env = std::process::Command::new("bash")
        .arg(&env_script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io(format!("bash {}: {e}", env_script.display())))?;
    if !env.status.success() {
        return Err(Error::runtime("building llama-cpp-python failed (see above)"));
    }
    let python = String::from_utf8_lossy(&env.stdout).trim().to_string();
    let list: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    eprintln!("running llama.cpp...");
    let out = std::process::Command::new(&python)
        .arg(&bench_script)
        .args(["--model", &model.display().to_string(), "--threads", &list.join(",")])
        .args(["--pp", &PP.to_string(), "--tg", &TG.to_string(), "--ctx", &CONTEXT.to_string()])
        .args(["--reps", &REPS.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io(format!("{python}: {e}")))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        return Err(Error::runtime("the llama.cpp benchmark failed (see above)"));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| Error::parse(format!("llama.cpp benchmark output: {e}")))
}

/// `rlx bench serve`: this executable's `rlx serve` under concurrent clients, beside
/// llama-server when asked.
pub fn bench_serve(
    model: Option<PathBuf>,
    threads: &[usize],
    llama_cpp: bool,
    clients: Vec<usize>,
    tokens: usize,
    rounds: usize,
) -> Result<()> {
    let llama_server = if llama_cpp {
        let path = std::env::var_os("LLAMA_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| rlx::models::models_dir().join("llama.cpp/build/bin/llama-server"));
        if !path.exists() {
            return Err(Error::input(format!(
                "{} not found: build it with tools/llm/build_llama_cpp.sh (or set LLAMA_SERVER)",
                path.display()
            )));
        }
        Some(path)
    } else {
        None
    };
    let rlx = std::env::current_exe().map_err(|e| Error::runtime(format!("cannot find this executable: {e}")))?;
    // One thread count per run: the largest given (default: all cores).
    let threads = threads.iter().copied().max();
    rlx_serve::bench::run(&rlx_serve::bench::BenchOptions {
        rlx,
        model: model.unwrap_or_else(rlx::models::default_model_path),
        clients: if clients.is_empty() { vec![1] } else { clients },
        max_tokens: tokens.max(1),
        rounds: rounds.max(1),
        llama_server,
        threads,
    })
}
