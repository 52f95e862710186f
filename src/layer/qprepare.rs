//! The weight preparation of a quantized layer in plain Rust: the panels of
//! `ops::pack_conv2d_weights` and the compensation of `ops::compensation_for_gemm` with the i32
//! bias folded in, computed in one pass over the weights instead of by a compiled function under
//! the generic schedule, writing the packed tensor once in place. `prepare_weights` is the fast
//! path (a network's weights prepare at memory speed): each panel's channels gathered into
//! reduction rows, then interleaved four bytes (one packed group: four i8, or two i16 widened
//! from i8 on the way) at a time; or, where the input channels of one tap fill a group (four
//! i8, two i16), packed straight from the weights. Four channels at a time, entries move through
//! the vector loops of `qprepare_x86`; each byte of the packed tensor is written once, with no
//! temporary between the weights and it but the reduction rows where they are gathered.
//! `prepare_weights_scalar` is its slow twin, element by element as the definition reads;
//! the tests here compare the two bit for bit, and `tests/it/ort_requant.rs` checks the fast one
//! against the compiled definition.

use ir::DType;
use schedules::ops::{GemmOperands, conv_row_bytes, source_shift};

use super::error::LayerError;
use super::qprepare_x86;
use crate::runtime::{Tensor, WeightArena};

/// Weights prepared for the per-call function.
#[derive(Clone)]
pub struct PreparedWeights {
    /// `[⌈OC/nr⌉, K/P, nr, P]` of `operands.weight_dtype()` (`P = operands.pack()`, `K` the
    /// GEMM's reduction length).
    pub packed: Tensor,
    /// `i32[OC]`: `(zp_src + shift) · Σ w[oc, ..] − bias[oc]`, wrapping.
    pub compensation: Tensor,
}

/// `weights: i8[OC, IC, KH, KW]` (`dims`, row-major) packed in panels of `nr` channels for
/// `operands` (`pack_conv2d_weights`: `packed[p, ko, j, ki] = w[o, r % IC, k / R, r / IC]` with
/// `o = p·nr + j`, `k = ko·P + ki`, `r = k % R`, zero where `r ≥ KW·IC`, `k ≥ KH·R` or `o ≥ OC`,
/// for `k < gemm_k`: `KH·R`, or more over gathered rows, `Conv2dInt8Knobs::gemm_k`), and the
/// compensation for a `src_dtype` source with zero point `src_zp` minus `bias`. The caller checks
/// that `weights` holds `Π dims` values and `bias` `OC` (`QConvSpec::check`).
pub fn prepare_weights(
    weights: &[i8],
    dims: [i64; 4],
    nr: i64,
    gemm_k: i64,
    operands: GemmOperands,
    src: (DType, i32),
    bias: Option<&[i32]>,
) -> Result<PreparedWeights, LayerError> {
    prepare_weights_in(None, weights, dims, (nr, gemm_k), operands, src, bias)
}

