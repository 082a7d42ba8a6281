//! Optimizers for training with RLX: SGD (momentum, Nesterov), Adam, AdamW, Lion;
//! clipping by global norm; constant and warmup + cosine learning-rate schedules.
//!
//! Parameters and gradients are f32 slices (one per named parameter, in a fixed order).
//! The update rules are optax's, term for term (tests compare against optax on the
//! same gradients: tools/optim/make_optax_fixtures.py). State is explicit: an optimizer
//! is its hyper-parameters plus an [`OptimizerState`] (step count and one buffer set per
//! moment), which saves to and loads from JSON.
//!
//! Architecture invariant: no graph or device here; a training loop feeds host values in.

use rlx_ir::{Error, Result};
use serde::{Deserialize, Serialize};

/// A learning rate as a function of the step (0-based: the rate of the first update is
/// `rate(0)`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Schedule {
    Constant(f32),
    /// optax's `warmup_cosine_decay_schedule`: linear from `init` to `peak` over `warmup`
    /// steps, then a cosine from `peak` down to `end` reached at step `decay_steps`
    /// (and held after).
    WarmupCosine {
        init: f32,
        peak: f32,
        warmup: u64,
        decay_steps: u64,
        end: f32,
    },
}

impl Schedule {
    /// Every rate a finite number >= 0: a NaN or infinite rate trains NaN losses that
    /// look like a run (`rlx train --lr nan` did, and exited 0).
    pub fn check(&self) -> Result<()> {
        let rates: &[(&str, f32)] = match *self {
            Schedule::Constant(lr) => &[("learning rate", lr)],
            Schedule::WarmupCosine { init, peak, end, .. } => {
                &[("initial learning rate", init), ("peak learning rate", peak), ("final learning rate", end)]
            }
        };
        for &(what, v) in rates {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::input(format!("the {what} must be a finite number >= 0, got {v}")));
            }
        }
        Ok(())
    }

    pub fn rate(&self, step: u64) -> f32 {
        match *self {
            Schedule::Constant(lr) => lr,
            Schedule::WarmupCosine { init, peak, warmup, decay_steps, end } => {
                if step < warmup {
                    return init + (peak - init) * (step as f32 / warmup as f32);
                }
                let span = decay_steps.saturating_sub(warmup).max(1);
                let t = (step - warmup).min(span) as f32 / span as f32;
                end + (peak - end) * 0.5 * (1.0 + (std::f32::consts::PI * t).cos())
            }
        }
    }
}

/// Which update rule, with its hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rule {
    /// `v = g + momentum v`; update `g + momentum v` (Nesterov) or `v`; `p -= lr update`.
    Sgd { momentum: f32, nesterov: bool },
    /// Bias-corrected moments; update `m_hat / (sqrt(v_hat) + eps)`, plus `weight_decay p`
    /// (decoupled: AdamW) when it is nonzero.
    Adam { b1: f32, b2: f32, eps: f32, weight_decay: f32 },
    /// `update = sign(b1 m + (1 - b1) g) + weight_decay p`; then `m = b2 m + (1 - b2) g`.
    Lion { b1: f32, b2: f32, weight_decay: f32 },
}

impl Rule {
    pub fn sgd(momentum: f32, nesterov: bool) -> Rule {
        Rule::Sgd { momentum, nesterov }
    }
    pub fn adam() -> Rule {
        Rule::Adam { b1: 0.9, b2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }
    /// optax's default decay is 1e-4.
    pub fn adamw(weight_decay: f32) -> Rule {
        Rule::Adam { b1: 0.9, b2: 0.999, eps: 1e-8, weight_decay }
    }
    pub fn lion(weight_decay: f32) -> Rule {
        Rule::Lion { b1: 0.9, b2: 0.99, weight_decay }
    }

    /// How many buffers per param the rule keeps (SGD without momentum none).
    pub fn moments(&self) -> usize {
        match self {
            Rule::Sgd { momentum, .. } => usize::from(*momentum != 0.0),
            Rule::Adam { .. } => 2,
            Rule::Lion { .. } => 1,
        }
    }
}

/// Everything an optimizer remembers between steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizerState {
    /// Updates applied so far.
    pub step: u64,
    /// Per moment (SGD's velocity; Adam's m and v; Lion's m), one buffer per parameter.
    pub moments: Vec<Vec<Vec<f32>>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Optimizer {
    pub rule: Rule,
    pub schedule: Schedule,
    /// Clip gradients to this global L2 norm first (optax `clip_by_global_norm`).
    pub clip_norm: Option<f32>,
    pub state: OptimizerState,
}

impl Optimizer {
    /// An optimizer for parameters of the given lengths.
    pub fn new(rule: Rule, schedule: Schedule, sizes: &[usize]) -> Optimizer {
        let moments = (0..rule.moments()).map(|_| sizes.iter().map(|&n| vec![0.0; n]).collect()).collect();
        Optimizer { rule, schedule, clip_norm: None, state: OptimizerState { step: 0, moments } }
    }

