//! `rlx train`: the digits MLP or CNN, or a character transformer on a text (the
//! embedded sonnets or `--text FILE`), then a sample. Progress bar, a line per epoch, a
//! metrics file (JSON lines) and a loss-curve PNG; checkpoints (`--save`, `--resume`);
//! data-parallel over MPI (`mpirun -np N rlx train ... --distributed`).

use indicatif::{ProgressBar, ProgressStyle};
use rlx::optim::Rule;
use rlx::prelude::*;
use rlx::train::metrics::{MetricsLog, TensorBoard};
use rlx::train::plot::{Axis, Chart, Scale, Series, chart};
use rlx::train::{
    ArrayData, Collective, Digits, Epoch, Network, Progress, RunConfig, RunControl, StepReport, Trainer,
    TransformerConfig, char_transformer, char_windows, cnn, mlp,
};
use std::path::{Path, PathBuf};

/// `rlx train`'s arguments.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// `mlp`, `cnn`, `char`, or `graph LOSS.json` (with --data DIR).
    #[arg(default_value = "mlp")]
    pub model: String,
    /// For `graph`: the loss graph (JSON): inputs `x` and `y` (i64 class ids),
    /// outputs `[loss]` or `[loss, logits]`, f32 params.
    pub loss_graph: Option<PathBuf>,
    /// For `graph`: a directory with `x.npy` (features, one example per row) and
    /// `y.npy` (integer targets).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Initial values for some or all params (safetensors), instead of the seeded init.
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// Epochs over the training examples (char: until --steps, 400 by default).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Stop after this many steps in all.
    #[arg(long)]
    pub steps: Option<usize>,
    /// The global batch (split across the ranks with --distributed).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Peak learning rate (linear warmup, cosine decay).
    #[arg(long)]
    pub lr: Option<f32>,
    /// Seeds the initial params, the held-out split and the shuffling (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// `adamw` (default), `adam`, `sgd` (Nesterov momentum) or `lion`.
    #[arg(long)]
    pub optimizer: Option<String>,
    /// The text for `char` (default: two embedded sonnets).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Where to write the loss curve (default rlx-train-MODEL.png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Where to write the metrics, one JSON object per step and per epoch (default
    /// rlx-train-MODEL.jsonl; a resumed run appends).
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Also write TensorBoard event files to DIR (`tensorboard --logdir DIR`).
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// Write a checkpoint to DIR after every epoch: params.safetensors, the
    /// optimizer state, the data order and RNG, meta.json.
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Continue the run checkpointed in DIR (its settings, unless given again).
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Stop after N epochs of this invocation (the schedule still spans the whole run);
    /// --resume continues it.
    #[arg(long, value_name = "N")]
    pub stop_after: Option<usize>,
    /// Data-parallel over MPI: `mpirun -np N rlx train ... --distributed`.
    #[arg(long)]
    pub distributed: bool,
    /// Gradient allreduce bucket size in MiB (--distributed).
    #[arg(long, default_value_t = 4.0)]
    pub bucket_mib: f64,
    #[arg(long)]
    pub threads: Option<usize>,
    /// `cpu` or `gpu` (the optimizer runs on the host).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

fn rule(name: &str) -> Result<Rule> {
    Ok(match name {
        "adamw" => Rule::adamw(0.05),
        "adam" => Rule::adam(),
        "sgd" => Rule::sgd(0.9, true),
        "lion" => Rule::lion(0.05),
        other => return Err(Error::input(format!("unknown optimizer '{other}' (adamw, adam, sgd, lion)"))),
    })
}

fn bar(steps: usize) -> ProgressBar {
    let pb = ProgressBar::new(steps as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:36} {pos}/{len} steps  {msg}  [{elapsed}<{eta}]") {
        pb.set_style(style);
    }
    pb
}

/// The process group of `--distributed`: MPI's world.
#[cfg(feature = "mpi")]
pub fn process_group() -> Result<Box<dyn Collective>> {
    Ok(Box::new(rlx::train::distributed::Mpi::init()?))
}

#[cfg(not(feature = "mpi"))]
pub fn process_group() -> Result<Box<dyn Collective>> {
    Err(Error::unsupported("this rlx was built without MPI (cargo feature `mpi` of rlx-cli)"))
}

