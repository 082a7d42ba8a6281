//! Scan and its backward loop (semantics in `rlx_ir::ops::scan`).
//!
//! The body (and the backward body) are compiled once, with the outer program's options
//! and threads, into programs of their own; a run feeds them step by step. Values cross
//! between steps as host tensors (a copy per step: scans here are RNN-sized, and the step
//! programs do the arithmetic).

use crate::arena::{Args, Out, read_host, write_host};
use crate::program::CpuProgram;
use rlx_compile::CompileOptions;
use rlx_ir::ops::scan::ScanGradOutput;
use rlx_ir::shape::numel;
use rlx_ir::{DType, Error, Graph, HostTensor, Result};
use std::sync::Mutex;

/// What a scan step computes.
#[derive(Clone, Copy, Debug)]
pub enum Selects {
    /// A forward scan's final carry.
    Carry(usize),
    /// A result of the backward loop.
    Grad(ScanGradOutput),
}

pub struct ScanPlan {
    body: Mutex<CpuProgram>,
    grad_body: Option<Mutex<CpuProgram>>,
    n_carry: usize,
    n_bcast: usize,
    n_xs: usize,
    len: usize,
    /// Steps per checkpoint segment.
    segment: usize,
    selects: Selects,
    /// Each operand's dtype and dims.
    operands: Vec<(DType, Vec<usize>)>,
}

impl std::fmt::Debug for ScanPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScanPlan({:?}, {} steps, segments of {})", self.selects, self.len, self.segment)
    }
}

impl ScanPlan {
    pub fn new(
        body: &Graph,
        grad_body: Option<&Graph>,
        (n_carry, n_bcast): (usize, usize),
        checkpoints: Option<usize>,
        selects: Selects,
        ins: &[(DType, &[usize])],
        (options, threads): (&CompileOptions, usize),
    ) -> Result<ScanPlan> {
        let forward = ins.len() - if grad_body.is_some() { n_carry } else { 0 };
        let n_xs = forward - n_carry - n_bcast;
        let len = ins[n_carry + n_bcast].1[0];
        let keep = checkpoints.unwrap_or(len).max(1);
        let compile = |g: &Graph| CpuProgram::compile(g, options, threads).map(Mutex::new);
        Ok(ScanPlan {
            body: compile(body).map_err(|e| e.context("scan body"))?,
            grad_body: grad_body.map(compile).transpose().map_err(|e| e.context("scan grad body"))?,
            n_carry,
            n_bcast,
            n_xs,
            len,
            segment: len.div_ceil(keep).max(1),
            selects,
            operands: ins.iter().map(|(dt, d)| (*dt, d.to_vec())).collect(),
        })
    }

    fn operand(&self, ins: &Args, i: usize) -> Result<HostTensor> {
        let (dt, dims) = &self.operands[i];
        read_host(ins.bytes(i)?, ins.slot(i)?.class, *dt, dims)
    }

    /// Row `t` of sequence operand `i`.
    fn slice(x: &HostTensor, t: usize) -> Result<HostTensor> {
        let row = x.bytes().len() / x.dims()[0].max(1);
        HostTensor::from_bytes(x.dtype(), &x.dims()[1..], x.bytes()[t * row..(t + 1) * row].to_vec())
    }

    fn step(program: &Mutex<CpuProgram>, inputs: &[&HostTensor]) -> Result<Vec<HostTensor>> {
        let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
        program.lock().unwrap_or_else(|e| e.into_inner()).run(&views)
    }
}

pub fn scan(p: &ScanPlan, ins: &Args, out: &mut Out) -> Result<()> {
    let (nc, nb) = (p.n_carry, p.n_bcast);
    let operands: Vec<HostTensor> = (0..p.operands.len()).map(|i| p.operand(ins, i)).collect::<Result<_>>()?;
    let (inits, rest) = operands.split_at(nc);
    let (bcast, rest) = rest.split_at(nb);
    let (xs, finals) = rest.split_at(p.n_xs);
    let xs_at = |t: usize| xs.iter().map(|x| ScanPlan::slice(x, t)).collect::<Result<Vec<_>>>();
    let run_body = |carries: &[HostTensor], t: usize| -> Result<Vec<HostTensor>> {
        let x = xs_at(t)?;
        let inputs: Vec<&HostTensor> = carries.iter().chain(bcast).chain(&x).collect();
        ScanPlan::step(&p.body, &inputs).map_err(|e| e.context(format_args!("scan step {t}")))
    };
    let result = match p.selects {
        Selects::Carry(i) => {
            let mut carries = inits.to_vec();
            for t in 0..p.len {
                carries = run_body(&carries, t)?;
            }
            carries.swap_remove(i)
        }
        Selects::Grad(which) => {
            let grad = p.grad_body.as_ref().ok_or_else(|| Error::internal("scan_grad without a grad body"))?;
            // Forward, keeping the carries at the start of every segment.
            let mut checkpoints = Vec::new();
            let mut carries = inits.to_vec();
            for t in 0..p.len {
                if t % p.segment == 0 {
                    checkpoints.push(carries.clone());
                }
                carries = run_body(&carries, t)?;
            }
            // Backward, segment by segment from the last, recomputing its carries.
            let mut g = finals.to_vec();
            // Bcast terms summed over steps (in f64, then rounded once to the dtype).
            let mut bcast_sums: Vec<Option<Vec<f64>>> = vec![None; nb];
            let mut x_rows: Vec<Option<HostTensor>> = vec![None; p.len * p.n_xs];
            for (s, start) in checkpoints.into_iter().zip((0..p.len).step_by(p.segment)).rev() {
                let end = (start + p.segment).min(p.len);
                let mut segment = vec![s];
                for t in start..end - 1 {
                    let next = run_body(segment.last().expect("nonempty"), t)?;
                    segment.push(next);
                }
                for t in (start..end).rev() {
                    let x = xs_at(t)?;
                    let inputs: Vec<&HostTensor> = segment[t - start].iter().chain(bcast).chain(&x).chain(&g).collect();
                    let mut outs =
                        ScanPlan::step(grad, &inputs).map_err(|e| e.context(format_args!("scan backward step {t}")))?;
                    let terms = outs.split_off(nc);
                    g = outs;
                    for (j, term) in terms[..nb].iter().enumerate() {
                        let v = term.to_f64_vec();
                        match &mut bcast_sums[j] {
                            Some(acc) => acc.iter_mut().zip(&v).for_each(|(a, b)| *a += b),
                            none => *none = Some(v),
                        }
                    }
                    for (k, term) in terms[nb..].iter().enumerate() {
                        x_rows[t * p.n_xs + k] = Some(term.clone());
                    }
                }
            }
            match which {
                ScanGradOutput::Carry(i) => g.swap_remove(i),
                ScanGradOutput::Bcast(j) => {
                    let (dt, dims) = &p.operands[nc + j];
                    let sum = bcast_sums[j].take().unwrap_or_else(|| vec![0.0; numel(dims)]);
                    HostTensor::from_f64_as(*dt, dims, &sum)?
                }
                ScanGradOutput::Xs(k) => {
                    let (dt, dims) = &p.operands[nc + nb + k];
                    let mut stacked = Vec::new();
                    for t in 0..p.len {
                        let row = x_rows[t * p.n_xs + k].take().ok_or_else(|| Error::internal("missing scan row"))?;
                        stacked.extend_from_slice(row.bytes());
                    }
                    HostTensor::from_bytes(*dt, dims, stacked)?
                }
            }
        }
    };
    let slot = out.slot(0)?;
    write_host(out.bytes_mut(0)?, slot.class, result.view())
}
