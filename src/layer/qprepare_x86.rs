//! The vector loops of `qprepare::prepare_weights` on x86-64: panel entries (four bytes of one
//! channel: four i8, or two i16 as their bytes) moved four channels at a time through 4×4
//! transposes of 32-bit words, so that every store writes sixteen bytes. `interleave_rows` and
//! `interleave_rows_wide` (i16 entries, widened from i8 in registers) take reduction rows (SSE2,
//! the x86-64 baseline); `pack_quads_3x3` and `pack_pairs_3x3` (i16 entries) take a 3×3
//! kernel's weights as they come (SSSE3 byte shuffles, where the CPU has them). Each does the
//! channels it can in fours and returns how many; the caller's scalar loops do the rest. `qprepare`'s tests compare
//! the result with `prepare_weights_scalar`, bit for bit.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128i, _mm_add_epi64, _mm_cvtsi128_si64, _mm_loadl_epi64, _mm_loadu_si128, _mm_or_si128, _mm_sad_epu8,
    _mm_set1_epi8, _mm_setzero_si128, _mm_shuffle_epi8, _mm_srai_epi16, _mm_storeu_si128, _mm_unpackhi_epi8,
    _mm_unpackhi_epi32, _mm_unpackhi_epi64, _mm_unpacklo_epi8, _mm_unpacklo_epi32, _mm_unpacklo_epi64, _mm_xor_si128,
};

/// Writes the four-byte entries of the first channels of a panel of `nr` channels from their reduction
/// rows (`rows`: `channels` rows of `k_len` bytes, `k_len` a multiple of four): entry (group
/// `g`, channel `j`) at byte `(g·nr + j)·4` of `panel` holds `rows[j][4g..4g + 4]`. Returns the
/// channels written (a multiple of four; none off x86-64).
pub(super) fn interleave_rows(rows: &[i8], k_len: usize, channels: usize, nr: usize, panel: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let done = channels / 4 * 4;
        let groups = k_len / 4;
        assert!(rows.len() >= channels * k_len && panel.len() >= groups * nr * 4 && done <= nr);
        for g0 in (0..groups / 4 * 4).step_by(4) {
            for j0 in (0..done).step_by(4) {
                // SAFETY: SSE2 is part of x86-64. Each load reads 16 bytes at `4·g0` of a row,
                // `4·g0 + 16 ≤ k_len`; each store writes 16 bytes at `((g0 + i)·nr + j0)·4`,
                // `j0 + 4 ≤ nr` and `g0 + i < groups` (the assert above bounds both slices).
                unsafe {
                    let load = |j: usize| _mm_loadu_si128(rows[(j0 + j) * k_len + 4 * g0..][..16].as_ptr().cast());
                    let cols = transpose4([load(0), load(1), load(2), load(3)]);
                    for (i, col) in cols.into_iter().enumerate() {
                        _mm_storeu_si128(panel[((g0 + i) * nr + j0) * 4..][..16].as_mut_ptr().cast(), col);
                    }
                }
            }
        }
        // The last groups (fewer than four) of the channels done above.
        for g in groups / 4 * 4..groups {
            for j in 0..done {
                let v = &rows[j * k_len + 4 * g..][..4];
                panel[(g * nr + j) * 4..][..4].copy_from_slice(&[v[0] as u8, v[1] as u8, v[2] as u8, v[3] as u8]);
            }
        }
        done
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (rows, k_len, channels, nr, panel);
        0
    }
}

