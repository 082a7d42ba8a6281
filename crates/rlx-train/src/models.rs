//! Networks to train: each is a graph builder for a batch size (inputs `x` and integer
//! targets `y`; outputs `[loss, logits]`) and a list of named params with their layout,
//! which decides how they are initialized; or a user's loss graph built for one batch
//! size ([`Network::from_loss_graph`]).

use crate::data::Rng;
use rlx_ir::shape::fmt_type;
use rlx_ir::{AttentionMask, Conv2dParams, DType, Error, Graph, NodeId, PoolParams, Result, Unary};

/// How a param is initialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// Uniform in +-sqrt(6 / fan_in) (He / Kaiming uniform): dense `[in, out]` weights.
    Dense,
    /// The same with fan_in = c * kh * kw: conv weights `[o, c, kh, kw]`.
    Conv,
    /// Normal with standard deviation 0.02 (embeddings).
    Embedding,
    Zeros,
    Ones,
}

#[derive(Clone, Debug)]
pub struct ParamSpec {
    pub name: String,
    pub dims: Vec<usize>,
    pub init: Init,
}

/// Builds the body of a network: from inputs `x`, `y` and the batch size to
/// `(loss, logits)` (params are already declared).
type Build = Box<dyn Fn(&mut Graph, NodeId, NodeId, usize) -> Result<(NodeId, NodeId)> + Send + Sync>;

/// How a network's graph comes about.
enum Body {
    /// Built for any batch size.
    Build(Build),
    /// A whole loss graph for the batch size it was built for.
    Fixed { graph: Graph, batch: usize },
}

/// A trainable network.
pub struct Network {
    pub name: String,
    pub params: Vec<ParamSpec>,
    /// Dims of one example of `x` (the batch axis comes first).
    pub example: Vec<usize>,
    /// Dtype of `x` (f32 features, or i64 tokens).
    pub x_dtype: DType,
    /// Dims of one example's targets `y` (`[]` for a class label).
    pub target: Vec<usize>,
    body: Body,
}

impl Network {
    /// A network whose `build` adds, to a graph holding inputs `x` (`[batch, ..example]`
    /// of `x_dtype`), `y` (`[batch, ..target]` i64) and the `params`, the nodes from them
    /// to `(loss, logits)`: a scalar loss and per-class scores (last axis).
    pub fn new(
        name: &str,
        params: Vec<ParamSpec>,
        (example, x_dtype): (&[usize], DType),
        target: &[usize],
        build: impl Fn(&mut Graph, NodeId, NodeId, usize) -> Result<(NodeId, NodeId)> + Send + Sync + 'static,
    ) -> Network {
        Network {
            name: name.into(),
            params,
            example: example.to_vec(),
            x_dtype,
            target: target.to_vec(),
            body: Body::Build(Box::new(build)),
        }
    }

