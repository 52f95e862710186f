//! Ground floor: choosing what to generate code for. `Target` (the host's own ISA, or an explicit
//! x86-64 feature level), `OptLevel`, and the fallible half of `IsaLevel` (parsing a level's
//! name, checking the CPU supports it), which sits here rather than in `isa` because its errors
//! (`error`) name levels.
//!
//! Free of Cranelift: `codegen::build_isa` turns a target into a Cranelift ISA.

use crate::error::CompileError;
use crate::isa::IsaLevel;

/// Environment variable that forces the level of `Target::Native`.
pub const ISA_ENV: &str = "TENSORLIFT_ISA";

impl IsaLevel {
    /// The level called `name` (see `name`).
    pub fn from_name(name: &str) -> Result<IsaLevel, CompileError> {
        IsaLevel::ALL.into_iter().find(|l| l.name() == name).ok_or_else(|| CompileError::UnknownIsa {
            found: name.to_string(),
            expected: IsaLevel::ALL.map(IsaLevel::name).join("|"),
        })
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
    pub(crate) fn forced(self) -> Result<Option<IsaLevel>, CompileError> {
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
