//! Building a graph op by op: logical tensors (inputs, constants, intermediates), ops that read
//! and write them, and the graph's outputs. What can be checked while adding (that ids belong to
//! this graph, the number of inputs and outputs, one producer per tensor) is checked here;
//! everything else when the graph is finalized (`finalize`).

use std::collections::BTreeMap;
use std::sync::Arc;

use cranelift_entity::{PrimaryMap, SecondaryMap};

use super::dtype::DataType;
use super::error::{GraphError, OpRef, TensorRef};
use super::op::{Op, OpId, OpKind};
use super::shape::{Operand, infer};
use super::tensor::{Layout, LogicalTensor, Shape, TensorId};
use super::value::Value;

/// A graph under construction.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub(super) tensors: PrimaryMap<TensorId, LogicalTensor>,
    pub(super) ops: PrimaryMap<OpId, Op>,
    pub(super) inputs: Vec<TensorId>,
    pub(super) outputs: Vec<TensorId>,
    pub(super) constants: BTreeMap<TensorId, Arc<Value>>,
    /// The op that writes each tensor.
    pub(super) producer: SecondaryMap<TensorId, Option<OpId>>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Declares a logical tensor that an op will write (or that a later `add_input` marks).
    pub fn add_tensor(&mut self, tensor: LogicalTensor) -> TensorId {
        self.tensors.push(tensor)
    }

    /// Declares an intermediate tensor of layout `Any`; its shape may be `Shape::UnknownRank`
    /// or have unknown dimensions, which finalization infers from the op that writes it.
    pub fn tensor(&mut self, name: &str, dtype: DataType, shape: impl Into<Shape>) -> TensorId {
        self.add_tensor(LogicalTensor::new(name, dtype, shape))
    }

    /// Declares a graph input with its layout (`Strided` or `Any`; not `Opaque`).
    pub fn add_input(&mut self, tensor: LogicalTensor) -> TensorId {
        let id = self.add_tensor(tensor);
        self.inputs.push(id);
        id
    }

    /// Declares a graph input, dense and row-major.
    pub fn input(&mut self, name: &str, dtype: DataType, shape: impl Into<Shape>) -> TensorId {
        let shape = shape.into();
        let layout = Layout::row_major(&shape);
        self.add_input(LogicalTensor { name: name.to_string(), dtype, shape, layout })
    }

    /// Declares a constant (weights, biases): its type and shape are the value's, its layout
    /// dense and row-major; the graph holds the data.
    pub fn constant(&mut self, name: &str, value: Value) -> TensorId {
        self.constant_shared(name, Arc::new(value))
    }

    /// `constant` with a value shared with the caller (an importer's decoded tensor), not copied.
    pub fn constant_shared(&mut self, name: &str, value: Arc<Value>) -> TensorId {
        let shape = Shape::known(value.dims());
        let layout = Layout::row_major(&shape);
        let id = self.add_tensor(LogicalTensor { name: name.to_string(), dtype: value.dtype(), shape, layout });
        self.constants.insert(id, value);
        id
    }

    /// Adds an op reading `inputs` and writing `outputs` (declared tensors). Errors: an id not
    /// of this graph, the wrong number of inputs or outputs, an output that another op already
    /// writes or that is a graph input or constant.
    pub fn add_op(
        &mut self,
        name: &str,
        kind: OpKind,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<OpId, GraphError> {
        let id = self.ops.next_key();
        let op = OpRef { id, name: name.into(), kind: kind.name() };
        if let Some(&t) = inputs.iter().chain(outputs).find(|t| !self.tensors.is_valid(**t)) {
            return Err(GraphError::UnknownTensor { op, tensor: t });
        }
        let (lo, hi) = kind.input_count();
        if !(lo..=hi).contains(&inputs.len()) {
            let expected = if lo == hi { lo.to_string() } else { format!("{lo} or {hi}") };
            return Err(GraphError::Arity { op, what: "inputs", expected, found: inputs.len() });
        }
        if outputs.len() != kind.output_count() {
            return Err(GraphError::Arity {
                op,
                what: "outputs",
                expected: kind.output_count().to_string(),
                found: outputs.len(),
            });
        }
        for (i, &t) in outputs.iter().enumerate() {
            if let Some(first) = self.producer[t].or_else(|| outputs[..i].contains(&t).then_some(id)) {
                let first = self.op_ref(first);
                return Err(GraphError::ProducedTwice { tensor: self.tensor_ref(t), first, second: op });
            }
            if self.inputs.contains(&t) || self.constants.contains_key(&t) {
                return Err(GraphError::WritesInput { op, tensor: self.tensor_ref(t) });
            }
        }
        for &t in outputs {
            self.producer[t] = Some(id);
        }
        Ok(self.ops.push(Op { name: name.to_string(), kind, inputs: inputs.to_vec(), outputs: outputs.to_vec() }))
    }

    /// Adds an op and a new output tensor for it, named `name`, whose type and shape are
    /// inferred now from the inputs' (which must already be known well enough). Returns the
    /// output tensor.
    pub fn apply(&mut self, name: &str, kind: OpKind, inputs: &[TensorId]) -> Result<TensorId, GraphError> {
        let op = OpRef { id: self.ops.next_key(), name: name.into(), kind: kind.name() };
        if let Some(&t) = inputs.iter().find(|t| !self.tensors.is_valid(**t)) {
            return Err(GraphError::UnknownTensor { op, tensor: t });
        }
        let (lo, hi) = kind.input_count();
        if !(lo..=hi).contains(&inputs.len()) {
            let expected = if lo == hi { lo.to_string() } else { format!("{lo} or {hi}") };
            return Err(GraphError::Arity { op, what: "inputs", expected, found: inputs.len() });
        }
        let refs: Vec<TensorRef> = inputs.iter().map(|&t| self.tensor_ref(t)).collect();
        let operands: Vec<Operand<'_>> = inputs
            .iter()
            .zip(&refs)
            .map(|(&t, r)| Operand { tensor: r, dtype: self.tensors[t].dtype, shape: &self.tensors[t].shape })
            .collect();
        let (dtype, shape) = infer(&op, &kind, &operands)?;
        let out = self.tensor(name, dtype, shape);
        self.add_op(name, kind, inputs, &[out])?;
        Ok(out)
    }

    /// Marks a tensor as a graph output (in the order marked).
    pub fn mark_output(&mut self, tensor: TensorId) -> Result<(), GraphError> {
        if !self.tensors.is_valid(tensor) {
            return Err(GraphError::UnknownGraphTensor { tensor });
        }
        if !self.outputs.contains(&tensor) {
            self.outputs.push(tensor);
        }
        Ok(())
    }

    /// The logical tensor `id`, if it belongs to this graph.
    pub fn logical_tensor(&self, id: TensorId) -> Option<&LogicalTensor> {
        self.tensors.get(id)
    }

    /// Every logical tensor, by id.
    pub fn tensors(&self) -> impl Iterator<Item = (TensorId, &LogicalTensor)> {
        self.tensors.iter()
    }

    /// The op `id`, if it belongs to this graph.
    pub fn op(&self, id: OpId) -> Option<&Op> {
        self.ops.get(id)
    }

    /// Every op, in the order added.
    pub fn ops(&self) -> impl Iterator<Item = (OpId, &Op)> {
        self.ops.iter()
    }

    /// The graph inputs, in the order declared.
    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    /// The graph outputs, in the order marked.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// The data of constant `id`.
    pub fn constant_value(&self, id: TensorId) -> Option<&Arc<Value>> {
        self.constants.get(&id)
    }

    /// Whether `id` is a constant.
    pub fn is_constant(&self, id: TensorId) -> bool {
        self.constants.contains_key(&id)
    }

    /// The op that writes `id`, if any.
    pub fn producer(&self, id: TensorId) -> Option<OpId> {
        self.producer.get(id).copied().flatten()
    }

    /// How errors name op `id`.
    pub fn op_ref(&self, id: OpId) -> OpRef {
        match self.ops.get(id) {
            Some(op) => OpRef { id, name: op.name.as_str().into(), kind: op.kind.name() },
            None => OpRef { id, name: "".into(), kind: "?" },
        }
    }

    /// How errors name tensor `id`.
    pub fn tensor_ref(&self, id: TensorId) -> TensorRef {
        TensorRef { id, name: self.tensors.get(id).map_or("", |t| t.name.as_str()).into() }
    }
}
