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
/// (as `maxps` with the bound second does). The rounding adds and subtracts `1.5 · 2^23`, which
/// rounds to nearest even for every `|v| < 2^22` without a call to the C library.
#[inline(always)]
pub fn round_clamped(x: f32, lo: f32, hi: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let v = if x >= lo { x } else { lo };
    let v = if v <= hi { v } else { hi };
    ((v + MAGIC) - MAGIC) as i32
}
