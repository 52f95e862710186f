//! Quantize (onnxruntime's `QuantizeLinear`, per tensor): `q = saturate(round_half_even(x / scale)
//! + zero_point)`, a true division; NaN stores the type's minimum (onnxruntime clamps with
//! `maxps`, which returns the bound for NaN, before converting).
//!
//! The NCHW → NHWC case quantizes a block of pixels of each channel plane into a small buffer
//! (contiguous, so the division and rounding vectorize), then interleaves the block's channels
//! into the destination.

#[cfg(test)]
use super::Int8;
use super::{Affine, Build, round_clamped};

/// Pixels per block of the NHWC case: a few kilobytes of source per channel.
pub(super) const BLOCK: usize = 64;

/// Quantizes `src` (f32 in little-endian bytes; NCHW `[n, c, h, w]`, or any shape with
/// `nhwc == false`) into `dst`, written in NHWC order when `nhwc`: the part of the output from
/// element `first` on that `dst` holds (whole pixels when `nhwc`); `src` is the whole source.
pub fn quantize_part(src: &[u8], dims: [usize; 4], nhwc: bool, q: Affine, first: usize, dst: &mut [u8]) {
    quantize_part_copying(src, dims, nhwc, q, first, dst, &mut []);
}

/// `quantize_part` that also stores the source bytes it reads, in the same pass (a network's
/// input kept in the engine's buffer as it is quantized): into `copy[0]` from the part's first
/// element where not `nhwc`; where `nhwc`, the part lies within one image and `copy[ch]` takes
/// channel `ch`'s plane from the part's first pixel.
pub fn quantize_part_copying(
    src: &[u8],
    dims: [usize; 4],
    nhwc: bool,
    q: Affine,
    first: usize,
    dst: &mut [u8],
    copy: &mut [&mut [u8]],
) {
    let ran = quantize_part_in(Build::best(), src, dims, nhwc, q, first, dst, copy);
    debug_assert!(ran.is_some(), "the best build is available");
}

/// The whole of `quantize_part` compiled for `build`.
#[cfg(test)]
pub(crate) fn quantize_in(
    build: Build,
    src: &[u8],
    dims: [usize; 4],
    nhwc: bool,
    q: Affine,
    dst: &mut [u8],
) -> Option<()> {
    quantize_part_in(build, src, dims, nhwc, q, 0, dst, &mut [])
}

native_builds! {
    /// `quantize_part` compiled for `build`, storing the source bytes it reads into `copy` as
    /// `quantize_part_copying` does where it is not empty.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn quantize_part_in(
        src: &[u8],
        dims: [usize; 4],
        nhwc: bool,
        q: Affine,
        first: usize,
        dst: &mut [u8],
        copy: &mut [&mut [u8]],
    ) => quantize_any
}

#[inline(always)]
fn quantize_any(
    src: &[u8],
    dims: [usize; 4],
    nhwc: bool,
    q: Affine,
    first: usize,
    dst: &mut [u8],
    copy: &mut [&mut [u8]],
) {
    let Affine { scale, zero_point, ty } = q;
    let (lo, hi) = ty.range();
    let bounds = ((lo - zero_point) as f32, (hi - zero_point) as f32);
    if !nhwc {
        run(&src[first * 4..], scale, zero_point, bounds, dst, kept(copy, 0, 0, dst.len()));
        return;
    }
    let [n, c, h, w] = dims;
    let plane = h * w;
    if c == 0 || plane == 0 {
        return;
    }
    let mut block = vec![0u8; c * BLOCK];
    // Pixels `begin..end` of the `n · plane` in blocks that do not cross an image.
    let begin = first / c;
    let end = (begin + dst.len() / c).min(n * plane);
    let mut p = begin;
    while p < end {
        let (b, q) = (p / plane, p % plane);
        let len = BLOCK.min(plane - q).min(end - p);
        let at = b * c * plane + q;
        for ch in 0..c {
            let from = &src[(at + ch * plane) * 4..][..len * 4];
            let copy = kept(copy, ch, p - begin, len);
            run(from, scale, zero_point, bounds, &mut block[ch * BLOCK..][..len], copy);
        }
        interleave(&block, c, len, &mut dst[(p - begin) * c..][..len * c]);
        p += len;
    }
}

/// Where `len` f32 from element `at` of `copy[i]` go, if `copy` is not empty.
#[inline(always)]
fn kept<'a>(copy: &'a mut [&mut [u8]], i: usize, at: usize, len: usize) -> Option<&'a mut [u8]> {
    copy.get_mut(i).map(|copy| &mut copy[4 * at..4 * (at + len)])
}

/// Quantizes a contiguous run: `src` holds `dst.len()` f32 in little-endian bytes; each is also
/// stored into `copy` (as long as `src`) where there is one, in the same pass.
#[inline(always)]
fn run(src: &[u8], scale: f32, zero_point: i32, (lo, hi): (f32, f32), dst: &mut [u8], copy: Option<&mut [u8]>) {
    let q = |x: &[u8]| {
        let x = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        (round_clamped(x / scale, lo, hi) + zero_point) as u8
    };
    match copy {
        Some(copy) => {
            for ((d, x), c) in dst.iter_mut().zip(src.chunks_exact(4)).zip(copy.chunks_exact_mut(4)) {
                c.copy_from_slice(x);
                *d = q(x);
            }
        }
        None => {
            for (d, x) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = q(x);
            }
        }
    }
}

/// Writes pixel `p`'s channels `block[ch · BLOCK + p]` to `out[p · c + ch]`, `p < len`. Three
/// channels (images) over a whole block take a loop of fixed length, which vectorizes.
#[inline(always)]
fn interleave(block: &[u8], c: usize, len: usize, out: &mut [u8]) {
    match c {
        1 => out.copy_from_slice(&block[..len]),
        3 if len == BLOCK => {
            let planes: &[u8; 3 * BLOCK] = block.try_into().expect("three planes");
            let out: &mut [u8; 3 * BLOCK] = out.try_into().expect("a whole block");
            for p in 0..BLOCK {
                out[3 * p] = planes[p];
                out[3 * p + 1] = planes[BLOCK + p];
                out[3 * p + 2] = planes[2 * BLOCK + p];
            }
        }
        _ => {
            for (p, px) in out.chunks_exact_mut(c).enumerate() {
                for (ch, o) in px.iter_mut().enumerate() {
                    *o = block[ch * BLOCK + p];
                }
            }
        }
    }
}

/// The plain scalar loop: element by element, a division each, NHWC stores strided by `c`.
#[cfg(test)]
pub(crate) fn quantize_scalar(
    src: &[f32],
    dims: [usize; 4],
    nhwc: bool,
    scale: f32,
    zp: i32,
    ty: Int8,
    dst: &mut [u8],
) {
    let (lo, hi) = ty.range();
    let q = |x: f32| {
        let v = if x.is_nan() {
            lo
        } else {
            ((x / scale).round_ties_even() as i32 as i64 + zp as i64).clamp(lo as i64, hi as i64) as i32
        };
        v as u8
    };
    if !nhwc {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = q(x);
        }
        return;
    }
    let [n, c, h, w] = dims;
    let plane = h * w;
    for b in 0..n {
        for ch in 0..c {
            let from = &src[(b * c + ch) * plane..][..plane];
            for (p, &x) in from.iter().enumerate() {
                dst[(b * plane + p) * c + ch] = q(x);
            }
        }
    }
}
