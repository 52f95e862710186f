//! `LayerError`: what setting up, compiling or checking a table layer can fail with, and
//! `NotInTable`, a layer the table does not have.

use ir::interp::InterpError;
use schedules::auto::AutoError;
use schedules::quant::QuantError;
use schedules::x86_conv::Conv2dInt8Error;
use thiserror::Error;

use crate::build::BuildError;
use crate::error::RuntimeError;

/// A layer that is not one of the table's (it has no position to seed its data).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{found}: expected a layer of the resnet-18 table (R1..R11, FC)")]
pub struct NotInTable {
    pub found: String,
}

/// A quantized operator's specification (`QConvSpec`, `QDenseSpec`) or a call's buffers that
/// do not fit it: what was expected and what was found, naming the operator.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{op}: {what} must be {expected}, found {found}")]
pub struct SpecError {
    pub op: String,
    pub what: String,
    pub expected: String,
    pub found: String,
}

/// Errors of `LayerData` and the quantized operators' compile API
/// (the definitions' errors boxed: they are the large ones).
#[derive(Debug, Error)]
pub enum LayerError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    NotInTable(#[from] NotInTable),
    #[error(transparent)]
    Quant(Box<QuantError>),
    #[error(transparent)]
    Conv(Box<Conv2dInt8Error>),
    #[error(transparent)]
    Auto(Box<AutoError>),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Interp(#[from] InterpError),
}

impl From<QuantError> for LayerError {
    fn from(e: QuantError) -> LayerError {
        LayerError::Quant(Box::new(e))
    }
}

impl From<Conv2dInt8Error> for LayerError {
    fn from(e: Conv2dInt8Error) -> LayerError {
        LayerError::Conv(Box::new(e))
    }
}
