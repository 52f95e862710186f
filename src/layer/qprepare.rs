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
#[derive(Clone)]
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
    // Panel by panel: its channels' reduction rows (`k = ky·row + kx·ic + i`, zeros where a
    // kernel row is padded to `row`) gathered in a scratch that stays in cache (the weights
    // themselves where they are already in that order), then the panel written in sequence.
    let direct = kh * kw == 1 && row == ic;
    let mut scratch = vec![0i8; if direct { 0 } else { nr * k_len }];
    let panel_bytes = groups * nr * pack * dtype.bytes();
    for (p, panel) in out.chunks_exact_mut(panel_bytes).enumerate() {
        let first = p * nr;
        let channels = nr.min(oc - first);
        for j in 0..channels {
            let o = first + j;
            let w = &weights[o * taps..][..taps];
            let sum = w.iter().fold(0i32, |s, &w| s.wrapping_add(i32::from(w)));
            compensation.push(sum.wrapping_mul(factor).wrapping_sub(bias.map_or(0, |b| b[o])));
            if !direct {
                let rows = &mut scratch[j * k_len..][..k_len];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let taps = w.iter().skip(ky * kw + kx).step_by(kh * kw);
                        for (r, &v) in rows[ky * row + kx * ic..][..ic].iter_mut().zip(taps) {
                            *r = v;
                        }
                    }
                }
            }
        }
        let rows: &[i8] = if direct { &weights[first * taps..][..channels * taps] } else { &scratch };
        let width = pack * dtype.bytes();
        let mut lanes_of: Vec<_> = rows.chunks_exact(k_len).take(channels).map(|r| r.chunks_exact(pack)).collect();
        for group in panel.chunks_exact_mut(nr * width) {
            for (out, lanes) in group.chunks_exact_mut(width).zip(lanes_of.iter_mut()) {
                let values = lanes.next().unwrap_or_default();
                if wide {
                    for (d, &v) in out.chunks_exact_mut(2).zip(values) {
                        d.copy_from_slice(&i16::from(v).to_le_bytes());
                    }
                } else {
                    for (d, &v) in out.iter_mut().zip(values) {
                        *d = v as u8;
                    }
                }
            }
        }
    }
    Ok(PreparedWeights { packed, compensation: Tensor::from_slice(&[oc as i64], &compensation)? })
}
