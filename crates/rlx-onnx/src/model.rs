//! `OnnxModel`: a parsed ONNX file, compiled once per distinct input shape.

use crate::import::{Importer, Init, describe_node, lookup};
use crate::proto::{
    GraphProto, ModelProto, ValueInfoProto, tensor_shape_proto::dimension::Value as DimValue, type_proto,
};
use crate::tensor::ExternalData;
use bytes::Bytes;
use prost::Message;
use rlx_ir::shape::fmt_type;
use rlx_ir::{DType, Error, Graph, HostTensor, Result, TensorRef};
use rlx_runtime::{CompileOptions, CompiledGraph, Device, ParamBuffer, Session};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A graph input or output as the model declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// None when the element type is one RLX lacks (or the model leaves it out).
    pub dtype: Option<DType>,
    /// None: a symbolic dim (`batch`), named in `dim_names`.
    pub dims: Vec<Option<usize>>,
    /// The symbolic name of each dim ("" for a fixed or anonymous dim).
    pub dim_names: Vec<String>,
}

impl TensorInfo {
    fn from_proto(v: &ValueInfoProto) -> TensorInfo {
        let tensor = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => Some(t),
            _ => None,
        };
        let dtype = tensor.and_then(|t| crate::tensor::dtype_of(t.elem_type()).ok());
        let dims: Vec<(Option<usize>, String)> = tensor
            .and_then(|t| t.shape.as_ref())
            .map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(DimValue::DimValue(n)) if *n >= 0 => (Some(*n as usize), String::new()),
                        Some(DimValue::DimParam(p)) => (None, p.clone()),
                        _ => (None, String::new()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        TensorInfo {
            name: v.name().to_string(),
            dtype,
            dims: dims.iter().map(|d| d.0).collect(),
            dim_names: dims.into_iter().map(|d| d.1).collect(),
        }
    }

    /// `input_ids: i64[batch, sequence]`.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self
            .dims
            .iter()
            .zip(&self.dim_names)
            .map(|(d, n)| match d {
                Some(d) => d.to_string(),
                None if n.is_empty() => "?".to_string(),
                None => n.clone(),
            })
            .collect();
        let dtype = self.dtype.map_or("unsupported".to_string(), |d| format!("{d:?}").to_lowercase());
        format!("{}: {dtype}[{}]", self.name, dims.join(", "))
    }
}

/// An ONNX model ready to run: parsed once; imported and compiled once per distinct set of
/// input shapes.
pub struct OnnxModel {
    graph: GraphProto,
    opsets: Vec<(String, i64)>,
    opset: i64,
    ir_version: i64,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    initializers: HashMap<String, Init>,
    external: ExternalData,
    /// Weights computed at import (batch norms folded into convs), shared by every shape.
    derived: Mutex<HashMap<String, ParamBuffer>>,
    device: Device,
    options: CompileOptions,
    session: Option<Session>,
    cache: HashMap<ShapeKey, CompiledGraph>,
    /// Small inputs an operand needs at compile time (a Reshape's shape, an If's
    /// condition on a sample rate, a Resize's scales): programs are compiled per their
    /// values.
    specialized: Vec<String>,
    last_compile: Option<Duration>,
}

/// What a compiled program is specialized on: every input's dims, and the bytes of the
/// specialized inputs.
type ShapeKey = (Vec<Vec<usize>>, Vec<Vec<u8>>);

/// Largest input a program specializes on, in elements.
const SPECIALIZE_LIMIT: usize = 1 << 12;

impl std::fmt::Debug for OnnxModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxModel").field("graph", &self.graph.name()).field("opset", &self.opset).finish()
    }
}

