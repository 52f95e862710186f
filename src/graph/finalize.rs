//! Finalizing a graph: every input of every op is produced, a graph input or a constant; the
//! ops form no cycle; layouts at the graph's boundary are public; and, op by op in dependency
//! order, attributes are valid and the declared output types and shapes agree with what the op
//! produces (unknown dimensions are filled in where inference knows them). The result is a
//! `FinalizedGraph`, which partitioning and the reference read.

use cranelift_entity::SecondaryMap;

use super::build::Graph;
use super::error::{GraphError, OpRef};
use super::op::{Op, OpId};
use super::shape::{Operand, infer};
use super::tensor::{Layout, LogicalTensor, TensorId};

/// A validated graph: every tensor's type and shape as inferred, the ops in dependency order.
#[derive(Clone, Debug)]
pub struct FinalizedGraph {
    graph: Graph,
    order: Vec<OpId>,
    consumers: SecondaryMap<TensorId, Vec<OpId>>,
}

impl Graph {
    /// Validates the graph (module doc) and infers every op's output.
    pub fn finalize(mut self) -> Result<FinalizedGraph, GraphError> {
        for (id, op) in self.ops.iter() {
            for &t in &op.inputs {
                let known = self.producer(t).is_some() || self.inputs.contains(&t) || self.is_constant(t);
                if !known {
                    return Err(GraphError::Dangling { op: self.op_ref(id), tensor: self.tensor_ref(t) });
                }
            }
        }
        let order = self.dependency_order()?;
        self.check_boundary_layouts()?;
        for &id in &order {
            self.infer_op(id)?;
        }
        for &t in &self.outputs {
            if self.producer(t).is_none() && !self.inputs.contains(&t) && !self.is_constant(t) {
                return Err(GraphError::OutputNotProduced { tensor: self.tensor_ref(t) });
            }
        }
        let mut consumers: SecondaryMap<TensorId, Vec<OpId>> = SecondaryMap::new();
        for &id in &order {
            for &t in &self.ops[id].inputs {
                if !consumers[t].contains(&id) {
                    consumers[t].push(id);
                }
            }
        }
        Ok(FinalizedGraph { graph: self, order, consumers })
    }

    /// The ops in dependency order (Kahn's algorithm; ties by id), or the ops of a cycle.
    fn dependency_order(&self) -> Result<Vec<OpId>, GraphError> {
        let preds = |id: OpId| -> Vec<OpId> {
            let mut p: Vec<OpId> = self.ops[id].inputs.iter().filter_map(|&t| self.producer(t)).collect();
            p.sort_unstable();
            p.dedup();
            p
        };
        let mut pending: SecondaryMap<OpId, usize> = SecondaryMap::new();
        let mut succs: SecondaryMap<OpId, Vec<OpId>> = SecondaryMap::new();
        for (id, _) in self.ops.iter() {
            let p = preds(id);
            pending[id] = p.len();
            for q in p {
                succs[q].push(id);
            }
        }
        let mut ready: std::collections::BTreeSet<OpId> = self.ops.keys().filter(|&id| pending[id] == 0).collect();
        let mut order = Vec::with_capacity(self.ops.len());
        while let Some(id) = ready.pop_first() {
            order.push(id);
            for &s in &succs[id] {
                pending[s] -= 1;
                if pending[s] == 0 {
                    ready.insert(s);
                }
            }
        }
        if order.len() == self.ops.len() {
            return Ok(order);
        }
        // Every op left waits on another op left: walk predecessors until one repeats.
        let left: Vec<OpId> = self.ops.keys().filter(|&id| pending[id] > 0).collect();
        let mut path = vec![left[0]];
        loop {
            let last = path[path.len() - 1];
            let Some(next) = preds(last).into_iter().find(|p| pending[*p] > 0) else {
                return Err(GraphError::Cycle { ops: left.iter().map(|&id| self.op_ref(id)).collect() });
            };
            if let Some(start) = path.iter().position(|&p| p == next) {
                // `path[i + 1]` feeds `path[i]`, and `next` feeds the last: in data-flow order
                // the cycle is `next`, the last, ..., `path[start + 1]`, `next` again.
                let cycle: Vec<OpRef> = std::iter::once(next)
                    .chain(path[start + 1..].iter().rev().copied())
                    .chain(std::iter::once(next))
                    .map(|id| self.op_ref(id))
                    .collect();
                return Err(GraphError::Cycle { ops: cycle });
            }
            path.push(next);
        }
    }

    /// Graph inputs, outputs and constants are strided (or not yet decided), with one stride
    /// per dimension; no tensor's strides disagree with its rank.
    fn check_boundary_layouts(&self) -> Result<(), GraphError> {
        let boundary = |t: TensorId| self.inputs.contains(&t) || self.outputs.contains(&t) || self.is_constant(t);
        for (id, t) in self.tensors.iter() {
            match &t.layout {
                Layout::Opaque if boundary(id) => {
                    return Err(GraphError::Layout {
                        tensor: self.tensor_ref(id),
                        expected: "strided or any (a graph input, output or constant is never opaque)".into(),
                        found: t.layout.to_string(),
                    });
                }
                Layout::Strided(strides) => {
                    if let Some(rank) = t.shape.rank()
                        && rank != strides.len()
                    {
                        return Err(GraphError::Layout {
                            tensor: self.tensor_ref(id),
                            expected: format!("one stride per dimension ({rank})"),
                            found: t.layout.to_string(),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Infers op `id`'s output and merges it into the declared output tensor.
    fn infer_op(&mut self, id: OpId) -> Result<(), GraphError> {
        let op: &Op = &self.ops[id];
        let op_ref = self.op_ref(id);
        let refs: Vec<_> = op.inputs.iter().map(|&t| self.tensor_ref(t)).collect();
        let operands: Vec<Operand<'_>> = op
            .inputs
            .iter()
            .zip(&refs)
            .map(|(&t, r)| Operand { tensor: r, dtype: self.tensors[t].dtype, shape: &self.tensors[t].shape })
            .collect();
        let (dtype, shape) = infer(&op_ref, &op.kind, &operands)?;
        let out = op.outputs[0];
        let declared: &LogicalTensor = &self.tensors[out];
        if declared.dtype != dtype {
            return Err(GraphError::Declared {
                op: op_ref,
                tensor: self.tensor_ref(out),
                what: "type",
                declared: declared.dtype.to_string().into(),
                inferred: dtype.to_string().into(),
            });
        }
        if !declared.shape.fits(&shape) {
            return Err(GraphError::Declared {
                op: op_ref,
                tensor: self.tensor_ref(out),
                what: "shape",
                declared: declared.shape.to_string().into(),
                inferred: shape.to_string().into(),
            });
        }
        let refined = declared.shape.refine(&shape);
        self.tensors[out].shape = refined;
        Ok(())
    }
}

impl FinalizedGraph {
    /// The graph, with inferred shapes.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The ops in dependency order (every op after the producers of its inputs).
    pub fn order(&self) -> &[OpId] {
        &self.order
    }

    /// The ops that read `t`, in dependency order.
    pub fn consumers(&self, t: TensorId) -> &[OpId] {
        self.consumers.get(t).map_or(&[], Vec::as_slice)
    }

    /// The logical tensor `t` (after inference).
    pub fn tensor(&self, t: TensorId) -> Option<&LogicalTensor> {
        self.graph.logical_tensor(t)
    }

    /// The op `id`.
    pub fn op(&self, id: OpId) -> Option<&Op> {
        self.graph.op(id)
    }
}