/// `interleave_rows` for i16 entries: entry (group `g`, channel `j`) at byte `(g·nr + j)·4` of
/// `panel` holds `rows[j][2g..2g + 2]` widened to i16 (`rows`: `channels` rows of `k_len` i8,
/// `k_len` a multiple of four). Returns the channels written (a multiple of four; none off
/// x86-64).
pub(super) fn interleave_rows_wide(rows: &[i8], k_len: usize, channels: usize, nr: usize, panel: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let done = channels / 4 * 4;
        let groups = k_len / 2;
        assert!(rows.len() >= channels * k_len && panel.len() >= groups * nr * 4 && done <= nr);
        // Eight groups (sixteen bytes of each row) at a time, then four (eight bytes).
        let (eights, fours) = (groups / 8 * 8, groups / 4 * 4);
        for g0 in (0..eights).step_by(8) {
            for j0 in (0..done).step_by(4) {
                // SAFETY: SSE2 is part of x86-64. Each load reads 16 bytes at `2·g0` of a row,
                // `2·g0 + 16 ≤ k_len`; each store writes 16 bytes at `((g0 + i)·nr + j0)·4`,
                // `j0 + 4 ≤ nr` and `g0 + i < groups` (the assert above bounds both slices).
                unsafe {
                    let load = |j: usize| _mm_loadu_si128(rows[(j0 + j) * k_len + 2 * g0..][..16].as_ptr().cast());
                    let v = [load(0), load(1), load(2), load(3)];
                    let lo = transpose4(v.map(widen_lo));
                    let hi = transpose4(v.map(widen_hi));
                    for (i, col) in lo.into_iter().chain(hi).enumerate() {
                        _mm_storeu_si128(panel[((g0 + i) * nr + j0) * 4..][..16].as_mut_ptr().cast(), col);
                    }
                }
            }
        }
        for g0 in (eights..fours).step_by(4) {
            for j0 in (0..done).step_by(4) {
                // SAFETY: as above, each load reading 8 bytes at `2·g0`, `2·g0 + 8 ≤ k_len`.
                unsafe {
                    let load = |j: usize| _mm_loadl_epi64(rows[(j0 + j) * k_len + 2 * g0..][..8].as_ptr().cast());
                    let cols = transpose4([load(0), load(1), load(2), load(3)].map(widen_lo));
                    for (i, col) in cols.into_iter().enumerate() {
                        _mm_storeu_si128(panel[((g0 + i) * nr + j0) * 4..][..16].as_mut_ptr().cast(), col);
                    }
                }
            }
        }
        // The last groups (fewer than four) of the channels done above.
        for g in fours..groups {
            for j in 0..done {
                let v = &rows[j * k_len + 2 * g..][..2];
                let ([a0, a1], [b0, b1]) = (i16::from(v[0]).to_le_bytes(), i16::from(v[1]).to_le_bytes());
                panel[(g * nr + j) * 4..][..4].copy_from_slice(&[a0, a1, b0, b1]);
            }
        }
        done
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (rows, k_len, channels, nr, panel);
        0
    }
}

/// The sum of the first bytes of `w` (as i8, wrapping), sixteen at a time: each read as the u8
/// `w + 128` and summed by sums of absolute differences from zero, less `128·count`, modulo
/// 2^32. Returns the sum and how many bytes it covers (a multiple of sixteen; none off x86-64).
pub(super) fn byte_sum(w: &[i8]) -> (i32, usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let done = w.len() / 16 * 16;
        // SAFETY: SSE2 is part of x86-64; each load reads a slice of 16 bytes.
        let biased = unsafe {
            let (flip, zero) = (_mm_set1_epi8(-128), _mm_setzero_si128());
            let mut acc = zero;
            for c in w[..done].chunks_exact(16) {
                let v = _mm_xor_si128(_mm_loadu_si128(c.as_ptr().cast()), flip);
                acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
            }
            _mm_cvtsi128_si64(acc).wrapping_add(_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)))
        };
        ((biased as i32).wrapping_sub((done as i32).wrapping_mul(128)), done)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = w;
        (0, 0)
    }
}

/// The i8 entries of the first channels of a panel of `nr` channels whose weights are `block`
/// (`[channels, IC, 3, 3]`, `IC` a multiple of four), as `qprepare::pack_taps` writes them (`pack` 4):
/// entry (group of input channels `q`, channel `j`) of tap `t` at byte `taps[t] + (q·nr + j)·4`
/// holds `w[j, 4q..4q + 4, t / 3, t % 3]`. Returns the channels written (a multiple of four;
/// none where the CPU lacks SSSE3).
pub(super) fn pack_quads_3x3(block: &[i8], taps: &[usize], (ic, nr): (usize, usize), panel: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("ssse3") && taps.len() == 9 {
            // SAFETY: the CPU has SSSE3 (checked above).
            return unsafe { pack_quads_3x3_ssse3(block, taps, (ic, nr), panel) };
        }
    }
    let _ = (block, taps, ic, nr, panel);
    0
}

