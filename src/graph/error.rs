//! The typed errors of building and finalizing a graph. Each names the op (id, name and kind)
//! or the tensor (id and name) at fault, with what was expected and what was found.

use std::fmt;

use super::dtype::DataType;
use super::op::OpId;
use super::tensor::TensorId;

/// An op as errors name it: id, name and kind (`op3 "conv1" (Convolution)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRef {
    pub id: OpId,
    pub name: Box<str>,
    pub kind: &'static str,
}

impl fmt::Display for OpRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} ({})", self.id, self.name, self.kind)
    }
}

/// A tensor as errors name it: id and name (`t2 "x"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRef {
    pub id: TensorId,
    pub name: Box<str>,
}

impl fmt::Display for TensorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.id, self.name)
    }
}

/// A list of ops, for messages.
fn list(ops: &[OpRef]) -> String {
    ops.iter().map(ToString::to_string).collect::<Vec<_>>().join(" → ")
}

/// What is wrong with a graph. (Names are boxed strings so that the error stays small enough
/// to return by value.)
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("{op}: {tensor} is not a tensor of this graph")]
    UnknownTensor { op: OpRef, tensor: TensorId },
    #[error("{tensor} is not a tensor of this graph")]
    UnknownGraphTensor { tensor: TensorId },
    #[error("{op}: expected {expected} {what}, found {found}")]
    Arity { op: OpRef, what: &'static str, expected: String, found: usize },
    #[error("{tensor} is written by {first} and again by {second}; a tensor has one producer")]
    ProducedTwice { tensor: TensorRef, first: OpRef, second: OpRef },
    #[error("{op} writes {tensor}, which is a graph input or a constant")]
    WritesInput { op: OpRef, tensor: TensorRef },
    #[error("{op} reads {tensor}, which no op produces and which is neither a graph input nor a constant")]
    Dangling { op: OpRef, tensor: TensorRef },
    #[error("the ops form a cycle: {}", list(ops))]
    Cycle { ops: Vec<OpRef> },
    #[error("{op}: {operand} must be {expected}, found {found}")]
    DType { op: OpRef, operand: String, expected: String, found: DataType },
    #[error("{op}: {operand} must be {expected}, found {found}")]
    Shape { op: OpRef, operand: String, expected: String, found: String },
    #[error("{op}: attribute `{attribute}` must be {expected}, found {found}")]
    Attribute { op: OpRef, attribute: &'static str, expected: String, found: String },
    #[error("{op}: the rank of its input {tensor} is unknown")]
    UnknownRank { op: OpRef, tensor: TensorRef },
    #[error("{op}: output {tensor} is declared with {what} {declared}, but the op produces {inferred}")]
    Declared { op: OpRef, tensor: TensorRef, what: &'static str, declared: Box<str>, inferred: Box<str> },
    #[error("graph output {tensor} is produced by no op and is neither a graph input nor a constant")]
    OutputNotProduced { tensor: TensorRef },
    #[error("{tensor}: its layout must be {expected}, found {found}")]
    Layout { tensor: TensorRef, expected: String, found: String },
}
