//! The files `export` writes itself (the tools of `link` write the rest): the build directory in
//! the output directory, the C side's sources in it, the header, and at the end the libraries
//! moved out of it and the directory removed.

use std::path::{Path, PathBuf};

use super::ExportError;
use super::c_source;
use super::interface::io_error;
use super::operator::OpInfo;
use crate::isa::IsaLevel;

/// Creates `out_dir` (if missing) and the build directory `.<name>.build` in it; returns the latter.
pub(super) fn create_build_dir(out_dir: &Path, name: &str) -> Result<PathBuf, ExportError> {
    std::fs::create_dir_all(out_dir).map_err(io_error(out_dir))?;
    let build_dir = out_dir.join(format!(".{name}.build"));
    std::fs::create_dir_all(&build_dir).map_err(io_error(&build_dir))?;
    Ok(build_dir)
}

/// Writes the header `<name>.h` into `out_dir`; returns its path.
pub(super) fn write_header(out_dir: &Path, name: &str, ops: &[OpInfo]) -> Result<PathBuf, ExportError> {
    let header = out_dir.join(format!("{name}.h"));
    std::fs::write(&header, c_source::header(name, ops)).map_err(io_error(&header))?;
    Ok(header)
}

/// Writes the library source `<name>_lib.c` into `build_dir`; returns its name there.
pub(super) fn write_library_source(
    build_dir: &Path,
    name: &str,
    levels: &[IsaLevel],
    ops: &[OpInfo],
    manifest: &serde_json::Value,
    extra: &str,
) -> Result<String, ExportError> {
    let source = format!("{name}_lib.c");
    let source_path = build_dir.join(&source);
    std::fs::write(&source_path, c_source::library_source(name, levels, ops, manifest, extra))
        .map_err(io_error(&source_path))?;
    Ok(source)
}

/// Writes the linker version script `<name>.map` into `build_dir`; returns its name there.
pub(super) fn write_version_script(build_dir: &Path, name: &str, ops: &[OpInfo]) -> Result<String, ExportError> {
    let version_script = format!("{name}.map");
    let script_path = build_dir.join(&version_script);
    std::fs::write(&script_path, c_source::version_script(name, ops)).map_err(io_error(&script_path))?;
    Ok(version_script)
}

/// Moves the shared library `so_name` and the archive `archive_name` from `build_dir` into
/// `out_dir`; returns their new paths.
pub(super) fn move_out(
    build_dir: &Path,
    out_dir: &Path,
    so_name: &str,
    archive_name: &str,
) -> Result<(PathBuf, PathBuf), ExportError> {
    let shared = out_dir.join(so_name);
    let archive = out_dir.join(archive_name);
    for (file, to) in [(so_name, &shared), (archive_name, &archive)] {
        let from = build_dir.join(file);
        std::fs::rename(&from, to).map_err(io_error(&from))?;
    }
    Ok((shared, archive))
}

/// Removes the build directory and what is left in it.
pub(super) fn remove_build_dir(build_dir: &Path) -> Result<(), ExportError> {
    std::fs::remove_dir_all(build_dir).map_err(io_error(build_dir))
}
