//! Building an IR graph from an ONNX graph whose input shapes are bound.
//!
//! Every ONNX value is an IR node. Shapes are static once the inputs are bound, so shape
//! subgraphs (Shape -> Gather -> Concat -> Reshape) are constants: `Importer::const_of`
//! evaluates a node whose ancestors are all constants with the compiler's constant
//! evaluator, and an op whose operand must be known at compile time (a Reshape's shape, a
//! Slice's starts) reads it from there. A node's output that folds to a small constant is
//! replaced by a `Constant` node, so later nodes see a constant directly.

use crate::ops::{self, OpDef};
use crate::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use crate::tensor::{ExternalData, to_host};
use rlx_compile::passes::const_fold::evaluate;
use rlx_ir::shape::numel;
use rlx_ir::{Error, Graph, HostTensor, NodeId, Op, Result};
use rlx_runtime::ParamBuffer;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Largest folded value turned into a `Constant` node, in elements.
const CONSTANT_NODE_LIMIT: usize = 1 << 12;
/// Largest value `const_of` evaluates, in elements.
const FOLD_LIMIT: usize = 1 << 22;

/// An initializer: small or integer tensors are constants (shape operands, scales, pads
/// read at import), float weights are params bound to a buffer over the file's bytes.
#[derive(Clone)]
pub enum Init {
    Const(HostTensor),
    Param(ParamBuffer),
}

impl Init {
    pub fn from_proto(t: &TensorProto, external: &ExternalData) -> Result<Init> {
        let dtype =
            crate::tensor::dtype_of(t.data_type()).map_err(|e| e.context(format!("initializer '{}'", t.name())))?;
        let dims = crate::tensor::dims_of(t)?;
        if dtype.is_float() && numel(&dims) > 64 {
            Ok(Init::Param(crate::tensor::to_param(t, external)?))
        } else {
            Ok(Init::Const(to_host(t, external)?))
        }
    }
}

/// One node being imported: its proto, the opset of its domain and the version of the
/// op definition chosen for it.
pub struct Node<'a> {
    pub proto: &'a NodeProto,
    pub opset: i64,
    pub since: i64,
}

impl<'a> Node<'a> {
    pub fn op_type(&self) -> &str {
        self.proto.op_type()
    }

    fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.proto.attribute.iter().find(|a| a.name() == name)
    }

    fn typed(&self, name: &str, want: AttributeType) -> Result<Option<&'a AttributeProto>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if a.ref_attr_name.is_some() => {
                Err(Error::unsupported(format!("attribute '{name}' refers to a function attribute")))
            }
            Some(a) if a.r#type() == want || a.r#type() == AttributeType::Undefined => Ok(Some(a)),
            Some(a) => Err(Error::parse(format!(
                "attribute '{name}' is {}, expected {}",
                a.r#type().as_str_name(),
                want.as_str_name()
            ))),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>> {
        Ok(self.typed(name, AttributeType::Int)?.map(|a| a.i()))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.typed(name, AttributeType::Float)?.map_or(default, |a| a.f()))
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self.typed(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self.typed(name, AttributeType::Floats)?.map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String> {
        match self.typed(name, AttributeType::String)? {
            None => Ok(default.to_string()),
            Some(a) => {
                String::from_utf8(a.s().to_vec()).map_err(|_| Error::parse(format!("attribute '{name}' is not UTF-8")))
            }
        }
    }

    pub fn strings(&self, name: &str) -> Result<Option<Vec<String>>> {
        self.typed(name, AttributeType::Strings)?
            .map(|a| {
                a.strings
                    .iter()
                    .map(|s| {
                        String::from_utf8(s.to_vec())
                            .map_err(|_| Error::parse(format!("attribute '{name}' is not UTF-8")))
                    })
                    .collect()
            })
            .transpose()
    }

    pub fn tensor(&self, name: &str) -> Result<Option<&'a TensorProto>> {
        Ok(self.typed(name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()))
    }

    pub fn graph(&self, name: &str) -> Result<&'a GraphProto> {
        self.typed(name, AttributeType::Graph)?
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| Error::parse(format!("attribute '{name}' (a graph) is missing")))
    }

    /// Number of input slots (absent optional inputs are empty names).
    pub fn n_inputs(&self) -> usize {
        self.proto.input.len()
    }
}

pub struct Importer<'m> {
    pub g: Graph,
    scopes: Vec<HashMap<String, NodeId>>,
    consts: HashMap<NodeId, HostTensor>,
    not_const: HashSet<NodeId>,
    initializers: &'m HashMap<String, Init>,
    external: &'m ExternalData,
    /// Params the graph reads, to bind after compiling.
    pub params: Vec<(String, ParamBuffer)>,
    /// Runtime inputs whose values an operand needed at compile time (the model then
    /// specializes on them, see `OnnxModel::run`).
    pub wanted: Vec<String>,
    /// Opset of the default domain.
    pub opset: i64,
    /// Weights computed at import (a conv's weight with a batch norm folded in), kept by
    /// the model so that a new input shape does not compute them again.
    pub derived: &'m Mutex<HashMap<String, ParamBuffer>>,
    /// Values that are a zero padding of another (`(source, [axis, before, after]...)`),
    /// through Pad, Identity and Transpose, so a Conv reading one takes the padding into
    /// its own instead of reading the padded copy.
    pub zero_padded: HashMap<NodeId, (NodeId, Vec<[usize; 3]>)>,
}

