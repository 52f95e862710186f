//! What `export` is asked (`ExportOptions`), what it returns (`Library`) and how it fails
//! (`ExportError`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use ir::DType;
use thiserror::Error;

use crate::error::CompileError;
use crate::isa::IsaLevel;
use crate::target::OptLevel;

/// How to build a library.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// `lib<name>.so`, `<name>.h`, and the prefix of every exported symbol: a C identifier.
    pub name: String,
    /// The levels compiled; calls dispatch to the best one the CPU supports.
    pub levels: Vec<IsaLevel>,
    pub opt_level: OptLevel,
    /// The C compiler (default: `$CC`, else `cc`).
    pub cc: Option<PathBuf>,
}

impl ExportOptions {
    /// Every level, the JIT's optimization level.
    pub fn new(name: &str) -> ExportOptions {
        ExportOptions {
            name: name.to_string(),
            levels: IsaLevel::ALL.to_vec(),
            opt_level: crate::CompileOptions::DEFAULT_OPT_LEVEL,
            cc: None,
        }
    }
}

/// Errors from `export`.
#[derive(Debug, Error)]
pub enum ExportError {
    #[error("{what} {found:?}: expected a C identifier ([A-Za-z_][A-Za-z0-9_]*)")]
    BadName { what: &'static str, found: String },
    #[error("operator {name:?} is exported twice")]
    DuplicateOperator { name: String },
    #[error("no ISA level to compile: expected at least one")]
    NoLevels,
    #[error("operator {op}: no function for level {level} (levels asked: {asked})")]
    MissingLevel { op: String, level: IsaLevel, asked: String },
    #[error("operator {op}: the {level} function's parameters differ from the {first} function's: {detail}")]
    ParameterMismatch { op: String, level: IsaLevel, first: IsaLevel, detail: String },
    #[error("operator {op}: parameter {param} has dtype {dtype}, which the ABI cannot pass (expected a scalar dtype)")]
    VectorParameter { op: String, param: String, dtype: DType },
    #[error("operator {op}: {count} parameters, the ABI takes at most {max}")]
    TooManyParameters { op: String, count: usize, max: usize },
    #[error("operator {op} at level {level}: {source}")]
    Compile { op: String, level: IsaLevel, source: CompileError },
    #[error("operator {op} at level {level}: writing the object failed: {message}")]
    Object { op: String, level: IsaLevel, message: String },
    #[error("thread counts {found:?}: expected one or more, each from 1 to {max}")]
    Threads { found: Vec<usize>, max: usize },
    #[error("{path}: {message}")]
    Model { path: PathBuf, message: String },
    #[error(
        "partition {partition} ({kind}): {why}; a library runs only the partitions the engine compiles or runs \
         natively, not those it leaves to the graph's reference"
    )]
    UnsupportedPartition { partition: String, kind: String, why: String },
    #[error("{what}: expected {expected}, found {found}")]
    UnsupportedModel { what: String, expected: String, found: String },
    #[error("partition {partition} at level {level}: {message}")]
    Partition { partition: String, level: IsaLevel, message: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Tool { command: String, status: String, stderr: String },
}

/// What `export` wrote.
#[derive(Clone, Debug)]
pub struct Library {
    pub name: String,
    pub shared: PathBuf,
    pub archive: PathBuf,
    pub header: PathBuf,
    /// The manifest `NAME_manifest()` returns, with `selected_isa` and `pool_threads` left out (they
    /// are known where the library runs).
    pub manifest: serde_json::Value,
    pub levels: Vec<IsaLevel>,
    /// Lowered-function translation to objects, and C compilation and linking.
    pub codegen_time: Duration,
    pub link_time: Duration,
}

/// The `ExportError` of an I/O failure on `path`.
pub(super) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io { path: path.to_path_buf(), source }
}