    /// A network from a loss graph built for one batch size (a graph JSON): inputs `x`
    /// (features, `[batch, ..]`) and `y` (integer targets, `[batch, ..]` i64), f32
    /// params, outputs `[loss]` or `[loss, logits]` (logits give the accuracy). Params
    /// of 2 or more dims start He-uniform (fan-in: the first dim, or c*kh*kw of a 4-D
    /// conv weight), vectors at zero; give other values with an init file.
    pub fn from_loss_graph(graph: Graph) -> Result<Network> {
        let err = |why: String| Err(Error::input(format!("loss graph '{}': {why}", graph.name())));
        let leaf = |id: NodeId| graph.node(id).and_then(|n| n.leaf_name()).unwrap_or_default().to_string();
        let inputs: Vec<String> = graph.inputs().into_iter().map(leaf).collect();
        let (Some(x), Some(y)) = (graph.find_leaf("x"), graph.find_leaf("y")) else {
            return err(format!("needs inputs 'x' (features) and 'y' (targets), it has {inputs:?}"));
        };
        if inputs.len() != 2 {
            return err(format!("needs exactly the inputs 'x' and 'y', it has {inputs:?}"));
        }
        let (xd, yd) = (graph.dims(x).to_vec(), graph.dims(y).to_vec());
        if xd.is_empty() || yd.first() != xd.first() {
            return err(format!(
                "'x' {} and 'y' {} need the same batch size as their first dim",
                fmt_type(graph.dtype(x), &xd),
                fmt_type(graph.dtype(y), &yd)
            ));
        }
        if graph.dtype(y) != DType::I64 {
            return err(format!("'y' must hold i64 class ids, it is {}", fmt_type(graph.dtype(y), &yd)));
        }
        let Some(&loss) = graph.outputs().first() else { return err("has no outputs".into()) };
        if graph.dims(loss).iter().product::<usize>() != 1 {
            return err(format!(
                "its first output must be a scalar loss, it is {}",
                fmt_type(graph.dtype(loss), graph.dims(loss))
            ));
        }
        let mut params = Vec::new();
        for p in graph.params() {
            if graph.dtype(p) != DType::F32 {
                return err(format!(
                    "param '{}' is {}: trainable params are f32",
                    leaf(p),
                    fmt_type(graph.dtype(p), graph.dims(p))
                ));
            }
            let dims = graph.dims(p).to_vec();
            let init = match dims.len() {
                0 | 1 => Init::Zeros,
                4 => Init::Conv,
                _ => Init::Dense,
            };
            params.push(ParamSpec { name: leaf(p), dims, init });
        }
        Ok(Network {
            name: graph.name().to_string(),
            params,
            example: xd[1..].to_vec(),
            x_dtype: graph.dtype(x),
            target: yd[1..].to_vec(),
            body: Body::Fixed { batch: xd[0], graph },
        })
    }

    /// The one batch size a network from a loss graph takes (None: any).
    pub fn fixed_batch(&self) -> Option<usize> {
        match self.body {
            Body::Build(_) => None,
            Body::Fixed { batch, .. } => Some(batch),
        }
    }

    /// The forward graph for `batch` examples: inputs `x`, `y`; params as listed;
    /// outputs `[loss, logits]` (`[loss]` for a loss graph without logits).
    pub fn graph(&self, batch: usize) -> Result<Graph> {
        let build = match &self.body {
            Body::Build(build) => build,
            Body::Fixed { graph, batch: fixed } if *fixed == batch => return Ok(graph.clone()),
            Body::Fixed { batch: fixed, .. } => {
                return Err(Error::input(format!(
                    "loss graph '{}' is built for batches of {fixed}, not {batch}",
                    self.name
                )));
            }
        };
        let mut g = Graph::new(&format!("{}_b{batch}", self.name));
        let x = g.input("x", self.x_dtype, &[&[batch][..], &self.example].concat())?;
        let y = g.input("y", DType::I64, &[&[batch][..], &self.target].concat())?;
        for p in &self.params {
            g.param(&p.name, DType::F32, &p.dims)?;
        }
        let (loss, logits) = build(&mut g, x, y, batch)?;
        g.set_outputs(&[loss, logits])?;
        Ok(g)
    }

    /// Initial values of every param, in `params` order.
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = Rng::new(seed);
        self.params
            .iter()
            .map(|p| {
                let n: usize = p.dims.iter().product();
                let fan_in = |dims: &[usize]| dims.iter().product::<usize>().max(1) as f64;
                let uniform = |rng: &mut Rng, fan: f64| {
                    let a = (6.0 / fan).sqrt();
                    (0..n).map(|_| ((rng.uniform() * 2.0 - 1.0) * a) as f32).collect()
                };
                match p.init {
                    Init::Dense => uniform(&mut rng, fan_in(&p.dims[..1])),
                    Init::Conv => uniform(&mut rng, fan_in(&p.dims[1..])),
                    Init::Embedding => (0..n).map(|_| (rng.normal() * 0.02) as f32).collect(),
                    Init::Zeros => vec![0.0; n],
                    Init::Ones => vec![1.0; n],
                }
            })
            .collect()
    }

    /// Parameter count.
    pub fn size(&self) -> usize {
        self.params.iter().map(|p| p.dims.iter().product::<usize>()).sum()
    }
}

