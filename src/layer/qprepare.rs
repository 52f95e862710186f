//! The weight preparation of a quantized layer in plain Rust (`prepare_weights`): the panels of
//! `ops::pack_conv2d_weights` and the compensation of `ops::compensation_for_gemm` with the i32
//! bias folded in, computed in one pass over the weights instead of by a compiled function under
//! the generic schedule. `tests/it/ort_requant.rs` checks it against that function bit for bit.

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
    // First each channel's reduction row contiguous (`k = ky·row + kx·ic + i`, zeros where a
    // kernel row is padded to `row`), then the packed order `[panel, k / pack, j, k % pack]`
    // written in sequence: both passes touch memory in order or within a few lines, so a large
    // layer prepares at memory speed rather than one cache miss per weight.
    let k_len = kh * row;
    let mut rows = vec![0i8; oc * k_len];
    for o in 0..oc {
        for ky in 0..kh {
            for kx in 0..kw {
                let to = o * k_len + ky * row + kx * ic;
                for (i, r) in rows[to..to + ic].iter_mut().enumerate() {
                    *r = weights[((o * ic + i) * kh + ky) * kw + kx];
                }
            }
        }
    }
    let mut packed = vec![0i8; panels * groups * nr * pack];
    for (block, out) in packed.chunks_exact_mut(nr * pack).enumerate() {
        let (p, ko) = (block / groups, block % groups);
        for (j, lanes) in out.chunks_exact_mut(pack).enumerate() {
            let o = p * nr + j;
            if o < oc {
                lanes.copy_from_slice(&rows[o * k_len + ko * pack..][..pack]);
            }
        }
    }
    let shape = [panels as i64, groups as i64, nr as i64, pack as i64];
    let packed = if operands.weight_dtype() == DType::I16 {
        Tensor::from_slice(&shape, &packed.iter().map(|&w| i16::from(w)).collect::<Vec<i16>>())?
    } else {
        Tensor::from_slice(&shape, &packed)?
    };
    let factor = src_zp.wrapping_add(source_shift(src_dtype, operands.source));
    let taps = ic * kh * kw;
    let compensation: Vec<i32> = (0..oc)
        .map(|o| {
            let sum = weights[o * taps..(o + 1) * taps].iter().fold(0i32, |s, &w| s.wrapping_add(i32::from(w)));
            sum.wrapping_mul(factor).wrapping_sub(bias.map_or(0, |b| b[o]))
        })
        .collect();
    Ok(PreparedWeights { packed, compensation: Tensor::from_slice(&[oc as i64], &compensation)? })
}
