//! Weight packing: the layouts the VNNI kernels read int8 weights in, the panels of the direct
//! convolution (`pack_conv2d_weights`, with the kernel-row size `conv_row_bytes` it shares with
//! the source) and the channel-blocked `OIHW[x/4]i[y]o4i`.

use ir::Expr;
use ir::expr::{min as index_min, select};
use ir::te::{Tensor, compute_vec};

use super::checks::{ceil_div, require_conv_weights, shape_error};
use super::gemm_operands::GemmOperands;
use crate::quant::QuantError;

/// The bytes of one kernel row in the x86 layouts: the `KW·IC` source bytes a pixel reads for one
/// kernel row (contiguous channels last), rounded up to a multiple of 4 (one VNNI group).
pub fn conv_row_bytes(ic: i64, kw: i64) -> i64 {
    ceil_div(kw * ic, 4) * 4
}

/// The reduction length of the GEMM of a convolution whose receptive fields are gathered into
/// rows (`SourceRows::Im2col`): the `KH` kernel rows of `R = conv_row_bytes(IC, KW)` bytes end
/// to end, rounded up to a multiple of `align` (4, or 64 to fill an AMX tile's k).
pub fn im2col_k(ic: i64, kh: i64, kw: i64, align: i64) -> i64 {
    ceil_div(kh * conv_row_bytes(ic, kw), align.max(1)) * align.max(1)
}

/// The weight preparation of `conv2d_int8_direct` (run once, when the weights are packed):
/// `weights: i8[OC, IC, KH, KW]` as the VNNI panels `[⌈OC/nr⌉, K/4, nr, 4]` of the GEMM operand
/// `B[k, oc]`, i.e. `packed[p, ko, j, ki] = B[ko·4 + ki, p·nr + j]` as `nn::pack_b_vnni` lays it
/// out, with `k = kh·R + kw·IC + ic`, `R = conv_row_bytes(IC, KW)` and `K = gemm_k` (`KH·R`, or
/// more for gathered rows: `im2col_k`); for an i16
/// `operands.source`, widened to i16 in pairs, `[⌈OC/nr⌉, K/2, nr, 2]`
/// (`packed[p, ko, j, ki] = B[ko·2 + ki, p·nr + j]`). Entries for the `R - KW·IC` bytes that
/// round a kernel row up, for `k ≥ KH·R`, or for `oc ≥ OC`, are 0, so they add nothing to the
/// accumulator. A `gemm_k` below `KH·R` or not a multiple of 4 is a typed error.
pub fn pack_conv2d_weights(
    weights: &Tensor,
    nr: i64,
    operands: GemmOperands,
    gemm_k: i64,
    name: &str,
) -> Result<Tensor, QuantError> {
    let op = format!("pack_conv2d_weights {name}");
    let [oc, ic, kh, kw] = require_conv_weights(&op, weights)?;
    if nr < 1 {
        return Err(shape_error(&op, "the panel width nr", "positive", nr.to_string()));
    }
    let row = conv_row_bytes(ic, kw);
    if gemm_k < kh * row || gemm_k % 4 != 0 {
        let expected = format!("a multiple of 4 from KH·R = {}", kh * row);
        return Err(shape_error(&op, "the GEMM reduction length", expected, gemm_k.to_string()));
    }
    let (pack, dtype) = (operands.pack(), operands.weight_dtype());
    Ok(compute_vec(
        vec![ceil_div(oc, nr), gemm_k / pack, nr, pack],
        |i| {
            let o = &i[0] * nr + &i[2];
            let k = &i[1] * pack + &i[3];
            // Rows past `KH·R` read the last kernel row (clamped into the weights), then zeroed.
            let (ky, r) = (index_min(&k / row, Expr::index(kh - 1)), &k % row);
            let inside = r.lt(kw * ic) & o.lt(oc) & k.lt(kh * row);
            select(inside, weights.at([&o, &(&r % ic), &ky, &(&r / ic)]).cast(dtype), Expr::int(dtype, 0))
        },
        name,
    )?)
}

/// `OIHW → OIHW[x/4]i[y]o4i`, the VNNI-blocked weights: `out[ob, ib, kh, kw, i4, oi, ii] =
/// wei[ob·y + oi, ib·x + i4·4 + ii, kh, kw]`, shape `[⌈O/y⌉, ⌈I/x⌉, KH, KW, x/4, y, 4]`, so one
/// `(kh, kw, i4)` step of a `y`-channel block is `4·y` consecutive bytes (four consecutive input
/// channels per output channel, what `vpdpbusd` reads). Channels past `O` or `I` are zero (they
/// add nothing to the accumulator or the compensation). `x` must be a positive multiple of 4.
pub fn oihw_to_vnni_blocked(weights: &Tensor, x: i64, y: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("oihw_to_vnni_blocked {name}");
    let [o, i_ch, kh, kw] = *weights.shape() else {
        return Err(shape_error(&op, "the weight shape", "[O, I, KH, KW]", format!("{:?}", weights.shape())));
    };
    if x < 4 || x % 4 != 0 || y < 1 {
        return Err(shape_error(
            &op,
            "the blocks (x, y)",
            "x a positive multiple of 4 and y >= 1",
            format!("({x}, {y})"),
        ));
    }
    let zero =
        if weights.dtype().is_float() { Expr::float(weights.dtype(), 0.0) } else { Expr::int(weights.dtype(), 0) };
    Ok(compute_vec(
        vec![ceil_div(o, y), ceil_div(i_ch, x), kh, kw, x / 4, y, 4],
        |i| {
            let oc = &i[0] * y + &i[5];
            let ic = &i[1] * x + &i[4] * 4 + &i[6];
            let inside = oc.lt(o) & ic.lt(i_ch);
            select(inside, weights.at([&oc, &ic, &i[2], &i[3]]), zero)
        },
        name,
    )?)
}