pub fn train(args: &TrainArgs) -> Result<()> {
    let device = Device::from_name(&args.device)?;
    if args.stop_after == Some(0) {
        return Err(Error::input("--stop-after must be at least 1 epoch"));
    }
    if !(args.bucket_mib.is_finite() && args.bucket_mib > 0.0) {
        return Err(Error::input(format!("--bucket-mib must be a size > 0, got {}", args.bucket_mib)));
    }
    if !args.distributed {
        return train_in(args, device, None);
    }
    let group = process_group()?;
    let result = train_in(args, device, Some(group.as_ref()));
    if let Err(e) = &result
        && group.size() > 1
    {
        // The other ranks wait in the next collective call: end the whole job, naming
        // this rank, rather than let them hang.
        eprintln!("rank {}/{}: error: {}", group.rank(), group.size(), e.to_string().replace('\n', " "));
        group.abort(1);
    }
    result
}

/// Public-domain verse (Shakespeare, sonnets 18 and 116) to learn characters from.
const TEXT: &str = "Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.
Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove.
O no! it is an ever-fixed mark
That looks on tempests and is never shaken;
It is the star to every wand'ring bark,
Whose worth's unknown, although his height be taken.
Love's not Time's fool, though rosy lips and cheeks
Within his bending sickle's compass come;
Love alters not with his brief hours and weeks,
But bears it out even to the edge of doom.
If this be error and upon me prov'd,
I never writ, nor no man ever lov'd.
";

/// A text shorter than this trains on every window (stride 1, as the sonnets do); a
/// longer one on windows a sequence apart, which keeps the windows' arrays at 16 bytes
/// per character (Botchan's 300 kB: 10k windows).
const EVERY_WINDOW_BELOW: usize = 64 << 10;