    pub fn with_clip_norm(mut self, max_norm: f32) -> Optimizer {
        self.clip_norm = Some(max_norm);
        self
    }

    /// One update of `params` from `grads` (same count and lengths as at creation).
    /// Returns the gradients' global norm before clipping.
    pub fn step(&mut self, params: &mut [Vec<f32>], grads: &mut [Vec<f32>]) -> Result<f32> {
        let sizes_ok = params.len() == grads.len()
            && self.state.moments.iter().all(|m| m.len() == params.len())
            && params
                .iter()
                .zip(grads.iter())
                .enumerate()
                .all(|(i, (p, g))| p.len() == g.len() && self.state.moments.iter().all(|m| m[i].len() == p.len()));
        if !sizes_ok {
            return Err(Error::input(format!(
                "optimizer step: {} params and {} gradients do not match the {} buffers it was made for",
                params.len(),
                grads.len(),
                self.state.moments.first().map_or(params.len(), Vec::len)
            )));
        }
        let norm = global_norm(grads);
        if let Some(max) = self.clip_norm {
            clip_to(grads, norm, max);
        }
        let t = self.state.step;
        let lr = self.schedule.rate(t);
        let moments = &mut self.state.moments;
        match self.rule {
            Rule::Sgd { momentum, nesterov } => {
                for (i, (p, g)) in params.iter_mut().zip(grads.iter()).enumerate() {
                    if momentum == 0.0 {
                        p.iter_mut().zip(g).for_each(|(p, g)| *p -= lr * g);
                        continue;
                    }
                    let v = &mut moments[0][i];
                    for ((p, &g), v) in p.iter_mut().zip(g).zip(v.iter_mut()) {
                        *v = g + momentum * *v;
                        let u = if nesterov { g + momentum * *v } else { *v };
                        *p -= lr * u;
                    }
                }
            }
            Rule::Adam { b1, b2, eps, weight_decay } => {
                // powi matches optax's f32 power to the last bit here (powf did not); the
                // count saturates far past where b^count underflows to 0.
                let count = (t + 1).min(i32::MAX as u64) as i32;
                let (c1, c2) = (1.0 - b1.powi(count), 1.0 - b2.powi(count));
                let (ms, vs) = moments.split_at_mut(1);
                for (i, (p, g)) in params.iter_mut().zip(grads.iter()).enumerate() {
                    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(ms[0][i].iter_mut()).zip(vs[0][i].iter_mut()) {
                        *m = b1 * *m + (1.0 - b1) * g;
                        *v = b2 * *v + (1.0 - b2) * g * g;
                        let u = (*m / c1) / ((*v / c2).sqrt() + eps) + weight_decay * *p;
                        *p -= lr * u;
                    }
                }
            }
            Rule::Lion { b1, b2, weight_decay } => {
                for (i, (p, g)) in params.iter_mut().zip(grads.iter()).enumerate() {
                    for ((p, &g), m) in p.iter_mut().zip(g).zip(moments[0][i].iter_mut()) {
                        let c = b1 * *m + (1.0 - b1) * g;
                        let sign = if c > 0.0 {
                            1.0
                        } else if c < 0.0 {
                            -1.0
                        } else {
                            0.0
                        };
                        *m = b2 * *m + (1.0 - b2) * g;
                        *p -= lr * (sign + weight_decay * *p);
                    }
                }
            }
        }
        self.state.step += 1;
        Ok(norm)
    }

    /// The optimizer as JSON (rule, schedule, clipping and state).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| Error::internal(format!("optimizer state: {e}")))
    }

    pub fn from_json(text: &str) -> Result<Optimizer> {
        serde_json::from_str(text).map_err(|e| Error::parse(format!("optimizer state: {e}")))
    }
}

/// `sqrt(sum of every gradient element squared)`, accumulated in f64.
pub fn global_norm(grads: &[Vec<f32>]) -> f32 {
    grads.iter().flatten().map(|&g| (g as f64) * (g as f64)).sum::<f64>().sqrt() as f32
}

/// optax's rule: gradients scaled by `max / norm` when `norm >= max`.
fn clip_to(grads: &mut [Vec<f32>], norm: f32, max: f32) {
    if norm >= max && norm > 0.0 {
        grads.iter_mut().flatten().for_each(|g| *g = *g / norm * max);
    }
}