/// `prepare_weights` with the packed tensor cut from `arena` where one is given (a compile's
/// weights from one reservation, `WeightArena`); the same values either way.
pub fn prepare_weights_in(
    arena: Option<&WeightArena>,
    weights: &[i8],
    dims: [i64; 4],
    (nr, gemm_k): (i64, i64),
    operands: GemmOperands,
    (src_dtype, src_zp): (DType, i32),
    bias: Option<&[i32]>,
) -> Result<PreparedWeights, LayerError> {
    let [oc, ic, kh, kw] = dims.map(|d| d as usize);
    let (nr, row, pack) = (nr as usize, conv_row_bytes(dims[1], dims[3]) as usize, operands.pack() as usize);
    let (k_len, taps, panels) = ((gemm_k as usize).max(kh * row), ic * kh * kw, oc.div_ceil(nr));
    let groups = k_len / pack;
    let dtype = operands.weight_dtype();
    let wide = dtype == DType::I16;
    let shape = [panels as i64, groups as i64, nr as i64, pack as i64];
    let mut packed = match arena {
        Some(arena) => arena.zeros(dtype, &shape)?,
        None => Tensor::zeros(dtype, &shape)?,
    };
    let factor = src_zp.wrapping_add(source_shift(src_dtype, operands.source));
    let mut compensation = vec![0i32; oc];
    // A 1×1 kernel whose channels need no padding is already in reduction order.
    let direct = kh * kw == 1 && row == ic && k_len == row;
    // Entries that never straddle a tap or a kernel row pack straight from each channel's
    // weights, with no reduction rows: four channels of one tap make one i8 entry where `IC` is
    // a multiple of four (`quads`), two one i16 entry where it is even (`pairs`; `row` is a
    // multiple of four either way).
    let quads = !direct && !wide && pack == 4 && ic % 4 == 0 && row % 4 == 0;
    let pairs = !direct && wide && pack == 2 && ic % 2 == 0 && row % 2 == 0;
    // Reduction rows of one panel, `k = ky·row + kx·ic + i`; the bytes that pad a kernel row to
    // `row`, and those past `KH·R`, are never written, so they stay zero.
    let mut scratch = vec![0i8; if direct || quads || pairs { 0 } else { nr * k_len }];
    let offsets = if quads || pairs { tap_offsets([ic, kh, kw], row, nr, pack) } else { Vec::new() };
    // Every (group, channel) entry is four bytes: `pack` i8, or `pack` (two) i16, each i16
    // widened from its i8 as it is written.
    const ENTRY: usize = 4;
    for (p, panel) in packed.as_mut_bytes().chunks_exact_mut(groups * nr * ENTRY).enumerate() {
        let first = p * nr;
        let channels = nr.min(oc - first);
        let block = &weights[first * taps..][..channels * taps];
        // Each channel's compensation while its weights are in cache for the packing below.
        for ((o, c), w) in (first..).zip(&mut compensation[first..first + channels]).zip(block.chunks_exact(taps)) {
            *c = channel_sum(w).wrapping_mul(factor).wrapping_sub(bias.map_or(0, |b| b[o]));
        }
        if quads || pairs {
            let done = if quads {
                qprepare_x86::pack_quads_3x3(block, &offsets, (ic, nr), panel)
            } else {
                qprepare_x86::pack_pairs_3x3(block, &offsets, (ic, nr), panel)
            };
            pack_taps(block, &offsets, (ic, nr), pack, done, panel);
            continue;
        }
        let rows: &[i8] = if direct {
            block
        } else {
            for (w, rows) in block.chunks_exact(taps).zip(scratch.chunks_exact_mut(k_len)) {
                gather_rows(w, [ic, kh, kw], row, rows);
            }
            &scratch[..channels * k_len]
        };
        // Four channels at a time where the vector loop takes them.
        let done = if wide {
            qprepare_x86::interleave_rows_wide(rows, k_len, channels, nr, panel)
        } else {
            qprepare_x86::interleave_rows(rows, k_len, channels, nr, panel)
        };
        // Group by group: `channels` rows read in step (each stays in one cache line for 16 or 32
        // groups), the panel written in sequence. Channels past `OC` stay zero.
        for (g, entries) in panel.chunks_exact_mut(nr * ENTRY).enumerate() {
            let at = g * pack;
            let entries = &mut entries[done * ENTRY..];
            for (entry, r) in entries.chunks_exact_mut(ENTRY).zip(rows[done * k_len..].chunks_exact(k_len)) {
                let v = &r[at..at + pack];
                if wide {
                    entry.copy_from_slice(&wide_entry(v[0], v[1]));
                } else {
                    entry.copy_from_slice(&[v[0] as u8, v[1] as u8, v[2] as u8, v[3] as u8]);
                }
            }
        }
    }
    Ok(PreparedWeights { packed, compensation: Tensor::from_slice(&[oc as i64], &compensation)? })
}

/// The sum of one channel's weights, wrapping: sixteen at a time on x86-64
/// (`qprepare_x86::byte_sum`), the rest one by one.
fn channel_sum(w: &[i8]) -> i32 {
    let (sum, done) = qprepare_x86::byte_sum(w);
    w[done..].iter().fold(sum, |s, &v| s.wrapping_add(i32::from(v)))
}

/// The i16 entry of two i8 values: their i16, little-endian.
fn wide_entry(a: i8, b: i8) -> [u8; 4] {
    let ([a0, a1], [b0, b1]) = (i16::from(a).to_le_bytes(), i16::from(b).to_le_bytes());
    [a0, a1, b0, b1]
}