fn spec(name: &str, dims: &[usize], init: Init) -> ParamSpec {
    ParamSpec { name: name.to_string(), dims: dims.to_vec(), init }
}

fn param(g: &Graph, name: &str) -> NodeId {
    g.find_leaf(name).expect("declared by Network::graph")
}

/// `x @ w + b` with params `{name}.w [in, out]` and `{name}.b [out]`.
fn dense(g: &mut Graph, x: NodeId, name: &str) -> Result<NodeId> {
    let w = param(g, &format!("{name}.w"));
    let b = param(g, &format!("{name}.b"));
    let y = g.matmul(x, w)?;
    g.add(y, b)
}

fn dense_specs(name: &str, inp: usize, out: usize) -> [ParamSpec; 2] {
    [spec(&format!("{name}.w"), &[inp, out], Init::Dense), spec(&format!("{name}.b"), &[out], Init::Zeros)]
}

/// 64 -> hidden -> 10 with ReLU, for 8x8 digits.
pub fn mlp(hidden: usize) -> Network {
    Network {
        name: "mlp".into(),
        params: [dense_specs("fc1", 64, hidden), dense_specs("fc2", hidden, 10)].concat(),
        example: vec![64],
        x_dtype: DType::F32,
        target: vec![],
        body: Body::Build(Box::new(|g, x, y, _| {
            let h = dense(g, x, "fc1")?;
            let h = g.unary(Unary::Relu, h)?;
            let logits = dense(g, h, "fc2")?;
            Ok((g.cross_entropy(logits, y)?, logits))
        })),
    }
}

/// conv 3x3 (`c1`) -> relu -> max pool 2 -> conv 3x3 (`c2`) -> relu -> max pool 2 ->
/// dense 10, for 8x8 digits.
pub fn cnn(c1: usize, c2: usize) -> Network {
    let conv = |name: &str, o: usize, c: usize| {
        [spec(&format!("{name}.w"), &[o, c, 3, 3], Init::Conv), spec(&format!("{name}.b"), &[o], Init::Zeros)]
    };
    Network {
        name: "cnn".into(),
        params: [conv("conv1", c1, 1), conv("conv2", c2, c1)]
            .into_iter()
            .flatten()
            .chain(dense_specs("fc", 4 * c2, 10))
            .collect(),
        example: vec![1, 8, 8],
        x_dtype: DType::F32,
        target: vec![],
        body: Body::Build(Box::new(move |g, x, y, batch| {
            let same = Conv2dParams::default().with_padding(1);
            let mut h = x;
            for layer in ["conv1", "conv2"] {
                let (w, b) = (param(g, &format!("{layer}.w")), param(g, &format!("{layer}.b")));
                h = g.conv2d(h, w, Some(b), same)?;
                h = g.unary(Unary::Relu, h)?;
                h = g.max_pool2d(h, PoolParams::square(2))?;
            }
            let h = g.reshape(h, &[batch, 4 * c2])?;
            let logits = dense(g, h, "fc")?;
            Ok((g.cross_entropy(logits, y)?, logits))
        })),
    }
}

/// A GPT-style character model: token + position embeddings, `layers` pre-norm blocks of
/// causal multi-head attention and a GELU MLP, a final layer norm and an output head.
/// `x` holds token ids `[batch, seq]`, `y` the next tokens.
#[derive(Clone, Copy, Debug)]
pub struct TransformerConfig {
    pub vocab: usize,
    pub seq: usize,
    pub dim: usize,
    pub heads: usize,
    pub layers: usize,
}

