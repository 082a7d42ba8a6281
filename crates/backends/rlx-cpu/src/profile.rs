//! The CPU profiler: where a program's time goes.
//!
//! With `RLX_PROFILE=1` in the environment (or [`set_enabled`], which the CLI's
//! `--profile` flags call) every [`crate::CpuProgram::run`] times each of its kernel calls
//! and the time around them, and adds them to a process-wide table keyed by the graph's
//! name (one entry per step kind: a prompt step, a decode step, a batched step). [`report`]
//! prints it: per step kind the wall time of a run split into kernels, the gaps between
//! kernels (dispatch, the f16 rounding of outputs), the pool hand-off (waking a worker to
//! run the program and returning), the copies of inputs and outputs and, apart, the packing
//! of weights on a program's first run; then per kernel
//! kind and for the slowest nodes: calls, time, share, and the GFLOP/s and GB/s achieved
//! over the kernel's own time.
//!
//! A kernel's time includes its own parallel overhead (splitting the work, waking the
//! pool's workers, waiting for the slowest at the join). FLOPs count a multiply-add as 2;
//! bytes are what the kernel must touch at least (its operands and results once; for
//! attention over a cache, the rows it attends to; for a cache append, the new rows), so
//! GB/s is a lower bound of the traffic. Off, the cost is one relaxed atomic load per run.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// 0: not read yet; 1: off; 2: on.
static ENABLED: AtomicU8 = AtomicU8::new(0);

/// Whether runs are profiled: [`set_enabled`]'s last value, else `RLX_PROFILE` is set to
/// something other than `0` or empty.
pub fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("RLX_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0");
            ENABLED.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        state => state == 2,
    }
}

