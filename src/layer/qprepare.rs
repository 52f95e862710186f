//! The weight preparation of a quantized layer in plain Rust (`prepare_weights`): the panels of
//! `ops::pack_conv2d_weights` and the compensation of `ops::compensation_for_gemm` with the i32
//! bias folded in, computed in one pass over the weights instead of by a compiled function under
//! the generic schedule, writing the packed tensor once in place (the weights of a network
//! prepare at memory speed). `tests/it/ort_requant.rs` checks it against that function bit for
//! bit.

use ir::DType;
use schedules::ops::{GemmOperands, conv_row_bytes, source_shift};

use super::error::LayerError;
use crate::runtime::Tensor;

/// Weights prepared for the per-call function.
pub struct PreparedWeights {
    /// `[⌈OC/nr⌉, KH·R/P, nr, P]` of `operands.weight_dtype()` (`P = operands.pack()`).
    pub packed: Tensor,
    /// `i32[OC]`: `(zp_src + shift) · Σ w[oc, ..] − bias[oc]`, wrapping.
    pub compensation: Tensor,
}

/// `weights: i8[OC, IC, KH, KW]` (`dims`, row-major) packed in panels of `nr` channels for
/// `operands` (`pack_conv2d_weights`: `packed[p, ko, j, ki] = w[o, r % IC, k / R, r / IC]` with
/// `o = p·nr + j`, `k = ko·P + ki`, `r = k % R`, zero where `r ≥ KW·IC` or `o ≥ OC`), and the
/// compensation for a `src_dtype` source with zero point `src_zp` minus `bias`. The caller checks
/// that `weights` holds `Π dims` values and `bias` `OC` (`QConvSpec::check`).
pub fn prepare_weights(
    weights: &[i8],
    dims: [i64; 4],
    nr: i64,
    operands: GemmOperands,
    (src_dtype, src_zp): (DType, i32),
    bias: Option<&[i32]>,
) -> Result<PreparedWeights, LayerError> {
    let [oc, ic, kh, kw] = dims.map(|d| d as usize);
    let (nr, row, pack) = (nr as usize, conv_row_bytes(dims[1], dims[3]) as usize, operands.pack() as usize);
    let panels = oc.div_ceil(nr);
    let groups = kh * row / pack;
    let k_len = kh * row;
    let taps = ic * kh * kw;
    let factor = src_zp.wrapping_add(source_shift(src_dtype, operands.source));
    let dtype = operands.weight_dtype();
    let wide = dtype == DType::I16;
    // Written once, in place: the tensor starts zeroed (the padding of rows and panels), and
    // no copy of the weights is made besides one channel's reduction row at a time.
    let mut packed = Tensor::zeros(dtype, &[panels as i64, groups as i64, nr as i64, pack as i64])?;
    let out = packed.as_mut_bytes();
    let mut compensation = Vec::with_capacity(oc);
    // One channel's reduction row (`k = ky·row + kx·ic + i`, zeros where a kernel row is padded
    // to `row`): small enough to stay in cache while its groups of `pack` are spread over the
    // panel (`nr·pack` apart), so the weights are read once in order and the panels written
    // within a few lines at a time.
    let mut channel = vec![0i8; k_len];
    for (o, w) in weights.chunks_exact(taps).enumerate().take(oc) {
        let sum = w.iter().fold(0i32, |s, &w| s.wrapping_add(i32::from(w)));
        compensation.push(sum.wrapping_mul(factor).wrapping_sub(bias.map_or(0, |b| b[o])));
        let reduction: &[i8] = if kh * kw == 1 && row == ic {
            w
        } else {
            for (i, taps) in w.chunks_exact(kh * kw).enumerate() {
                for (ky, line) in taps.chunks_exact(kw).enumerate() {
                    for (kx, &v) in line.iter().enumerate() {
                        channel[ky * row + kx * ic + i] = v;
                    }
                }
            }
            &channel
        };
        let (p, j) = (o / nr, o % nr);
        let panel = &mut out[p * groups * nr * pack * dtype.bytes()..][..groups * nr * pack * dtype.bytes()];
        for (ko, lanes) in reduction.chunks_exact(pack).enumerate() {
            let at = (ko * nr + j) * pack;
            if wide {
                for (d, &v) in panel[2 * at..2 * (at + pack)].chunks_exact_mut(2).zip(lanes) {
                    d.copy_from_slice(&i16::from(v).to_le_bytes());
                }
            } else {
                for (d, &v) in panel[at..at + pack].iter_mut().zip(lanes) {
                    *d = v as u8;
                }
            }
        }
    }
    Ok(PreparedWeights { packed, compensation: Tensor::from_slice(&[oc as i64], &compensation)? })
}
