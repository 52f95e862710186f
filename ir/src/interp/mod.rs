//! Reference interpreters: the definition of what every program means.
//!
//! * `te_eval` evaluates tensor-expression definitions directly and knows nothing of schedules.
//! * `loop_eval` runs a loop-IR `Func` at any stage of lowering.
//!
//! Both compile each expression once into closures over slot-indexed variables (`compile`) and
//! compute every operator with `scalar`, so they, the simplifier and the JIT share one definition
//! of arithmetic. `Array` is the host data both interpreters and the tests exchange.

pub mod array;
mod compile;
pub mod loop_eval;
pub mod scalar;
pub mod te_eval;

use std::fmt;

use thiserror::Error;

use crate::dtype::DType;

pub use array::Array;
pub use loop_eval::run_func;
pub use scalar::Scalar;
pub use te_eval::eval_te;

/// Whether a memory access reads or writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Access {
    Read,
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::Write => "write",
        })
    }
}

/// Errors of the reference interpreters. Every message says what was expected and what was found.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum InterpError {
    #[error("tensor {tensor} is read but no input array was supplied for it")]
    MissingInput { tensor: String },
    #[error("tensor {tensor} is a compute, not a placeholder: only placeholders take input arrays")]
    NotAnInput { tensor: String },
    #[error("input tensor {tensor} is supplied more than once")]
    DuplicateInput { tensor: String },
    #[error("{func}: expected {expected} argument arrays, found {found}")]
    ArgumentCount { func: String, expected: usize, found: usize },
    #[error("array for {name}: expected element type {expected}, found {found}")]
    ArgumentDType { name: String, expected: DType, found: DType },
    #[error("array for {name}: expected shape {expected:?}, found {found:?}")]
    ArgumentShape { name: String, expected: Vec<i64>, found: Vec<i64> },
    /// `index` has one entry per dimension, or a single flat element index after
    /// `flatten_buffers`; for a vector access it is the index of the first offending lane.
    #[error("out-of-bounds {access} of {name}: {} is outside shape {shape:?}", describe_index(.index, .shape))]
    OutOfBounds { access: Access, name: String, index: Vec<i64>, shape: Vec<i64> },
    /// A `BoundsCheck` failed: a read whose index depends on data leaves `name`.
    #[error("out-of-bounds read of {name}: an index computed from data is outside its shape")]
    IndexCheck { name: String },
    /// `index` is the row-major position of the first offending element.
    #[error(
        "array for {name}: elements must lie in the declared range {lo}..={hi}, found {found} at flat index {index}"
    )]
    ValueRange { name: String, lo: i64, hi: i64, index: usize, found: i64 },
    /// The program violates an IR invariant (unbound variable, wrong index count, lane mismatch,
    /// misplaced reduction, ...): a bug in whatever produced it.
    #[error("malformed IR: {reason}")]
    Malformed { reason: String },
}

fn describe_index(index: &[i64], shape: &[i64]) -> String {
    if index.len() == 1 && shape.len() != 1 {
        format!("flat index {} ({} elements)", index[0], shape.iter().product::<i64>())
    } else {
        format!("index {index:?}")
    }
}

/// Checks that `array` can stand for a tensor or buffer of the given element type and shape.
pub(crate) fn check_array(name: &str, dtype: DType, shape: &[i64], array: &Array) -> Result<(), InterpError> {
    if array.dtype() != dtype {
        return Err(InterpError::ArgumentDType { name: name.to_string(), expected: dtype, found: array.dtype() });
    }
    if array.shape() != shape {
        return Err(InterpError::ArgumentShape {
            name: name.to_string(),
            expected: shape.to_vec(),
            found: array.shape().to_vec(),
        });
    }
    Ok(())
}