/// The i16 entries of the first channels of a panel of `nr` channels whose weights are `block`
/// (`[channels, IC, 3, 3]`, `IC` a multiple of four), as `qprepare::pack_taps` writes them (`pack` 2):
/// entry (pair of input channels `q`, channel `j`) of tap `t` at byte `taps[t] + (q·nr + j)·4`
/// holds `w[j, 2q..2q + 2, t / 3, t % 3]` widened to i16. Returns the channels written (a
/// multiple of four; none where the CPU lacks SSSE3).
pub(super) fn pack_pairs_3x3(block: &[i8], taps: &[usize], (ic, nr): (usize, usize), panel: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("ssse3") && taps.len() == 9 && ic % 4 == 0 {
            // SAFETY: the CPU has SSSE3 (checked above).
            return unsafe { pack_pairs_3x3_ssse3(block, taps, (ic, nr), panel) };
        }
    }
    let _ = (block, taps, ic, nr, panel);
    0
}

/// The shuffle masks of one channel's 36 weights of four input channels (`w[i, t]` at byte
/// `9i + t`) read as four overlapping 16-byte loads, at bytes 0, 16 (`lo`, `hi`: taps 0–3), 4
/// and 20 (`mid`, `end`: taps 4–8): each mask picks, for output byte `4t' + i` (tap `t'` of the
/// output vector, input channel `i`), the load's byte at `9i + t`, or zero (`-128`) where
/// another load has it.
#[cfg(target_arch = "x86_64")]
fn masks() -> [[i8; 16]; 6] {
    // Output vector (taps `first..first + 4`, at most tap 8) from a load at `at`.
    let mask = |first: usize, at: usize| -> [i8; 16] {
        std::array::from_fn(|o| {
            let (t, i) = (first + o / 4, o % 4);
            let p = 9 * i + t;
            if t < 9 && (at..at + 16).contains(&p) { (p - at) as i8 } else { -128 }
        })
    };
    [mask(0, 0), mask(0, 16), mask(4, 4), mask(4, 20), mask(8, 4), mask(8, 20)]
}

/// 4×4 transpose of 32-bit words: `rows[r]` word `c` becomes result `c` word `r`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose4([r0, r1, r2, r3]: [__m128i; 4]) -> [__m128i; 4] {
    // SAFETY: SSE2 is part of x86-64; register operations only.
    unsafe {
        let (t0, t1) = (_mm_unpacklo_epi32(r0, r1), _mm_unpacklo_epi32(r2, r3));
        let (t2, t3) = (_mm_unpackhi_epi32(r0, r1), _mm_unpackhi_epi32(r2, r3));
        [_mm_unpacklo_epi64(t0, t1), _mm_unpackhi_epi64(t0, t1), _mm_unpacklo_epi64(t2, t3), _mm_unpackhi_epi64(t2, t3)]
    }
}

/// The low eight i8 of `v` as eight i16 (each byte doubled, then shifted down keeping its sign).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn widen_lo(v: __m128i) -> __m128i {
    // SAFETY: SSE2 is part of x86-64; register operations only.
    unsafe { _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8) }
}

/// The high eight i8 of `v` as eight i16.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn widen_hi(v: __m128i) -> __m128i {
    // SAFETY: SSE2 is part of x86-64; register operations only.
    unsafe { _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8) }
}

/// For each of the four channels `j0..j0 + 4` of `block` (`per_channel` weights each), its 36
/// weights of input channels `4q..4q + 4` as entries of four input channels of one tap: taps
/// 0–3, taps 4–7, and tap 8 in word 0 (the shuffles of `masks`, loaded).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
fn gather_taps(block: &[i8], per_channel: usize, (q, j0): (usize, usize), masks: &[__m128i; 6]) -> [[__m128i; 4]; 3] {
    let [a_lo, a_hi, b_mid, b_end, c_mid, c_end] = *masks;
    let [mut a, mut b, mut c] = [[_mm_setzero_si128(); 4]; 3];
    for j in 0..4 {
        let w = &block[(j0 + j) * per_channel + 36 * q..][..36];
        // SAFETY: each load reads the 16 bytes of a slice of 16 bytes.
        let load = |at: usize| unsafe { _mm_loadu_si128(w[at..at + 16].as_ptr().cast()) };
        let (lo, hi, mid, end) = (load(0), load(16), load(4), load(20));
        a[j] = _mm_or_si128(_mm_shuffle_epi8(lo, a_lo), _mm_shuffle_epi8(hi, a_hi));
        b[j] = _mm_or_si128(_mm_shuffle_epi8(mid, b_mid), _mm_shuffle_epi8(end, b_end));
        c[j] = _mm_or_si128(_mm_shuffle_epi8(mid, c_mid), _mm_shuffle_epi8(end, c_end));
    }
    [a, b, c]
}

