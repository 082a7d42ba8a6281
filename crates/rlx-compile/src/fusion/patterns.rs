//! Pattern fusions. Each pass finds its anchors, checks every absorbed value with
//! `Facts::absorb_blocker`, collects non-overlapping matches, then rewrites them at once.

use super::{Facts, FusionLimits, rewrite};
use crate::schedule::{Kernel, Schedule, Step, ValueId};
use rlx_ir::{BinaryOp, DType, F32Attr, Op, ReduceOp, Result, Unary};

/// A fused step replacing the steps in `window` (sorted; the fused step takes the last
/// one's place).
struct Match {
    window: Vec<usize>,
    step: Step,
}

impl Match {
    /// The fused step replacing the steps of `window` (covering their graph nodes).
    fn new(
        s: &Schedule,
        window: Vec<usize>,
        kernel: Kernel,
        inputs: Vec<ValueId>,
        outputs: Vec<ValueId>,
        temps: Vec<ValueId>,
    ) -> Match {
        Match { step: Step { kernel, inputs, outputs, temps, nodes: nodes(s, &window) }, window }
    }
}

/// Applies matches whose windows do not overlap an earlier match's.
fn apply(s: &mut Schedule, matches: Vec<Match>) {
    let n = s.steps.len();
    let mut taken = vec![false; n];
    let mut replace: Vec<Option<Step>> = vec![None; n];
    let mut remove = vec![false; n];
    for m in matches {
        if m.window.iter().any(|&i| taken[i]) {
            continue;
        }
        let last = *m.window.iter().max().expect("non-empty window");
        for &i in &m.window {
            taken[i] = true;
            remove[i] = i != last;
        }
        replace[last] = Some(m.step);
    }
    rewrite(s, replace, &remove);
}

fn f32_only(s: &Schedule, values: &[ValueId]) -> bool {
    values.iter().all(|&v| s.values[v].dtype == DType::F32)
}

fn nodes(s: &Schedule, window: &[usize]) -> Vec<rlx_ir::NodeId> {
    window.iter().flat_map(|&i| s.steps[i].nodes.clone()).collect()
}

/// `act(a @ b + bias)` with a row-broadcast bias.
pub fn matmul_bias_act(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let Kernel::Op(Op::Binary(BinaryOp::Add)) = &step.kernel else { continue };
        let out = step.outputs[0];
        let operands = [(step.inputs[0], step.inputs[1]), (step.inputs[1], step.inputs[0])];
        let Some((mm, (mm_step, _), bias)) = operands
            .iter()
            .find_map(|&(a, b)| f.producer_op(s, a).filter(|(_, op)| matches!(op, Op::MatMul)).map(|p| (a, p, b)))
        else {
            continue;
        };
        let n = *s.values[out].dims.last().unwrap_or(&0);
        let bias_dims = &s.values[bias].dims;
        let row_bias = bias_dims.last() == Some(&n) && bias_dims.iter().rev().skip(1).all(|&d| d == 1);
        let anchor = format!("anchor step {i} ({})", s.describe(out));
        if !row_bias || !f32_only(s, &[mm, bias, out]) || s.values[mm].dims != s.values[out].dims {
            log.push(format!("{anchor}: declined, needs an f32 matmul plus a row bias [n]"));
            continue;
        }
        let mut window = vec![mm_step, i];
        if let Some(why) = f.absorb_blocker(s, mm, &window) {
            log.push(format!("{anchor}: declined, {why}"));
            continue;
        }
        // An activation that is the sum's only reader joins the window.
        let mut result = out;
        let mut act = None;
        if let [reader] = f.readers[out][..]
            && let Kernel::Op(Op::Unary(u)) = &s.steps[reader].kernel
            && matches!(u, Unary::Relu | Unary::Gelu | Unary::GeluTanh | Unary::Silu | Unary::Sigmoid | Unary::Tanh)
            && f.absorb_blocker(s, out, &[i, reader]).is_none()
        {
            act = Some(*u);
            result = s.steps[reader].outputs[0];
            window.push(reader);
        }
        let mm_inputs = &s.steps[mm_step].inputs;
        log.push(format!("{anchor}: fused matmul+bias{}", act.map_or(String::new(), |u| format!("+{}", u.name()))));
        window.sort_unstable();
        matches.push(Match::new(
            s,
            window,
            Kernel::MatMulBias { act },
            vec![mm_inputs[0], mm_inputs[1], bias],
            vec![result],
            Vec::new(),
        ));
    }
    apply(s, matches);
    Ok(())
}

