//! Ground floor: what the CPU can run. The x86-64 feature levels code is generated for
//! (`IsaLevel`), the CPU's features (`has_feature`) and identity (`cpu`), and the hand-assembled
//! kernel families and the level each runs at (`family`).
//!
//! Plain facts, importing nothing of this crate, so that the assemblers (`kernels`), the code
//! generator, the runtime and the errors all name the same levels. Choosing a level (`Target`,
//! `IsaLevel::from_name`, `IsaLevel::check_supported`) can fail, so it lives above the errors, in
//! `target`.

mod amx;
mod cpu;
mod family;

use std::fmt;

pub use amx::release_tiles;
pub use cpu::{CpuId, cpu_id, cpu_name};
pub use family::{DotMethod, KernelVariant, VectorWidth};

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
    /// AVX-512 VNNI plus AMX-TILE and AMX-INT8: int8 GEMM on tiles (`tdpbusd`), zmm elsewhere.
    /// Supported only once the OS permits tile data for the process (`is_supported` asks).
    Amx,
}

impl IsaLevel {
    pub const ALL: [IsaLevel; 5] =
        [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512Vnni, IsaLevel::Amx];

    /// The name `TENSORLIFT_ISA` and the CLI's `--isa` accept.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Scalar => "scalar",
            IsaLevel::Avx2 => "avx2",
            IsaLevel::AvxVnni => "avx-vnni",
            IsaLevel::Avx512Vnni => "avx512-vnni",
            IsaLevel::Amx => "amx",
        }
    }

    /// True if this CPU can run code built for this level: it has every one of `features`
    /// (and, for `Amx`, the OS granted this process tile data: the first call asks).
    pub fn is_supported(self) -> bool {
        self.features().into_iter().all(has_feature) && (self != IsaLevel::Amx || amx::permitted())
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
            IsaLevel::Avx512Vnni | IsaLevel::Amx => {
                f.extend(["avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni"])
            }
            IsaLevel::Scalar | IsaLevel::Avx2 => {}
        }
        if self == IsaLevel::Amx {
            f.extend(["amx-tile", "amx-int8"]);
        }
        f
    }

    /// Whether the level has a `vpdpbusd` (exact on any u8 × i8 operands).
    pub fn has_vnni(self) -> bool {
        self >= IsaLevel::AvxVnni
    }

    /// Whether the level's code uses zmm (AVX-512 F/BW/VL/DQ and VNNI).
    pub fn has_avx512(self) -> bool {
        self >= IsaLevel::Avx512Vnni
    }

    /// The best level this CPU supports; `None` off x86-64 or below SSE4.2.
    pub fn detect() -> Option<IsaLevel> {
        IsaLevel::ALL.into_iter().rev().find(|l| l.is_supported())
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
            "amx-tile" => amx::has_tile(),
            "amx-int8" => amx::has_int8(),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = name;
        false
    }
}
