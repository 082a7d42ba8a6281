//! One check per input channel: any bytes give `Ok` or `Err`, never a panic, and what
//! a reader accepts obeys the invariants below. The libFuzzer targets in fuzz_targets/
//! call these; crates/rlx/tests/fuzz_replay includes this file with `#[path]` and feeds
//! every committed corpus file to them, so a crash found once stays fixed.
//!
//! Uses only crates that both the fuzz crate and `rlx`'s test targets depend on.

use rlx_ir::{ActivationQuant, DType, Graph, HostTensor, NodeId, Op};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// GGUF: every tensor the reader accepts lies inside the file, and decoding a small one
/// is `Ok` or `Err`.
pub fn gguf(data: &[u8]) {
    let len = data.len();
    let Ok(g) = rlx_gguf::Gguf::parse(Arc::new(data.to_vec())) else { return };
    for t in &g.tensors {
        let r = g.tensor_range(t);
        assert!(r.start <= r.end && r.end <= len, "tensor '{}' at {r:?} outside a {len}-byte file", t.name);
        assert_eq!(g.tensor_data(t).len(), t.bytes, "tensor '{}'", t.name);
        // Decoding is bounded by the tensor's bytes, which the file holds; cap it anyway
        // so one input stays fast.
        if t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_some_and(|n| n <= 1 << 16) {
            let _ = g.dequantize(&t.name);
        }
    }
    for (_, v) in &g.metadata {
        let _ = v.summary();
    }
}

/// Graph JSON: a document is `Ok` or `Err`; an accepted graph serializes to a document
/// that parses back to a graph serializing to the same text.
pub fn graph_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(g) = Graph::from_json(text) else { return };
    let doc = g.to_json().expect("an accepted graph serializes");
    let back = Graph::from_json(&doc).unwrap_or_else(|e| panic!("re-parsing a serialized graph: {e}\n{doc}"));
    assert_eq!(back.to_json().expect("serializes"), doc, "the round trip changed the document");
}

/// `.npy`: a file is `Ok` or `Err`; an accepted tensor writes and reads back unchanged.
pub fn npy(data: &[u8]) {
    let Ok(t) = rlx_io::parse_npy(data) else { return };
    let back = rlx_io::parse_npy(&rlx_io::npy_bytes(&t)).expect("a written .npy parses");
    assert_eq!(back.dims(), t.dims());
    if t.dtype() == DType::BF16 {
        // Written as f4 (NumPy has no bf16): exact, so the f32 bits agree.
        let bits = |t: &HostTensor| t.to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&t));
    } else {
        assert_eq!(back.dtype(), t.dtype());
        assert_eq!(back.bytes(), t.bytes());
    }
}

/// safetensors: parse; what parses is written back and parses to the same tensors and
/// metadata.
pub fn safetensors(data: &[u8]) {
    let Ok(file) = rlx_io::parse_safetensors(data) else { return };
    let tensors: Vec<(&str, &HostTensor)> = file.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let metadata: Vec<(&str, &str)> = file.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let bytes = rlx_io::safetensors_bytes(&tensors, &metadata).expect("parsed names are distinct");
    let back = rlx_io::parse_safetensors(&bytes).expect("a written safetensors file parses");
    assert_eq!(back.tensors, file.tensors);
    let sorted = |mut m: Vec<(String, String)>| {
        m.sort();
        m
    };
    assert_eq!(sorted(back.metadata), sorted(file.metadata));
}

/// Graph sizes a mutated graph may reach before it is run: the point is odd shapes and
/// attributes, not big ones, and a run must stay in the milliseconds.
const MAX_ELEMS: usize = 1 << 12;
const MAX_NODES: usize = 96;

/// Mutated graphs, run: the first byte picks a seed graph, the rest drive structural
/// mutations (attributes, leaf dims and dtypes, op swaps, operand rewiring, appended
/// nodes, outputs). Nodes are rebuilt through `Graph::push`, so a mutation propagates
/// through the shape rules; a node whose op is rejected is dropped with its readers.
/// A graph that verifies and stays small is compiled for the CPU and run with
/// deterministic inputs: errors are fine, panics are not, and outputs have their
/// declared types.
pub fn graph_run(data: &[u8]) {
    let Some(g) = mutated_graph(data) else { return };
    if g.verify().is_err() || !small(&g) {
        return;
    }
    run_cpu(&g, data.first().copied().unwrap_or(0));
}