/// A transpose of the last two axes feeding a matmul: the matmul reads the transposed
/// operand with swapped strides instead (K^T in attention, B^T in gradients).
pub fn transpose_matmul(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let Kernel::Op(Op::MatMul) = &step.kernel else { continue };
        let anchor = format!("anchor step {i} ({})", s.describe(step.outputs[0]));
        let mut window = vec![i];
        let mut inputs = step.inputs.clone();
        let mut flags = [false; 2];
        for k in 0..2 {
            let v = step.inputs[k];
            let Some((ts, Op::Transpose { perm })) = f.producer_op(s, v) else { continue };
            let r = perm.len();
            let swaps_last_two = r >= 2
                && perm[..r - 2].iter().enumerate().all(|(a, &p)| a == p)
                && perm[r - 2] == r - 1
                && perm[r - 1] == r - 2;
            if !swaps_last_two {
                continue;
            }
            let mut w = window.clone();
            w.push(ts);
            match f.absorb_blocker(s, v, &w) {
                Some(why) => log.push(format!("{anchor}: kept transpose of operand {k}, {why}")),
                None => {
                    window.push(ts);
                    inputs[k] = s.steps[ts].inputs[0];
                    flags[k] = true;
                }
            }
        }
        if window.len() == 1 {
            continue;
        }
        log.push(format!("{anchor}: fused transpose into matmul (a^T {}, b^T {})", flags[0], flags[1]));
        window.sort_unstable();
        matches.push(Match::new(
            s,
            window,
            Kernel::MatMulT { ta: flags[0], tb: flags[1] },
            inputs,
            step.outputs.clone(),
            Vec::new(),
        ));
    }
    apply(s, matches);
    Ok(())
}

/// `up * silu(gate)`, and the two-matmul form `(x @ wu) * silu(x @ wg)`.
pub fn swiglu(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    let mut extra_values = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let Kernel::Op(Op::Binary(BinaryOp::Mul)) = &step.kernel else { continue };
        let out = step.outputs[0];
        let operands = [(step.inputs[0], step.inputs[1]), (step.inputs[1], step.inputs[0])];
        let Some((silu, (silu_step, _), up)) = operands.iter().find_map(|&(a, b)| {
            f.producer_op(s, a).filter(|(_, op)| matches!(op, Op::Unary(Unary::Silu))).map(|p| (a, p, b))
        }) else {
            continue;
        };
        let gate = s.steps[silu_step].inputs[0];
        let anchor = format!("anchor step {i} ({})", s.describe(out));
        let same = s.values[gate].dims == s.values[out].dims && s.values[up].dims == s.values[out].dims;
        if !same || !f32_only(s, &[gate, up, out]) {
            log.push(format!("{anchor}: declined, needs f32 gate and up of the output's shape"));
            continue;
        }
        let mut window = vec![silu_step, i];
        if let Some(why) = f.absorb_blocker(s, silu, &window) {
            log.push(format!("{anchor}: declined, {why}"));
            continue;
        }
        // Two matmuls (plain, or both of quantized weights with the same activations)
        // sharing their left operand, each read only here.
        let product = |(gs, gop): (usize, &Op), (us, uop): (usize, &Op)| {
            let kernel = match (gop, uop) {
                (Op::MatMul, Op::MatMul) => Kernel::SwiGluMatMul,
                (
                    Op::DequantMatMul { scheme: gate, activations },
                    Op::DequantMatMul { scheme: up, activations: up_activations },
                ) if activations == up_activations => {
                    Kernel::SwiGluDequant { gate: *gate, up: *up, activations: *activations }
                }
                _ => return None,
            };
            let (gi, ui) = (&s.steps[gs].inputs, &s.steps[us].inputs);
            let plain = s.values[gi[1]].dims.len() == 2 && s.values[ui[1]].dims.len() == 2;
            let mut w = window.clone();
            w.extend([gs, us]);
            (gi[0] == ui[0]
                && plain
                && f.absorb_blocker(s, gate, &w).is_none()
                && f.absorb_blocker(s, up, &w).is_none())
            .then_some((kernel, gs, us, gi[0], gi[1], ui[1]))
        };
        let two = f.producer_op(s, gate).zip(f.producer_op(s, up)).and_then(|(g, u)| product(g, u));
        let step = if let Some((kernel, gs, us, x, wg, wu)) = two {
            window.extend([gs, us]);
            extra_values.push((matches.len(), gate));
            log.push(format!("{anchor}: fused swiglu with both matmuls"));
            Step { kernel, inputs: vec![x, wg, wu], outputs: vec![out], temps: Vec::new(), nodes: Vec::new() }
        } else {
            log.push(format!("{anchor}: fused swiglu"));
            Step {
                kernel: Kernel::SwiGlu,
                inputs: vec![gate, up],
                outputs: vec![out],
                temps: Vec::new(),
                nodes: Vec::new(),
            }
        };
        window.sort_unstable();
        let step = Step { nodes: nodes(s, &window), ..step };
        matches.push(Match { window, step });
    }
    // The two-matmul form needs scratch for x @ wg.
    for (k, gate) in extra_values {
        let (dtype, dims) = (s.values[gate].dtype, s.values[gate].dims.clone());
        let temp = s.add_value(dtype, &dims, format!("swiglu gate scratch for {}", s.values[gate].label));
        matches[k].step.temps.push(temp);
    }
    apply(s, matches);
    Ok(())
}

