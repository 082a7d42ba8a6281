//! The training loop: the network's gradient graph (`grad_with_loss` with respect to
//! every param) compiled once for the training batch size, an evaluation graph for the
//! held-out batch, and an optimizer updating host copies of the params.
//!
//! Mixed precision (`CompileOptions::precision` bf16 or f16): the compiled graphs declare
//! the params in the half format (half the param memory where the width policy packs
//! them) while the host keeps f32 master weights and the optimizer's state in f32; each
//! step rounds the masters into the params (to nearest even) and gets f32 gradients back,
//! since the graph is differentiated before the params are narrowed.

use crate::checkpoint;
use crate::models::Network;
use rlx_autodiff::grad_with_loss;
use rlx_compile::passes::params_stored_as;
use rlx_ir::shape::fmt_type;
use rlx_ir::{Error, Graph, HostTensor, Result, TensorRef};
use rlx_optim::{Optimizer, Rule, Schedule};
use rlx_runtime::{CompileOptions, CompiledGraph, Device, Session};
use std::path::Path;

/// Trains the params of any graph whose first output is a scalar loss: the gradient
/// graph (`grad_with_loss` with respect to every param) compiled once, f32 master copies
/// of the params on the host, and an optimizer updating them. [`Trainer`] is this plus a
/// network, its batch size and an evaluation graph; the Python `rlx.Trainer` is this.
pub struct GraphTrainer {
    step: CompiledGraph,
    model: String,
    names: Vec<String>,
    dims: Vec<Vec<usize>>,
    /// The f32 master copy of each param, in [`GraphTrainer::names`] order.
    pub params: Vec<Vec<f32>>,
    pub optimizer: Optimizer,
    /// The gradient graph's seed input ("d_output", shaped like the loss) and its 1.
    seed: (String, HostTensor),
}

