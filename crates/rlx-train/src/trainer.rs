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
use rlx_ir::{DType, Graph, HostTensor, Result};
use rlx_optim::{Optimizer, Rule, Schedule};
use rlx_runtime::{CompileOptions, CompiledGraph, Device, Session};

pub struct Trainer {
    pub network: Network,
    step: CompiledGraph,
    eval: Option<(usize, CompiledGraph)>,
    pub params: Vec<Vec<f32>>,
    pub optimizer: Optimizer,
    pub batch: usize,
    session: Session,
    options: CompileOptions,
    seed: HostTensor,
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
        schedule.check()?;
        let session = Session::new(device)?;
        let names: Vec<&str> = network.params.iter().map(|p| p.name.as_str()).collect();
        let grad = grad_with_loss(&network.graph(batch)?, &names)?;
        let step = session.compile_with(&with_half_params(&grad, options)?, options)?;
        let params = network.init(seed);
        let sizes: Vec<usize> = params.iter().map(Vec::len).collect();
        Ok(Trainer {
            optimizer: Optimizer::new(rule, schedule, &sizes),
            network,
            step,
            eval: None,
            params,
            batch,
            session,
            options: options.clone(),
            seed: HostTensor::from_f32_as(DType::F32, &[], &[1.0])?,
        })
    }

    fn load_params(c: &mut CompiledGraph, network: &Network, params: &[Vec<f32>]) -> Result<()> {
        for (spec, values) in network.params.iter().zip(params) {
            c.set_param(&spec.name, values)?;
        }
        Ok(())
    }

    /// Bytes the training step's params occupy on the device.
    pub fn param_bytes(&self) -> usize {
        self.step.param_bytes()
    }

    /// One update on a batch; returns the batch loss (before the update).
    pub fn step(&mut self, x: &HostTensor, y: &HostTensor) -> Result<f32> {
        Self::load_params(&mut self.step, &self.network, &self.params)?;
        let mut out = self.step.run_typed(&[("x", x), ("y", y), ("d_output", &self.seed)])?;
        let loss = out[0].to_f32_vec()[0];
        let mut grads: Vec<Vec<f32>> = out.drain(1..).map(|t| t.to_f32_vec()).collect();
        self.optimizer.step(&mut self.params, &mut grads)?;
        Ok(loss)
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
        Self::load_params(c, &self.network, &self.params)?;
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
