//! Exporting compiled operators as a self-contained library: `lib<NAME>.so`, `lib<NAME>.a` and
//! `<NAME>.h`.
//!
//! Each operator is lowered once per ISA level and translated by the same code generator as the
//! JIT (`codegen::translate`, hand-assembled kernels through `define_function_bytes`) into an
//! ELF object per level (`cranelift-object`, position-independent). A generated C file holds the
//! runtime generated code imports (`runtime.c`: parallel-for on a pthread pool, scratch memory,
//! half conversions), CPU detection and the exported functions, which check their DLPack
//! arguments and dispatch to the best level this CPU supports (chosen on first call;
//! `TENSORLIFT_ISA` forces one). The system C compiler links it all; the library needs libc and
//! libpthread only and exports nothing but `<NAME>_`-prefixed functions.
//!
//! The ABI (version `ABI_VERSION`), per operator `OP`:
//! `int32_t NAME_OP(DLTensor *const *args, int32_t nargs)` returns 0 or an `ErrorCode`, with the
//! message in `NAME_last_error()` (per thread); `NAME_manifest()` describes the library as JSON.

mod c_source;
pub mod dlpack;
pub mod harness;
pub mod load;
pub mod operators;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cranelift_module::{Linkage, default_libcall_names};
use cranelift_object::{ObjectBuilder, ObjectModule};
use ir::DType;
use thiserror::Error;

use crate::codegen::{build_object_isa, translate};
use crate::error::CompileError;
use crate::isa::IsaLevel;
use crate::target::OptLevel;

pub use load::{LoadError, LoadedLibrary};

/// Version of the exported ABI (function signatures, error codes, manifest keys).
pub const ABI_VERSION: u32 = 1;

/// The DLPack version whose `DLTensor` the ABI takes.
pub const DLPACK_VERSION: &str = "1.0";

/// The status an exported function returns. Values are part of the ABI.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(i32)]
pub enum ErrorCode {
    Ok = 0,
    /// `nargs` differs from the operator's argument count.
    Nargs = 1,
    /// `args`, an argument, its `data` or its `shape` is NULL.
    NullPointer = 2,
    /// Not a CPU tensor.
    Device = 3,
    /// Wrong dtype code or bits, or lanes other than 1.
    Dtype = 4,
    Ndim = 5,
    Shape = 6,
    /// Strides that are not compact row-major.
    Strides = 7,
    /// `data + byte_offset` overflows.
    ByteOffset = 8,
    /// `data + byte_offset` is not aligned to the element size.
    Alignment = 9,
    /// An output overlaps another argument.
    Overlap = 10,
    /// An element outside the range the compiled code relies on (`Buffer::value_range`).
    ValueRange = 11,
    /// A scratch allocation failed.
    OutOfMemory = 12,
    /// No compiled level runs on this CPU, or `TENSORLIFT_ISA` names one that cannot be used.
    UnsupportedCpu = 13,
    /// Generated code returned a status the runtime does not know (a bug).
    Internal = 14,
    /// An index computed from data (a gather) left its tensor; the message names the tensor.
    IndexOutOfBounds = 15,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::Ok,
        ErrorCode::Nargs,
        ErrorCode::NullPointer,
        ErrorCode::Device,
        ErrorCode::Dtype,
        ErrorCode::Ndim,
        ErrorCode::Shape,
        ErrorCode::Strides,
        ErrorCode::ByteOffset,
        ErrorCode::Alignment,
        ErrorCode::Overlap,
        ErrorCode::ValueRange,
        ErrorCode::OutOfMemory,
        ErrorCode::UnsupportedCpu,
        ErrorCode::Internal,
        ErrorCode::IndexOutOfBounds,
    ];

    /// The suffix of its C constant (`NAME_ERROR_<suffix>`, `NAME_OK`).
    pub fn c_name(self) -> &'static str {
        match self {
            ErrorCode::Ok => "OK",
            ErrorCode::Nargs => "NARGS",
            ErrorCode::NullPointer => "NULL_POINTER",
            ErrorCode::Device => "DEVICE",
            ErrorCode::Dtype => "DTYPE",
            ErrorCode::Ndim => "NDIM",
            ErrorCode::Shape => "SHAPE",
            ErrorCode::Strides => "STRIDES",
            ErrorCode::ByteOffset => "BYTE_OFFSET",
            ErrorCode::Alignment => "ALIGNMENT",
            ErrorCode::Overlap => "OVERLAP",
            ErrorCode::ValueRange => "VALUE_RANGE",
            ErrorCode::OutOfMemory => "OUT_OF_MEMORY",
            ErrorCode::UnsupportedCpu => "UNSUPPORTED_CPU",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::IndexOutOfBounds => "INDEX_OUT_OF_BOUNDS",
        }
    }

    pub fn from_i32(code: i32) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| *c as i32 == code)
    }
}