/// The entries of one panel whose channels' weights are `block` (`[channels, IC, KH, KW]`), each
/// `pack` values of one tap: entry (group `k / pack`, channel `j`) holds `w[j, i..i + pack, ky,
/// kx]` for `k = ky·row + kx·ic + i`, as four i8 (`pack` 4; `IC` and `row` multiples of four)
/// or as two i8 widened to i16 (`pack` 2; `IC` and `row` even), so that an entry never
/// straddles a tap; for the channels from `first` on. `taps[t]` is the byte offset in the panel
/// of tap `t`'s first group (`tap_offsets`). Tap by tap, group by group, so that the panel is
/// written in sequence (each channel's next bytes a few apart).
fn pack_taps(block: &[i8], taps: &[usize], (ic, nr): (usize, usize), pack: usize, first: usize, panel: &mut [u8]) {
    let khkw = taps.len();
    let per_channel = ic * khkw;
    if block.len() <= first * per_channel {
        return;
    }
    for (t, &offset) in taps.iter().enumerate() {
        for q in 0..ic / pack {
            let entries = &mut panel[offset + q * nr * 4..][..nr * 4];
            let at = pack * q * khkw + t;
            for (entry, w) in entries.chunks_exact_mut(4).zip(block.chunks_exact(per_channel)).skip(first) {
                let v = &w[at..at + (pack - 1) * khkw + 1];
                entry.copy_from_slice(&match pack {
                    4 => [v[0] as u8, v[khkw] as u8, v[2 * khkw] as u8, v[3 * khkw] as u8],
                    _ => wide_entry(v[0], v[khkw]),
                });
            }
        }
    }
}

/// For each tap `t = ky·KW + kx`, the byte offset of its first entry (input channels from 0,
/// channel 0) in a panel of `nr` channels of four-byte entries of `pack` values: group
/// `(ky·row + kx·ic) / pack`.
fn tap_offsets([ic, kh, kw]: [usize; 3], row: usize, nr: usize, pack: usize) -> Vec<usize> {
    (0..kh * kw).map(|t| (t / kw * row + t % kw * ic) / pack * nr * 4).collect()
}

/// One channel's weights `w: [IC, KH, KW]` as its reduction row (`rows[ky·row + kx·ic + i] =
/// w[i, ky, kx]`), written tap by tap so that the writes run in sequence.
fn gather_rows(w: &[i8], [ic, kh, kw]: [usize; 3], row: usize, rows: &mut [i8]) {
    let khkw = kh * kw;
    for ky in 0..kh {
        for kx in 0..kw {
            let t = ky * kw + kx;
            let dst = &mut rows[ky * row + kx * ic..][..ic];
            if khkw == 1 {
                dst.copy_from_slice(&w[..ic]);
            } else {
                for (d, taps) in dst.iter_mut().zip(w.chunks_exact(khkw)) {
                    *d = taps[t];
                }
            }
        }
    }
}

