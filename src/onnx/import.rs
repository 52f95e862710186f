//! Importing a model: the checked `ModelProto` (`read`) walked node by node, in file order (ONNX
//! requires nodes in topological order), each node mapped onto graph ops (`float_ops`, `qdq`,
//! `qlinear`), then the graph finalized. ONNX tensors are found by name: graph inputs,
//! initializers and `Constant` outputs (constants, decoded once when first used) and the outputs
//! of earlier nodes.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::graph::{DataType, Dim, FinalizedGraph, Graph, OpKind, Shape, TensorId, Value};

use super::error::OnnxError;
use super::node::Node;
use super::proto::{GraphProto, ModelProto, TensorProto};
use super::read::{declared_dims, opset, read, read_file};
use super::tensor::{Constant, decode, dtype_name, graph_dtype};
use super::{float_ops, qdq, qlinear};

/// An imported model: the finalized graph and its named inputs and outputs, in the file's order.
#[derive(Debug)]
pub struct Model {
    pub graph: FinalizedGraph,
    pub inputs: Vec<(String, TensorId)>,
    pub outputs: Vec<(String, TensorId)>,
    /// Every value the file names that the graph computes (node outputs and graph inputs), with
    /// its tensor, sorted by name: how another runtime's intermediate tensors are found.
    pub values: Vec<(String, TensorId)>,
    /// The version of the default (`ai.onnx`) opset.
    pub opset: i64,
}

/// Imports an ONNX model from its bytes.
pub fn import(bytes: &[u8]) -> Result<Model, OnnxError> {
    import_checked(&read(bytes)?)
}

/// Imports the ONNX model at `path`.
pub fn load(path: impl AsRef<Path>) -> Result<Model, OnnxError> {
    import_checked(&read_file(path.as_ref())?)
}

/// Imports a decoded model, which may have been built or edited in memory: it is encoded and
/// read back, so that it is checked as a file is.
pub fn import_proto(model: &ModelProto) -> Result<Model, OnnxError> {
    import(&prost::Message::encode_to_vec(model))
}

/// Imports a model `read` has checked.
fn import_checked(model: &ModelProto) -> Result<Model, OnnxError> {
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    let version = opset(model)?;
    let mut im = Importer::new(graph);
    let inputs = im.declare_inputs(graph)?;
    for (index, proto) in graph.node.iter().enumerate() {
        if im.folded.contains(&index) {
            continue;
        }
        let node = Node::new(index, proto);
        im.node(&node)?;
    }
    let mut outputs = Vec::new();
    for v in &graph.output {
        let name = v.name();
        let t = match im.tensors.get(name) {
            Some(&t) => t,
            None if im.is_constant(name) => im.graph_constant_named(name, None)?,
            None => return Err(OnnxError::MissingOutput { name: name.to_string() }),
        };
        im.g.mark_output(t).map_err(|e| OnnxError::Finalize(Box::new(e)))?;
        outputs.push((name.to_string(), t));
    }
    let mut values: Vec<(String, TensorId)> = im.tensors.iter().map(|(n, &t)| (n.clone(), t)).collect();
    values.sort();
    let graph = im.g.finalize().map_err(|e| OnnxError::Finalize(Box::new(e)))?;
    Ok(Model { graph, inputs, outputs, values, opset: version })
}

/// The state of one import.
pub struct Importer<'m> {
    pub g: Graph,
    initializers: HashMap<&'m str, &'m TensorProto>,
    /// Decoded constants by name (initializers on first use, `Constant` outputs).
    constants: HashMap<String, Arc<Constant>>,
    /// Graph tensors by ONNX name.
    tensors: HashMap<String, TensorId>,
    /// The nodes reading each name, by index.
    pub consumers: HashMap<&'m str, Vec<usize>>,
    /// The graph's output names.
    pub graph_outputs: HashSet<&'m str>,
    /// Nodes already imported as part of an earlier one (a BatchNormalization folded into its Conv).
    pub folded: HashSet<usize>,
    pub nodes: &'m [super::proto::NodeProto],
}

