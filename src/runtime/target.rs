//! Target selection: the host's own ISA, or an explicit x86-64 feature level.

use std::fmt;

use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};

use crate::error::CompileError;

/// An x86-64 feature level code can be generated for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum IsaLevel {
    /// SSE4.2 (with SSSE3, SSE4.1, POPCNT): the baseline every kernel runs on.
    Sse42,
    /// AVX2 with FMA, BMI1/2 and LZCNT: VEX-encoded 128-bit code.
    Avx2,
    /// AVX-512 F/BW/VL/DQ with VNNI, which unlocks `vpdpbusd` for int8 dot products.
    Avx512Vnni,
}

impl IsaLevel {
    pub const ALL: [IsaLevel; 3] = [IsaLevel::Sse42, IsaLevel::Avx2, IsaLevel::Avx512Vnni];

    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Sse42 => "sse4.2",
            IsaLevel::Avx2 => "avx2",
            IsaLevel::Avx512Vnni => "avx512-vnni",
        }
    }

    /// True if this CPU can run code built for this level.
    pub fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let sse42 = has!("ssse3") && has!("sse4.1") && has!("sse4.2") && has!("popcnt");
            let avx2 =
                sse42 && has!("avx") && has!("avx2") && has!("fma") && has!("bmi1") && has!("bmi2") && has!("lzcnt");
            match self {
                IsaLevel::Sse42 => sse42,
                IsaLevel::Avx2 => avx2,
                IsaLevel::Avx512Vnni => {
                    avx2 && has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512vl")
                        && has!("avx512dq")
                        && has!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// The best level this CPU supports; `None` off x86-64 or below SSE4.2.
    pub fn detect() -> Option<IsaLevel> {
        IsaLevel::ALL.into_iter().rev().find(|l| l.is_supported())
    }

    /// Cranelift x64 ISA flags of this level (each level includes the ones below).
    fn cranelift_flags(self) -> Vec<&'static str> {
        let mut flags = vec!["has_sse3", "has_ssse3", "has_sse41", "has_sse42", "has_popcnt"];
        if self >= IsaLevel::Avx2 {
            flags.extend(["has_avx", "has_avx2", "has_fma", "has_bmi1", "has_bmi2", "has_lzcnt"]);
        }
        if self >= IsaLevel::Avx512Vnni {
            flags.extend(["has_avx512f", "has_avx512vl", "has_avx512dq", "has_avx512vnni"]);
        }
        flags
    }
}

impl fmt::Display for IsaLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which machine code to generate.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Target {
    /// Every feature of the host CPU (`cranelift_native`).
    #[default]
    Native,
    /// Exactly this level, which must not exceed what the host supports.
    Level(IsaLevel),
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

/// The Cranelift ISA for `target`. The verifier runs in debug builds only.
pub(crate) fn build_isa(target: Target, opt: OptLevel) -> Result<OwnedTargetIsa, CompileError> {
    let mut flags = settings::builder();
    let debug = if cfg!(debug_assertions) { "true" } else { "false" };
    for (name, value) in [
        ("opt_level", opt.setting()),
        ("enable_verifier", debug),
        // Frames with large stack buffers are probed page by page, so they cannot skip over
        // a guard page.
        ("enable_probestack", "true"),
        ("probestack_strategy", "inline"),
    ] {
        flags.set(name, value).map_err(isa_error)?;
    }
    let builder = match target {
        Target::Native => {
            // Lowering 128-bit vectors needs SSE4.1 instructions, so below the baseline level
            // Cranelift would fail (or panic) on the first vector operation.
            if cfg!(target_arch = "x86_64") && !IsaLevel::Sse42.is_supported() {
                return Err(CompileError::UnsupportedTarget { requested: IsaLevel::Sse42, available: "none".into() });
            }
            cranelift_native::builder().map_err(isa_error)?
        }
        Target::Level(level) => {
            if !level.is_supported() {
                let available = IsaLevel::detect().map_or("none".to_string(), |l| l.to_string());
                return Err(CompileError::UnsupportedTarget { requested: level, available });
            }
            let mut builder = isa::lookup(target_lexicon::Triple::host()).map_err(isa_error)?;
            for flag in level.cranelift_flags() {
                builder.enable(flag).map_err(isa_error)?;
            }
            builder
        }
    };
    builder.finish(settings::Flags::new(flags)).map_err(isa_error)
}
