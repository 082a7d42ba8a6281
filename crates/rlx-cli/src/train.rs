//! `rlx train`: the digits MLP or CNN (progress bar, a line per epoch, held-out accuracy,
//! a loss-curve PNG), or a character transformer on an embedded text, then a sample.

use indicatif::{ProgressBar, ProgressStyle};
use rlx::optim::{Rule, Schedule};
use rlx::prelude::*;
use rlx::train::plot::{Series, line_chart};
use rlx::train::{Epoch, RunConfig, Trainer, TransformerConfig, char_transformer, cnn, mlp, train_digits};
use std::path::{Path, PathBuf};

pub struct TrainArgs {
    pub model: String,
    pub epochs: Option<usize>,
    pub batch: Option<usize>,
    pub lr: Option<f32>,
    pub seed: u64,
    pub optimizer: String,
    pub plot: Option<PathBuf>,
    pub threads: Option<usize>,
    pub device: Device,
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

pub fn train(args: &TrainArgs) -> Result<()> {
    let options = CompileOptions { threads: args.threads, ..CompileOptions::default() };
    match args.model.as_str() {
        "mlp" | "cnn" => digits(args, &options),
        "char" => char_model(args, &options),
        other => Err(Error::input(format!("unknown model '{other}' (mlp, cnn, char)"))),
    }
}

fn digits(args: &TrainArgs, options: &CompileOptions) -> Result<()> {
    let (network, base) =
        if args.model == "mlp" { (mlp(512), RunConfig::mlp()) } else { (cnn(32, 64), RunConfig::cnn()) };
    let cfg = RunConfig {
        epochs: args.epochs.unwrap_or(base.epochs),
        batch: args.batch.unwrap_or(base.batch),
        lr: args.lr.unwrap_or(base.lr),
        rule: if args.optimizer == "adamw" { base.rule } else { rule(&args.optimizer)? },
        seed: args.seed,
        device: args.device,
        ..base
    };
    let data = rlx::train::Digits::load()?;
    let (train_set, held_set) = data.split(cfg.held_out, cfg.seed);
    cfg.check(train_set.len())?;
    println!(
        "rlx train {}: {} training / {} held-out digits (8x8), {} params, {} lr {} (warmup + cosine), batch {}, {} epochs, seed {}",
        args.model,
        train_set.len(),
        held_set.len(),
        network.size(),
        args.optimizer,
        cfg.lr,
        cfg.batch,
        cfg.epochs,
        cfg.seed
    );
    let steps = cfg.epochs * (train_set.len() / cfg.batch);
    let pb = bar(steps);
    let (_, epochs) = train_digits(
        network,
        &cfg,
        options,
        |step, _, loss| {
            pb.set_position(step as u64);
            if step % 10 == 0 {
                pb.set_message(format!("loss {loss:.4}"));
            }
        },
        |e: &Epoch| {
            pb.suspend(|| {
                println!(
                    "epoch {:>3}  train loss {:.4}  held-out loss {:.4}  accuracy {:.2}%  ({:.1} s)",
                    e.epoch + 1,
                    e.train_loss(),
                    e.held_out_loss,
                    100.0 * e.held_out_accuracy,
                    e.seconds
                )
            });
        },
    )?;
    pb.finish_and_clear();
    let last = epochs.last().ok_or_else(|| Error::input("no epochs to train"))?;
    let plot = args.plot.clone().unwrap_or_else(|| PathBuf::from(format!("rlx-train-{}.png", args.model)));
    plot_run(&plot, &args.model, &epochs)?;
    println!(
        "done: held-out accuracy {:.2}% after {} epochs in {:.1} s; loss curve in {}",
        100.0 * last.held_out_accuracy,
        epochs.len(),
        last.seconds,
        plot.display()
    );
    Ok(())
}

/// Training loss per step and held-out loss per epoch, against the step.
fn plot_run(path: &Path, model: &str, epochs: &[Epoch]) -> Result<()> {
    let per = epochs.first().map_or(1, |e| e.step_losses.len().max(1));
    let train: Vec<(f64, f64)> = epochs
        .iter()
        .flat_map(|e| e.step_losses.iter())
        .enumerate()
        .map(|(i, &l)| (i as f64 + 1.0, l as f64))
        .collect();
    // A moving average over an epoch's worth of steps keeps the curve readable.
    let smooth: Vec<(f64, f64)> = train
        .iter()
        .enumerate()
        .map(|(i, &(x, _))| {
            let from = i.saturating_sub(per - 1);
            (x, train[from..=i].iter().map(|p| p.1).sum::<f64>() / (i - from + 1) as f64)
        })
        .collect();
    let held: Vec<(f64, f64)> = epochs.iter().map(|e| (((e.epoch + 1) * per) as f64, e.held_out_loss as f64)).collect();
    line_chart(
        path,
        &format!("rlx train {model}: cross-entropy"),
        "step",
        "loss",
        &[
            Series { label: "train (epoch mean)", points: &smooth, color: [40, 100, 220] },
            Series { label: "held out", points: &held, color: [230, 90, 30] },
        ],
    )
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

fn char_model(args: &TrainArgs, options: &CompileOptions) -> Result<()> {
    let mut vocab: Vec<char> = TEXT.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let ids: Vec<i64> = TEXT.chars().map(|c| vocab.binary_search(&c).expect("in vocab") as i64).collect();
    let cfg = TransformerConfig { vocab: vocab.len(), seq: 32, dim: 64, heads: 4, layers: 2 };
    let network = char_transformer(cfg);
    let batch = args.batch.unwrap_or(16);
    let steps = args.epochs.unwrap_or(400);
    let lr = args.lr.unwrap_or(3e-3);
    if batch == 0 {
        return Err(Error::input("the batch size must be at least 1"));
    }
    Schedule::Constant(lr).check()?;
    println!(
        "rlx train char: {} characters ({} distinct), transformer {} layers x {} dims, {} params, {steps} steps of {batch} windows of {}",
        ids.len(),
        vocab.len(),
        cfg.layers,
        cfg.dim,
        network.size(),
        cfg.seq
    );
    let schedule = Schedule::WarmupCosine {
        init: 0.0,
        peak: lr,
        warmup: (steps / 20) as u64,
        decay_steps: steps as u64,
        end: lr * 0.05,
    };
    let mut trainer = Trainer::on(args.device, network, batch, rule(&args.optimizer)?, schedule, args.seed, options)?;
    let mut rng = rlx::train::Rng::new(args.seed);
    let pb = bar(steps);
    let start = std::time::Instant::now();
    let mut losses = Vec::new();
    for step in 0..steps {
        let mut x = Vec::with_capacity(batch * cfg.seq);
        let mut y = Vec::with_capacity(batch * cfg.seq);
        for _ in 0..batch {
            let at = (rng.next_u64() % (ids.len() - cfg.seq - 1) as u64) as usize;
            x.extend_from_slice(&ids[at..at + cfg.seq]);
            y.extend_from_slice(&ids[at + 1..at + cfg.seq + 1]);
        }
        let x = HostTensor::from_i64(&[batch, cfg.seq], &x)?;
        let y = HostTensor::from_i64(&[batch, cfg.seq], &y)?;
        let loss = trainer.step(&x, &y)?;
        losses.push((step as f64 + 1.0, loss as f64));
        pb.set_position(step as u64 + 1);
        pb.set_message(format!("loss {loss:.4}"));
        if (step + 1) % (steps / 10).max(1) == 0 {
            pb.suspend(|| println!("step {:>5}  loss {loss:.4}  ({:.1} s)", step + 1, start.elapsed().as_secs_f64()));
        }
    }
    pb.finish_and_clear();
    // Greedy continuation of the text's first window.
    let mut context: Vec<i64> = ids[..cfg.seq].to_vec();
    let mut sample: String = TEXT.chars().take(cfg.seq).collect();
    for _ in 0..160 {
        let window = HostTensor::from_i64(&[1, cfg.seq], &context[context.len() - cfg.seq..])?;
        let (_, logits) = trainer.evaluate(&window, &window)?;
        let last = &logits[(cfg.seq - 1) * vocab.len()..];
        let next = last.iter().enumerate().fold(0, |b, (i, &v)| if v > last[b] { i } else { b });
        context.push(next as i64);
        sample.push(vocab[next]);
    }
    println!("\nsample (greedy, from the first {} characters):\n{sample}\n", cfg.seq);
    let plot = args.plot.clone().unwrap_or_else(|| PathBuf::from("rlx-train-char.png"));
    line_chart(
        &plot,
        "rlx train char: cross-entropy",
        "step",
        "loss",
        &[Series { label: "train", points: &losses, color: [40, 100, 220] }],
    )?;
    println!(
        "done: loss {:.4} -> {:.4} in {:.1} s; loss curve in {}",
        losses.first().map_or(0.0, |l| l.1),
        losses.last().map_or(0.0, |l| l.1),
        start.elapsed().as_secs_f64(),
        plot.display()
    );
    Ok(())
}
