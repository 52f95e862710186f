//! The geometry of window ops (convolution, pooling): validated kernel, strides, pads and
//! dilations per spatial dimension, and the output sizes they give. Shared by shape inference,
//! the partition kinds and the reference, so that all three agree on which input positions a
//! window covers.

/// A validated window over the spatial dimensions: every list has one entry per spatial
/// dimension, strides and dilations ≥ 1, kernels ≥ 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Output sizes round up (`ceil_mode`) instead of down.
    pub ceil_mode: bool,
}

/// `⌊a / b⌋` for `b > 0`.
fn floor_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b)
}

impl Window {
    /// The number of spatial dimensions.
    pub fn rank(&self) -> usize {
        self.kernel.len()
    }

    /// The extent one window spans in spatial dimension `axis`: `(K − 1)·d + 1`.
    pub fn span(&self, axis: usize) -> usize {
        (self.kernel[axis] - 1).saturating_mul(self.dilations[axis]).saturating_add(1)
    }

    /// The output size of spatial dimension `axis` for input size `input`:
    /// `⌊(D + pb + pe − span) / s⌋ + 1`, or `⌈(D + pb + pe − span) / s⌉ + 1` with `ceil_mode`;
    /// `None` when that is below 1.
    pub fn output_size(&self, axis: usize, input: usize) -> Option<usize> {
        let num = input as i128 + self.pads_begin[axis] as i128 + self.pads_end[axis] as i128 - self.span(axis) as i128;
        let s = self.strides[axis] as i128;
        let steps = if self.ceil_mode { -floor_div(-num, s) } else { floor_div(num, s) };
        let out = steps + 1;
        if out >= 1 { usize::try_from(out).ok() } else { None }
    }

    /// The input position of kernel tap `k` for output position `o` in spatial dimension
    /// `axis`: `o·s − pb + k·d` (negative or ≥ D: padding).
    pub fn position(&self, axis: usize, o: usize, k: usize) -> i128 {
        o as i128 * self.strides[axis] as i128 - self.pads_begin[axis] as i128
            + k as i128 * self.dilations[axis] as i128
    }

    /// The number of kernel taps: `K1·..·Kk`.
    pub fn taps(&self) -> usize {
        self.kernel.iter().fold(1usize, |a, &k| a.saturating_mul(k))
    }
}