impl GraphTrainer {
    /// `params` gives every param of `loss` its initial values (f32, row-major); the
    /// optimizer follows `rule` and `schedule`.
    pub fn new(
        session: &Session,
        loss: &Graph,
        params: Vec<(String, Vec<f32>)>,
        rule: Rule,
        schedule: Schedule,
        options: &CompileOptions,
    ) -> Result<GraphTrainer> {
        schedule.check()?;
        let declared = loss.params();
        for &p in &declared {
            let name = loss.node(p).and_then(|n| n.leaf_name()).unwrap_or_default();
            let want: usize = loss.dims(p).iter().product();
            match params.iter().find(|(n, _)| n == name) {
                None => return Err(Error::input(format!("param '{name}' of '{}' has no initial value", loss.name()))),
                Some((_, v)) if v.len() != want => {
                    return Err(Error::input(format!(
                        "param '{name}' is {}, its initial value has {} values",
                        fmt_type(loss.dtype(p), loss.dims(p)),
                        v.len()
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some((extra, _)) = params
            .iter()
            .find(|(n, _)| !declared.iter().any(|&p| loss.node(p).and_then(|n| n.leaf_name()) == Some(n.as_str())))
        {
            return Err(Error::input(format!("'{}' has no param '{extra}'", loss.name())));
        }
        let names: Vec<String> = params.iter().map(|(n, _)| n.clone()).collect();
        let dims = names
            .iter()
            .map(|n| {
                let p = declared.iter().find(|&&p| loss.node(p).and_then(|n| n.leaf_name()) == Some(n.as_str()));
                p.map(|&p| loss.dims(p).to_vec()).unwrap_or_default()
            })
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let grad = grad_with_loss(loss, &refs)?;
        let step = session.compile_with(&with_half_params(&grad, options)?, options)?;
        // The input grad_with_loss added: shaped and typed like the loss ([] or [1], f32
        // or another float), named "d_output" unless the loss graph took that name.
        let seed = step
            .inputs()
            .iter()
            .find(|b| !loss.inputs().iter().any(|&i| loss.node(i).and_then(|n| n.leaf_name()) == Some(b.name.as_str())))
            .ok_or_else(|| Error::internal("the gradient graph has no seed input"))?;
        let seed = (seed.name.clone(), HostTensor::from_f32_as(seed.dtype, &seed.dims, &[1.0])?);
        let params: Vec<Vec<f32>> = params.into_iter().map(|(_, v)| v).collect();
        let sizes: Vec<usize> = params.iter().map(Vec::len).collect();
        let optimizer = Optimizer::new(rule, schedule, &sizes);
        Ok(GraphTrainer { optimizer, step, model: loss.name().to_string(), names, dims, params, seed })
    }

    /// The params' names, in the order of [`GraphTrainer::params`].
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Bytes the training step's params occupy on the device.
    pub fn param_bytes(&self) -> usize {
        self.step.param_bytes()
    }

    /// Sets the params of `c` (a graph declaring the same params) from the masters.
    pub fn load_params(&self, c: &mut CompiledGraph) -> Result<()> {
        set_params(&self.names, &self.params, c)
    }

    /// Each param's dims, in the order of [`GraphTrainer::params`].
    pub fn dims(&self) -> &[Vec<usize>] {
        &self.dims
    }

    /// One update on a batch (the loss graph's inputs by name, borrowed); returns the
    /// batch loss (before the update).
    pub fn step(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<f32> {
        let (loss, mut grads) = self.gradients(inputs)?;
        self.apply(&mut grads)?;
        Ok(loss)
    }

    /// The batch loss and every param's gradient (f32, in [`GraphTrainer::names`] order)
    /// at the current params; [`GraphTrainer::step`] is this then [`GraphTrainer::apply`].
    pub fn gradients(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<(f32, Vec<Vec<f32>>)> {
        set_params(&self.names, &self.params, &mut self.step)?;
        let mut all = inputs.to_vec();
        all.push((&self.seed.0, self.seed.1.view()));
        let mut out = self.step.run_views(&all)?;
        let loss = out[0].to_f32_vec()[0];
        Ok((loss, out.drain(1..).map(|t| t.to_f32_vec()).collect()))
    }

    /// One optimizer update from `grads` (clipped in place when the optimizer clips).
    pub fn apply(&mut self, grads: &mut [Vec<f32>]) -> Result<()> {
        self.optimizer.step(&mut self.params, grads).map(|_| ())
    }

    /// Writes the params, the optimizer and `run` (the training loop's own state, given
    /// back by [`GraphTrainer::resume`]) to the checkpoint directory `dir`.
    pub fn save(&self, dir: &Path, run: &serde_json::Value) -> Result<()> {
        let state = checkpoint::State {
            model: &self.model,
            names: &self.names,
            dims: &self.dims,
            params: &self.params,
            optimizer: &self.optimizer,
        };
        checkpoint::save(dir, &state, run)
    }

    /// Replaces the params and the optimizer (rule, schedule, state) by those saved in
    /// `dir`, whose params must have these names and dims; returns the loop state saved.
    pub fn resume(&mut self, dir: &Path) -> Result<serde_json::Value> {
        checkpoint::load(dir, &self.names, &self.dims, &mut self.params, &mut self.optimizer)
    }

    /// Sets params from a safetensors file (f32 tensors named as params, each of its
    /// param's dims); params it does not name keep their values.
    pub fn load_params_file(&mut self, path: &Path) -> Result<()> {
        let file = rlx_io::load_safetensors(path)?;
        for (name, t) in &file.tensors {
            let Some(i) = self.names.iter().position(|n| n == name) else {
                return Err(Error::input(format!(
                    "{}: tensor '{name}' is no param of '{}' (its params: {})",
                    path.display(),
                    self.model,
                    self.names.join(", ")
                )));
            };
            self.params[i] = checkpoint::f32_values(path, name, t, &self.dims[i])?;
        }
        Ok(())
    }

    /// SHA-256 of the params (each one's name, then its f32 values little-endian), in
    /// hex: equal on every rank of a data-parallel run.
    pub fn params_sha256(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for (name, values) in self.names.iter().zip(&self.params) {
            h.update(name.as_bytes());
            h.update(rlx_ir::encode_le(values, f32::to_le_bytes));
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn set_params(names: &[String], params: &[Vec<f32>], c: &mut CompiledGraph) -> Result<()> {
    for (name, values) in names.iter().zip(params) {
        c.set_param(name, values)?;
    }
    Ok(())
}

pub struct Trainer {
    pub network: Network,
    pub core: GraphTrainer,
    eval: Option<(usize, CompiledGraph)>,
    pub batch: usize,
    session: Session,
    options: CompileOptions,
}

impl Trainer {
    /// A trainer for `network` with batches of `batch`, params initialized from `seed`,
    /// on the CPU.
    pub fn new(
        network: Network,
        batch: usize,
        rule: Rule,
        schedule: Schedule,
        seed: u64,
        options: &CompileOptions,
    ) -> Result<Trainer> {
        Trainer::on(Device::Cpu, network, batch, rule, schedule, seed, options)
    }

    /// [`Trainer::new`] with the steps compiled for `device`.
    pub fn on(
        device: Device,
        network: Network,
        batch: usize,
        rule: Rule,
        schedule: Schedule,
        seed: u64,
        options: &CompileOptions,
    ) -> Result<Trainer> {
        if batch == 0 {
            return Err(rlx_ir::Error::input("the batch size must be at least 1"));
        }
        let session = Session::new(device)?;
        let init = network.params.iter().map(|p| p.name.clone()).zip(network.init(seed)).collect();
        let core = GraphTrainer::new(&session, &network.graph(batch)?, init, rule, schedule, options)?;
        Ok(Trainer { network, core, eval: None, batch, session, options: options.clone() })
    }

    /// Bytes the training step's params occupy on the device.
    pub fn param_bytes(&self) -> usize {
        self.core.param_bytes()
    }

    /// One update on a batch; returns the batch loss (before the update).
    pub fn step(&mut self, x: &HostTensor, y: &HostTensor) -> Result<f32> {
        self.core.step(&[("x", x.view()), ("y", y.view())])
    }

    /// [`GraphTrainer::save`] of the network's params.
    pub fn save(&self, dir: &Path, run: &serde_json::Value) -> Result<()> {
        self.core.save(dir, run)
    }

    /// [`GraphTrainer::resume`]: the network's params and optimizer from `dir`.
    pub fn resume(&mut self, dir: &Path) -> Result<serde_json::Value> {
        self.core.resume(dir)
    }

    /// Loss and logits (empty for a loss graph without them) on a batch of any size the
    /// network takes (its graph compiles on first use).
    pub fn evaluate(&mut self, x: &HostTensor, y: &HostTensor) -> Result<(f32, Vec<f32>)> {
        let n = x.dims()[0];
        if self.eval.as_ref().is_none_or(|(b, _)| *b != n) {
            let g = with_half_params(&self.network.graph(n)?, &self.options)?;
            let c = self.session.compile_with(&g, &self.options)?;
            self.eval = Some((n, c));
        }
        let (_, c) = self.eval.as_mut().expect("compiled above");
        self.core.load_params(c)?;
        let out = c.run_typed(&[("x", x), ("y", y)])?;
        Ok((out[0].to_f32_vec()[0], out.get(1).map_or_else(Vec::new, |l| l.to_f32_vec())))
    }
}

/// Under a mixed policy, `graph` with its params in the policy's half format.
fn with_half_params(graph: &Graph, options: &CompileOptions) -> Result<Graph> {
    match options.precision.half() {
        Some(half) => params_stored_as(graph, half),
        None => Ok(graph.clone()),
    }
}
