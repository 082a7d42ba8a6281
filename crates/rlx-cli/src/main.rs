//! `rlx`: inspect, run and demo RLX graphs. Every failure exits non-zero with a
//! one-line reason on stderr.

mod bench;
mod check;
mod demo;
mod info;
mod inspect;
mod run;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rlx", version, about = "RLX: compile and run tensor graphs", disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a graph's nodes, shapes, dtypes, inputs, params and outputs.
    Inspect {
        /// A graph in RLX's JSON format (docs/graph-format.md).
        graph: PathBuf,
    },
    /// Compile a graph for the CPU, run it on .npy inputs and print or save the outputs.
    Run {
        /// A graph in RLX's JSON format.
        graph: PathBuf,
        /// An input value: NAME=FILE.npy (repeat for each input).
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// A param value: NAME=FILE.npy (repeat for each param).
        #[arg(long = "param", value_name = "NAME=FILE")]
        params: Vec<String>,
        /// Write output i to DIR/output_i.npy instead of printing it.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Build, compile and run a small MLP with embedded weights, checked against an f64 reference.
    Demo,
    /// Verify a graph and report fusions, hazards and what it costs on a backend.
    Check {
        /// A graph in RLX's JSON format.
        graph: PathBuf,
        /// The backend to plan for.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Machine-readable output (schema: docs/check-schema.md).
        #[arg(long)]
        json: bool,
    },
    /// Print the CPU features found and the arm each kernel family uses.
    Info,
    /// Measure kernels against their anchors (glibc, NumPy, OpenBLAS, FMA peak) in one run.
    Bench {
        /// What to measure: `kernels`.
        #[arg(default_value = "kernels")]
        what: String,
    },
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // clap's report is several lines; the first one says what was wrong.
            let text = e.to_string();
            eprintln!("{}", text.lines().next().unwrap_or("error: bad arguments"));
            return ExitCode::from(2);
        }
        Err(e) => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let result = match cli.command {
        Command::Inspect { graph } => inspect::inspect(&graph),
        Command::Run { graph, inputs, params, out } => run::run(&graph, &inputs, &params, out.as_deref()),
        Command::Demo => demo::demo(),
        Command::Check { graph, backend, json } => check::check(&graph, &backend, json),
        Command::Info => info::info(),
        Command::Bench { what } => bench::bench(&what),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.to_string().replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// Reads and parses a graph file.
fn load_graph(path: &std::path::Path) -> rlx::Result<rlx::prelude::Graph> {
    let text = std::fs::read_to_string(path).map_err(|e| rlx::Error::io(format!("{}: {e}", path.display())))?;
    rlx::prelude::Graph::from_json(&text).map_err(|e| e.context(path.display()))
}

/// `rlx info | head` should end quietly like any Unix tool: Rust ignores SIGPIPE, which
/// turns a closed pipe into a panic inside `println!`; the default action exits instead.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    {
        const SIGPIPE: i32 = 13; // Linux, macOS and the BSDs
        const SIG_DFL: usize = 0;
        unsafe extern "C" {
            fn signal(signum: i32, handler: usize) -> usize;
        }
        // SAFETY: installing the default disposition for SIGPIPE has no preconditions.
        unsafe {
            signal(SIGPIPE, SIG_DFL);
        }
    }
}