/// The seed graphs' documents, in graph_run's seed order: the graph_json seeds.
pub fn seed_documents() -> Vec<String> {
    seeds().docs.iter().filter_map(|d| serde_json::to_string_pretty(d).ok()).collect()
}

/// The graph `graph_run` builds from `data`, as a document `rlx run` and `rlx check`
/// read: how a crash's bytes become a repro for the CLI.
pub fn graph_run_document(data: &[u8]) -> Option<String> {
    mutated_graph(data)?.to_json().ok()
}

struct Seeds {
    /// Each seed's document (`serde_json` of the graph format).
    docs: Vec<Value>,
    /// Every op of every seed: what op swaps and appended nodes draw from.
    ops: Vec<Value>,
    /// Strings seen in ops (enum variants, names): what a string mutation draws from.
    words: Vec<Value>,
}

fn seeds() -> &'static Seeds {
    static SEEDS: OnceLock<Seeds> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut graphs: Vec<Graph> = rlx_corpus::cases()
            .map(|cases| cases.into_iter().map(|c| c.graph).filter(small).collect())
            .unwrap_or_default();
        graphs.extend(seed_graphs());
        let docs: Vec<Value> =
            graphs.iter().filter_map(|g| g.to_json().ok()).filter_map(|t| serde_json::from_str(&t).ok()).collect();
        let mut ops = Vec::new();
        let mut words = Vec::new();
        for d in &docs {
            for n in d["nodes"].as_array().into_iter().flatten() {
                ops.push(n["op"].clone());
                collect_words(&n["op"], &mut words);
            }
        }
        for dt in DType::ALL {
            if let Ok(v) = serde_json::to_value(dt) {
                words.push(v);
            }
        }
        words.sort_by_key(|w| w.to_string());
        words.dedup();
        Seeds { docs, ops, words }
    })
}

fn collect_words(v: &Value, out: &mut Vec<Value>) {
    match v {
        // Long strings are base64 tensor data, not words.
        Value::String(s) if s.len() <= 24 => out.push(v.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_words(x, out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(Value::String(k.clone()));
            collect_words(x, out)
        }),
        _ => {}
    }
}