impl<'m> Importer<'m> {
    fn new(graph: &'m GraphProto) -> Importer<'m> {
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in graph.node.iter().enumerate() {
            for name in &n.input {
                consumers.entry(name.as_str()).or_default().push(i);
            }
        }
        Importer {
            g: Graph::new(),
            initializers: graph.initializer.iter().map(|t| (t.name(), t)).collect(),
            constants: HashMap::new(),
            tensors: HashMap::new(),
            consumers,
            graph_outputs: graph.output.iter().map(|v| v.name()).collect(),
            folded: HashSet::new(),
            nodes: &graph.node,
        }
    }

    /// Declares the graph inputs that are not initializers, with their types and shapes.
    fn declare_inputs(&mut self, graph: &'m GraphProto) -> Result<Vec<(String, TensorId)>, OnnxError> {
        let mut inputs = Vec::new();
        for v in &graph.input {
            let name = v.name();
            if self.initializers.contains_key(name) {
                continue;
            }
            let code = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(super::proto::type_proto::Value::TensorType(t)) => t.elem_type(),
                _ => {
                    return Err(OnnxError::UnsupportedDtype { tensor: name.into(), dtype: "a non-tensor type".into() });
                }
            };
            let dtype = graph_dtype(code)
                .ok_or_else(|| OnnxError::UnsupportedDtype { tensor: name.into(), dtype: dtype_name(code) })?;
            let Some(dims) = declared_dims(v)? else {
                return Err(OnnxError::UnsupportedDtype {
                    tensor: name.into(),
                    dtype: "a tensor without a shape".into(),
                });
            };
            let shape = Shape::Dims(dims.into_iter().map(|d| d.map_or(Dim::Unknown, Dim::Known)).collect());
            if self.tensors.contains_key(name) {
                return Err(OnnxError::Redefined { name: name.into(), by: "a second graph input".into() });
            }
            let t = self.g.input(name, dtype, shape);
            self.tensors.insert(name.to_string(), t);
            inputs.push((name.to_string(), t));
        }
        Ok(inputs)
    }

    /// Imports one node.
    fn node(&mut self, n: &Node<'m>) -> Result<(), OnnxError> {
        let domain = n.proto.domain();
        let op = n.proto.op_type();
        match domain {
            "" | "ai.onnx" => match op {
                "Constant" => self.constant_node(n),
                "Conv" => float_ops::conv(self, n),
                "BatchNormalization" => Err(n.unsupported(
                    "a BatchNormalization is folded into the Conv before it; this one does not follow a Conv with \
                     constant weights whose output it alone reads",
                )),
                "Relu" => float_ops::unary(self, n, OpKind::ReLU),
                "Clip" => float_ops::clip(self, n),
                "Add" => float_ops::add(self, n),
                "MaxPool" => float_ops::max_pool(self, n),
                "AveragePool" => float_ops::avg_pool(self, n),
                "GlobalAveragePool" => float_ops::unary(self, n, OpKind::GlobalAveragePool),
                "Flatten" => float_ops::flatten(self, n),
                "Reshape" => float_ops::reshape(self, n),
                "Gemm" => float_ops::gemm(self, n),
                "MatMul" => float_ops::matmul(self, n),
                "DequantizeLinear" => qdq::dequantize_linear(self, n),
                "QuantizeLinear" => qdq::quantize_linear(self, n),
                "QLinearConv" => qlinear::conv(self, n),
                "QLinearMatMul" => qlinear::matmul(self, n),
                _ => Err(unknown(n)),
            },
            "com.microsoft" => match op {
                "QGemm" => qlinear::gemm(self, n),
                "QLinearAdd" => qlinear::add(self, n),
                "QLinearGlobalAveragePool" => qlinear::global_average_pool(self, n),
                _ => Err(unknown(n)),
            },
            _ => Err(unknown(n)),
        }
    }