/// What `args.model` trains: the network, its data, its default settings (for `ranks`
/// ranks), and (for `char`) the vocabulary.
fn setup(args: &TrainArgs, ranks: usize) -> Result<(Network, ArrayData, RunConfig, Option<Vec<char>>)> {
    if args.model != "graph" && (args.loss_graph.is_some() || args.data.is_some()) {
        return Err(Error::input(format!("a loss graph and --data are for `rlx train graph`, not '{}'", args.model)));
    }
    match args.model.as_str() {
        "graph" => {
            let (Some(path), Some(dir)) = (&args.loss_graph, &args.data) else {
                return Err(Error::input(
                    "rlx train graph needs a loss graph and its data: rlx train graph LOSS.json --data DIR",
                ));
            };
            let network = Network::from_loss_graph(crate::load_graph(path)?)?;
            let data = ArrayData::new(rlx::io::load_npy(dir.join("x.npy"))?, rlx::io::load_npy(dir.join("y.npy"))?)
                .map_err(|e| e.context(dir.display()))?;
            let batch = network.fixed_batch().unwrap_or(1) * ranks;
            Ok((network, data, RunConfig { epochs: 10, batch, ..RunConfig::mlp() }, None))
        }
        "mlp" | "cnn" => {
            let (network, base) =
                if args.model == "mlp" { (mlp(512), RunConfig::mlp()) } else { (cnn(32, 64), RunConfig::cnn()) };
            let data = Digits::load()?.arrays(&network.example)?;
            Ok((network, data, base, None))
        }
        "char" => {
            let text = match &args.text {
                Some(path) => {
                    std::fs::read_to_string(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?
                }
                None => TEXT.to_string(),
            };
            let seq = 32;
            let stride = if text.len() < EVERY_WINDOW_BELOW { 1 } else { seq };
            let (vocab, data) = char_windows(&text, seq, stride)?;
            let network = char_transformer(TransformerConfig { vocab: vocab.len(), seq, dim: 64, heads: 4, layers: 2 });
            // 400 steps of 16 windows unless --epochs or --steps say otherwise.
            let base = RunConfig { epochs: usize::MAX, max_steps: Some(400), held_out: 0.1, ..RunConfig::mlp() };
            Ok((network, data, base, Some(vocab)))
        }
        other => Err(Error::input(format!("unknown model '{other}' (mlp, cnn, char, graph)"))),
    }
}

fn train_in(args: &TrainArgs, device: Device, group: Option<&dyn Collective>) -> Result<()> {
    let (rank, ranks) = group.map_or((0, 1), |g| (g.rank(), g.size()));
    let root = rank == 0;
    let options = CompileOptions { threads: args.threads, ..CompileOptions::default() };
    let (network, data, base, vocab) = setup(args, ranks)?;
    let base = match &args.resume {
        Some(dir) => RunConfig::saved_in(dir, device)?,
        None => base,
    };
    let cfg = RunConfig {
        epochs: args.epochs.unwrap_or(if args.steps.is_some() { usize::MAX } else { base.epochs }),
        max_steps: if args.epochs.is_some() && args.steps.is_none() { None } else { args.steps.or(base.max_steps) },
        batch: args.batch.unwrap_or(base.batch),
        lr: args.lr.unwrap_or(base.lr),
        rule: match &args.optimizer {
            Some(name) => rule(name)?,
            None => base.rule,
        },
        seed: args.seed.unwrap_or(base.seed),
        device,
        ..base
    };
    let control = RunControl {
        init: args.init.clone(),
        save: args.save.clone(),
        resume: args.resume.clone(),
        stop_after_epochs: args.stop_after,
        group,
        bucket_bytes: (args.bucket_mib * (1 << 20) as f64) as usize,
    };
    let name = args.model.as_str();
    let (train_n, held_n) = {
        let (t, h) = data.split(cfg.held_out, cfg.seed);
        (t.len(), h.len())
    };
    let steps_planned = cfg.epochs.saturating_mul(train_n / cfg.batch.max(1)).min(cfg.max_steps.unwrap_or(usize::MAX));
    if root {
        println!(
            "rlx train {name}: {train_n} training / {held_n} held-out examples {}, {} params, lr {} (warmup + cosine), global batch {}{}, {steps_planned} steps, seed {}",
            rlx::ir::shape::fmt_dims(&network.example),
            network.size(),
            cfg.lr,
            cfg.batch,
            if ranks > 1 { format!(" over {ranks} ranks") } else { String::new() },
            cfg.seed
        );
        if let Some(dir) = &args.resume {
            println!("resuming from {}", dir.display());
        }
    }
    let metrics_path = args.metrics.clone().unwrap_or_else(|| PathBuf::from(format!("rlx-train-{name}.jsonl")));
    // Opened at the first step, so that settings refused before it leave no file.
    let mut metrics: Option<MetricsLog> = None;
    let mut board: Option<TensorBoard> = None;
    let pb = if root { bar(steps_planned) } else { ProgressBar::hidden() };
    let mut last_step: Option<StepReport> = None;
    let (mut reduce_bytes, mut reduce_s, mut step_s, mut reduced_steps) = (0usize, 0f64, 0f64, 0usize);
    let run = rlx::train::train(network, &data, &cfg, &options, &control, |p| {
        if root && metrics.is_none() {
            metrics = Some(MetricsLog::create(&metrics_path, args.resume.is_some())?);
            board = args.tensorboard.as_deref().map(TensorBoard::create).transpose()?;
        }
        match p {
            Progress::Step(s) => {
                pb.set_position(s.step as u64);
                if let Some(r) = &s.reduce {
                    (reduce_bytes, reduce_s, step_s, reduced_steps) =
                        (r.bytes, reduce_s + r.seconds, step_s + s.seconds, reduced_steps + 1);
                }
                if s.step % 10 == 0 {
                    pb.set_message(format!("loss {:.4}", s.loss));
                }
                last_step = Some(s.clone());
                if let Some(b) = board.as_mut() {
                    let mut values = vec![("train/loss", s.loss as f64), ("train/lr", s.lr as f64)];
                    values.push(("train/examples_per_s", s.examples as f64 / s.seconds.max(1e-12)));
                    if let Some(r) = &s.reduce {
                        values.push(("train/allreduce_ms", r.seconds * 1e3));
                    }
                    b.scalars(s.step, &values)?;
                }
                metrics.as_mut().map_or(Ok(()), |m| m.step(s))
            }
            Progress::Epoch(e) => {
                let exchange = if reduced_steps > 0 {
                    let per = reduce_s / reduced_steps as f64;
                    format!(
                        "  allreduce {:.2} MiB/step in {:.2} ms ({:.0}% of a step)",
                        reduce_bytes as f64 / (1 << 20) as f64,
                        per * 1e3,
                        100.0 * reduce_s / step_s.max(1e-12)
                    )
                } else {
                    String::new()
                };
                (reduce_s, step_s, reduced_steps) = (0.0, 0.0, 0);
                if root {
                    pb.suspend(|| {
                        println!(
                            "epoch {:>3}  train loss {:.4}  held-out loss {:.4}  accuracy {:.2}%  ({:.1} s){exchange}",
                            e.epoch + 1,
                            e.train_loss(),
                            e.held_out_loss,
                            100.0 * e.held_out_accuracy,
                            e.seconds
                        )
                    });
                }
                let step = last_step.as_ref().map_or(0, |s| s.step);
                if let Some(b) = board.as_mut() {
                    let values = [
                        ("train/epoch_loss", e.train_loss() as f64),
                        ("held_out/loss", e.held_out_loss as f64),
                        ("held_out/accuracy", e.held_out_accuracy),
                    ];
                    b.scalars(step, &values)?;
                    b.flush()?;
                }
                metrics.as_mut().map_or(Ok(()), |m| m.epoch(e, step))
            }
        }
    });
    pb.finish_and_clear();
    let (trainer, epochs) = run?;
    let hash = trainer.core.params_sha256();
    if ranks > 1 {
        println!("rank {rank}/{ranks}: params sha256 {hash}");
    }
    if !root {
        return Ok(());
    }
    if ranks == 1 {
        println!("params sha256 {hash}");
    }
    let Some(last) = epochs.last() else {
        println!("nothing left to train: the checkpoint is at the end of its run");
        return Ok(());
    };
    if let Some(vocab) = vocab {
        sample(trainer, &data, &vocab)?;
    }
    let plot = args.plot.clone().unwrap_or_else(|| PathBuf::from(format!("rlx-train-{name}.png")));
    plot_run(&plot, name, &epochs)?;
    let saved = args.save.as_ref().map_or(String::new(), |d| format!("; checkpoint in {}", d.display()));
    println!(
        "done: held-out loss {:.4}, accuracy {:.2}% after epoch {} in {:.1} s; loss curve in {}, metrics in {}{saved}",
        last.held_out_loss,
        100.0 * last.held_out_accuracy,
        last.epoch + 1,
        last.seconds,
        plot.display(),
        metrics_path.display()
    );
    Ok(())
}

/// Greedy continuation of the data's first window.
fn sample(mut trainer: Trainer, data: &ArrayData, vocab: &[char]) -> Result<()> {
    let seq = data.example()[0];
    let mut context: Vec<i64> = data.x.to_f64_vec()[..seq].iter().map(|&v| v as i64).collect();
    let mut text: String = context.iter().map(|&i| vocab[i as usize]).collect();
    for _ in 0..160 {
        let window = HostTensor::from_i64(&[1, seq], &context[context.len() - seq..])?;
        let (_, logits) = trainer.evaluate(&window, &window)?;
        let last = &logits[(seq - 1) * vocab.len()..];
        let next = last.iter().enumerate().fold(0, |b, (i, &v)| if v > last[b] { i } else { b });
        context.push(next as i64);
        text.push(vocab[next]);
    }
    println!("\nsample (greedy, from the first {seq} characters):\n{text}\n");
    Ok(())
}

/// Training loss per step (an epoch's moving average) and held-out loss per epoch on a
/// log-scale axis, held-out accuracy on the right, against the step.
fn plot_run(path: &Path, model: &str, epochs: &[Epoch]) -> Result<()> {
    let per = epochs.first().map_or(1, |e| e.step_losses.len().max(1));
    // A resumed run's steps go on from its first epoch's.
    let first = epochs.first().map_or(0, |e| e.epoch * per);
    let train: Vec<(f64, f64)> = epochs
        .iter()
        .flat_map(|e| e.step_losses.iter())
        .enumerate()
        .map(|(i, &l)| ((first + i + 1) as f64, l as f64))
        .collect();
    let smooth: Vec<(f64, f64)> = train
        .iter()
        .enumerate()
        .map(|(i, &(x, _))| {
            let from = i.saturating_sub(per - 1);
            (x, train[from..=i].iter().map(|p| p.1).sum::<f64>() / (i - from + 1) as f64)
        })
        .collect();
    let mut ends = Vec::new();
    let mut step = first;
    for e in epochs {
        step += e.step_losses.len();
        ends.push(step as f64);
    }
    let held: Vec<(f64, f64)> = epochs.iter().zip(&ends).map(|(e, &x)| (x, e.held_out_loss as f64)).collect();
    let accuracy: Vec<(f64, f64)> = epochs.iter().zip(&ends).map(|(e, &x)| (x, e.held_out_accuracy)).collect();
    let loss = [
        Series { label: "train loss (epoch mean)", points: &smooth, color: [40, 100, 220] },
        Series { label: "held-out loss", points: &held, color: [230, 90, 30] },
    ];
    let acc = [Series { label: "held-out accuracy", points: &accuracy, color: [30, 150, 70] }];
    let has_accuracy = accuracy.iter().any(|p| p.1.is_finite());
    chart(
        path,
        &Chart {
            title: &format!("rlx train {model}"),
            x_label: "step",
            left: Axis { label: "cross-entropy", scale: Scale::Log, series: &loss },
            right: has_accuracy.then_some(Axis { label: "accuracy", scale: Scale::Percent, series: &acc }),
        },
    )
}
