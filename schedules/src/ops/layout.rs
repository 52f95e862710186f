//! Activation layouts (`Layout`: NCHW at the API, NHWC where the x86 convolution computes) and
//! the transforms between them and the channel-blocked `NCHW[x]c`.

use ir::Expr;
use ir::expr::select;
use ir::te::{Tensor, compute_vec};

use super::checks::{ceil_div, require_nchw, shape_error};
use crate::quant::QuantError;

/// The order of an activation tensor's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `[N, C, H, W]`: each channel's plane contiguous (the layout of `conv2d_nchw_int8`).
    Nchw,
    /// `[N, H, W, C]`: each pixel's channels contiguous. The x86 convolution computes in it, so
    /// layers chained in NHWC need no transposes between them.
    Nhwc,
}

impl Layout {
    /// The shape of an activation with `n` images of `c` channels of `h × w` pixels.
    pub fn shape(self, [n, c, h, w]: [i64; 4]) -> [i64; 4] {
        match self {
            Layout::Nchw => [n, c, h, w],
            Layout::Nhwc => [n, h, w, c],
        }
    }

    /// `[n, c, h, w]` of a tensor of this layout (`None` unless 4-D).
    pub(super) fn nchw_dims(self, shape: &[i64]) -> Option<[i64; 4]> {
        let &[a, b, c, d] = shape else { return None };
        Some(match self {
            Layout::Nchw => [a, b, c, d],
            Layout::Nhwc => [a, d, b, c],
        })
    }

    /// `(n, c, y, x)` of the index `i` of a tensor in this layout.
    pub fn nchw_of(self, i: &[Expr]) -> [&Expr; 4] {
        match self {
            Layout::Nchw => [&i[0], &i[1], &i[2], &i[3]],
            Layout::Nhwc => [&i[0], &i[3], &i[1], &i[2]],
        }
    }

    /// The index, in this layout, of image `n`, channel `c`, row `y`, column `x`.
    pub fn index(self, n: &Expr, c: &Expr, y: &Expr, x: &Expr) -> [Expr; 4] {
        let [n, c, y, x] = [n, c, y, x].map(Expr::clone);
        match self {
            Layout::Nchw => [n, c, y, x],
            Layout::Nhwc => [n, y, x, c],
        }
    }
}

/// `NCHW → NCHW[x]c`: `out[n, cb, h, w, ci] = src[n, cb·x + ci, h, w]`, shape
/// `[N, ⌈C/x⌉, H, W, x]`; channels past `C` hold `pad_value` (the zero point, for activations).
pub fn nchw_to_nchwc(src: &Tensor, x: i64, pad_value: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("nchw_to_nchwc {name}");
    let [n, c, h, w] = require_nchw(&op, src)?;
    if x < 1 {
        return Err(shape_error(&op, "the channel block", "a positive size", x.to_string()));
    }
    let fits = src.dtype().scalar.int_range().is_none_or(|(lo, hi)| (lo..=hi).contains(&(pad_value as i128)));
    if !fits {
        return Err(shape_error(&op, "the pad value", format!("a value of {}", src.dtype()), pad_value.to_string()));
    }
    let pad = if src.dtype().is_float() {
        Expr::float(src.dtype(), pad_value as f64)
    } else {
        Expr::int(src.dtype(), pad_value)
    };
    Ok(compute_vec(
        vec![n, ceil_div(c, x), h, w, x],
        |i| {
            let ch = &i[1] * x + &i[4];
            select(ch.lt(c), src.at([&i[0], &ch, &i[2], &i[3]]), pad)
        },
        name,
    )?)
}

/// `NCHW[x]c → NCHW` keeping the first `channels` channels: `out[n, c, h, w] = src[n, c / x, h,
/// w, c % x]`. `channels` must need all `⌈channels/x⌉` blocks of `src`.
pub fn nchwc_to_nchw(src: &Tensor, channels: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("nchwc_to_nchw {name}");
    let [n, cb, h, w, x] = *src.shape() else {
        return Err(shape_error(&op, "the source shape", "[N, C/x, H, W, x]", format!("{:?}", src.shape())));
    };
    if channels < 1 || ceil_div(channels, x) != cb {
        let expected = format!("{} to {} (for {cb} blocks of {x})", (cb - 1) * x + 1, cb * x);
        return Err(shape_error(&op, "the channel count", expected, channels.to_string()));
    }
    Ok(compute_vec(vec![n, channels, h, w], |i| src.at([&i[0], &(&i[1] / x), &i[2], &i[3], &(&i[1] % x)]), name)?)
}

/// The activation `src` in layout `from` rewritten in layout `to` (e.g. `NCHW → NHWC`:
/// `out[n, h, w, c] = src[n, c, h, w]`): the transposes between the API layout and the one the
/// x86 convolution computes in.
pub fn convert_layout(src: &Tensor, from: Layout, to: Layout, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("convert_layout {name}");
    let Some(dims) = from.nchw_dims(src.shape()) else {
        let expected = if from == Layout::Nchw { "[N, C, H, W]" } else { "[N, H, W, C]" };
        return Err(shape_error(&op, "the source shape", expected, format!("{:?}", src.shape())));
    };
    Ok(compute_vec(
        to.shape(dims).to_vec(),
        |i| {
            let [n, c, y, x] = to.nchw_of(i);
            src.at_vec(from.index(n, c, y, x).to_vec())
        },
        name,
    )?)
}
