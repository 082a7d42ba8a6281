//! `rlx bench serve`: aggregate generated tokens per second of `rlx serve` under 1, 4 and
//! 8 concurrent clients, beside llama.cpp's `llama-server` on the same model, prompts and
//! load when it is available; then the server's resident memory after the load and after
//! two more rounds of 200 requests (the first of them compiles what the load left out:
//! graphs for batch sizes it did not reach; the second should add nothing).
//!
//! Each client sends non-streaming `/v1/completions` requests one after another (greedy,
//! `max_tokens` each, `ignore_eos` so that each runs to `max_tokens` on both servers: without
//! it 3 of SmolLM2's 8 answers ended after one token, and "8 clients" decoded ~5 streams;
//! `cache_prompt: false`, so that neither server starts a prompt from rows a request
//! before it left: the 8 prompts come round again in the next round)
//! over plain HTTP/1.1; the rate is the completion tokens the servers report in `usage`,
//! summed, over the wall time of the whole load.

use rlx_ir::{Error, Result};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to measure.
pub struct BenchOptions {
    /// The `rlx` executable (serves the model in a child process).
    pub rlx: PathBuf,
    pub model: PathBuf,
    pub clients: Vec<usize>,
    /// Tokens per request.
    pub max_tokens: usize,
    /// Requests per client at each load.
    pub rounds: usize,
    /// llama.cpp's server, measured beside RLX when given.
    pub llama_server: Option<PathBuf>,
    pub threads: Option<usize>,
}

/// Prompts the clients cycle through.
const PROMPTS: [&str; 8] = [
    "Write a long story about a dragon who learns to paint.",
    "Explain how a steam engine works, step by step.",
    "List every country in Europe with its capital.",
    "Describe the water cycle to a ten year old.",
    "Write a poem about the ocean at night.",
    "Tell me the history of the printing press.",
    "Give a recipe for bread, with all the steps.",
    "Describe a walk through a busy market in the morning.",
];

/// A server in a child process, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `rlx serve` on a free port (read from its log).
    fn rlx(o: &BenchOptions, slots: usize, context: usize) -> Result<Server> {
        let mut cmd = Command::new(&o.rlx);
        cmd.args(["serve", "--port", "0", "--parallel", &slots.to_string(), "-c", &context.to_string(), "-m"])
            .arg(&o.model);
        if let Some(t) = o.threads {
            cmd.args(["-t", &t.to_string()]);
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().map_err(|e| spawn_error(&o.rlx, e))?;
        let mut log = BufReader::new(child.stderr.take().expect("piped"));
        let mut line = String::new();
        loop {
            line.clear();
            if log.read_line(&mut line).map_err(|e| Error::runtime(e.to_string()))? == 0 {
                return Err(Error::runtime("rlx serve exited before listening"));
            }
            if let Some(port) = line.trim().rsplit(':').next().and_then(|p| p.parse().ok())
                && line.contains("listening on")
            {
                // Keep draining its log so that it never blocks on a full pipe.
                std::thread::spawn(move || log.lines().for_each(drop));
                return Ok(Server { child, port });
            }
        }
    }

    /// `llama-server` with the same slots and context per slot.
    fn llama(o: &BenchOptions, binary: &Path, slots: usize, context: usize) -> Result<Server> {
        Server::llama_with(o, binary, slots, context, &[])
    }

    fn llama_with(o: &BenchOptions, binary: &Path, slots: usize, context: usize, extra: &[&str]) -> Result<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::runtime(e.to_string()))?
            .port();
        let mut cmd = Command::new(binary);
        cmd.arg("-m").arg(&o.model).args([
            "--port",
            &port.to_string(),
            "-np",
            &slots.to_string(),
            // llama-server splits -c among its slots.
            "-c",
            &(slots * context).to_string(),
        ]);
        if let Some(t) = o.threads {
            cmd.args(["-t", &t.to_string()]);
        }
        cmd.args(extra);
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| spawn_error(binary, e))?;
        let mut server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(120);
        while http(port, "GET", "/health", None).map(|(status, _)| status) != Ok(200) {
            // ggml's AMX kernels (through its weight repacking) raise SIGILL in some VMs
            // that grant AMX to other programs (an Intel Xeon, 2026-12-05): its other CPU
            // kernels are what runs there.
            if extra.is_empty() && server.died_of_sigill() {
                eprintln!("llama-server died of SIGILL in its AMX kernels; starting it again with --no-repack");
                return Server::llama_with(o, binary, slots, context, &["--no-repack"]);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(Error::runtime(format!("{} exited ({status}) before serving", binary.display())));
            }
            if Instant::now() > deadline {
                return Err(Error::runtime("llama-server did not become healthy in 120 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// Whether the process died of SIGILL.
    fn died_of_sigill(&mut self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        matches!(self.child.try_wait(), Ok(Some(status)) if status.signal() == Some(4))
    }

    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: f64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    }
}

fn spawn_error(binary: &Path, e: std::io::Error) -> Error {
    Error::runtime(format!("cannot start {}: {e}", binary.display()))
}

/// One HTTP/1.1 request (`Connection: close`); status and body.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, String)> {
    let io = |e: std::io::Error| Error::runtime(format!("http {method} {path}: {e}"));
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(io)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    Ok((status, if chunked { dechunk(rest) } else { rest.to_string() }))
}

/// A chunked body's payload.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// Runs `clients` clients of `rounds` requests each; aggregate completion tokens/s.
fn load(port: u16, clients: usize, rounds: usize, max_tokens: usize) -> Result<f64> {
    let start = Instant::now();
    let tokens = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || -> Result<u64> {
                    let mut total = 0;
                    for r in 0..rounds {
                        let prompt = PROMPTS[(c + r * clients) % PROMPTS.len()];
                        let body =
                            json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true,
                                   "cache_prompt": false});
                        let (status, text) = http(port, "POST", "/v1/completions", Some(&body))?;
                        let answer: Value = serde_json::from_str(&text)
                            .map_err(|e| Error::runtime(format!("answer {status} is not JSON ({e}): {text}")))?;
                        total += answer["usage"]["completion_tokens"]
                            .as_u64()
                            .ok_or_else(|| Error::runtime(format!("answer {status} has no usage: {text}")))?;
                    }
                    Ok(total)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::internal("client panicked"))))
            .sum::<Result<u64>>()
    })?;
    Ok(tokens as f64 / start.elapsed().as_secs_f64())
}