/// `pack_quads_3x3` on SSSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn pack_quads_3x3_ssse3(block: &[i8], taps: &[usize], (ic, nr): (usize, usize), panel: &mut [u8]) -> usize {
    let per_channel = ic * 9;
    let channels = (block.len() / per_channel).min(nr);
    let done = channels / 4 * 4;
    // SAFETY (every load and store below): SSSE3 is enabled here; each reads or writes the 16
    // bytes of a slice of 16 bytes.
    let masks = masks().map(|m| unsafe { _mm_loadu_si128(m.as_ptr().cast()) });
    for q in 0..ic / 4 {
        for j0 in (0..done).step_by(4) {
            let [a, b, c] = gather_taps(block, per_channel, (q, j0), &masks);
            let [c0, ..] = transpose4(c);
            let cols = transpose4(a).into_iter().chain(transpose4(b)).chain([c0]);
            for (t, col) in cols.enumerate() {
                let at = taps[t] + (q * nr + j0) * 4;
                unsafe { _mm_storeu_si128(panel[at..at + 16].as_mut_ptr().cast(), col) };
            }
        }
    }
    done
}

/// `pack_pairs_3x3` on SSSE3: the entries of `pack_quads_3x3_ssse3`'s shuffles (four input
/// channels of one tap in a word), each word widened to two i16 entries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn pack_pairs_3x3_ssse3(block: &[i8], taps: &[usize], (ic, nr): (usize, usize), panel: &mut [u8]) -> usize {
    let per_channel = ic * 9;
    let channels = (block.len() / per_channel).min(nr);
    let done = channels / 4 * 4;
    // SAFETY (every load and store below): SSSE3 is enabled here; each reads or writes the 16
    // bytes of a slice of 16 bytes.
    let masks = masks().map(|m| unsafe { _mm_loadu_si128(m.as_ptr().cast()) });
    for q in 0..ic / 4 {
        for j0 in (0..done).step_by(4) {
            // Each word of four input channels of one tap widened: two words, the entries of
            // pairs 2q and 2q + 1, per tap.
            let [a, b, c] = gather_taps(block, per_channel, (q, j0), &masks);
            // Columns in tap order, two per tap (pairs 2q and 2q + 1), each stored as it is made.
            let mut store = |t: usize, [lo, hi, ..]: [__m128i; 4]| {
                let at = taps[t] + (2 * q * nr + j0) * 4;
                unsafe {
                    _mm_storeu_si128(panel[at..at + 16].as_mut_ptr().cast(), lo);
                    _mm_storeu_si128(panel[at + nr * 4..at + nr * 4 + 16].as_mut_ptr().cast(), hi);
                }
            };
            let [c0, c1, c2, c3] = transpose4(a.map(widen_lo));
            store(0, [c0, c1, c2, c3]);
            store(1, [c2, c3, c2, c3]);
            let [c0, c1, c2, c3] = transpose4(a.map(widen_hi));
            store(2, [c0, c1, c2, c3]);
            store(3, [c2, c3, c2, c3]);
            let [c0, c1, c2, c3] = transpose4(b.map(widen_lo));
            store(4, [c0, c1, c2, c3]);
            store(5, [c2, c3, c2, c3]);
            let [c0, c1, c2, c3] = transpose4(b.map(widen_hi));
            store(6, [c0, c1, c2, c3]);
            store(7, [c2, c3, c2, c3]);
            store(8, transpose4(c.map(widen_lo)));
        }
    }
    done
}
