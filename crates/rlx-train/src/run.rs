//! A whole digits run: split, epochs of shuffled mini-batches, held-out evaluation after
//! each epoch. Shared by `rlx train`, `rlx demo` and the tests.

use crate::data::{Digits, Rng};
use crate::models::{Network, accuracy, mean};
use crate::trainer::Trainer;
use rlx_ir::Result;
use rlx_optim::{Rule, Schedule};
use rlx_runtime::{CompileOptions, Device};

/// What to train and how.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub epochs: usize,
    pub batch: usize,
    /// Peak learning rate (warmup over 5% of the steps, cosine decay to 1% of it).
    pub lr: f32,
    pub rule: Rule,
    pub held_out: f64,
    pub seed: u64,
    /// Where the training step runs (params and optimizer state stay on the host).
    pub device: Device,
}

impl RunConfig {
    /// Settings that train the digits MLP (`mlp(512)`) to >= 97% held out on every seed
    /// tried (1 to 5: 97.5% to 99.2%): AdamW (decay 0.05), batches of 16, 30 epochs.
    pub fn mlp() -> RunConfig {
        RunConfig {
            epochs: 30,
            batch: 16,
            lr: 3e-3,
            rule: Rule::adamw(0.05),
            held_out: 0.2,
            seed: 1,
            device: Device::Cpu,
        }
    }

    /// Settings that train the digits CNN (`cnn(32, 64)`) to >= 98% held out on every
    /// seed tried (1 to 5: 98.1% to 99.4%): as the MLP's, 12 epochs.
    pub fn cnn() -> RunConfig {
        RunConfig { epochs: 12, ..RunConfig::mlp() }
    }

    /// Refuses settings that would train nothing while looking like a run: a batch of 0,
    /// or larger than the `examples` there are (whole batches only: 0 steps), and a
    /// learning rate that is not a finite number >= 0.
    pub fn check(&self, examples: usize) -> Result<()> {
        if self.batch == 0 || self.batch > examples {
            return Err(rlx_ir::Error::input(format!(
                "the batch size must lie in 1..={examples} (the training examples), got {}",
                self.batch
            )));
        }
        Schedule::Constant(self.lr).check()
    }
}

/// One epoch's figures.
#[derive(Clone, Debug)]
pub struct Epoch {
    pub epoch: usize,
    /// Loss of each training step.
    pub step_losses: Vec<f32>,
    pub held_out_loss: f32,
    pub held_out_accuracy: f64,
    pub seconds: f64,
}

impl Epoch {
    pub fn train_loss(&self) -> f32 {
        mean(&self.step_losses)
    }
}

/// Trains `network` on the digits; `on_step(step, steps, loss)` and `on_epoch` report
/// progress. Returns the trainer (final params) and every epoch's figures.
pub fn train_digits(
    network: Network,
    cfg: &RunConfig,
    options: &CompileOptions,
    mut on_step: impl FnMut(usize, usize, f32),
    mut on_epoch: impl FnMut(&Epoch),
) -> Result<(Trainer, Vec<Epoch>)> {
    let data = Digits::load()?;
    let (train, test) = data.split(cfg.held_out, cfg.seed);
    let example = network.example.clone();
    cfg.check(train.len())?;
    let per_epoch = train.len() / cfg.batch;
    let steps = cfg.epochs * per_epoch;
    let schedule = Schedule::WarmupCosine {
        init: 0.0,
        peak: cfg.lr,
        warmup: (steps / 20) as u64,
        decay_steps: steps as u64,
        end: cfg.lr * 0.01,
    };
    let mut trainer = Trainer::on(cfg.device, network, cfg.batch, cfg.rule.clone(), schedule, cfg.seed, options)?;
    let (tx, ty) = data.batch(&test, &example)?;
    let labels: Vec<i64> = ty.to_f64_vec().iter().map(|&v| v as i64).collect();
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);
    let start = std::time::Instant::now();
    let mut epochs = Vec::new();
    for epoch in 0..cfg.epochs {
        let mut order = train.clone();
        rng.shuffle(&mut order);
        let mut step_losses = Vec::new();
        for b in order.chunks_exact(cfg.batch) {
            let (x, y) = data.batch(b, &example)?;
            let loss = trainer.step(&x, &y)?;
            step_losses.push(loss);
            on_step(epoch * per_epoch + step_losses.len(), steps, loss);
        }
        let (held_out_loss, logits) = trainer.evaluate(&tx, &ty)?;
        let e = Epoch {
            epoch,
            step_losses,
            held_out_loss,
            held_out_accuracy: accuracy(&logits, &labels, 10),
            seconds: start.elapsed().as_secs_f64(),
        };
        on_epoch(&e);
        epochs.push(e);
    }
    Ok((trainer, epochs))
}
