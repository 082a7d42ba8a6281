//! The training loop: the network's gradient graph (`grad_with_loss` with respect to
//! every param) compiled once for the training batch size, an evaluation graph for the
//! held-out batch, and an optimizer updating host copies of the params.
//!
//! Mixed precision (`CompileOptions::precision` bf16 or f16): the compiled graphs declare
//! the params in the half format (half the param memory where the width policy packs
//! them) while the host keeps f32 master weights and the optimizer's state in f32; each
//! step rounds the masters into the params (to nearest even) and gets f32 gradients back,
//! since the graph is differentiated before the params are narrowed.

use crate::models::Network;
use rlx_autodiff::grad_with_loss;
use rlx_compile::passes::params_stored_as;
use rlx_ir::shape::fmt_type;
use rlx_ir::{Error, Graph, HostTensor, Result, TensorRef};
use rlx_optim::{Optimizer, Rule, Schedule};
use rlx_runtime::{CompileOptions, CompiledGraph, Device, Session};

/// Trains the params of any graph whose first output is a scalar loss: the gradient
/// graph (`grad_with_loss` with respect to every param) compiled once, f32 master copies
/// of the params on the host, and an optimizer updating them. [`Trainer`] is this plus a
/// network, its batch size and an evaluation graph; the Python `rlx.Trainer` is this.
pub struct GraphTrainer {
    step: CompiledGraph,
    names: Vec<String>,
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
        Ok(GraphTrainer { optimizer: Optimizer::new(rule, schedule, &sizes), step, names, params, seed })
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

    /// One update on a batch (the loss graph's inputs by name, borrowed); returns the
    /// batch loss (before the update).
    pub fn step(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<f32> {
        set_params(&self.names, &self.params, &mut self.step)?;
        let mut all = inputs.to_vec();
        all.push((&self.seed.0, self.seed.1.view()));
        let mut out = self.step.run_views(&all)?;
        let loss = out[0].to_f32_vec()[0];
        let mut grads: Vec<Vec<f32>> = out.drain(1..).map(|t| t.to_f32_vec()).collect();
        self.optimizer.step(&mut self.params, &mut grads)?;
        Ok(loss)
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

    /// Loss and logits on a batch of any size (its graph compiles on first use).
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
        Ok((out[0].to_f32_vec()[0], out[1].to_f32_vec()))
    }
}

/// Under a mixed policy, `graph` with its params in the policy's half format.
fn with_half_params(graph: &Graph, options: &CompileOptions) -> Result<Graph> {
    match options.precision.half() {
        Some(half) => params_stored_as(graph, half),
        None => Ok(graph.clone()),
    }
}
