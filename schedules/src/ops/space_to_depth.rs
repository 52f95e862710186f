//! Space to depth: a convolution at stride `s` as one at stride 1 over a source whose `s × s`
//! blocks of pixels are the channels of one pixel (`s²·IC` of them), under the kernel rearranged
//! the same way (`⌈KH/s⌉ × ⌈KW/s⌉` taps, zero where they fall past the original kernel). The
//! stem (7×7 at stride 2 on 3 channels) becomes a 4×4 kernel at stride 1 on 12 channels:
//! kernel rows of 48 contiguous bytes instead of 21, four GEMM segments instead of seven.
//!
//! Channel `c' = (dy·s + dx)·IC + c` of pixel `(Y, X)` is channel `c` of pixel
//! `(Y·s + dy, X·s + dx)`, and tap `(ky, kx)` of `c'` is tap `(ky·s + dy, kx·s + dx)` of `c`.

use ir::Expr;
use ir::expr::{min as index_min, select};
use ir::te::{Tensor, compute_vec};

use super::checks::{ceil_div, require_conv_weights, shape_error};
use crate::quant::QuantError;

/// Whether space to depth changes the convolution: a kernel larger than 1×1 at a stride above 1
/// (a 1×1 kernel subsamples instead, and at stride 1 there is nothing to fold).
pub fn space_to_depth_applies(stride: i64, kh: i64, kw: i64) -> bool {
    stride > 1 && kh * kw > 1
}

/// The kernel `[OC, IC, KH, KW]` at stride `s` after space to depth: `[OC, s²·IC, ⌈KH/s⌉,
/// ⌈KW/s⌉]`.
pub fn space_to_depth_dims([oc, ic, kh, kw]: [i64; 4], s: i64) -> [i64; 4] {
    let s = s.max(1);
    [oc, s * s * ic, ceil_div(kh, s), ceil_div(kw, s)]
}

/// The original channel and kernel offsets `(c, dy, dx)` of channel `c'` after space to depth at
/// stride `s` of `IC` channels.
fn split_channel(c: &Expr, s: i64, ic: i64) -> (Expr, Expr, Expr) {
    (c % ic, c / (s * ic), (c / ic) % s)
}

/// The channel `c'` of pixel `(y, x)` after space to depth at stride `s` of `IC` channels, as
/// the original pixel `(y·s + dy, x·s + dx)` and channel `c`.
pub fn space_to_depth_source(y: &Expr, x: &Expr, c: &Expr, s: i64, ic: i64) -> (Expr, Expr, Expr) {
    let (c, dy, dx) = split_channel(c, s, ic);
    (y * s + dy, x * s + dx, c)
}

/// `weights: i8[OC, IC, KH, KW]` rearranged for space to depth at stride `s`
/// (`space_to_depth_dims`), zero where a tap falls past the kernel. Errors for weights that are
/// not i8 `[OC, IC, KH, KW]` or a stride below 1.
pub fn space_to_depth_weights(weights: &Tensor, s: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("space_to_depth_weights {name}");
    let [oc, ic, kh, kw] = require_conv_weights(&op, weights)?;
    if s < 1 {
        return Err(shape_error(&op, "the stride", "at least 1", s.to_string()));
    }
    let dims = space_to_depth_dims([oc, ic, kh, kw], s);
    Ok(compute_vec(
        dims.to_vec(),
        |i| {
            let (ky, kx, c) = space_to_depth_source(&i[2], &i[3], &i[1], s, ic);
            let inside = ky.clone().lt(kh) & kx.clone().lt(kw);
            // Reads clamped into the kernel; the select discards them past it.
            let (ky, kx) = (index_min(ky, Expr::index(kh - 1)), index_min(kx, Expr::index(kw - 1)));
            select(inside, weights.at([&i[0], &c, &ky, &kx]), Expr::int(weights.dtype(), 0))
        },
        name,
    )?)
}

/// `space_to_depth_weights` on the values of `weights: i8[OC, IC, KH, KW]` (`dims`, row-major,
/// as many values as `dims` say): the rearranged weights, row-major in `space_to_depth_dims`.
pub fn space_to_depth_values(weights: &[i8], dims: [i64; 4], s: i64) -> Vec<i8> {
    let [oc, ic, kh, kw] = dims.map(|d| d.max(0) as usize);
    let [_, ic2, kh2, kw2] = space_to_depth_dims(dims, s).map(|d| d.max(0) as usize);
    let s = s.max(1) as usize;
    let mut out = vec![0i8; oc * ic2 * kh2 * kw2];
    for (o, out) in out.chunks_exact_mut(ic2 * kh2 * kw2).enumerate() {
        for c2 in 0..ic2 {
            let (c, dy, dx) = (c2 % ic, c2 / (s * ic), c2 / ic % s);
            for ky in 0..kh2 {
                for kx in 0..kw2 {
                    let (y, x) = (ky * s + dy, kx * s + dx);
                    if y < kh && x < kw {
                        out[(c2 * kh2 + ky) * kw2 + kx] = weights[((o * ic + c) * kh + y) * kw + x];
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::DType;
    use ir::interp::{Array, eval_te};
    use ir::te::placeholder_vec;

    #[test]
    fn the_stem_becomes_a_4x4_kernel_on_12_channels_and_both_forms_agree() {
        assert_eq!(space_to_depth_dims([64, 3, 7, 7], 2), [64, 12, 4, 4]);
        assert_eq!(space_to_depth_dims([8, 5, 3, 5], 3), [8, 45, 1, 2]);
        assert!(
            space_to_depth_applies(2, 7, 7) && !space_to_depth_applies(2, 1, 1) && !space_to_depth_applies(1, 3, 3)
        );
        for (dims, s) in [([3, 3, 7, 7], 2), ([2, 5, 3, 5], 3), ([2, 1, 5, 3], 2)] {
            let n: i64 = dims.iter().product();
            let values: Vec<i64> = (0..n).map(|v| (v * 37 % 255) - 127).collect();
            let w = placeholder_vec(dims.to_vec(), DType::I8, "w").unwrap();
            let te = space_to_depth_weights(&w, s, "s2d").unwrap();
            let arr = Array::from_i64(DType::I8, &dims, &values);
            let got = eval_te(&[&te], &[(&w, &arr)]).unwrap().remove(0).to_i64_vec();
            let plain: Vec<i8> = values.iter().map(|&v| v as i8).collect();
            let plain: Vec<i64> = space_to_depth_values(&plain, dims, s).into_iter().map(i64::from).collect();
            assert_eq!(got, plain, "{dims:?} s {s}");
            // Every weight appears once, the rest are zeros.
            assert_eq!(plain.iter().sum::<i64>(), values.iter().sum::<i64>(), "{dims:?} s {s}");
            assert_eq!(plain.iter().filter(|&&v| v != 0).count(), values.iter().filter(|&&v| v != 0).count());
        }
        // Tap (1, 2) of channel c' = (1·2 + 0)·3 + 2 (dy 1, dx 0, c 2) is tap (3, 4) of channel 2.
        let dims = [1, 3, 7, 7];
        let values: Vec<i8> = (0..147).map(|v| v as i8).collect();
        let s2d = space_to_depth_values(&values, dims, 2);
        assert_eq!(s2d[(8 * 4 + 1) * 4 + 2], values[(2 * 7 + 3) * 7 + 4]);
    }
}