/// Measures and prints the table.
pub fn run(o: &BenchOptions) -> Result<()> {
    const CONTEXT: usize = 512;
    let slots = o.clients.iter().copied().max().unwrap_or(1).max(1);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    println!(
        "rlx bench serve: {} on {cpu}, {} threads; {slots} slots x {CONTEXT} tokens; clients send {} requests each of {} tokens (greedy, /v1/completions)",
        o.model.display(),
        o.threads.map_or("all".into(), |t| t.to_string()),
        o.rounds,
        o.max_tokens
    );
    let mut rows: Vec<(usize, f64, Option<f64>)> = Vec::new();
    let rlx = Server::rlx(o, slots, CONTEXT)?;
    load(rlx.port, 1, 1, 4)?; // compiles the graphs a request needs
    for &c in &o.clients {
        rows.push((c, load(rlx.port, c, o.rounds, o.max_tokens)?, None));
    }
    let mut rss = vec![rlx.rss_mib()];
    for _ in 0..2 {
        load(rlx.port, slots, 200_usize.div_ceil(slots), 8)?;
        rss.push(rlx.rss_mib());
    }
    drop(rlx);
    if let Some(binary) = &o.llama_server {
        let llama = Server::llama(o, binary, slots, CONTEXT)?;
        load(llama.port, 1, 1, 4)?;
        for row in &mut rows {
            row.2 = Some(load(llama.port, row.0, o.rounds, o.max_tokens)?);
        }
    }
    println!("{:>8} {:>16} {:>20} {:>8}", "clients", "rlx tok/s", "llama-server tok/s", "ratio");
    for &(c, ours, theirs) in &rows {
        let (t, ratio) = match theirs {
            Some(t) => (format!("{t:.1}"), format!("{:.2}x", ours / t)),
            None => ("-".into(), "-".into()),
        };
        println!("{c:>8} {ours:>16.1} {t:>20} {ratio:>8}");
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && last.0 > first.0
    {
        println!("rlx: {} clients = {:.2}x the aggregate rate of {}", last.0, last.1 / first.1, first.0);
    }
    if let [Some(load), Some(first), Some(second)] = rss[..] {
        println!(
            "rlx serve resident memory: {load:.1} MiB after the load, {first:.1} MiB after 200 more requests, \
             {second:.1} MiB after 200 more"
        );
    }
    Ok(())
}
