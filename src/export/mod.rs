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
//!
//! Read `export` top to bottom: it is the whole export, one named step per line. Files, one
//! concern each: `abi` (the ABI's version, limits and `ErrorCode`), `interface`
//! (`ExportOptions`, `Library`, `ExportError`), `operator` (`Operator` and its parameters as the
//! C side sees them), `object` (the objects per operator and level), `c_source` (the C side's
//! text), `files` (the files `export` writes and moves), `link` (the C compiler and binutils);
//! beside the export: `dlpack` (the DLPack types), `load` (loading a library into this process),
//! `harness` (C programs that drive one), `operators` (ready-made operators), `model` (a whole
//! quantized ONNX network as one `NAME_run`, on the engine's plan).

mod abi;
mod c_source;
pub mod dlpack;
mod files;
pub mod harness;
mod interface;
mod link;
pub mod load;
pub mod model;
mod object;
mod operator;
pub mod operators;

use std::path::Path;
use std::time::Instant;

use crate::isa::IsaLevel;

pub use abi::{ABI_VERSION, DLPACK_VERSION, ErrorCode, MAX_ARGS};
pub use interface::{ExportError, ExportOptions, Library};
pub use load::{LoadError, LoadedLibrary};
pub use operator::Operator;

use files::{create_build_dir, move_out, remove_build_dir, write_header, write_library_source, write_version_script};
use link::Toolchain;
pub use model::{ModelExport, ModelLibrary, export_graph, export_model};
use object::emit_objects;
// `c_source` takes the operators as `super::OpInfo`.
use operator::OpInfo;

/// Writes `lib<NAME>.so`, `lib<NAME>.a` and `<NAME>.h` for `operators` into `out_dir`
/// (created if missing). The same inputs give byte-identical files.
pub fn export(operators: &[Operator], options: &ExportOptions, out_dir: &Path) -> Result<Library, ExportError> {
    let name = &options.name;
    check_library_name(name)?;
    let levels = levels_to_compile(&options.levels)?;
    let build_dir = create_build_dir(out_dir, name)?;

    let start = Instant::now();
    let (ops, objects) = emit_objects(operators, name, &levels, options.opt_level, &build_dir)?;
    let parts = Parts { ops, objects, source: String::new(), manifest: serde_json::Map::new() };
    link_library(options, &levels, parts, (out_dir, &build_dir), start.elapsed())
}

/// What a library is made of before the C side is written: its operators as the C side sees
/// them, the objects in the build directory, C text placed after the runtime (functions the
/// operators' entries name) and keys added to the manifest.
pub(crate) struct Parts {
    pub ops: Vec<OpInfo>,
    pub objects: Vec<String>,
    pub source: String,
    pub manifest: serde_json::Map<String, serde_json::Value>,
}

/// The C side of `parts` written, compiled and linked with its objects into the libraries in
/// `out_dir`; the build directory removed.
pub(crate) fn link_library(
    options: &ExportOptions,
    levels: &[IsaLevel],
    parts: Parts,
    (out_dir, build_dir): (&Path, &Path),
    codegen_time: std::time::Duration,
) -> Result<Library, ExportError> {
    let name = &options.name;
    let start = Instant::now();
    let Parts { ops, objects, source: extra, manifest: keys } = parts;
    let mut manifest = c_source::manifest(name, levels, &ops);
    if let serde_json::Value::Object(map) = &mut manifest {
        map.extend(keys);
    }
    let header = write_header(out_dir, name, &ops)?;
    let source = write_library_source(build_dir, name, levels, &ops, &manifest, &extra)?;
    let version_script = write_version_script(build_dir, name, &ops)?;
    let toolchain = Toolchain::new(options.cc.as_deref(), build_dir);
    let lib_object = toolchain.compile_library_source(name, &source)?;
    let combined = toolchain.link_relocatable(name, &lib_object, &objects)?;
    let so_name = toolchain.link_shared(name, &combined, &version_script)?;
    let archive_name = toolchain.archive(name, &combined)?;
    let (shared, archive) = move_out(build_dir, out_dir, &so_name, &archive_name)?;
    remove_build_dir(build_dir)?;
    Ok(Library {
        name: name.clone(),
        shared,
        archive,
        header,
        manifest,
        levels: levels.to_vec(),
        codegen_time,
        link_time: start.elapsed(),
    })
}

/// The library name must be a C identifier: it prefixes every exported symbol.
pub(crate) fn check_library_name(name: &str) -> Result<(), ExportError> {
    if !is_c_identifier(name) {
        return Err(ExportError::BadName { what: "library name", found: name.to_string() });
    }
    Ok(())
}

/// The levels asked, sorted and each once; at least one.
pub(crate) fn levels_to_compile(asked: &[IsaLevel]) -> Result<Vec<IsaLevel>, ExportError> {
    let mut levels = asked.to_vec();
    levels.sort();
    levels.dedup();
    if levels.is_empty() {
        return Err(ExportError::NoLevels);
    }
    Ok(levels)
}

/// A C identifier.
fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