/// Small graphs covering the ops the corpus lacks (scan, caches, quantized weights,
/// layout, pooling, losses), each a few hundred elements at most.
fn seed_graphs() -> Vec<Graph> {
    use rlx_ir::{AttentionMask, BinaryOp, CompareOp, PoolParams, QuantScheme, ReduceOp, RopeStyle, Unary};
    let builders: Vec<fn() -> rlx_ir::Result<Graph>> = vec![
        || {
            let mut g = Graph::new("layout");
            let x = g.input("x", DType::F32, &[2, 3, 4])?;
            let y = g.input("y", DType::F32, &[2, 3, 4])?;
            let t = g.transpose(x, &[2, 0, 1])?;
            let r = g.reshape(t, &[4, 6])?;
            let n = g.narrow(r, 1, 1, 3)?;
            let c = g.concat(&[x, y], 1)?;
            let e = g.expand(n, &[2, 4, 3])?;
            let m = g.reduce(ReduceOp::Max, c, &[1], false)?;
            let a = g.argmax(c, 2, true)?;
            let lt = g.compare(CompareOp::Lt, x, y)?;
            let w = g.where_(lt, x, y)?;
            let h = g.cast(w, DType::F16)?;
            g.set_outputs(&[e, m, a, h])?;
            Ok(g)
        },
        || {
            let mut g = Graph::new("gather_loss");
            let table = g.param("table", DType::F32, &[10, 8])?;
            let idx = g.input("idx", DType::I64, &[6])?;
            let rows = g.gather(table, idx)?;
            let upd = g.scatter_add(idx, rows, 10)?;
            let labels = g.input("labels", DType::I64, &[6])?;
            let loss = g.cross_entropy(rows, labels)?;
            let ls = g.push(Op::LogSoftmax { axis: 1 }, &[rows])?;
            let p = g.binary(BinaryOp::Pow, ls, ls)?;
            let s = g.unary(Unary::Exp, p)?;
            g.set_outputs(&[upd, loss, s])?;
            Ok(g)
        },
        || {
            let mut g = Graph::new("pool");
            let x = g.input("x", DType::F32, &[1, 2, 6, 6])?;
            let m = g.max_pool2d(x, PoolParams::square(2))?;
            let a = g.avg_pool2d(x, PoolParams { kernel: [3, 3], stride: [1, 2], padding: [1, 1, 1, 1] }, false)?;
            g.set_outputs(&[m, a])?;
            Ok(g)
        },
        || {
            let mut g = Graph::new("attention_cache");
            let q = g.input("q", DType::F32, &[1, 2, 3, 8])?;
            let cache = g.param("k_cache", DType::F32, &[1, 2, 6, 8])?;
            let pos = g.input("pos", DType::I64, &[])?;
            let k = g.kv_append(cache, q, pos, 2)?;
            let positions = g.input("positions", DType::I64, &[3])?;
            let qr = g.rope(q, positions, RopeStyle::NeoX, 10000.0, None)?;
            let len = g.input("len", DType::I64, &[])?;
            let att = g.attention(qr, k, k, AttentionMask::CausalLen(len), None)?;
            let causal = g.attention(q, q, q, AttentionMask::Causal, Some(0.5))?;
            g.set_outputs(&[att, causal])?;
            Ok(g)
        },
        || {
            let mut g = Graph::new("quant");
            let x = g.input("x", DType::F32, &[3, 32])?;
            let row = QuantScheme::Q8_0.row_bytes(32)?;
            let w = g.param("w", DType::U8, &[4, row])?;
            let y = g.dequant_matmul(x, w, QuantScheme::Q8_0, ActivationQuant::Q8)?;
            let y16 = g.dequant_matmul(x, w, QuantScheme::Q8_0, ActivationQuant::Q16)?;
            let d = g.dequantize(w, QuantScheme::Q8_0)?;
            let n = g.layer_norm(d, None, None, 1e-5)?;
            g.set_outputs(&[y, y16, n])?;
            Ok(g)
        },
        || {
            let mut body = Graph::new("body");
            let h = body.input("h", DType::F32, &[4])?;
            let b = body.input("b", DType::F32, &[4])?;
            let x = body.input("x", DType::F32, &[4])?;
            let s = body.binary(BinaryOp::Mul, h, b)?;
            let s = body.binary(BinaryOp::Add, s, x)?;
            let s = body.unary(Unary::Tanh, s)?;
            body.set_outputs(&[s])?;
            let mut g = Graph::new("scan");
            let h0 = g.input("h0", DType::F32, &[4])?;
            let b = g.param("b", DType::F32, &[4])?;
            let xs = g.input("xs", DType::F32, &[5, 4])?;
            let out = g.scan(&body, h0, &[b], &[xs], Some(2))?;
            g.set_outputs(&[out])?;
            Ok(g)
        },
    ];
    builders.into_iter().filter_map(|b| b().ok()).collect()
}

/// Whether every value of `g` (and of the bodies of its loops) is small. Each dim is
/// bounded too, not just the element count: an empty tensor with a dim of 2^40 is small
/// in bytes, but products of its dims overflow in kernels (the first such crash,
/// fuzz/artifacts-to-fix/graph_run-attention-mul-overflow, is reported; the bound keeps
/// the fuzzer from rediscovering it instead of exploring further).
fn small(g: &Graph) -> bool {
    g.len() <= MAX_NODES
        && g.nodes().all(|(_, n)| {
            let elems = n.dims().iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let body_ok = match n.op() {
                Op::Scan { body, .. } => small(body),
                Op::ScanGrad { body, grad_body, .. } => small(body) && small(grad_body),
                _ => true,
            };
            elems.is_some_and(|e| e <= MAX_ELEMS) && n.dims().iter().all(|&d| d <= MAX_ELEMS) && body_ok
        })
}

/// Reads the fuzz input as a stream of bytes, zero once exhausted.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.byte() as usize | (self.byte() as usize) << 8) % n }
    }
}