/// One operator to export: a lowered function (`ir::lower`) per ISA level. Every level's function
/// takes the same parameters (names, dtypes, shapes); declared value ranges may differ.
#[derive(Clone, Debug)]
pub struct Operator {
    /// The exported symbol is `<library name>_<name>`: a C identifier.
    pub name: String,
    pub funcs: BTreeMap<IsaLevel, ir::Func>,
    /// The tuning record the schedule came from, copied into the manifest.
    pub tuning: Option<serde_json::Value>,
}

impl Operator {
    /// The same function on every level in `levels`.
    pub fn portable(name: &str, func: &ir::Func, levels: &[IsaLevel]) -> Operator {
        Operator { name: name.to_string(), funcs: levels.iter().map(|&l| (l, func.clone())).collect(), tuning: None }
    }

    /// `lower(level)` on every level in `levels` (schedules that pick kernels by level).
    pub fn per_level<E>(
        name: &str,
        levels: &[IsaLevel],
        mut lower: impl FnMut(IsaLevel) -> Result<ir::Func, E>,
    ) -> Result<Operator, E> {
        let mut funcs = BTreeMap::new();
        for &level in levels {
            funcs.insert(level, lower(level)?);
        }
        Ok(Operator { name: name.to_string(), funcs, tuning: None })
    }
}

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
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Tool { command: String, status: String, stderr: String },
}

/// Most parameters one operator may take (the runtime's argument array).
pub const MAX_ARGS: usize = 64;

/// What `export` wrote.
#[derive(Clone, Debug)]
pub struct Library {
    pub name: String,
    pub shared: PathBuf,
    pub archive: PathBuf,
    pub header: PathBuf,
    /// The manifest `NAME_manifest()` returns, with `selected_isa` left out (it is chosen at load).
    pub manifest: serde_json::Value,
    pub levels: Vec<IsaLevel>,
    /// Lowered-function translation to objects, and C compilation and linking.
    pub codegen_time: Duration,
    pub link_time: Duration,
}

/// A C identifier.
fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a parameter's value goes, from the manifest's point of view.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParamInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    /// Generated code of some level stores to it.
    pub output: bool,
    /// Per compiled level (in `levels` order), the range that level's code relies on.
    pub ranges: Vec<Option<(i64, i64)>>,
}

/// An operator ready for the C side: parameters and, per level, the entry symbol.
pub(crate) struct OpInfo {
    pub name: String,
    pub params: Vec<ParamInfo>,
    pub entries: Vec<(IsaLevel, String)>,
    /// Per level (as `entries`), the tensors whose gathers are checked at run time, numbered as
    /// the generated code's `STATUS_INDEX_OUT_OF_BOUNDS + n` numbers them.
    pub checked: Vec<Vec<String>>,
    pub tuning: Option<serde_json::Value>,
}

/// A range the code relies on that the dtype does not already guarantee.
fn checked_range(dtype: DType, range: Option<(i64, i64)>) -> Option<(i64, i64)> {
    range.filter(|&(lo, hi)| {
        !dtype.scalar.int_range().is_some_and(|(min, max)| i128::from(lo) <= min && max <= i128::from(hi))
    })
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io { path: path.to_path_buf(), source }
}