/// Turns profiling on or off for the runs that follow.
pub fn set_enabled(on: bool) {
    ENABLED.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// One kernel call of a program, as the profiler sees it.
pub(crate) struct NodeTime {
    pub time: Duration,
    pub flops: f64,
    pub bytes: f64,
}

/// The time of runs around their kernels.
#[derive(Clone, Debug, Default)]
pub struct RunTime {
    pub wall: Duration,
    /// Writing the inputs into the arena and reading the outputs back.
    pub copies: Duration,
    /// Packing param weights for the products that read them packed, on a program's first
    /// run and after a param's bytes change, and checking on the other runs that the
    /// packings are current (a one-time cost a run's average would otherwise hide in the
    /// copies: 0.31 ms a run against 0.015 of copies in an MLP's profile over 66 runs).
    pub packing: Duration,
    /// Entering the worker pool and coming back.
    pub handoff: Duration,
    /// Inside the pool, between kernel calls.
    pub gaps: Duration,
}

/// A kernel call's totals over the runs recorded.
#[derive(Clone, Debug)]
pub struct Node {
    /// `"kind -> output"`.
    pub label: String,
    pub calls: u64,
    pub time: Duration,
    pub flops: f64,
    pub bytes: f64,
}

/// A step kind's totals: the runs of the programs of one graph name.
#[derive(Clone, Debug)]
pub struct GraphProfile {
    pub name: String,
    pub runs: u64,
    pub run: RunTime,
    pub nodes: Vec<Node>,
}

static TABLE: Mutex<Vec<GraphProfile>> = Mutex::new(Vec::new());

/// Adds one run of the program `name` (its kernels labelled by `labels`) to the table.
pub(crate) fn record(name: &str, labels: &[&str], nodes: &[NodeTime], run: &RunTime) {
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    // Programs of one name and length share an entry (the same step compiled again).
    let same = |g: &GraphProfile| g.name == name && g.nodes.len() == labels.len();
    let i = match table.iter().position(same) {
        Some(i) => i,
        None => {
            let nodes = labels
                .iter()
                .map(|l| Node { label: l.to_string(), calls: 0, time: Duration::ZERO, flops: 0.0, bytes: 0.0 })
                .collect();
            table.push(GraphProfile { name: name.to_string(), runs: 0, run: RunTime::default(), nodes });
            table.len() - 1
        }
    };
    let g = &mut table[i];
    g.runs += 1;
    g.run.wall += run.wall;
    g.run.copies += run.copies;
    g.run.packing += run.packing;
    g.run.handoff += run.handoff;
    g.run.gaps += run.gaps;
    for (n, t) in g.nodes.iter_mut().zip(nodes) {
        n.calls += 1;
        n.time += t.time;
        n.flops += t.flops;
        n.bytes += t.bytes;
    }
}

/// What was recorded so far.
pub fn snapshot() -> Vec<GraphProfile> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Forgets what was recorded.
pub fn reset() {
    TABLE.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Kernel kind of a node label (`"kind -> output"`).
fn kind(label: &str) -> &str {
    label.split(" -> ").next().unwrap_or(label)
}

/// The table as text, step kinds by total time; `None` when nothing was recorded.
pub fn report() -> Option<String> {
    use std::fmt::Write;
    let table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    if table.is_empty() {
        return None;
    }
    let ms = |d: Duration, runs: u64| d.as_secs_f64() * 1e3 / runs as f64;
    let rate = |x: f64, d: Duration| {
        if d.is_zero() || x == 0.0 { "-".to_string() } else { format!("{:.1}", x / d.as_secs_f64() / 1e9) }
    };
    let mut order: Vec<&GraphProfile> = table.iter().collect();
    order.sort_by_key(|g| std::cmp::Reverse(g.run.wall));
    let mut out =
        String::from("RLX_PROFILE: per step kind, times per run; GFLOP/s and GB/s over each kernel's own time\n");
    for g in order {
        let runs = g.runs.max(1);
        let kernels: Duration = g.nodes.iter().map(|n| n.time).sum();
        let wall = g.run.wall;
        let share = |d: Duration| 100.0 * d.as_secs_f64() / wall.as_secs_f64().max(1e-12);
        let _ = writeln!(
            out,
            "\n{}: {} runs, {:.3} ms a run = kernels {:.3} ms ({:.1}%) + between kernels {:.3} ms ({:.1}%) \
             + pool hand-off {:.3} ms ({:.1}%) + input/output copies {:.3} ms ({:.1}%)",
            g.name,
            g.runs,
            ms(wall, runs),
            ms(kernels, runs),
            share(kernels),
            ms(g.run.gaps, runs),
            share(g.run.gaps),
            ms(g.run.handoff, runs),
            share(g.run.handoff),
            ms(g.run.copies, runs),
            share(g.run.copies),
        );
        if !g.run.packing.is_zero() {
            let _ = writeln!(
                out,
                "  + weight packing (first runs, changed params) {:.3} ms a run ({:.1}%)",
                ms(g.run.packing, runs),
                share(g.run.packing)
            );
        }
        // By kernel kind.
        let mut kinds: Vec<(&str, u64, Duration, f64, f64)> = Vec::new();
        for n in &g.nodes {
            let k = kind(&n.label);
            match kinds.iter_mut().find(|e| e.0 == k) {
                Some(e) => {
                    e.1 += n.calls;
                    e.2 += n.time;
                    e.3 += n.flops;
                    e.4 += n.bytes;
                }
                None => kinds.push((k, n.calls, n.time, n.flops, n.bytes)),
            }
        }
        kinds.sort_by_key(|k| std::cmp::Reverse(k.2));
        let _ = writeln!(
            out,
            "  {:<28} {:>9} {:>9} {:>7} {:>8} {:>7}",
            "kernel", "calls/run", "ms/run", "share", "GFLOP/s", "GB/s"
        );
        for (k, calls, time, flops, bytes) in kinds {
            let _ = writeln!(
                out,
                "  {:<28} {:>9} {:>9.3} {:>6.1}% {:>8} {:>7}",
                k,
                calls / runs,
                ms(time, runs),
                share(time),
                rate(flops, time),
                rate(bytes, time)
            );
        }
        let mut nodes: Vec<&Node> = g.nodes.iter().collect();
        nodes.sort_by_key(|n| std::cmp::Reverse(n.time));
        let _ = writeln!(out, "  slowest nodes:");
        for n in nodes.iter().take(8) {
            let _ = writeln!(
                out,
                "  {:>9.3} ms {:>6.1}% {:>8} GFLOP/s {:>7} GB/s  {}",
                ms(n.time, runs),
                share(n.time),
                rate(n.flops, n.time),
                rate(n.bytes, n.time),
                n.label
            );
        }
    }
    Some(out)
}