fn mutated_graph(data: &[u8]) -> Option<Graph> {
    let seeds = seeds();
    let mut b = Bytes { data, at: 0 };
    let mut doc = seeds.docs.get(b.byte() as usize % seeds.docs.len().max(1))?.clone();
    let mut outputs: Vec<u64> = doc["outputs"].as_array()?.iter().filter_map(Value::as_u64).collect();
    let mut nodes: Vec<Value> = doc["nodes"].as_array_mut().map(std::mem::take)?;
    // At most 32 mutations: enough to reach odd corners, few enough that a mutation
    // stays attributable to its bytes.
    for _ in 0..32 {
        if b.done() || nodes.is_empty() {
            break;
        }
        let kind = b.byte() % 9;
        let i = b.below(nodes.len());
        match kind {
            // An attribute of the op: a number, bool or string inside it.
            0..=2 => mutate_leaf(&mut nodes[i]["op"], &mut b, &seeds.words),
            // Op swap: another op of any seed, same operands.
            3 => nodes[i]["op"] = seeds.ops[b.below(seeds.ops.len())].clone(),
            // Rewire an operand to any node (one that does not precede `i` is dropped).
            4 => {
                let len = nodes.len();
                if let Some(ins) = nodes[i]["inputs"].as_array_mut().filter(|a| !a.is_empty()) {
                    let k = b.below(ins.len());
                    ins[k] = Value::from(b.below(len) as u64);
                }
            }
            // A leaf's dims: one dim changed, added or removed.
            5 => {
                if let Some(dims) = nodes[i]["dims"].as_array_mut() {
                    match b.byte() % 4 {
                        0 if !dims.is_empty() => {
                            dims.remove(b.below(dims.len()));
                        }
                        1 => dims.push(Value::from(b.byte() % 9)),
                        _ if !dims.is_empty() => {
                            let k = b.below(dims.len());
                            dims[k] = Value::from(small_number(&mut b, dims[k].as_u64().unwrap_or(1)));
                        }
                        _ => {}
                    }
                }
            }
            // A leaf's dtype.
            6 => nodes[i]["dtype"] = serde_json::to_value(DType::ALL[b.below(DType::ALL.len())]).ok()?,
            // A new node reading existing ones.
            7 => {
                let op = seeds.ops[b.below(seeds.ops.len())].clone();
                let n = 1 + b.byte() as usize % 4;
                let ins: Vec<Value> = (0..n).map(|_| Value::from(b.below(nodes.len()) as u64)).collect();
                nodes.push(serde_json::json!({ "op": op, "inputs": ins, "dtype": "f32", "dims": [] }));
                if nodes.len() > MAX_NODES {
                    return None;
                }
            }
            // Outputs: add a node or drop one.
            _ => {
                if b.byte().is_multiple_of(2) && outputs.len() > 1 {
                    outputs.remove(b.below(outputs.len()));
                } else {
                    outputs.push(b.below(nodes.len()) as u64);
                }
            }
        }
    }
    rebuild(&doc["name"], nodes, &outputs)
}

/// A replacement for number `v`: mostly small and near `v`, sometimes extreme.
fn small_number(b: &mut Bytes, v: u64) -> u64 {
    match b.byte() % 10 {
        0 => 0,
        1 => 1,
        2 => v.saturating_add(1),
        3 => v.saturating_sub(1),
        4 => v.saturating_mul(2),
        5 => v / 2,
        6 => 1u64 << (b.byte() % 64),
        7 => u64::MAX,
        _ => (b.byte() % 16) as u64,
    }
}

/// Mutates one number, bool or string inside `op`, picked by the next bytes.
fn mutate_leaf(op: &mut Value, b: &mut Bytes, words: &[Value]) {
    let count = count_leaves(op);
    if count == 0 {
        return;
    }
    let mut k = b.below(count);
    let Some(leaf) = nth_leaf(op, &mut k) else { return };
    let new = match leaf {
        Value::Bool(x) => Value::Bool(!*x),
        Value::Number(n) if n.is_u64() => Value::from(small_number(b, n.as_u64().unwrap_or(0))),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            let choices = [0.0, -1.0, 1.0, 1e-30, 1e30, f * 2.0, -f, f32::MAX as f64, f32::MIN_POSITIVE as f64];
            serde_json::Number::from_f64(choices[b.below(choices.len())]).map_or(Value::Null, Value::Number)
        }
        Value::String(_) if !words.is_empty() => words[b.below(words.len())].clone(),
        // `None` options (a default scale, all checkpoints) become a number.
        Value::Null => Value::from(b.byte() % 8),
        _ => return,
    };
    *leaf = new;
}

