//! The Cranelift ISA of a `Target`: the x64 flags of each `IsaLevel`, the optimization level's
//! setting, and the settings every generated function shares. The ground floor (`isa`, `target`)
//! stays free of Cranelift; this is where its choices become Cranelift's.

use std::fmt;

use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};

use crate::error::CompileError;
use crate::isa::IsaLevel;
use crate::target::{OptLevel, Target};

/// Cranelift x64 ISA flags of `level` (public so that tests can compile, never run, code for a
/// level the host lacks).
pub fn cranelift_flags(level: IsaLevel) -> Vec<&'static str> {
    let mut flags = vec!["has_sse3", "has_ssse3", "has_sse41", "has_sse42", "has_popcnt"];
    if level >= IsaLevel::Avx2 {
        flags.extend(["has_avx", "has_avx2", "has_fma", "has_bmi1", "has_bmi2", "has_lzcnt"]);
    }
    match level {
        IsaLevel::AvxVnni => flags.push("has_avx_vnni"),
        IsaLevel::Avx512Vnni | IsaLevel::Amx => {
            flags.extend(["has_avx512f", "has_avx512vl", "has_avx512dq", "has_avx512vnni"])
        }
        IsaLevel::Scalar | IsaLevel::Avx2 => {}
    }
    flags
}

/// Cranelift's `opt_level` setting for `opt`.
fn opt_setting(opt: OptLevel) -> &'static str {
    match opt {
        OptLevel::None => "none",
        OptLevel::Speed => "speed",
    }
}

fn isa_error(message: impl fmt::Display) -> CompileError {
    CompileError::Isa { message: message.to_string() }
}

/// Cranelift's shared settings for generated kernels. The verifier runs in debug builds only.
fn shared_flags(opt: OptLevel, extra: &[(&str, &str)]) -> Result<settings::Builder, CompileError> {
    let mut flags = settings::builder();
    let debug = if cfg!(debug_assertions) { "true" } else { "false" };
    for &(name, value) in [
        ("opt_level", opt_setting(opt)),
        ("enable_verifier", debug),
        // Frames with large stack buffers are probed page by page, so they cannot skip over
        // a guard page.
        ("enable_probestack", "true"),
        ("probestack_strategy", "inline"),
    ]
    .iter()
    .chain(extra)
    {
        flags.set(name, value).map_err(isa_error)?;
    }
    Ok(flags)
}

/// The Cranelift ISA of exactly `level` for `triple`, whatever this CPU supports.
fn level_builder(level: IsaLevel, triple: target_lexicon::Triple) -> Result<isa::Builder, CompileError> {
    let mut builder = isa::lookup(triple).map_err(isa_error)?;
    for flag in cranelift_flags(level) {
        builder.enable(flag).map_err(isa_error)?;
    }
    Ok(builder)
}

/// The Cranelift ISA for `target`, and the level kernels may use (`Scalar` off x86-64, where
/// there are none).
pub(crate) fn build_isa(target: Target, opt: OptLevel) -> Result<(OwnedTargetIsa, IsaLevel), CompileError> {
    let flags = shared_flags(opt, &[])?;
    let (builder, level) = match target.forced()? {
        None => {
            // Lowering 128-bit vectors needs SSE4.1 instructions, so below the baseline level
            // Cranelift would fail (or panic) on the first vector operation.
            if cfg!(target_arch = "x86_64") && !IsaLevel::Scalar.is_supported() {
                return Err(CompileError::UnsupportedTarget { requested: IsaLevel::Scalar, available: "none".into() });
            }
            (cranelift_native::builder().map_err(isa_error)?, IsaLevel::detect().unwrap_or(IsaLevel::Scalar))
        }
        Some(level) => {
            level.check_supported()?;
            (level_builder(level, target_lexicon::Triple::host())?, level)
        }
    };
    Ok((builder.finish(settings::Flags::new(flags)).map_err(isa_error)?, level))
}

/// The Cranelift ISA for code of `level` in a shared library (x86-64 Linux, any CPU):
/// position-independent, and without unwind tables, whose absolute relocations in `.eh_frame`
/// would make the library's text relocatable at load.
pub(crate) fn build_object_isa(level: IsaLevel, opt: OptLevel) -> Result<OwnedTargetIsa, CompileError> {
    let flags = shared_flags(opt, &[("is_pic", "true"), ("unwind_info", "false")])?;
    let triple = "x86_64-unknown-linux-gnu".parse().map_err(isa_error)?;
    level_builder(level, triple)?.finish(settings::Flags::new(flags)).map_err(isa_error)
}
