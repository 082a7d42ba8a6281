//! Recurrent layers: RNN, GRU, LSTM (opset 7, and 14 with the `layout` attribute).
//!
//! The input projection `X W^T + biases` of every step and direction is one matmul
//! outside the loop; only the recurrent part (`H R^T`, the gates) runs per step, as the
//! body of an IR scan over the projected sequence. The scan's one carry packs every
//! state the loop needs as rows of `[K, batch, hidden]`: the output sequence `Y` (when
//! asked for: step `t` writes row `t`, picked by a one-hot row of the second scanned
//! sequence; this costs `O(seq^2)` copies, which RNN-sized sequences afford, and keeps
//! one loop for all outputs), then `H`, then `C` (LSTM). A sequence of one step is
//! emitted directly, without a scan.

use super::{OpDef, def};
use crate::import::{Importer, Node};
use rlx_ir::{CompareOp, DType, Error, Graph, HostTensor, NodeId, Result, Unary};

pub const OPS: &[OpDef] = &[
    def("RNN", 7, |i, n| recurrent(i, n, Cell::Rnn)),
    def("RNN", 14, |i, n| recurrent(i, n, Cell::Rnn)),
    def("GRU", 7, |i, n| recurrent(i, n, Cell::Gru)),
    def("GRU", 14, |i, n| recurrent(i, n, Cell::Gru)),
    def("LSTM", 7, |i, n| recurrent(i, n, Cell::Lstm)),
    def("LSTM", 14, |i, n| recurrent(i, n, Cell::Lstm)),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    /// Gates per step (rows of W / R per hidden unit).
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The activation functions of one direction and their defaults.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// The activation functions ONNX's recurrent ops name.
#[derive(Clone, Copy, Debug)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

/// Parses `names` with `activation_alpha` / `activation_beta` consumed in order by the
/// functions that take them. ONNX leaves the defaults unstated; these are onnxruntime's
/// (LeakyRelu 0.01, HardSigmoid 0.2 / 0.5, Elu 1, every other 0).
fn parse_activations(names: &[String], alphas: &[f32], betas: &[f32]) -> Result<Vec<Act>> {
    let (mut alphas, mut betas) = (alphas.iter().map(|&a| f64::from(a)), betas.iter().map(|&b| f64::from(b)));
    names
        .iter()
        .map(|name| {
            let mut alpha = |default: f64| alphas.next().unwrap_or(default);
            Ok(match name.to_ascii_lowercase().as_str() {
                "relu" => Act::Relu,
                "tanh" => Act::Tanh,
                "sigmoid" => Act::Sigmoid,
                "affine" => Act::Affine(alpha(0.0), betas.next().unwrap_or(0.0)),
                "leakyrelu" => Act::LeakyRelu(alpha(0.01)),
                "thresholdedrelu" => Act::ThresholdedRelu(alpha(0.0)),
                "scaledtanh" => Act::ScaledTanh(alpha(0.0), betas.next().unwrap_or(0.0)),
                "hardsigmoid" => Act::HardSigmoid(alpha(0.2), betas.next().unwrap_or(0.5)),
                "elu" => Act::Elu(alpha(1.0)),
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                _ => return Err(Error::unsupported(format!("activation '{name}' is not supported"))),
            })
        })
        .collect()
}

fn scalar(g: &mut Graph, like: NodeId, v: f64) -> Result<NodeId> {
    g.scalar_like(like, v)
}

fn apply(g: &mut Graph, act: Act, x: NodeId) -> Result<NodeId> {
    match act {
        Act::Relu => g.unary(Unary::Relu, x),
        Act::Tanh => g.unary(Unary::Tanh, x),
        Act::Sigmoid => g.unary(Unary::Sigmoid, x),
        Act::Softplus => g.unary(Unary::Softplus, x),
        Act::Affine(a, b) => {
            let (a, b) = (scalar(g, x, a)?, scalar(g, x, b)?);
            let ax = g.mul(x, a)?;
            g.add(ax, b)
        }
        Act::LeakyRelu(a) => {
            let (zero, a) = (scalar(g, x, 0.0)?, scalar(g, x, a)?);
            let ax = g.mul(x, a)?;
            let neg = g.compare(CompareOp::Lt, x, zero)?;
            g.where_(neg, ax, x)
        }
        Act::ThresholdedRelu(a) => {
            let (zero, a) = (scalar(g, x, 0.0)?, scalar(g, x, a)?);
            let keep = g.compare(CompareOp::Gt, x, a)?;
            g.where_(keep, x, zero)
        }
        Act::ScaledTanh(a, b) => {
            let (a, b) = (scalar(g, x, a)?, scalar(g, x, b)?);
            let bx = g.mul(x, b)?;
            let t = g.unary(Unary::Tanh, bx)?;
            g.mul(t, a)
        }
        Act::HardSigmoid(a, b) => {
            let (a, b, zero, one) = (scalar(g, x, a)?, scalar(g, x, b)?, scalar(g, x, 0.0)?, scalar(g, x, 1.0)?);
            let ax = g.mul(x, a)?;
            let y = g.add(ax, b)?;
            let y = g.maximum(y, zero)?;
            g.minimum(y, one)
        }
        Act::Elu(a) => {
            let (zero, one, a) = (scalar(g, x, 0.0)?, scalar(g, x, 1.0)?, scalar(g, x, a)?);
            let e = g.unary(Unary::Exp, x)?;
            let em1 = g.sub(e, one)?;
            let neg = g.mul(em1, a)?;
            let below = g.compare(CompareOp::Lt, x, zero)?;
            g.where_(below, neg, x)
        }
        Act::Softsign => {
            let one = scalar(g, x, 1.0)?;
            let a = g.unary(Unary::Abs, x)?;
            let d = g.add(a, one)?;
            g.div(x, d)
        }
    }
}

/// What every step of one layer shares: the cell, its attributes and one direction's
/// activations.
struct Spec {
    cell: Cell,
    hidden: usize,
    acts: Vec<Act>,
    clip: Option<f64>,
    input_forget: bool,
}

/// One direction's recurrent operands, as nodes of the graph the step is built in.
#[derive(Clone, Copy)]
struct Recurrent {
    /// `R^T`: `[hidden, gates * hidden]`; for a GRU that resets before the product, only
    /// the update and reset gates' `[hidden, 2 * hidden]`.
    rt: NodeId,
    /// GRU without linear_before_reset: the hidden gate's `R_h^T`, `[hidden, hidden]`.
    rht: Option<NodeId>,
    /// LSTM peepholes `[3, hidden]` (input, output, forget).
    p: Option<NodeId>,
    /// GRU with linear_before_reset: the hidden gate's recurrent bias `[hidden]`.
    rbh: Option<NodeId>,
}

impl Spec {
    fn clip(&self, g: &mut Graph, x: NodeId) -> Result<NodeId> {
        let Some(c) = self.clip else { return Ok(x) };
        let (lo, hi) = (scalar(g, x, -c)?, scalar(g, x, c)?);
        let y = g.maximum(x, lo)?;
        g.minimum(y, hi)
    }

    /// `act(clip(x))`: clip bounds the input of the gate activations.
    fn gate(&self, g: &mut Graph, act: usize, x: NodeId) -> Result<NodeId> {
        let x = self.clip(g, x)?;
        apply(g, self.acts[act], x)
    }

    fn peephole(&self, g: &mut Graph, w: &Recurrent, k: usize, x: NodeId, c: NodeId) -> Result<NodeId> {
        let Some(p) = w.p else { return Ok(x) };
        let pk = g.narrow(p, 0, k, 1)?;
        let pc = g.mul(pk, c)?;
        g.add(x, pc)
    }

    /// One step: from the projected input `xw` `[batch, gates * hidden]` (biases added)
    /// and the states `h` (and `c`) `[batch, hidden]`, the next states.
    fn step(
        &self,
        g: &mut Graph,
        w: &Recurrent,
        xw: NodeId,
        h: NodeId,
        c: Option<NodeId>,
    ) -> Result<(NodeId, Option<NodeId>)> {
        let hd = self.hidden;
        let hr = g.matmul(h, w.rt)?;
        let gate = |g: &mut Graph, x: NodeId, k: usize| g.narrow(x, 1, k * hd, hd);
        match self.cell {
            Cell::Rnn => {
                let a = g.add(xw, hr)?;
                Ok((self.gate(g, 0, a)?, None))
            }
            Cell::Gru => {
                // Gate order z (update), r (reset), h.
                let (xz, xr, xh) = (gate(g, xw, 0)?, gate(g, xw, 1)?, gate(g, xw, 2)?);
                let (hz, hr_) = (gate(g, hr, 0)?, gate(g, hr, 1)?);
                let az = g.add(xz, hz)?;
                let z = self.gate(g, 0, az)?;
                let ar = g.add(xr, hr_)?;
                let r = self.gate(g, 0, ar)?;
                let hh = match (w.rht, w.rbh) {
                    (Some(rht), _) => {
                        let rh = g.mul(r, h)?;
                        g.matmul(rh, rht)?
                    }
                    (None, rbh) => {
                        let mut lin = gate(g, hr, 2)?;
                        if let Some(b) = rbh {
                            lin = g.add(lin, b)?;
                        }
                        g.mul(r, lin)?
                    }
                };
                let ah = g.add(xh, hh)?;
                let ht = self.gate(g, 1, ah)?;
                // (1 - z) ht + z h = ht + z (h - ht).
                let d = g.sub(h, ht)?;
                let zd = g.mul(z, d)?;
                Ok((g.add(ht, zd)?, None))
            }
            Cell::Lstm => {
                let c = c.ok_or_else(|| Error::internal("LSTM step without a cell state"))?;
                let a = g.add(xw, hr)?;
                // Gate order i, o, f, c; peepholes i, o, f.
                let (ai, ao, af, ac) = (gate(g, a, 0)?, gate(g, a, 1)?, gate(g, a, 2)?, gate(g, a, 3)?);
                let ai = self.peephole(g, w, 0, ai, c)?;
                let i = self.gate(g, 0, ai)?;
                let f = if self.input_forget {
                    let one = scalar(g, i, 1.0)?;
                    g.sub(one, i)?
                } else {
                    let af = self.peephole(g, w, 2, af, c)?;
                    self.gate(g, 0, af)?
                };
                let ct = self.gate(g, 1, ac)?;
                let fc = g.mul(f, c)?;
                let ict = g.mul(i, ct)?;
                let c_new = g.add(fc, ict)?;
                let ao = self.peephole(g, w, 1, ao, c_new)?;
                let o = self.gate(g, 0, ao)?;
                let hc = apply(g, self.acts[2], c_new)?;
                Ok((g.mul(o, hc)?, Some(c_new)))
            }
        }
    }
}

/// The outputs of one direction: `Y` `[seq, batch, hidden]` (when asked for), the final
/// `H` and `C` `[batch, hidden]`.
struct Run {
    y: Option<NodeId>,
    h: NodeId,
    c: Option<NodeId>,
}

/// Runs one direction over `xw` `[seq, batch, gates * hidden]`, already in step order
/// (reversed for the reverse direction); `Y` rows are written in time order.
fn run_direction(
    g: &mut Graph,
    spec: &Spec,
    w: Recurrent,
    xw: NodeId,
    (h0, c0): (NodeId, Option<NodeId>),
    (want_y, reverse): (bool, bool),
) -> Result<Run> {
    let (seq, batch, width) = match *g.dims(xw) {
        [s, b, w] => (s, b, w),
        _ => return Err(Error::internal("projected input must be [seq, batch, width]")),
    };
    let hd = spec.hidden;
    let dtype = g.dtype(xw);
    if seq == 1 {
        let x0 = g.reshape(xw, &[batch, width])?;
        let (h, c) = spec.step(g, &w, x0, h0, c0)?;
        let y = if want_y { Some(g.reshape(h, &[1, batch, hd])?) } else { None };
        return Ok(Run { y, h, c });
    }
    let y_rows = if want_y { seq } else { 0 };
    let rows = y_rows + 1 + usize::from(c0.is_some());
    let mut body = Graph::new("recurrent_step");
    let carry = body.input("carry", dtype, &[rows, batch, hd])?;
    let bind = |body: &mut Graph, name: &str, id: Option<NodeId>| -> Result<Option<NodeId>> {
        id.map(|id| {
            let (dt, dims) = (g.dtype(id), g.dims(id).to_vec());
            body.input(name, dt, &dims)
        })
        .transpose()
    };
    let inner = Recurrent {
        rt: bind(&mut body, "rt", Some(w.rt))?.ok_or_else(|| Error::internal("no R^T"))?,
        rht: bind(&mut body, "rht", w.rht)?,
        p: bind(&mut body, "p", w.p)?,
        rbh: bind(&mut body, "rbh", w.rbh)?,
    };
    let x_t = body.input("xw", dtype, &[batch, width])?;
    let hot = if want_y { Some(body.input("one_hot", DType::Bool, &[seq])?) } else { None };
    let state = |body: &mut Graph, row: usize| -> Result<NodeId> {
        let s = body.narrow(carry, 0, row, 1)?;
        body.reshape(s, &[batch, hd])
    };
    let h = state(&mut body, y_rows)?;
    let c = if c0.is_some() { Some(state(&mut body, y_rows + 1)?) } else { None };
    let (h_new, c_new) = spec.step(&mut body, &inner, x_t, h, c)?;
    let mut parts = Vec::new();
    let h_row = body.reshape(h_new, &[1, batch, hd])?;
    if let Some(hot) = hot {
        let y = body.narrow(carry, 0, 0, seq)?;
        let mask = body.reshape(hot, &[seq, 1, 1])?;
        let h_all = body.broadcast_to(h_row, &[seq, batch, hd])?;
        parts.push(body.where_(mask, h_all, y)?);
    }
    parts.push(h_row);
    if let Some(c_new) = c_new {
        parts.push(body.reshape(c_new, &[1, batch, hd])?);
    }
    let out = if parts.len() == 1 { h_row } else { body.concat(&parts, 0)? };
    body.set_outputs(&[out])?;

    // The initial carry: Y rows zero, then h0 (and c0).
    let mut init = Vec::new();
    if want_y {
        init.push(g.full(dtype, &[seq, batch, hd], 0.0)?);
    }
    init.push(g.reshape(h0, &[1, batch, hd])?);
    if let Some(c0) = c0 {
        init.push(g.reshape(c0, &[1, batch, hd])?);
    }
    let init = if init.len() == 1 { init[0] } else { g.concat(&init, 0)? };
    let mut ins = vec![init, w.rt];
    ins.extend([w.rht, w.p, w.rbh].into_iter().flatten());
    let n_bcast = ins.len() - 1;
    ins.push(xw);
    if want_y {
        // Step t writes Y row t (forward) or seq - 1 - t (reverse).
        let hot: Vec<u8> = (0..seq)
            .flat_map(|t| (0..seq).map(move |r| u8::from(r == if reverse { seq - 1 - t } else { t })))
            .collect();
        ins.push(g.constant_tensor(HostTensor::from_bytes(DType::Bool, &[seq, seq], hot)?)?);
    }
    let last = g.scan_carries(&body, &ins, 1, n_bcast, None, 0)?;
    let row = |g: &mut Graph, r: usize| -> Result<NodeId> {
        let s = g.narrow(last, 0, r, 1)?;
        g.reshape(s, &[batch, hd])
    };
    let y = if want_y { Some(g.narrow(last, 0, 0, seq)?) } else { None };
    let h = row(g, y_rows)?;
    let c = if c0.is_some() { Some(row(g, y_rows + 1)?) } else { None };
    Ok(Run { y, h, c })
}

/// Direction `d` of a `[dirs, ...]` operand, without its leading axis.
fn direction(g: &mut Graph, x: NodeId, d: usize) -> Result<NodeId> {
    let s = g.narrow(x, 0, d, 1)?;
    let dims = g.dims(s)[1..].to_vec();
    g.reshape(s, &dims)
}

fn expect_dims(i: &Importer, id: NodeId, what: &str, want: &[usize]) -> Result<()> {
    if i.g.dims(id) != want {
        return Err(Error::shape(format!("{what} must be {want:?}, got {}", i.g.describe(id))));
    }
    Ok(())
}

fn recurrent(i: &mut Importer, n: &Node, cell: Cell) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let (w, r) = (i.input(n, 1)?, i.input(n, 2)?);
    let dtype = i.g.dtype(x);
    if !dtype.is_float() {
        return Err(Error::dtype(format!("X must be a float tensor, got {}", i.g.describe(x))));
    }
    for (what, id) in [("W", w), ("R", r)] {
        if i.g.dtype(id) != dtype {
            return Err(Error::dtype(format!("{what} is {}, X is {dtype:?}", i.g.describe(id))));
        }
    }
    let layout = if n.since >= 14 { n.int("layout", 0)? } else { 0 };
    let batch_first = match layout {
        0 => false,
        1 => true,
        v => return Err(Error::unsupported(format!("layout {v} (0 or 1)"))),
    };
    let (seq, batch, input) = match *i.g.dims(x) {
        [a, b, c] if batch_first => (b, a, c),
        [a, b, c] => (a, b, c),
        _ => return Err(Error::shape(format!("X must have rank 3, got {}", i.g.describe(x)))),
    };
    if seq == 0 {
        return Err(Error::unsupported("an empty sequence (seq_length 0)"));
    }
    let direction_attr = n.string("direction", "forward")?;
    let dirs: &[bool] = match direction_attr.as_str() {
        "forward" => &[false],
        "reverse" => &[true],
        "bidirectional" => &[false, true],
        other => return Err(Error::unsupported(format!("direction '{other}'"))),
    };
    let nd = dirs.len();
    let gates = cell.gates();
    let hidden = match n.int_opt("hidden_size")? {
        Some(h) => usize::try_from(h).map_err(|_| Error::shape(format!("hidden_size {h} is negative")))?,
        None => i.g.dims(r).last().copied().unwrap_or(0),
    };
    let gh = gates * hidden;
    expect_dims(i, w, "W", &[nd, gh, input])?;
    expect_dims(i, r, "R", &[nd, gh, hidden])?;
    let b = i.opt_input(n, 3)?;
    if let Some(b) = b {
        expect_dims(i, b, "B", &[nd, 2 * gh])?;
    }
    if let Some(lens) = i.const_ints(n, 4)?
        && lens.iter().any(|&l| l != seq as i64)
    {
        return Err(Error::unsupported(format!(
            "sequence_lens {lens:?} differ from the sequence length {seq} (padded batches)"
        )));
    }
    let state_dims = if batch_first { [batch, nd, hidden] } else { [nd, batch, hidden] };
    let initial = |i: &mut Importer, k: usize, what: &str| -> Result<Option<NodeId>> {
        let Some(s) = i.opt_input(n, k)? else { return Ok(None) };
        expect_dims(i, s, what, &state_dims)?;
        Ok(Some(if batch_first { i.g.transpose(s, &[1, 0, 2])? } else { s }))
    };
    let h0 = initial(i, 5, "initial_h")?;
    let (c0, p) = if cell == Cell::Lstm { (initial(i, 6, "initial_c")?, i.opt_input(n, 7)?) } else { (None, None) };
    if let Some(p) = p {
        expect_dims(i, p, "P", &[nd, 3 * hidden])?;
    }
    let per_dir = cell.default_activations().len();
    let names = match n.strings("activations")? {
        Some(names) => names,
        None => (0..nd).flat_map(|_| cell.default_activations().iter().map(|s| s.to_string())).collect(),
    };
    if names.len() != per_dir * nd {
        return Err(Error::shape(format!(
            "activations {names:?}: {} {} direction(s) need {}",
            n.op_type(),
            nd,
            per_dir * nd
        )));
    }
    let acts = parse_activations(
        &names,
        &n.floats("activation_alpha")?.unwrap_or_default(),
        &n.floats("activation_beta")?.unwrap_or_default(),
    )?;
    let clip = n.has("clip").then(|| n.float("clip", 0.0)).transpose()?.map(f64::from);
    let input_forget = cell == Cell::Lstm && n.int("input_forget", 0)? != 0;
    let linear_before_reset = cell == Cell::Gru && n.int("linear_before_reset", 0)? != 0;
    let want_y = n.proto.output.first().is_some_and(|o| !o.is_empty());

    // One matmul projects every step for every direction: [seq * batch, dirs * gh].
    let xt = if batch_first { i.g.transpose(x, &[1, 0, 2])? } else { x };
    let x2 = i.g.reshape(xt, &[seq * batch, input])?;
    let w2 = i.g.reshape(w, &[nd * gh, input])?;
    let wt = i.g.transpose(w2, &[1, 0])?;
    let mut xw_all = i.g.matmul(x2, wt)?;
    if let Some(b) = b {
        // Wb + Rb, except a GRU's hidden-gate Rb when it is applied after the reset.
        let wb = i.g.narrow(b, 1, 0, gh)?;
        let mut rb = i.g.narrow(b, 1, gh, gh)?;
        if linear_before_reset {
            let zr = i.g.narrow(rb, 1, 0, 2 * hidden)?;
            let zero = i.g.full(dtype, &[nd, hidden], 0.0)?;
            rb = i.g.concat(&[zr, zero], 1)?;
        }
        let bias = i.g.add(wb, rb)?;
        let bias = i.g.reshape(bias, &[nd * gh])?;
        xw_all = i.g.add(xw_all, bias)?;
    }
    let xw_all = i.g.reshape(xw_all, &[seq, batch, nd * gh])?;

    let mut ys = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &reverse) in dirs.iter().enumerate() {
        let spec = Spec { cell, hidden, acts: acts[d * per_dir..(d + 1) * per_dir].to_vec(), clip, input_forget };
        let mut xw = i.g.narrow(xw_all, 2, d * gh, gh)?;
        if reverse && seq > 1 {
            let order: Vec<i64> = (0..seq as i64).rev().collect();
            let order = i.g.constant_tensor(HostTensor::from_i64(&[seq], &order)?)?;
            xw = i.g.gather(xw, order)?;
        }
        let rd = direction(&mut i.g, r, d)?;
        let rt = i.g.transpose(rd, &[1, 0])?;
        let (rt, rht) = if cell == Cell::Gru && !linear_before_reset {
            (i.g.narrow(rt, 1, 0, 2 * hidden)?, Some(i.g.narrow(rt, 1, 2 * hidden, hidden)?))
        } else {
            (rt, None)
        };
        let p = p.map(|p| {
            let pd = direction(&mut i.g, p, d)?;
            i.g.reshape(pd, &[3, hidden])
        });
        let rbh = match (linear_before_reset, b) {
            (true, Some(b)) => {
                let bd = direction(&mut i.g, b, d)?;
                Some(i.g.narrow(bd, 0, gh + 2 * hidden, hidden)?)
            }
            _ => None,
        };
        let rec = Recurrent { rt, rht, p: p.transpose()?, rbh };
        let zeros = |i: &mut Importer| i.g.full(dtype, &[batch, hidden], 0.0);
        let h0 = match h0 {
            Some(h) => direction(&mut i.g, h, d)?,
            None => zeros(i)?,
        };
        let c0 = match (cell, c0) {
            (Cell::Lstm, Some(c)) => Some(direction(&mut i.g, c, d)?),
            (Cell::Lstm, None) => Some(zeros(i)?),
            _ => None,
        };
        let run = run_direction(&mut i.g, &spec, rec, xw, (h0, c0), (want_y, reverse))
            .map_err(|e| e.context(format!("{} direction", if reverse { "reverse" } else { "forward" })))?;
        if let Some(y) = run.y {
            ys.push(i.g.reshape(y, &[seq, 1, batch, hidden])?);
        }
        hs.push(i.g.reshape(run.h, &[1, batch, hidden])?);
        if let Some(c) = run.c {
            cs.push(i.g.reshape(c, &[1, batch, hidden])?);
        }
    }
    let join = |i: &mut Importer, parts: &[NodeId], axis: usize| -> Result<NodeId> {
        if parts.len() == 1 { Ok(parts[0]) } else { i.g.concat(parts, axis) }
    };
    let states = |i: &mut Importer, parts: &[NodeId]| -> Result<NodeId> {
        let s = join(i, parts, 0)?;
        if batch_first { i.g.transpose(s, &[1, 0, 2]) } else { Ok(s) }
    };
    let y_h = states(i, &hs)?;
    let y = if want_y {
        let y = join(i, &ys, 1)?;
        if batch_first { i.g.transpose(y, &[2, 0, 1, 3])? } else { y }
    } else {
        // Not asked for: the slot is never bound (its output name is empty).
        y_h
    };
    let mut outs = vec![y, y_h];
    if cell == Cell::Lstm {
        outs.push(states(i, &cs)?);
    }
    Ok(outs)
}
