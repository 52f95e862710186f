//! Target selection: the host's own ISA, or an explicit x86-64 feature level.

use std::fmt;

use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};

use crate::error::CompileError;

/// An x86-64 feature level code can be generated for. Cranelift itself never emits more
/// than 128-bit vectors; the level chooses its instruction encodings and which hand-assembled
/// kernels (`crate::kernels`) a function may call.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum IsaLevel {
    /// SSE4.2 (with SSSE3, SSE4.1, POPCNT), the baseline Cranelift code runs on; no
    /// hand-assembled vector kernels, so tensor intrinsics run their loop-nest fallback.
    Scalar,
    /// AVX2 with FMA, BMI1/2 and LZCNT: VEX-encoded 128-bit code, ymm kernels.
    Avx2,
    /// AVX2 plus AVX-VNNI: VEX `vpdpbusd` on ymm.
    AvxVnni,
    /// AVX2 plus AVX-512 F/BW/VL/DQ and VNNI: `vpdpbusd` on zmm. Does not imply AVX-VNNI
    /// (Cascade Lake and Ice Lake have AVX512-VNNI only), so this level never emits VEX VNNI.
    Avx512Vnni,
}

/// Environment variable that forces the level of `Target::Native`.
pub const ISA_ENV: &str = "TENSORLIFT_ISA";

impl IsaLevel {
    pub const ALL: [IsaLevel; 4] = [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512Vnni];

    /// The name `TENSORLIFT_ISA` and the CLI's `--isa` accept.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Scalar => "scalar",
            IsaLevel::Avx2 => "avx2",
            IsaLevel::AvxVnni => "avx-vnni",
            IsaLevel::Avx512Vnni => "avx512-vnni",
        }
    }

    /// The level called `name` (see `name`).
    pub fn from_name(name: &str) -> Result<IsaLevel, CompileError> {
        IsaLevel::ALL.into_iter().find(|l| l.name() == name).ok_or_else(|| CompileError::UnknownIsa {
            found: name.to_string(),
            expected: IsaLevel::ALL.map(IsaLevel::name).join("|"),
        })
    }

    /// True if this CPU can run code built for this level: it has every one of `features`.
    pub fn is_supported(self) -> bool {
        self.features().into_iter().all(has_feature)
    }

    /// The CPU features code of this level needs, by `std::arch::is_x86_feature_detected!`
    /// name (what `is_supported` tests).
    pub fn features(self) -> Vec<&'static str> {
        let mut f = vec!["ssse3", "sse4.1", "sse4.2", "popcnt"];
        if self >= IsaLevel::Avx2 {
            f.extend(["avx", "avx2", "fma", "bmi1", "bmi2", "lzcnt"]);
        }
        match self {
            IsaLevel::AvxVnni => f.push("avxvnni"),
            IsaLevel::Avx512Vnni => f.extend(["avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni"]),
            IsaLevel::Scalar | IsaLevel::Avx2 => {}
        }
        f
    }

    /// Whether the level has a `vpdpbusd` (exact on any u8 × i8 operands).
    pub fn has_vnni(self) -> bool {
        self >= IsaLevel::AvxVnni
    }

    /// The best level this CPU supports; `None` off x86-64 or below SSE4.2.
    pub fn detect() -> Option<IsaLevel> {
        IsaLevel::ALL.into_iter().rev().find(|l| l.is_supported())
    }

    /// This level if the CPU supports it, else `UnsupportedTarget`.
    pub fn check_supported(self) -> Result<IsaLevel, CompileError> {
        if self.is_supported() {
            Ok(self)
        } else {
            let available = IsaLevel::detect().map_or("none".to_string(), |l| l.to_string());
            Err(CompileError::UnsupportedTarget { requested: self, available })
        }
    }

    /// Cranelift x64 ISA flags of this level.
    pub(crate) fn cranelift_flags(self) -> Vec<&'static str> {
        let mut flags = vec!["has_sse3", "has_ssse3", "has_sse41", "has_sse42", "has_popcnt"];
        if self >= IsaLevel::Avx2 {
            flags.extend(["has_avx", "has_avx2", "has_fma", "has_bmi1", "has_bmi2", "has_lzcnt"]);
        }
        match self {
            IsaLevel::AvxVnni => flags.push("has_avx_vnni"),
            IsaLevel::Avx512Vnni => flags.extend(["has_avx512f", "has_avx512vl", "has_avx512dq", "has_avx512vnni"]),
            IsaLevel::Scalar | IsaLevel::Avx2 => {}
        }
        flags
    }
}

impl fmt::Display for IsaLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this CPU has the feature `name` (an `is_x86_feature_detected!` name among those
/// `IsaLevel::features` lists); unknown names and other architectures: false.
pub fn has_feature(name: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        match name {
            "ssse3" => has!("ssse3"),
            "sse4.1" => has!("sse4.1"),
            "sse4.2" => has!("sse4.2"),
            "popcnt" => has!("popcnt"),
            "avx" => has!("avx"),
            "avx2" => has!("avx2"),
            "fma" => has!("fma"),
            "bmi1" => has!("bmi1"),
            "bmi2" => has!("bmi2"),
            "lzcnt" => has!("lzcnt"),
            "avxvnni" => has!("avxvnni"),
            "avx512f" => has!("avx512f"),
            "avx512bw" => has!("avx512bw"),
            "avx512vl" => has!("avx512vl"),
            "avx512dq" => has!("avx512dq"),
            "avx512vnni" => has!("avx512vnni"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = name;
        false
    }
}

/// Which machine code to generate.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Target {
    /// Every feature of the host CPU (`cranelift_native`) and the best `IsaLevel`'s kernels;
    /// `TENSORLIFT_ISA=<level name>` turns it into `Level(<level>)`.
    #[default]
    Native,
    /// Exactly this level, which must not exceed what the host supports.
    Level(IsaLevel),
}

impl Target {
    /// The level code compiled for this target uses: the explicit one (which the CPU must
    /// support), else the best this CPU has. Schedules that choose a kernel family ask this
    /// before they are compiled.
    pub fn level(self) -> Result<IsaLevel, CompileError> {
        match self.forced()? {
            Some(level) => level.check_supported(),
            None => Ok(IsaLevel::detect().unwrap_or(IsaLevel::Scalar)),
        }
    }

    /// The explicit level: `Level`, or `Native` with `TENSORLIFT_ISA` set.
    fn forced(self) -> Result<Option<IsaLevel>, CompileError> {
        match self {
            Target::Level(level) => Ok(Some(level)),
            Target::Native => match std::env::var(ISA_ENV) {
                Ok(name) => IsaLevel::from_name(name.trim()).map(Some),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(raw)) => Err(CompileError::UnknownIsa {
                    found: raw.to_string_lossy().into_owned(),
                    expected: IsaLevel::ALL.map(IsaLevel::name).join("|"),
                }),
            },
        }
    }
}

/// Cranelift's optimization level for generated kernels.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OptLevel {
    /// No Cranelift mid-end: instructions stay in the order the code generator emits.
    None,
    /// Cranelift's e-graph pass: GVN, LICM, constant folding, alias analysis.
    Speed,
}

impl OptLevel {
    fn setting(self) -> &'static str {
        match self {
            OptLevel::None => "none",
            OptLevel::Speed => "speed",
        }
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
        ("opt_level", opt.setting()),
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
    for flag in level.cranelift_flags() {
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