    /// `Constant`: its `value` tensor (or `value_float`, `value_int`, `value_ints`) under its output's name.
    fn constant_node(&mut self, n: &Node<'m>) -> Result<(), OnnxError> {
        let c = if let Some(t) = n.tensor("value")? {
            decode(t)?
        } else if n.has("value_float") {
            Constant::Value(Arc::new(
                Value::f32(&[], vec![n.float("value_float", 0.0)?]).map_err(|e| n.unsupported(e.to_string()))?,
            ))
        } else if n.has("value_int") {
            Constant::I64 { dims: vec![], data: vec![n.int("value_int", 0)?] }
        } else if let Some(v) = n.ints("value_ints")? {
            Constant::I64 { dims: vec![v.len()], data: v }
        } else {
            return Err(n.unsupported("a Constant needs one of `value`, `value_float`, `value_int`, `value_ints`"));
        };
        let name = n.output(0).ok_or(OnnxError::MissingOperand { node: n.r.clone(), index: 0, what: "output" })?;
        self.check_new(n, name)?;
        self.constants.insert(name.to_string(), Arc::new(c));
        Ok(())
    }

    /// Whether `name` is an initializer or a `Constant` output.
    pub fn is_constant(&self, name: &str) -> bool {
        self.constants.contains_key(name) || self.initializers.contains_key(name)
    }

    /// The constant `name`, decoded on first use; `None` if it is not a constant.
    fn lookup_constant(&mut self, name: &str) -> Result<Option<Arc<Constant>>, OnnxError> {
        if let Some(c) = self.constants.get(name) {
            return Ok(Some(c.clone()));
        }
        let Some(t) = self.initializers.get(name) else { return Ok(None) };
        let c = Arc::new(decode(t)?);
        self.constants.insert(name.to_string(), c.clone());
        Ok(Some(c))
    }

    /// Input `i` of `n`, which must be present and constant.
    pub fn constant(&mut self, n: &Node<'m>, i: usize, what: &'static str) -> Result<Arc<Constant>, OnnxError> {
        self.opt_constant(n, i, what)?.ok_or(OnnxError::MissingOperand { node: n.r.clone(), index: i, what })
    }

    /// Input `i` of `n` if present; it must then be constant.
    pub fn opt_constant(
        &mut self,
        n: &Node<'m>,
        i: usize,
        what: &'static str,
    ) -> Result<Option<Arc<Constant>>, OnnxError> {
        let Some(name) = n.input(i) else { return Ok(None) };
        match self.lookup_constant(name)? {
            Some(c) => Ok(Some(c)),
            None if self.tensors.contains_key(name) => {
                Err(OnnxError::NotConstant { node: n.r.clone(), input: name.to_string(), what })
            }
            None => Err(OnnxError::MissingInput { node: n.r.clone(), input: name.to_string() }),
        }
    }

    /// Input `i` of `n` if it is present and constant (`None` for a computed tensor).
    pub fn constant_if_any(&mut self, n: &Node<'m>, i: usize) -> Result<Option<Arc<Constant>>, OnnxError> {
        match n.input(i) {
            Some(name) => self.lookup_constant(name),
            None => Ok(None),
        }
    }

    /// Input `i` of `n` as a graph tensor (a constant becomes a graph constant, once).
    pub fn tensor(&mut self, n: &Node<'m>, i: usize, what: &'static str) -> Result<TensorId, OnnxError> {
        let name = n.input(i).ok_or(OnnxError::MissingOperand { node: n.r.clone(), index: i, what })?;
        if let Some(&t) = self.tensors.get(name) {
            return Ok(t);
        }
        if self.is_constant(name) {
            return self.graph_constant_named(name, Some(n));
        }
        Err(OnnxError::MissingInput { node: n.r.clone(), input: name.to_string() })
    }

    /// Input `i` of `n` as a graph tensor if present.
    pub fn opt_tensor(&mut self, n: &Node<'m>, i: usize, what: &'static str) -> Result<Option<TensorId>, OnnxError> {
        n.input(i).map(|_| self.tensor(n, i, what)).transpose()
    }

