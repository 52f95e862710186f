//! The engine's own loops for the partitions that move little data (quantization at the
//! network's edges, pooling, the residual add), on the engine's buffers. Each
//! computes exactly what the partition kind's definition in `graph` says; the graph's reference
//! is their slow twin (it shares no code with them).

pub mod add;
pub mod dequantize;
pub mod global_avg_pool;
pub mod max_pool;
pub mod quantize;

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
