//! The engine's own loops for the partitions that move little data (quantization at the
//! network's edges, pooling, the residual add), on the engine's buffers. Each
//! computes exactly what the partition kind's definition in `graph` says; the graph's reference
//! is their slow twin (it shares no code with them).

/// `fn $name(build: Build, args) -> Option<()>`: the loop `$body` (an `#[inline(always)]` fn
/// of those arguments) compiled for `build`, run; `None` (nothing run) where this CPU lacks the
/// build. The one place the native loops are multiversioned.
macro_rules! native_builds {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:path) => {
        $(#[$meta])*
        $vis fn $name(build: $crate::engine::native::Build, $($arg: $ty),*) -> Option<()> {
            use $crate::engine::native::Build;
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) {
                $body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) {
                $body($($arg),*)
            }
            if !build.available() {
                return None;
            }
            match build {
                Build::Portable => $body($($arg),*),
                // SAFETY: the CPU has the build's features (`available`, checked above).
                #[cfg(target_arch = "x86_64")]
                Build::Avx2 => unsafe { avx2($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                Build::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(not(target_arch = "x86_64"))]
                Build::Avx2 | Build::Avx512 => return None,
            }
            Some(())
        }
    };
}

pub mod add;
pub mod dequantize;
pub mod global_avg_pool;
pub mod max_pool;
pub mod quantize;
pub mod split;

/// A build of a native loop: the same Rust compiled for more vector instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// The baseline the crate is compiled for; `mul_add` is the standard library's.
    Portable,
    /// AVX2 and FMA (`mul_add` one instruction).
    Avx2,
    /// AVX-512 F/BW/VL with AVX2 and FMA (sixteen lanes of f32).
    Avx512,
}

impl Build {
    pub const ALL: [Build; 3] = [Build::Portable, Build::Avx2, Build::Avx512];

    /// Whether this CPU can run the build.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Build::Portable => true,
                Build::Avx2 => has!("avx2") && has!("fma"),
                Build::Avx512 => Build::Avx2.available() && has!("avx512f") && has!("avx512bw") && has!("avx512vl"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Build::Portable
        }
    }

    /// The widest build this CPU runs.
    pub fn best() -> Build {
        Build::ALL.into_iter().rev().find(|b| b.available()).unwrap_or(Build::Portable)
    }
}

/// An 8-bit integer element type of the engine's buffers: values are stored as their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8 {
    U8,
    S8,
}

impl Int8 {
    /// The value of a stored byte.
    #[inline]
    pub fn value(self, byte: u8) -> i32 {
        match self {
            Int8::U8 => byte as i32,
            Int8::S8 => byte as i8 as i32,
        }
    }

    /// The byte storing `v`, saturated to the type's range.
    #[inline]
    pub fn saturate(self, v: i32) -> u8 {
        match self {
            Int8::U8 => v.clamp(0, 255) as u8,
            Int8::S8 => v.clamp(-128, 127) as i8 as u8,
        }
    }

    /// The smallest and largest value.
    pub fn range(self) -> (i32, i32) {
        match self {
            Int8::U8 => (0, 255),
            Int8::S8 => (-128, 127),
        }
    }
}

/// A per-tensor quantization of 8-bit integers: a stored `q` means `f32(q − zero_point) · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Affine {
    pub scale: f32,
    pub zero_point: i32,
    pub ty: Int8,
}

/// `round_half_even(clamp(x, lo, hi))` for integral bounds `|lo|, |hi| < 2^22`; NaN gives `lo`
/// (as `maxps` with the bound second does). Adding `1.5 · 2^23` rounds any `|v| < 2^22` to
/// nearest even and leaves the integer in the low bits of the sum's encoding (onnxruntime's
/// `MLAS_ROUNDING_BIAS_MAGIC`): no conversion instruction, and the loops vectorize.
#[inline(always)]
pub fn round_clamped(x: f32, lo: f32, hi: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let v = if x >= lo { x } else { lo };
    let v = if v <= hi { v } else { hi };
    ((v + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32)
}

#[cfg(test)]
mod tests {
    use super::round_clamped;

    #[test]
    fn rounding_by_the_magic_number_is_round_half_even_within_the_bounds() {
        for i in -3000..=3000 {
            let x = i as f32 / 8.0;
            let want = x.clamp(-200.0, 300.0).round_ties_even() as i32;
            assert_eq!(round_clamped(x, -200.0, 300.0), want, "{x}");
        }
        assert_eq!(round_clamped(f32::NAN, -5.0, 5.0), -5);
        assert_eq!(round_clamped(f32::INFINITY, -5.0, 5.0), 5);
        assert_eq!(round_clamped(2.5, -5.0, 5.0), 2);
        assert_eq!(round_clamped(-2.5, -5.0, 5.0), -2);
    }
}