    /// The graph constant for constant `name` (made on first use).
    fn graph_constant_named(&mut self, name: &str, n: Option<&Node<'m>>) -> Result<TensorId, OnnxError> {
        let c = self.lookup_constant(name)?.ok_or_else(|| OnnxError::MissingOutput { name: name.to_string() })?;
        let Constant::Value(v) = &*c else {
            let what = format!("input {name:?} as a tensor of a graph op");
            return Err(match n {
                Some(n) => OnnxError::DType {
                    node: n.r.clone(),
                    what,
                    expected: "f32, s32, s8 or u8".into(),
                    found: "i64".into(),
                },
                None => OnnxError::UnsupportedDtype { tensor: name.to_string(), dtype: "i64".into() },
            });
        };
        let t = self.g.constant_shared(name, Arc::clone(v));
        self.tensors.insert(name.to_string(), t);
        Ok(t)
    }

    /// A new graph constant holding `value`, named after `n`.
    pub fn new_constant(&mut self, n: &Node<'m>, suffix: &str, value: Value) -> TensorId {
        self.g.constant(&n.op_name(suffix), value)
    }

    /// Adds graph op `kind` for node `n` (named after it, with `suffix`).
    pub fn apply(
        &mut self,
        n: &Node<'m>,
        suffix: &str,
        kind: OpKind,
        inputs: &[TensorId],
    ) -> Result<TensorId, OnnxError> {
        self.g
            .apply(&n.op_name(suffix), kind, inputs)
            .map_err(|source| OnnxError::Graph { node: n.r.clone(), source: Box::new(source) })
    }

    /// Binds output `i` of `n` to graph tensor `t`.
    pub fn define(&mut self, n: &Node<'m>, i: usize, t: TensorId) -> Result<(), OnnxError> {
        let name = n.output(i).ok_or(OnnxError::MissingOperand { node: n.r.clone(), index: i, what: "output" })?;
        self.check_new(n, name)?;
        self.tensors.insert(name.to_string(), t);
        Ok(())
    }

    /// Errors if `name` is already defined.
    fn check_new(&self, n: &Node<'m>, name: &str) -> Result<(), OnnxError> {
        if self.tensors.contains_key(name) || self.is_constant(name) {
            return Err(OnnxError::Redefined { name: name.to_string(), by: n.r.to_string() });
        }
        Ok(())
    }

    /// Errors if `n` has outputs past the first (optional outputs this importer does not make).
    pub fn single_output(&self, n: &Node<'m>) -> Result<(), OnnxError> {
        if (1..n.proto.output.len()).any(|i| n.output(i).is_some()) {
            return Err(n.unsupported(format!("only the first output is supported, found {}", n.proto.output.len())));
        }
        Ok(())
    }

    /// The type and dimensions of graph tensor `t` (dimensions `None` where unknown).
    pub fn describe(&self, n: &Node<'m>, t: TensorId) -> Result<(DataType, Vec<Option<usize>>), OnnxError> {
        let lt = self.g.logical_tensor(t).ok_or_else(|| n.unsupported("an input tensor of another graph"))?;
        let dims = lt
            .shape
            .dims()
            .ok_or_else(|| n.unsupported(format!("input {:?} has an unknown rank", lt.name)))?
            .iter()
            .map(|d| d.known())
            .collect();
        Ok((lt.dtype, dims))
    }

    /// The single node reading `name`, if exactly one does and `name` is no graph output.
    pub fn only_consumer(&self, name: &str) -> Option<usize> {
        match self.consumers.get(name).map(Vec::as_slice) {
            Some([i]) if !self.graph_outputs.contains(name) => Some(*i),
            _ => None,
        }
    }
}

/// The `UnknownOp` error of `n`.
fn unknown(n: &Node<'_>) -> OnnxError {
    let domain = if n.r.domain.is_empty() { "ai.onnx".to_string() } else { n.r.domain.clone() };
    OnnxError::UnknownOp { node: n.r.clone(), op_type: n.r.op_type.clone(), domain }
}