/// `prepare_weights`' slow twin: the same result, each packed element computed from the
/// definition's index mapping in turn (what the tests compare the fast path with).
pub fn prepare_weights_scalar(
    weights: &[i8],
    dims: [i64; 4],
    nr: i64,
    gemm_k: i64,
    operands: GemmOperands,
    (src_dtype, src_zp): (DType, i32),
    bias: Option<&[i32]>,
) -> Result<PreparedWeights, LayerError> {
    let [oc, ic, kh, kw] = dims.map(|d| d as usize);
    let (nr, row, pack) = (nr as usize, conv_row_bytes(dims[1], dims[3]) as usize, operands.pack() as usize);
    let (panels, groups) = (oc.div_ceil(nr), (gemm_k as usize).max(kh * row) / pack);
    let dtype = operands.weight_dtype();
    let mut packed = Tensor::zeros(dtype, &[panels as i64, groups as i64, nr as i64, pack as i64])?;
    let size = dtype.bytes();
    let out = packed.as_mut_bytes();
    for p in 0..panels {
        for ko in 0..groups {
            for j in 0..nr {
                for ki in 0..pack {
                    let (o, k) = (p * nr + j, ko * pack + ki);
                    let r = k % row;
                    let value = if o < oc && r < kw * ic && k < kh * row {
                        let (i, y, x) = (r % ic, k / row, r / ic);
                        weights[((o * ic + i) * kh + y) * kw + x]
                    } else {
                        0
                    };
                    let at = (((p * groups + ko) * nr + j) * pack + ki) * size;
                    out[at..at + size].copy_from_slice(&i16::from(value).to_le_bytes()[..size]);
                }
            }
        }
    }
    let factor = src_zp.wrapping_add(source_shift(src_dtype, operands.source));
    let taps = ic * kh * kw;
    let mut compensation = vec![0i32; oc];
    for (o, c) in compensation.iter_mut().enumerate() {
        let mut sum = 0i32;
        for t in 0..taps {
            sum = sum.wrapping_add(i32::from(weights[o * taps + t]));
        }
        *c = sum.wrapping_mul(factor).wrapping_sub(bias.map_or(0, |b| b[o]));
    }
    Ok(PreparedWeights { packed, compensation: Tensor::from_slice(&[oc as i64], &compensation)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random weights over the whole i8 range.
    fn weights(count: usize, seed: u64) -> Vec<i8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..count)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as i8
            })
            .collect()
    }

    /// The fast path against its slow twin over kernel sizes, channel counts that pad rows
    /// and panels, panel widths, every GEMM operand type and source dtype, with and without a
    /// bias: bit for bit; and packed into tensors cut from a `WeightArena`, the same. The shapes
    /// take every layout of both entry sizes: 1×1 kernels in reduction order, 3×3 (and 9×1)
    /// kernels packed straight from the weights with four input channels at a time (and with
    /// two, `IC` ≡ 2 mod 4), gathered rows (odd `IC`), with channels left over past the vector
    /// loops' fours, and reduction lengths with tails of two, four and eight i16 entries.
    #[test]
    fn the_fast_preparation_equals_the_scalar_one() {
        let arena = WeightArena::reserve(1 << 20).unwrap();
        let operands = [
            GemmOperands { source: DType::U8, weights: (-128, 127) },
            GemmOperands { source: DType::I8, weights: (-127, 127) },
            GemmOperands { source: DType::I16, weights: (-128, 127) },
        ];
        let shapes = [
            [8i64, 3, 7, 7],
            [24, 16, 3, 3],
            [40, 24, 1, 1],
            [12, 5, 3, 1],
            [33, 7, 1, 1],
            [5, 1, 2, 3],
            [20, 12, 3, 2],
            [9, 8, 1, 3],
            [30, 12, 3, 3],
            [13, 8, 3, 3],
            [18, 36, 1, 1],
            [7, 20, 1, 1],
            [6, 4, 3, 3],
            [10, 6, 3, 3],
            [7, 3, 3, 3],
            [17, 24, 3, 3],
            [9, 10, 1, 1],
            [11, 16, 9, 1],
        ];
        let mut cases = 0;
        for (n, dims) in shapes.iter().enumerate() {
            let count = dims.iter().product::<i64>() as usize;
            let w = weights(count, n as u64 + 1);
            let bias: Vec<i32> = weights(dims[0] as usize * 4, n as u64 + 7)
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8]))
                .collect();
            // The kernel rows end to end, and rounded up to 64 (gathered rows for AMX tiles).
            let rows = dims[2] * conv_row_bytes(dims[1], dims[3]);
            for (&ops, gemm_k) in operands.iter().flat_map(|o| [(o, rows), (o, (rows + 63) / 64 * 64)]) {
                for nr in [4, 8, 16, 32] {
                    for (src, zp) in [(DType::U8, 131), (DType::I8, -9)] {
                        for b in [None, Some(bias.as_slice())] {
                            let fast = prepare_weights(&w, *dims, nr, gemm_k, ops, (src, zp), b).unwrap();
                            let slow = prepare_weights_scalar(&w, *dims, nr, gemm_k, ops, (src, zp), b).unwrap();
                            let what = format!("{dims:?} nr {nr} K {gemm_k} {ops:?} {src} bias {}", b.is_some());
                            assert_eq!(fast.packed.shape()[1] * ops.pack(), gemm_k, "{what}");
                            assert_eq!(fast.packed.shape(), slow.packed.shape(), "{what}");
                            assert_eq!(fast.packed.dtype(), slow.packed.dtype(), "{what}");
                            assert_eq!(fast.packed.as_bytes(), slow.packed.as_bytes(), "{what}");
                            assert_eq!(fast.compensation.as_bytes(), slow.compensation.as_bytes(), "{what}");
                            let cut =
                                prepare_weights_in(Some(&arena), &w, *dims, (nr, gemm_k), ops, (src, zp), b).unwrap();
                            assert_eq!(cut.packed.shape(), slow.packed.shape(), "{what}, from the arena");
                            assert_eq!(cut.packed.as_bytes(), slow.packed.as_bytes(), "{what}, from the arena");
                            assert_eq!(
                                cut.compensation.as_bytes(),
                                slow.compensation.as_bytes(),
                                "{what}, from the arena"
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, shapes.len() * 3 * 2 * 4 * 2 * 2);
        assert!(arena.used() > 0, "tensors were cut from the arena");
    }
}