/// `norm(a + b)` over the last axis, emitting the sum when it is read elsewhere.
pub fn add_norm(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let (rms, eps, gamma, beta) = match &step.kernel {
            Kernel::Op(Op::LayerNorm { eps, gamma, beta }) => (false, *eps, *gamma, *beta),
            Kernel::Op(Op::RmsNorm { eps, gamma }) => (true, *eps, *gamma, false),
            _ => continue,
        };
        let x = step.inputs[0];
        let Some((add_step, Op::Binary(BinaryOp::Add))) = f.producer_op(s, x) else { continue };
        let (a, b) = (s.steps[add_step].inputs[0], s.steps[add_step].inputs[1]);
        let out = step.outputs[0];
        let anchor = format!("anchor step {i} ({})", s.describe(out));
        let same = s.values[a].dims == s.values[x].dims && s.values[b].dims == s.values[x].dims;
        if !same || !f32_only(s, &[a, b, out]) || s.values[out].dims != s.values[x].dims {
            log.push(format!("{anchor}: declined, needs an f32 add without broadcasting"));
            continue;
        }
        let window = vec![add_step, i];
        let emit_sum = f.absorb_blocker(s, x, &window).is_some();
        log.push(format!("{anchor}: fused add+norm{}", if emit_sum { ", emitting the sum" } else { "" }));
        let mut inputs = vec![a, b];
        inputs.extend(&step.inputs[1..]);
        // The sum goes to its value when emitted, else to scratch (output 1 either way).
        let mut outputs = vec![out];
        let mut temps = Vec::new();
        if emit_sum {
            outputs.push(x);
        } else {
            temps.push(x);
        }
        matches.push(Match::new(
            s,
            window,
            Kernel::AddNorm { rms, eps, gamma, beta, emit_sum },
            inputs,
            outputs,
            temps,
        ));
    }
    apply(s, matches);
    Ok(())
}

/// `rms_norm(x) * silu(z)`, emitting silu(z) when it is read elsewhere.
pub fn rms_norm_mul_silu(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let Kernel::Op(Op::Binary(BinaryOp::Mul)) = &step.kernel else { continue };
        let out = step.outputs[0];
        let operands = [(step.inputs[0], step.inputs[1]), (step.inputs[1], step.inputs[0])];
        let found = operands.iter().find_map(|&(n, g)| match (f.producer_op(s, n), f.producer_op(s, g)) {
            (Some((ns, Op::RmsNorm { eps, gamma })), Some((gs, Op::Unary(Unary::Silu)))) => {
                Some((n, ns, *eps, *gamma, g, gs))
            }
            _ => None,
        });
        let Some((normed, norm_step, eps, gamma, silu, silu_step)) = found else { continue };
        let anchor = format!("anchor step {i} ({})", s.describe(out));
        let z = s.steps[silu_step].inputs[0];
        let x = s.steps[norm_step].inputs[0];
        let same = [x, z, normed, silu].iter().all(|&v| s.values[v].dims == s.values[out].dims);
        if !same || !f32_only(s, &[x, z, out]) {
            log.push(format!("{anchor}: declined, needs f32 operands of one shape"));
            continue;
        }
        let window = vec![norm_step.min(silu_step), norm_step.max(silu_step), i];
        if let Some(why) = f.absorb_blocker(s, normed, &window) {
            log.push(format!("{anchor}: declined, {why}"));
            continue;
        }
        let emit_silu = f.absorb_blocker(s, silu, &window).is_some();
        log.push(format!("{anchor}: fused rms_norm*silu{}", if emit_silu { ", emitting silu(z)" } else { "" }));
        let mut inputs = vec![x];
        inputs.extend(&s.steps[norm_step].inputs[1..]);
        inputs.push(z);
        let mut outputs = vec![out];
        if emit_silu {
            outputs.push(silu);
        }
        matches.push(Match::new(
            s,
            window,
            Kernel::RmsNormMulSilu { eps, gamma, emit_silu },
            inputs,
            outputs,
            Vec::new(),
        ));
    }
    apply(s, matches);
    Ok(())
}

