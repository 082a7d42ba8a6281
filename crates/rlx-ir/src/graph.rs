//! The SSA graph: nodes in topological order, each typed by its op's shape rule.

use crate::ops::{Op, Operand};
use crate::shape::{checked_byte_len, fmt_type};
use crate::{DType, Error, HostTensor, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// A node of one [`Graph`]; only that graph hands them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(u32);

impl NodeId {
    /// Position of the node in its graph's topological order.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The id at a topological position. Graph methods check it against their graph,
    /// so a made-up id is an `Err` there, never an out-of-bounds read.
    pub fn from_index(index: usize) -> NodeId {
        NodeId(u32::try_from(index).unwrap_or(u32::MAX))
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// An op applied to earlier nodes, with the type its shape rule inferred.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub(crate) op: Op,
    pub(crate) inputs: Vec<NodeId>,
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<usize>,
}

impl Node {
    pub fn op(&self) -> &Op {
        &self.op
    }
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    /// Name of an Input or Param leaf.
    pub fn leaf_name(&self) -> Option<&str> {
        match &self.op {
            Op::Input { name } | Op::Param { name } => Some(name),
            _ => None,
        }
    }
}

/// A typed tensor program in SSA form. Every node is built by a shape-inferring builder,
/// so a `Graph` is always well typed; nodes only refer to earlier nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Graph {
    pub(crate) name: String,
    pub(crate) nodes: Vec<Node>,
    pub(crate) outputs: Vec<NodeId>,
    /// Each input's and param's node by name (nodes are only ever appended): a scan of
    /// the nodes per new leaf made building quadratic (an LLM's 64-row batched decode
    /// graph, 26076 nodes and ~3900 params: 131 ms, ~27% of its time in that scan).
    leaves: BTreeMap<String, NodeId>,
}

impl Graph {
    /// This graph with every float leaf and every cast to a float format in `dtype`
    /// instead (signature included; float constants converted by value). Its f64 twin is
    /// the accuracy oracle of an f32 graph (tests, `OnnxModel::reference_f64`).
    pub fn retyped(&self, dtype: DType) -> Result<Graph> {
        let moved = |d: DType| if d.is_float() { dtype } else { d };
        let mut new = Graph::new(self.name());
        let mut map = Vec::with_capacity(self.len());
        for (_, node) in self.nodes() {
            let id = match node.op() {
                Op::Constant { value } if value.dtype().is_float() => {
                    new.constant_tensor(HostTensor::from_f64_as(dtype, value.dims(), &value.to_f64_vec())?)?
                }
                op if op.is_leaf() => new.push_leaf(op.clone(), moved(node.dtype()), node.dims())?,
                op => {
                    let op = match op {
                        Op::Cast { to } => Op::Cast { to: moved(*to) },
                        other => other.clone(),
                    };
                    let ins: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()]).collect();
                    new.push(op, &ins)?
                }
            };
            map.push(id);
        }
        let outputs: Vec<NodeId> = self.outputs().iter().map(|o| map[o.index()]).collect();
        new.set_outputs(&outputs)?;
        Ok(new)
    }

    pub fn new(name: &str) -> Graph {
        Graph { name: name.to_string(), nodes: Vec::new(), outputs: Vec::new(), leaves: BTreeMap::new() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (NodeId, &Node)> {
        self.nodes.iter().enumerate().map(|(i, n)| (NodeId(i as u32), n))
    }
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }
    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    /// Input leaves in declaration order.
    pub fn inputs(&self) -> Vec<NodeId> {
        self.leaves(|op| matches!(op, Op::Input { .. }))
    }

    /// Param leaves in declaration order.
    pub fn params(&self) -> Vec<NodeId> {
        self.leaves(|op| matches!(op, Op::Param { .. }))
    }

    fn leaves(&self, pick: impl Fn(&Op) -> bool) -> Vec<NodeId> {
        self.nodes().filter(|(_, n)| pick(&n.op)).map(|(id, _)| id).collect()
    }

    /// The Input or Param leaf called `name`.
    pub fn find_leaf(&self, name: &str) -> Option<NodeId> {
        self.leaves.get(name).copied()
    }

    /// Dims of `id`; empty for an id this graph did not hand out.
    pub fn dims(&self, id: NodeId) -> &[usize] {
        self.node(id).map(|n| n.dims.as_slice()).unwrap_or(&[])
    }

    /// Dtype of `id`; `F32` for an id this graph did not hand out (builders reject such ids).
    pub fn dtype(&self, id: NodeId) -> DType {
        self.node(id).map(|n| n.dtype).unwrap_or(DType::F32)
    }

    /// `%3 add f32[2,3]` or `%0 input 'x' f32[2,3]`, for messages.
    pub fn describe(&self, id: NodeId) -> String {
        match self.node(id) {
            None => format!("{id} (not a node of graph '{}')", self.name),
            Some(n) => match n.leaf_name() {
                Some(name) => format!("{id} {} '{name}' {}", n.op.name(), fmt_type(n.dtype, &n.dims)),
                None => format!("{id} {} {}", n.op.name(), fmt_type(n.dtype, &n.dims)),
            },
        }
    }

    pub fn input(&mut self, name: &str, dtype: DType, dims: &[usize]) -> Result<NodeId> {
        self.push_leaf(Op::Input { name: name.to_string() }, dtype, dims)
    }

    pub fn param(&mut self, name: &str, dtype: DType, dims: &[usize]) -> Result<NodeId> {
        self.push_leaf(Op::Param { name: name.to_string() }, dtype, dims)
    }

    /// `values` are converted to `dtype`; len must equal the product of dims.
    pub fn constant(&mut self, dtype: DType, dims: &[usize], values: &[f32]) -> Result<NodeId> {
        let value = HostTensor::from_f32_as(dtype, dims, values).map_err(|e| e.context("constant"))?;
        self.constant_tensor(value)
    }

    /// A constant holding exactly `value` (any dtype, no conversion).
    pub fn constant_tensor(&mut self, value: HostTensor) -> Result<NodeId> {
        let (dtype, dims) = (value.dtype(), value.dims().to_vec());
        self.push_leaf(Op::Constant { value }, dtype, &dims)
    }

    /// A scalar (`dims = []`) constant.
    pub fn scalar(&mut self, dtype: DType, value: f32) -> Result<NodeId> {
        self.constant(dtype, &[], &[value])
    }

    pub fn set_outputs(&mut self, outputs: &[NodeId]) -> Result<()> {
        for &o in outputs {
            self.check_id("set_outputs", o)?;
        }
        self.outputs = outputs.to_vec();
        Ok(())
    }

    /// Appends a leaf (Input, Param or Constant) of the given type.
    pub fn push_leaf(&mut self, op: Op, dtype: DType, dims: &[usize]) -> Result<NodeId> {
        checked_byte_len(op.name(), dtype, dims)?;
        match &op {
            Op::Input { name } | Op::Param { name } => {
                if name.is_empty() {
                    return Err(Error::graph(format!("{} needs a non-empty name", op.name())));
                }
                if let Some(prev) = self.find_leaf(name) {
                    return Err(Error::graph(format!(
                        "{} name '{name}' is already used by {}",
                        op.name(),
                        self.describe(prev)
                    )));
                }
            }
            Op::Constant { value } => {
                if value.dtype() != dtype || value.dims() != dims {
                    return Err(Error::graph(format!(
                        "constant holds {} but is declared {}",
                        fmt_type(value.dtype(), value.dims()),
                        fmt_type(dtype, dims)
                    )));
                }
            }
            other => return Err(Error::graph(format!("{} is not a leaf op", other.name()))),
        }
        Ok(self.append(Node { op, inputs: Vec::new(), dtype, dims: dims.to_vec() }))
    }

    /// Appends `op` applied to `inputs`, typed by the op's shape rule. Every builder
    /// goes through here; so do graph transforms and importers.
    pub fn push(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId> {
        if op.is_leaf() {
            return Err(Error::graph(format!("{} is a leaf: use push_leaf", op.name())));
        }
        for &i in inputs {
            self.check_id(op.name(), i)?;
        }
        let operands: Vec<Operand> =
            inputs.iter().map(|&i| Operand { dtype: self.dtype(i), dims: self.dims(i) }).collect();
        let (dtype, dims) = op.infer(&operands).map_err(|e| {
            let described: Vec<String> = inputs.iter().map(|&i| self.describe(i)).collect();
            e.context(format_args!("building node %{} from [{}]", self.nodes.len(), described.join(", ")))
        })?;
        checked_byte_len(op.name(), dtype, &dims)?;
        Ok(self.append(Node { op, inputs: inputs.to_vec(), dtype, dims }))
    }

    fn append(&mut self, node: Node) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        if let Some(name) = node.leaf_name() {
            self.leaves.entry(name.to_string()).or_insert(id);
        }
        self.nodes.push(node);
        id
    }

    pub(crate) fn check_id(&self, what: &str, id: NodeId) -> Result<()> {
        if id.index() >= self.nodes.len() {
            return Err(Error::graph(format!(
                "{what}: {id} is not a node of graph '{}' ({} nodes)",
                self.name,
                self.nodes.len()
            )));
        }
        Ok(())
    }

    /// Checks every invariant a well-formed graph keeps: operands precede their users,
    /// every node's type equals what its op's rule infers, leaf names are unique, the
    /// outputs exist. Builders keep these; the verifier is for graphs from outside
    /// (JSON) and for passes that rewrite graphs.
    pub fn verify(&self) -> Result<()> {
        let mut names = HashSet::new();
        for (id, node) in self.nodes() {
            let here = || format!("verify: node {id} ({})", node.op.name());
            if let Some(name) = node.leaf_name()
                && !names.insert(name)
            {
                return Err(Error::graph(format!("{}: leaf name '{name}' is used twice", here())));
            }
            if node.op.is_leaf() {
                if !node.inputs.is_empty() {
                    return Err(Error::graph(format!("{}: a leaf has no operands", here())));
                }
                if let Op::Constant { value } = &node.op
                    && (value.dtype() != node.dtype || value.dims() != node.dims.as_slice())
                {
                    return Err(Error::graph(format!("{}: constant value and node type disagree", here())));
                }
                checked_byte_len(node.op.name(), node.dtype, &node.dims)?;
                continue;
            }
            if let Some(bad) = node.inputs.iter().find(|i| i.index() >= id.index()) {
                return Err(Error::graph(format!("{}: operand {bad} does not precede it", here())));
            }
            let operands: Vec<Operand> =
                node.inputs.iter().map(|&i| Operand { dtype: self.dtype(i), dims: self.dims(i) }).collect();
            let (dtype, dims) = node.op.infer(&operands).map_err(|e| e.context(here()))?;
            if dtype != node.dtype || dims != node.dims {
                return Err(Error::graph(format!(
                    "{}: declared {} but its rule infers {}",
                    here(),
                    fmt_type(node.dtype, &node.dims),
                    fmt_type(dtype, &dims)
                )));
            }
        }
        for &o in &self.outputs {
            self.check_id("verify: output", o)?;
        }
        Ok(())
    }
}