pub fn char_transformer(c: TransformerConfig) -> Network {
    let mut params =
        vec![spec("tok_emb", &[c.vocab, c.dim], Init::Embedding), spec("pos_emb", &[c.seq, c.dim], Init::Embedding)];
    for l in 0..c.layers {
        let p = |s: &str| format!("block{l}.{s}");
        params.push(spec(&p("ln1.gamma"), &[c.dim], Init::Ones));
        params.push(spec(&p("ln1.beta"), &[c.dim], Init::Zeros));
        for proj in ["q", "k", "v", "o"] {
            params.extend(dense_specs(&p(proj), c.dim, c.dim));
        }
        params.push(spec(&p("ln2.gamma"), &[c.dim], Init::Ones));
        params.push(spec(&p("ln2.beta"), &[c.dim], Init::Zeros));
        params.extend(dense_specs(&p("up"), c.dim, 4 * c.dim));
        params.extend(dense_specs(&p("down"), 4 * c.dim, c.dim));
    }
    params.push(spec("ln_f.gamma", &[c.dim], Init::Ones));
    params.push(spec("ln_f.beta", &[c.dim], Init::Zeros));
    params.extend(dense_specs("head", c.dim, c.vocab));
    Network {
        name: "char_transformer".into(),
        params,
        example: vec![c.seq],
        x_dtype: DType::I64,
        target: vec![c.seq],
        body: Body::Build(Box::new(move |g, x, y, batch| {
            let (s, d, h) = (c.seq, c.dim, c.heads);
            let tok = param(g, "tok_emb");
            let pos = param(g, "pos_emb");
            let e = g.gather(tok, x)?; // [b, s, d]
            let mut t = g.add(e, pos)?;
            let norm = |g: &mut Graph, x: NodeId, name: &str| {
                let (gm, bt) = (param(g, &format!("{name}.gamma")), param(g, &format!("{name}.beta")));
                g.layer_norm(x, Some(gm), Some(bt), 1e-5)
            };
            let heads = |g: &mut Graph, x: NodeId| -> Result<NodeId> {
                let x = g.reshape(x, &[batch, s, h, d / h])?;
                g.transpose(x, &[0, 2, 1, 3])
            };
            for l in 0..c.layers {
                let p = |n: &str| format!("block{l}.{n}");
                let a = norm(g, t, &p("ln1"))?;
                let q = dense(g, a, &p("q"))?;
                let k = dense(g, a, &p("k"))?;
                let v = dense(g, a, &p("v"))?;
                let (q, k, v) = (heads(g, q)?, heads(g, k)?, heads(g, v)?);
                let o = g.attention(q, k, v, AttentionMask::Causal, None)?;
                let o = g.transpose(o, &[0, 2, 1, 3])?;
                let o = g.reshape(o, &[batch, s, d])?;
                let o = dense(g, o, &p("o"))?;
                t = g.add(t, o)?;
                let m = norm(g, t, &p("ln2"))?;
                let m = dense(g, m, &p("up"))?;
                let m = g.unary(Unary::Gelu, m)?;
                let m = dense(g, m, &p("down"))?;
                t = g.add(t, m)?;
            }
            let t = norm(g, t, "ln_f")?;
            let logits = dense(g, t, "head")?;
            let flat = g.reshape(logits, &[batch * s, c.vocab])?;
            let targets = g.reshape(y, &[batch * s])?;
            Ok((g.cross_entropy(flat, targets)?, logits))
        })),
    }
}

/// Fraction of rows of `logits [n, classes]` whose argmax is the label.
pub fn accuracy(logits: &[f32], labels: &[i64], classes: usize) -> f64 {
    let hits = logits
        .chunks_exact(classes)
        .zip(labels)
        .filter(|&(row, &l)| {
            let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
            best as i64 == l
        })
        .count();
    hits as f64 / labels.len().max(1) as f64
}

/// Mean of a loss graph's scalar output, for reporting.
pub fn mean(values: &[f32]) -> f32 {
    values.iter().sum::<f32>() / values.len().max(1) as f32
}