impl<'m> Importer<'m> {
    pub fn new(
        name: &str,
        opset: i64,
        initializers: &'m HashMap<String, Init>,
        external: &'m ExternalData,
        derived: &'m Mutex<HashMap<String, ParamBuffer>>,
    ) -> Importer<'m> {
        Importer {
            g: Graph::new(name),
            scopes: vec![HashMap::new()],
            consts: HashMap::new(),
            not_const: HashSet::new(),
            initializers,
            external,
            params: Vec::new(),
            wanted: Vec::new(),
            opset,
            derived,
            zero_padded: HashMap::new(),
        }
    }

    /// The value of `id` known at import: a constant, or the buffer of a param.
    pub fn host_value(&mut self, id: NodeId) -> Option<HostTensor> {
        if let Some(Op::Param { name }) = self.g.node(id).map(|n| n.op())
            && let Some((_, buffer)) = self.params.iter().find(|(n, _)| n == name)
        {
            return buffer.read().ok();
        }
        self.const_of(id)
    }

    /// A param node for a weight computed at import, made once per model by `make` and
    /// cached under `name`.
    pub fn derived_param(&mut self, name: &str, make: impl FnOnce() -> Result<HostTensor>) -> Result<NodeId> {
        let cached = self.derived.lock().map_err(|_| Error::internal("derived weights poisoned"))?.get(name).cloned();
        let buffer = match cached {
            Some(b) => b,
            None => {
                let t = make()?;
                let b = ParamBuffer::zeroed(t.dtype(), t.dims())?;
                b.write(&t)?;
                self.derived
                    .lock()
                    .map_err(|_| Error::internal("derived weights poisoned"))?
                    .insert(name.into(), b.clone());
                b
            }
        };
        let id = self.g.param(name, buffer.dtype(), buffer.dims())?;
        self.params.push((name.to_string(), buffer));
        Ok(id)
    }

    pub fn external(&self) -> &'m ExternalData {
        self.external
    }

    /// Binds `name` in the innermost scope.
    pub fn define(&mut self, name: &str, id: NodeId) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(name.to_string(), id);
        }
    }

    /// The node of value `name`: a scope's value (innermost first), else an initializer
    /// (a constant or a param, created on first use).
    pub fn value(&mut self, name: &str) -> Result<NodeId> {
        if let Some(id) = self.scopes.iter().rev().find_map(|s| s.get(name)) {
            return Ok(*id);
        }
        let id = match self.initializers.get(name) {
            Some(Init::Const(t)) => self.g.constant_tensor(t.clone())?,
            Some(Init::Param(buffer)) => {
                let id = self.g.param(name, buffer.dtype(), buffer.dims())?;
                self.params.push((name.to_string(), buffer.clone()));
                id
            }
            None => {
                return Err(Error::graph(format!(
                    "value '{name}' is not defined (no node output, input or initializer)"
                )));
            }
        };
        self.scopes[0].insert(name.to_string(), id);
        Ok(id)
    }

    /// Input `i` of `node`, required.
    pub fn input(&mut self, node: &Node, i: usize) -> Result<NodeId> {
        self.opt_input(node, i)?.ok_or_else(|| Error::graph(format!("input {i} of {} is required", node.op_type())))
    }

    /// Input `i`, or None when absent (past the end or an empty name).
    pub fn opt_input(&mut self, node: &Node, i: usize) -> Result<Option<NodeId>> {
        match node.proto.input.get(i).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(name) => self.value(name).map(Some),
        }
    }

    /// All present inputs, in order.
    pub fn inputs(&mut self, node: &Node) -> Result<Vec<NodeId>> {
        (0..node.n_inputs()).filter_map(|i| self.opt_input(node, i).transpose()).collect()
    }

    /// The value of `id` when it is computable at import (every ancestor a constant).
    pub fn const_of(&mut self, id: NodeId) -> Option<HostTensor> {
        let mut stack = vec![id];
        while let Some(&top) = stack.last() {
            if self.consts.contains_key(&top) || self.not_const.contains(&top) {
                stack.pop();
                continue;
            }
            let node = self.g.node(top)?;
            if let Op::Constant { value } = node.op() {
                self.consts.insert(top, value.clone());
                stack.pop();
                continue;
            }
            if node.op().is_leaf() || numel(node.dims()) > FOLD_LIMIT {
                self.not_const.insert(top);
                stack.pop();
                continue;
            }
            let ins = node.inputs().to_vec();
            if ins.iter().any(|i| self.not_const.contains(i)) {
                self.not_const.insert(top);
                stack.pop();
                continue;
            }
            let pending: Vec<NodeId> = ins.iter().copied().filter(|i| !self.consts.contains_key(i)).collect();
            if !pending.is_empty() {
                stack.extend(pending);
                continue;
            }
            let values: Vec<&HostTensor> = ins.iter().map(|i| &self.consts[i]).collect();
            match evaluate(node.op(), &values, node.dtype(), node.dims()) {
                Some(v) => {
                    self.consts.insert(top, v);
                }
                None => {
                    self.not_const.insert(top);
                }
            }
            stack.pop();
        }
        self.consts.get(&id).cloned()
    }

    /// Input `i` as integers known at import, or None when absent.
    pub fn const_ints(&mut self, node: &Node, i: usize) -> Result<Option<Vec<i64>>> {
        let Some(id) = self.opt_input(node, i)? else { return Ok(None) };
        let t = self.const_input(node, i, id)?;
        if !t.dtype().is_int() {
            return Err(Error::dtype(format!(
                "input {i} of {} must be an integer tensor, got {:?}",
                node.op_type(),
                t.dtype()
            )));
        }
        Ok(Some(t.to_i64_vec()))
    }

    /// Input `i` as floats known at import, or None when absent.
    pub fn const_floats(&mut self, node: &Node, i: usize) -> Result<Option<Vec<f64>>> {
        let Some(id) = self.opt_input(node, i)? else { return Ok(None) };
        Ok(Some(self.const_input(node, i, id)?.to_f64_vec()))
    }

    /// The value of input `i` (node `id`), which must be known at import.
    pub fn const_input(&mut self, node: &Node, i: usize, id: NodeId) -> Result<HostTensor> {
        if let Some(v) = self.const_of(id) {
            return Ok(v);
        }
        let inputs = self.runtime_inputs_of(id);
        let message = format!(
            "input {i} ('{}') of {} must be known when the model is compiled (a constant or computed from shapes), but it depends on the runtime value of {}",
            node.proto.input.get(i).map_or("", String::as_str),
            node.op_type(),
            if inputs.is_empty() { "a param".to_string() } else { inputs.join(", ") }
        );
        self.wanted.extend(inputs);
        Err(Error::unsupported(message))
    }

    /// The names of the graph inputs `id` depends on.
    fn runtime_inputs_of(&self, id: NodeId) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut stack = vec![id];
        let mut names = Vec::new();
        while let Some(top) = stack.pop() {
            if !seen.insert(top) {
                continue;
            }
            let Some(node) = self.g.node(top) else { continue };
            if let Op::Input { name } = node.op() {
                names.push(name.clone());
            }
            stack.extend(node.inputs().iter().copied());
        }
        names.sort();
        names
    }

    /// Imports the nodes of `graph` into the current scope (the main graph, or a branch
    /// whose values shadow the outer scope's).
    pub fn import_nodes(&mut self, graph: &GraphProto) -> Result<()> {
        for (index, proto) in graph.node.iter().enumerate() {
            self.import_node(proto).map_err(|e| e.context(describe_node(proto, index, self.opset)))?;
        }
        Ok(())
    }

    fn import_node(&mut self, proto: &NodeProto) -> Result<()> {
        let def = lookup(proto, self.opset)?;
        let node = Node { proto, opset: self.opset, since: def.since };
        let outs = (def.import)(self, &node)?;
        for (k, name) in proto.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let Some(&id) = outs.get(k) else {
                return Err(Error::unsupported(format!(
                    "output {k} ('{name}') of {} is not supported",
                    proto.op_type()
                )));
            };
            let id = self.as_constant(id)?;
            self.define(name, id);
        }
        Ok(())
    }

    /// `id`, or a `Constant` node of its value when it folds to a small constant.
    fn as_constant(&mut self, id: NodeId) -> Result<NodeId> {
        let leaf = self.g.node(id).is_some_and(|n| n.op().is_leaf());
        if leaf || numel(self.g.dims(id)) > CONSTANT_NODE_LIMIT {
            return Ok(id);
        }
        match self.const_of(id) {
            Some(v) => {
                let c = self.g.constant_tensor(v.clone())?;
                self.consts.insert(c, v);
                Ok(c)
            }
            None => Ok(id),
        }
    }

    /// Runs `f` in a fresh inner scope (a subgraph's names shadow the outer ones).
    pub fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.scopes.push(HashMap::new());
        let result = f(self);
        self.scopes.pop();
        result
    }
}

/// The op definition for `proto` at `opset`: the newest version not after the opset.
pub fn lookup(proto: &NodeProto, opset: i64) -> Result<&'static OpDef> {
    let domain = proto.domain();
    if !(domain.is_empty() || domain == "ai.onnx") {
        return Err(Error::unsupported(format!("ops of domain '{domain}' are not supported")));
    }
    ops::table()
        .iter()
        .filter(|d| d.op_type == proto.op_type() && d.since <= opset)
        .max_by_key(|d| d.since)
        .copied()
        .ok_or_else(|| Error::unsupported(format!("op {} is not supported", proto.op_type())))
}

/// `node 'name' (Conv, opset 13)` or `node #4 (Conv, opset 13)` for messages.
pub fn describe_node(proto: &NodeProto, index: usize, opset: i64) -> String {
    match proto.name() {
        "" => format!("node #{index} ({}, opset {opset})", proto.op_type()),
        name => format!("node '{name}' ({}, opset {opset})", proto.op_type()),
    }
}