fn count_leaves(v: &Value) -> usize {
    match v {
        Value::Array(a) => a.iter().map(count_leaves).sum(),
        Value::Object(o) => o.values().map(count_leaves).sum(),
        Value::String(s) if s.len() > 24 => 0,
        _ => 1,
    }
}

fn nth_leaf<'v>(v: &'v mut Value, k: &mut usize) -> Option<&'v mut Value> {
    match v {
        Value::Array(a) => a.iter_mut().find_map(|x| nth_leaf(x, k)),
        Value::Object(o) => o.values_mut().find_map(|x| nth_leaf(x, k)),
        Value::String(s) if s.len() > 24 => None,
        _ if *k == 0 => Some(v),
        _ => {
            *k -= 1;
            None
        }
    }
}

/// Rebuilds `nodes` through `push` / `push_leaf`: a non-leaf's declared type is ignored
/// (its shape rule decides); a node that fails, or reads one that did, is dropped.
fn rebuild(name: &Value, nodes: Vec<Value>, outputs: &[u64]) -> Option<Graph> {
    let mut g = Graph::new(name.as_str().unwrap_or("fuzz"));
    let mut ids: Vec<Option<NodeId>> = Vec::with_capacity(nodes.len());
    for node in nodes {
        let id = (|| {
            let op: Op = serde_json::from_value(node["op"].clone()).ok()?;
            if op.is_leaf() {
                let dtype: DType = serde_json::from_value(node["dtype"].clone()).ok()?;
                let dims: Vec<usize> = serde_json::from_value(node["dims"].clone()).ok()?;
                rlx_ir::shape::checked_byte_len("node", dtype, &dims).ok()?;
                return g.push_leaf(op, dtype, &dims).ok();
            }
            let inputs = node["inputs"].as_array()?;
            let inputs: Option<Vec<NodeId>> =
                inputs.iter().map(|i| ids.get(i.as_u64()? as usize).copied().flatten()).collect();
            g.push(op, &inputs?).ok()
        })();
        ids.push(id);
    }
    let mut outs: Vec<NodeId> = outputs.iter().filter_map(|&o| ids.get(o as usize).copied().flatten()).collect();
    outs.dedup();
    if outs.is_empty() {
        outs.push(ids.iter().rev().find_map(|&i| i)?);
    }
    g.set_outputs(&outs).ok()?;
    Some(g)
}

/// Compiles `g` for the CPU on one thread and runs it with deterministic inputs; index
/// inputs are small, and out of range when `salt` says so (the kernels must refuse them).
fn run_cpu(g: &Graph, salt: u8) {
    use rlx_runtime::{CompileOptions, Device, Session};
    let Ok(session) = Session::new(Device::Cpu) else { return };
    let options = CompileOptions { threads: Some(1), memory_limit: Some(256 << 20), ..CompileOptions::default() };
    let Ok(mut compiled) = session.compile_with(g, &options) else { return };
    let fill = |id: NodeId, k: usize| -> Option<(String, HostTensor)> {
        let node = g.node(id)?;
        let n: usize = node.dims().iter().product();
        let values: Vec<f64> = (0..n)
            .map(|i| {
                let i = i + k * 7;
                if node.dtype().is_float() {
                    ((i * 37 % 19) as f64 - 9.0) / 4.0
                } else if salt.is_multiple_of(8) {
                    (i % 7) as f64 - 2.0
                } else {
                    (i % 3) as f64
                }
            })
            .collect();
        let t = HostTensor::from_f64_as(node.dtype(), node.dims(), &values).ok()?;
        Some((node.leaf_name()?.to_string(), t))
    };
    for (k, id) in g.params().into_iter().enumerate() {
        if let Some((name, t)) = fill(id, k) {
            let _ = compiled.set_param_typed(&name, &t);
        }
    }
    let inputs: Vec<(String, HostTensor)> =
        g.inputs().into_iter().enumerate().filter_map(|(k, id)| fill(id, k + 100)).collect();
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    if let Ok(outs) = compiled.run_typed(&refs) {
        assert_eq!(outs.len(), g.outputs().len());
        for (out, &id) in outs.iter().zip(g.outputs()) {
            assert_eq!((out.dtype(), out.dims()), (g.dtype(id), g.dims(id)), "output {}", id.index());
        }
    }
}
