//! The typed errors of reading and importing an ONNX file. Each says what was expected and what
//! was found, naming the node (index, name, op type), tensor or attribute at fault.

use std::fmt;

use crate::graph::GraphError;

/// A node as errors name it: its index in the graph, its name and its op (`node 3 "conv1"
/// (QLinearConv)`, with the domain when it is not the default one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub index: usize,
    pub name: String,
    pub op_type: String,
    pub domain: String,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} {:?} (", self.index, self.name)?;
        if !self.domain.is_empty() && self.domain != "ai.onnx" {
            write!(f, "{}:", self.domain)?;
        }
        write!(f, "{})", self.op_type)
    }
}

/// What is wrong with an ONNX file, or what of it is not supported. (Nodes and graph errors
/// are boxed to keep `Result`s small.)
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("the file is not a valid ONNX protobuf (truncated or malformed): {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("the model has no graph")]
    NoGraph,
    #[error("opset {domain:?} version {found}: supported are {expected}")]
    UnsupportedOpset { domain: String, expected: &'static str, found: String },
    #[error("{node}: unknown op {op_type:?} in domain {domain:?}")]
    UnknownOp { node: Box<NodeRef>, op_type: String, domain: String },
    #[error("{node}: input {input:?} is no initializer, graph input or output of an earlier node")]
    MissingInput { node: Box<NodeRef>, input: String },
    #[error("graph output {name:?} is produced by no node and is no graph input or initializer")]
    MissingOutput { name: String },
    #[error("{node}: expected input {index} ({what}), found none")]
    MissingOperand { node: Box<NodeRef>, index: usize, what: &'static str },
    #[error("{node}: input {input:?} ({what}) must be an initializer or a Constant, found a computed tensor")]
    NotConstant { node: Box<NodeRef>, input: String, what: &'static str },
    #[error("{node}: attribute `{attribute}` must be {expected}, found {found}")]
    Attribute { node: Box<NodeRef>, attribute: String, expected: String, found: String },
    #[error("{node}: {what}")]
    Unsupported { node: Box<NodeRef>, what: String },
    #[error("{node}: {what} must be {expected}, found {found}")]
    DType { node: Box<NodeRef>, what: String, expected: String, found: String },
    #[error("{node}: {what} must have shape {expected}, found {found}")]
    Shape { node: Box<NodeRef>, what: String, expected: String, found: String },
    #[error("tensor {tensor:?}: dimensions must be non-negative, found {dims:?}")]
    NegativeDim { tensor: String, dims: Vec<i64> },
    #[error("tensor {tensor:?}: dimensions {dims:?} hold more than the limit of {limit} elements")]
    TooLarge { tensor: String, dims: Vec<i64>, limit: u64 },
    #[error("tensor {tensor:?}: {field} holds {found} {unit}, expected {expected} for its dimensions")]
    DataLength { tensor: String, field: &'static str, unit: &'static str, expected: u64, found: u64 },
    #[error("tensor {tensor:?}: element {value} does not fit its type {dtype}")]
    DataRange { tensor: String, dtype: &'static str, value: i64 },
    #[error("tensor {tensor:?}: element type {dtype} is not supported (f32, i32, i8, u8, i64 are)")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("tensor {tensor:?}: data stored outside the file (external data) is not supported")]
    ExternalData { tensor: String },
    #[error("tensor {name:?} is defined twice (second time by {by})")]
    Redefined { name: String, by: String },
    #[error("{node}: {source}")]
    Graph { node: Box<NodeRef>, source: Box<GraphError> },
    #[error("the imported graph is not valid: {0}")]
    Finalize(Box<GraphError>),
}