/// `x / sqrt(sum(x*x, last, keep) [+ eps])` or `x * rsqrt(...)`, emitting the
/// denominator when it is read elsewhere.
pub fn l2_norm(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let rsqrt = match &step.kernel {
            Kernel::Op(Op::Binary(BinaryOp::Div)) => false,
            Kernel::Op(Op::Binary(BinaryOp::Mul)) => true,
            _ => continue,
        };
        let (x, d) = (step.inputs[0], step.inputs[1]);
        let out = step.outputs[0];
        let want = if rsqrt { Unary::Rsqrt } else { Unary::Sqrt };
        let Some((root_step, Op::Unary(u))) = f.producer_op(s, d) else { continue };
        if *u != want {
            continue;
        }
        let mut q = s.steps[root_step].inputs[0];
        let mut window = vec![root_step, i];
        // Optional `+ eps` with a scalar constant.
        let mut eps = 0.0f32;
        if let Some((add_step, Op::Binary(BinaryOp::Add))) = f.producer_op(s, q) {
            let (l, r) = (s.steps[add_step].inputs[0], s.steps[add_step].inputs[1]);
            match &s.values[r].kind {
                crate::schedule::ValueKind::Constant(c) if c.len() == 1 => {
                    eps = c.to_f32_vec()[0];
                    window.push(add_step);
                    q = l;
                }
                _ => continue,
            }
        }
        let rank = s.values[x].dims.len();
        let Some((sum_step, Op::Reduce { op: ReduceOp::Sum, axes, keep_dims: true })) = f.producer_op(s, q) else {
            continue;
        };
        if rank == 0 || axes[..] != [rank - 1] {
            continue;
        }
        let sq = s.steps[sum_step].inputs[0];
        let Some((sq_step, Op::Binary(BinaryOp::Mul))) = f.producer_op(s, sq) else { continue };
        if s.steps[sq_step].inputs != [x, x] {
            continue;
        }
        window.extend([sum_step, sq_step]);
        window.sort_unstable();
        let anchor = format!("anchor step {i} ({})", s.describe(out));
        if !f32_only(s, &[x, out]) || s.values[out].dims != s.values[x].dims || !eps.is_finite() {
            log.push(format!("{anchor}: declined, needs f32 x and a finite eps"));
            continue;
        }
        let interior: Vec<ValueId> =
            window.iter().map(|&w| s.steps[w].outputs[0]).filter(|&v| v != out && v != d).collect();
        if let Some(why) = interior.iter().find_map(|&v| f.absorb_blocker(s, v, &window)) {
            log.push(format!("{anchor}: declined, {why}"));
            continue;
        }
        let emit_denom = f.absorb_blocker(s, d, &window).is_some();
        log.push(format!("{anchor}: fused l2 norm{}", if emit_denom { ", emitting the denominator" } else { "" }));
        let mut outputs = vec![out];
        if emit_denom {
            outputs.push(d);
        }
        matches.push(Match::new(
            s,
            window,
            Kernel::L2Norm { eps: F32Attr(eps), rsqrt, emit_denom },
            vec![x],
            outputs,
            Vec::new(),
        ));
    }
    apply(s, matches);
    Ok(())
}

/// A reshape right after a norm: the norm writes the reshape's value directly, keeping the
/// reshape's dims and rank (the kernel takes its row length from its input).
pub fn norm_reshape(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let f = Facts::of(s);
    let mut matches = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let Kernel::Op(Op::Reshape { .. }) = &step.kernel else { continue };
        let normed = step.inputs[0];
        let Some((ns, op @ (Op::RmsNorm { .. } | Op::LayerNorm { .. }))) = f.producer_op(s, normed) else { continue };
        let anchor = format!("anchor step {i} ({})", s.describe(step.outputs[0]));
        let window = vec![ns, i];
        if let Some(why) = f.absorb_blocker(s, normed, &window) {
            log.push(format!("{anchor}: declined, {why}"));
            continue;
        }
        log.push(format!("{anchor}: folded the reshape into the {}", op.name()));
        matches.push(Match::new(
            s,
            window,
            Kernel::Op(op.clone()),
            s.steps[ns].inputs.clone(),
            step.outputs.clone(),
            Vec::new(),
        ));
    }
    apply(s, matches);
    Ok(())
}