/// Writes `lib<NAME>.so`, `lib<NAME>.a` and `<NAME>.h` for `operators` into `out_dir`
/// (created if missing). The same inputs give byte-identical files.
pub fn export(operators: &[Operator], options: &ExportOptions, out_dir: &Path) -> Result<Library, ExportError> {
    let name = &options.name;
    if !is_c_identifier(name) {
        return Err(ExportError::BadName { what: "library name", found: name.clone() });
    }
    let mut levels = options.levels.clone();
    levels.sort();
    levels.dedup();
    if levels.is_empty() {
        return Err(ExportError::NoLevels);
    }
    let asked = levels.iter().map(|l| l.name()).collect::<Vec<_>>().join(",");
    std::fs::create_dir_all(out_dir).map_err(io_error(out_dir))?;
    let build_dir = out_dir.join(format!(".{name}.build"));
    std::fs::create_dir_all(&build_dir).map_err(io_error(&build_dir))?;

    let start = Instant::now();
    let mut ops = Vec::new();
    let mut objects = Vec::new();
    for op in operators {
        if !is_c_identifier(&op.name) {
            return Err(ExportError::BadName { what: "operator name", found: op.name.clone() });
        }
        if ops.iter().any(|o: &OpInfo| o.name == op.name) {
            return Err(ExportError::DuplicateOperator { name: op.name.clone() });
        }
        let mut params: Option<(IsaLevel, Vec<ParamInfo>)> = None;
        let mut entries = Vec::new();
        let mut checked = Vec::new();
        for &level in &levels {
            let func = op.funcs.get(&level).ok_or_else(|| ExportError::MissingLevel {
                op: op.name.clone(),
                level,
                asked: asked.clone(),
            })?;
            let symbol = format!("tlx_{name}__{}__{}", op.name, level.name().replace('-', "_"));
            let (bytes, stored) =
                emit_object(func, &symbol, level, options.opt_level).map_err(|e| e.into_export(&op.name, level))?;
            let file = format!("{}__{}.o", op.name, level.name().replace('-', "_"));
            let path = build_dir.join(&file);
            std::fs::write(&path, bytes).map_err(io_error(&path))?;
            objects.push(file);
            entries.push((level, symbol));
            checked.push(ir::passes::checked_buffers(func).iter().map(|b| b.name().to_string()).collect());
            let this: Vec<ParamInfo> = func
                .params
                .iter()
                .zip(stored)
                .map(|(p, output)| ParamInfo {
                    name: p.name().to_string(),
                    dtype: p.dtype(),
                    shape: p.shape().to_vec(),
                    output,
                    ranges: vec![checked_range(p.dtype(), p.value_range())],
                })
                .collect();
            if let Some(p) = this.iter().find(|p| p.dtype.is_vector()) {
                return Err(ExportError::VectorParameter {
                    op: op.name.clone(),
                    param: p.name.clone(),
                    dtype: p.dtype,
                });
            }
            if this.len() > MAX_ARGS {
                return Err(ExportError::TooManyParameters { op: op.name.clone(), count: this.len(), max: MAX_ARGS });
            }
            match &mut params {
                None => params = Some((level, this)),
                Some((first, known)) => {
                    let same =
                        |a: &ParamInfo, b: &ParamInfo| a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
                    if known.len() != this.len() || known.iter().zip(&this).any(|(a, b)| !same(a, b)) {
                        let show = |ps: &[ParamInfo]| {
                            ps.iter()
                                .map(|p| format!("{}: {}{:?}", p.name, p.dtype, p.shape))
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        return Err(ExportError::ParameterMismatch {
                            op: op.name.clone(),
                            level,
                            first: *first,
                            detail: format!("({}) vs ({})", show(&this), show(known)),
                        });
                    }
                    for (k, p) in known.iter_mut().zip(this) {
                        k.output |= p.output;
                        k.ranges.extend(p.ranges);
                    }
                }
            }
        }
        let params = params.map(|(_, p)| p).unwrap_or_default();
        ops.push(OpInfo { name: op.name.clone(), params, entries, checked, tuning: op.tuning.clone() });
    }
    let codegen_time = start.elapsed();

    let start = Instant::now();
    let manifest = c_source::manifest(name, &levels, &ops);
    let header = out_dir.join(format!("{name}.h"));
    std::fs::write(&header, c_source::header(name, &ops)).map_err(io_error(&header))?;
    let source = format!("{name}_lib.c");
    let source_path = build_dir.join(&source);
    std::fs::write(&source_path, c_source::library_source(name, &levels, &ops, &manifest))
        .map_err(io_error(&source_path))?;
    let version_script = format!("{name}.map");
    let script_path = build_dir.join(&version_script);
    std::fs::write(&script_path, c_source::version_script(name, &ops)).map_err(io_error(&script_path))?;

    let cc = options.cc.clone().or_else(|| std::env::var_os("CC").map(PathBuf::from)).unwrap_or_else(|| "cc".into());
    let run = |program: &Path, args: &[&str]| -> Result<(), ExportError> {
        let command = format!("{} {}", program.display(), args.join(" "));
        let output = Command::new(program).args(args).current_dir(&build_dir).output().map_err(|e| {
            ExportError::Tool { command: command.clone(), status: "not started".into(), stderr: e.to_string() }
        })?;
        if output.status.success() {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            Err(ExportError::Tool { command, status: output.status.to_string(), stderr })
        }
    };
    let lib_object = format!("{name}_lib.o");
    run(&cc, &["-std=c11", "-O3", "-fPIC", "-fvisibility=hidden", "-c", &source, "-o", &lib_object])?;
    // One relocatable object whose hidden symbols (entries, runtime) are made local, so the
    // static archive too exposes only the `NAME_` functions.
    let combined = format!("{name}.o");
    let mut ld_args = vec!["-r", "-o", combined.as_str(), lib_object.as_str()];
    ld_args.extend(objects.iter().map(String::as_str));
    run(Path::new("ld"), &ld_args)?;
    run(Path::new("objcopy"), &["--localize-hidden", &combined])?;
    let so_name = format!("lib{name}.so");
    let version_arg = format!("-Wl,--version-script={version_script}");
    let soname_arg = format!("-Wl,-soname,{so_name}");
    run(
        &cc,
        &[
            "-shared",
            "-o",
            &so_name,
            &combined,
            &version_arg,
            &soname_arg,
            "-Wl,-z,noexecstack",
            "-Wl,-z,relro",
            "-Wl,-z,now",
            // Worker threads sleep inside the library: never unmap it.
            "-Wl,-z,nodelete",
            "-Wl,--build-id=sha1",
            "-lpthread",
        ],
    )?;
    let archive_name = format!("lib{name}.a");
    let _ = std::fs::remove_file(build_dir.join(&archive_name));
    run(Path::new("ar"), &["rcsD", &archive_name, &combined])?;
    let shared = out_dir.join(&so_name);
    let archive = out_dir.join(&archive_name);
    for (file, to) in [(&so_name, &shared), (&archive_name, &archive)] {
        let from = build_dir.join(file);
        std::fs::rename(&from, to).map_err(io_error(&from))?;
    }
    std::fs::remove_dir_all(&build_dir).map_err(io_error(&build_dir))?;
    Ok(Library {
        name: name.clone(),
        shared,
        archive,
        header,
        manifest,
        levels,
        codegen_time,
        link_time: start.elapsed(),
    })
}

/// A translation failure, before the operator's name is known.
enum EmitError {
    Compile(CompileError),
    Object(String),
}

impl EmitError {
    fn into_export(self, op: &str, level: IsaLevel) -> ExportError {
        match self {
            EmitError::Compile(source) => ExportError::Compile { op: op.to_string(), level, source },
            EmitError::Object(message) => ExportError::Object { op: op.to_string(), level, message },
        }
    }
}

/// The ELF object of `func` compiled for `level`, its entry named `symbol` (hidden), and which
/// parameters it stores to.
fn emit_object(
    func: &ir::Func,
    symbol: &str,
    level: IsaLevel,
    opt: OptLevel,
) -> Result<(Vec<u8>, Vec<bool>), EmitError> {
    let isa = build_object_isa(level, opt).map_err(EmitError::Compile)?;
    let builder = ObjectBuilder::new(isa, symbol.as_bytes().to_vec(), default_libcall_names())
        .map_err(|e| EmitError::Object(e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    let mut func = func.clone();
    func.name = symbol.to_string();
    let translation = translate(&mut module, &func, Linkage::Hidden, level).map_err(EmitError::Compile)?;
    let bytes = module.finish().emit().map_err(|e| EmitError::Object(e.to_string()))?;
    Ok((bytes, translation.stored_params))
}