impl OnnxModel {
    /// Reads a `.onnx` file (memory-mapped: weights stay in the file's pages) and the
    /// external data files beside it that its tensors name.
    pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        // SAFETY: read-only map; see ExternalData::read.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        OnnxModel::parse(Bytes::from_owner(map), ExternalData::beside(path)).map_err(|e| e.context(path.display()))
    }

    /// Parses a model held in memory (external data is not available this way).
    pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel> {
        OnnxModel::parse(Bytes::copy_from_slice(bytes), ExternalData::default())
    }

    fn parse(bytes: Bytes, external: ExternalData) -> Result<OnnxModel> {
        let len = bytes.len();
        let model = ModelProto::decode(bytes.clone()).map_err(|e| crate::wire::explain(&bytes, e, len))?;
        let ir_version = model.ir_version();
        let graph = model.graph.ok_or_else(|| Error::parse("the model has no graph (ModelProto field 7)"))?;
        let opsets: Vec<(String, i64)> =
            model.opset_import.iter().map(|o| (o.domain().to_string(), o.version())).collect();
        let opset = opsets
            .iter()
            .find(|(d, _)| d.is_empty() || d == "ai.onnx")
            .map(|(_, v)| *v)
            // IR version 3 models without an opset import target opset 1; require one.
            .ok_or_else(|| Error::parse("the model imports no opset of the default domain"))?;
        let mut initializers = HashMap::new();
        for t in &graph.initializer {
            if t.name().is_empty() {
                return Err(Error::parse("an initializer has no name"));
            }
            let init = Init::from_proto(t, &external)?;
            if initializers.insert(t.name().to_string(), init).is_some() {
                return Err(Error::parse(format!("initializer '{}' is defined twice", t.name())));
            }
        }
        if !graph.sparse_initializer.is_empty() {
            return Err(Error::unsupported("sparse initializers are not supported"));
        }
        // IR v3 style: initializers listed again as inputs are params with their values.
        let inputs =
            graph.input.iter().filter(|v| !initializers.contains_key(v.name())).map(TensorInfo::from_proto).collect();
        let outputs = graph.output.iter().map(TensorInfo::from_proto).collect();
        Ok(OnnxModel {
            graph,
            opsets,
            opset,
            ir_version,
            inputs,
            outputs,
            initializers,
            external,
            derived: Mutex::new(HashMap::new()),
            device: Device::Cpu,
            options: CompileOptions::default(),
            session: None,
            cache: HashMap::new(),
            specialized: Vec::new(),
            last_compile: None,
        })
    }

    /// Graph inputs that have no initializer: what `run` needs.
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// The opset of each domain the model imports (`""` is the default domain).
    pub fn opsets(&self) -> &[(String, i64)] {
        &self.opsets
    }

    pub fn ir_version(&self) -> i64 {
        self.ir_version
    }

    /// The number of nodes of each op type in the main graph, by first appearance.
    pub fn op_counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for n in &self.graph.node {
            match counts.iter_mut().find(|(t, _)| t == n.op_type()) {
                Some((_, c)) => *c += 1,
                None => counts.push((n.op_type().to_string(), 1)),
            }
        }
        counts
    }

    /// Every node (in subgraphs too) whose op has no importer at the model's opset, as
    /// `node 'name' (Op, opset N): reason`.
    pub fn unsupported_ops(&self) -> Vec<String> {
        let mut found = Vec::new();
        collect_unsupported(&self.graph, self.opset, &mut found);
        found
    }

    /// Fixes input `name` to `value`: it becomes a constant of the graph (shape-like
    /// inputs then fold, as tract's `input:` folding does), no longer an input of `run`.
    pub fn freeze_input(&mut self, name: &str, value: HostTensor) -> Result<()> {
        let k = self
            .inputs
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| Error::input(format!("the model has no input '{name}'")))?;
        let info = &self.inputs[k];
        if Some(value.dtype()) != info.dtype
            || value.dims().len() != info.dims.len()
            || info.dims.iter().zip(value.dims()).any(|(w, &g)| w.is_some_and(|w| w != g))
        {
            return Err(Error::input(format!(
                "input '{name}' is {}, got {}",
                info.describe(),
                fmt_type(value.dtype(), value.dims())
            )));
        }
        self.inputs.remove(k);
        self.initializers.insert(name.to_string(), Init::Const(value));
        self.cache.clear();
        Ok(())
    }

    /// Runs on `device` from the next `run` (drops the programs compiled for another).
    pub fn set_device(&mut self, device: Device) -> Result<()> {
        if device != self.device {
            self.session = Some(Session::new(device)?);
            self.device = device;
            self.cache.clear();
        }
        Ok(())
    }

    /// Worker threads of the programs compiled from now on (default: `RLX_THREADS`, else
    /// every core); drops the programs compiled with another count.
    pub fn set_threads(&mut self, threads: usize) {
        if self.options.threads != Some(threads) {
            self.options = self.options.clone().with_threads(threads);
            self.cache.clear();
        }
    }

    /// The parameter tensors (initializers held as weights): count and bytes.
    pub fn param_stats(&self) -> (usize, usize) {
        self.initializers.values().fold((0, 0), |(n, b), i| match i {
            Init::Param(p) => (n + 1, b + rlx_ir::shape::numel(p.dims()) * p.dtype().size_bytes()),
            Init::Const(c) => (n + 1, b + c.bytes().len()),
        })
    }

    /// How long the last import + compile took (None before the first `run`).
    pub fn last_compile_time(&self) -> Option<Duration> {
        self.last_compile
    }

    /// Imports the graph for these input shapes (one per `inputs()` entry, in order),
    /// without compiling: what `rlx check` and the tests inspect.
    pub fn graph_for(&self, shapes: &[Vec<usize>]) -> Result<Graph> {
        Ok(self.import(shapes, &HashMap::new()).map_err(|(e, _)| e)?.0)
    }

    /// The names of the inputs the compiled programs are specialized on (their values
    /// reach an operand that must be known at compile time).
    pub fn specialized_inputs(&self) -> &[String] {
        &self.specialized
    }

    /// Imports for `shapes`, with the inputs in `values` as constants. On failure, also
    /// the runtime inputs whose values an operand wanted.
    #[allow(clippy::type_complexity)]
    fn import(
        &self,
        shapes: &[Vec<usize>],
        values: &HashMap<&str, TensorRef<'_>>,
    ) -> std::result::Result<(Graph, Vec<(String, ParamBuffer)>), (Error, Vec<String>)> {
        let mut imp = Importer::new(self.graph.name(), self.opset, &self.initializers, &self.external, &self.derived);
        match self.import_into(&mut imp, shapes, values) {
            Ok(()) => Ok((imp.g, imp.params)),
            Err(e) => Err((e, imp.wanted)),
        }
    }

    fn import_into(
        &self,
        imp: &mut Importer,
        shapes: &[Vec<usize>],
        values: &HashMap<&str, TensorRef<'_>>,
    ) -> Result<()> {
        let mut symbols: HashMap<&str, usize> = HashMap::new();
        for (info, dims) in self.inputs.iter().zip(shapes) {
            let dtype = info.dtype.ok_or_else(|| {
                Error::unsupported(format!("input '{}': its element type is not supported", info.name))
            })?;
            for (axis, (want, name)) in info.dims.iter().zip(&info.dim_names).enumerate() {
                let got = dims[axis];
                if want.is_some_and(|w| w != got) {
                    return Err(Error::input(format!(
                        "input '{}': dim {axis} is {} in the model, got {}",
                        info.name,
                        want.unwrap_or(0),
                        fmt_type(dtype, dims)
                    )));
                }
                if !name.is_empty()
                    && let Some(&bound) = symbols.get(name.as_str())
                    && bound != got
                {
                    return Err(Error::input(format!(
                        "input '{}': dim {axis} ('{name}') is {got}, but another input bound '{name}' to {bound}",
                        info.name
                    )));
                }
                symbols.insert(name, got);
            }
            let id = match values.get(info.name.as_str()) {
                Some(v) => imp.g.constant_tensor(v.to_host())?,
                None => imp.g.input(&info.name, dtype, dims)?,
            };
            imp.define(&info.name, id);
        }
        imp.import_nodes(&self.graph)?;
        let mut outputs = Vec::with_capacity(self.graph.output.len());
        for o in &self.graph.output {
            let id = imp.value(o.name()).map_err(|e| e.context(format!("graph output '{}'", o.name())))?;
            outputs.push(id);
        }
        imp.g.set_outputs(&outputs)
    }

    /// Binds symbolic dims from the inputs' shapes, compiles once per distinct input shape
    /// (cached) and runs; outputs in graph output order.
    pub fn run(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let views: Vec<(&str, TensorRef)> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
        self.run_views(&views)
    }

    /// [`OnnxModel::run`] on borrowed tensors (a caller's buffers: NumPy arrays, mapped
    /// files), read in place.
    pub fn run_views(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<Vec<HostTensor>> {
        let ordered = self.order_inputs(inputs)?;
        let mut key = self.key(&ordered);
        if !self.cache.contains_key(&key) {
            let start = Instant::now();
            let (graph, params) = self.import_specialized(&ordered)?;
            key = self.key(&ordered);
            if self.session.is_none() {
                self.session = Some(Session::new(self.device)?);
            }
            let session = self.session.as_ref().ok_or_else(|| Error::internal("no session"))?;
            let mut compiled = session.compile_with(&graph, &self.options)?;
            for (name, buffer) in &params {
                compiled.bind_param(name, buffer)?;
            }
            self.last_compile = Some(start.elapsed());
            self.cache.insert(key.clone(), compiled);
        }
        let compiled = self.cache.get_mut(&key).ok_or_else(|| Error::internal("compiled program missing"))?;
        run_on(compiled, &self.inputs, &ordered)
    }

    /// The same graph run in f64 on the CPU (every float value, param and cast moved to
    /// f64; params and inputs converted by value): an accuracy oracle for `run`, which
    /// tests compare both RLX and onnxruntime against. Outputs are f64 where `run`'s are
    /// float.
    pub fn reference_f64(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let views: Vec<(&str, TensorRef)> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
        let ordered = self.order_inputs(&views)?;
        let (graph, params) = self.import_specialized(&ordered)?;
        let mut compiled = Session::new(Device::Cpu)?.compile(&graph.retyped(DType::F64)?)?;
        for (name, buffer) in &params {
            compiled.set_param_typed(name, &buffer.read()?)?;
        }
        let wide: Vec<HostTensor> = ordered
            .iter()
            .map(|t| {
                if t.dtype().is_float() {
                    HostTensor::from_f64_as(DType::F64, t.dims(), &t.to_f64_vec())
                } else {
                    Ok(t.to_host())
                }
            })
            .collect::<Result<_>>()?;
        let views: Vec<TensorRef> = wide.iter().map(HostTensor::view).collect();
        run_on(&mut compiled, &self.inputs, &views)
    }

    /// The caller's inputs in model order, each checked against its declaration.
    fn order_inputs<'a>(&self, inputs: &[(&str, TensorRef<'a>)]) -> Result<Vec<TensorRef<'a>>> {
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for info in &self.inputs {
            let mut given = inputs.iter().filter(|(n, _)| *n == info.name);
            let (_, t) = given
                .next()
                .ok_or_else(|| Error::input(format!("input '{}' ({}) is missing", info.name, info.describe())))?;
            if given.next().is_some() {
                return Err(Error::input(format!("input '{}' is given twice", info.name)));
            }
            if Some(t.dtype()) != info.dtype || t.dims().len() != info.dims.len() {
                return Err(Error::input(format!(
                    "input '{}' is {}, got {}",
                    info.name,
                    info.describe(),
                    fmt_type(t.dtype(), t.dims())
                )));
            }
            ordered.push(*t);
        }
        if let Some((name, _)) = inputs.iter().find(|(n, _)| !self.inputs.iter().any(|i| i.name == *n)) {
            return Err(Error::input(format!("the model has no input '{name}'")));
        }
        Ok(ordered)
    }

    /// The cache key of these inputs under the current specialization.
    fn key(&self, ordered: &[TensorRef<'_>]) -> ShapeKey {
        let shapes = ordered.iter().map(|t| t.dims().to_vec()).collect();
        let values = self
            .inputs
            .iter()
            .zip(ordered)
            .filter(|(i, _)| self.specialized.contains(&i.name))
            .map(|(_, t)| t.bytes().to_vec())
            .collect();
        (shapes, values)
    }

    /// Imports for these inputs' shapes, learning which small inputs an operand needs at
    /// compile time (they become constants of this and later programs).
    #[allow(clippy::type_complexity)]
    fn import_specialized(&mut self, ordered: &[TensorRef<'_>]) -> Result<(Graph, Vec<(String, ParamBuffer)>)> {
        let shapes: Vec<Vec<usize>> = ordered.iter().map(|t| t.dims().to_vec()).collect();
        loop {
            let values: HashMap<&str, TensorRef> = self
                .inputs
                .iter()
                .zip(ordered)
                .filter(|(i, _)| self.specialized.contains(&i.name))
                .map(|(i, t)| (i.name.as_str(), *t))
                .collect();
            let (e, wanted) = match self.import(&shapes, &values) {
                Ok(done) => return Ok(done),
                Err(failed) => failed,
            };
            let new: Vec<String> = wanted
                .into_iter()
                .filter(|w| !self.specialized.contains(w))
                .filter(|w| self.inputs.iter().zip(ordered).any(|(i, t)| i.name == *w && t.len() <= SPECIALIZE_LIMIT))
                .collect();
            if new.is_empty() {
                return Err(e);
            }
            self.specialized.extend(new);
            self.specialized.sort();
            self.specialized.dedup();
        }
    }
}

/// Runs `compiled` on the inputs it declares (specialized inputs are constants in it, and
/// an input no output depends on is dropped).
fn run_on(compiled: &mut CompiledGraph, infos: &[TensorInfo], ordered: &[TensorRef<'_>]) -> Result<Vec<HostTensor>> {
    let named: Vec<(&str, TensorRef)> = infos
        .iter()
        .zip(ordered)
        .filter(|(i, _)| compiled.inputs().iter().any(|b| b.name == i.name))
        .map(|(i, t)| (i.name.as_str(), *t))
        .collect();
    compiled.run_views(&named)
}

fn collect_unsupported(graph: &GraphProto, opset: i64, found: &mut Vec<String>) {
    for (index, node) in graph.node.iter().enumerate() {
        if let Err(e) = lookup(node, opset) {
            found.push(format!("{}: {}", describe_node(node, index, opset), e.message()));
        }
        for a in &node.attribute {
            if let Some(g) = &a.g {
                collect_unsupported(g, opset, found);
            }
            for g in &a.graphs {
                collect_unsupported(g, opset, found);
            }
        }
    }
}
