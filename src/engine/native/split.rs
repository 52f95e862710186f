//! The native loops split across the engine's thread pool: each output cut into pieces that
//! the pool's threads compute at once. Every element is computed exactly as the whole loop
//! computes it, so the result is the same at every thread count.

use std::sync::Mutex;

use super::add::{AddParams, add as add_all};
use super::dequantize::dequantize as dequantize_part;
use super::global_avg_pool::global_avg_pool as global_avg_pool_part;
use super::max_pool::{Window, max_pool_lines};
use super::quantize::{BLOCK, quantize_part, quantize_part_copying};
use super::{Affine, Int8};
use crate::runtime::host::Pool;

/// Bytes a loop reads and writes below which it is not split: the pool's hand-off would cost
/// about as much as the work.
const MIN_WORK: usize = 16 * 1024;

/// Pieces per thread: small enough that a thread that starts late leaves its share to others.
const PIECES_PER_THREAD: usize = 4;

/// Units of output per piece, for `units` units of `work` bytes each (all of them: one piece).
fn piece(pool: Option<&Pool>, units: usize, work: usize) -> usize {
    let threads = pool.map_or(1, Pool::threads);
    let total = units.saturating_mul(work);
    if threads < 2 || total < 2 * MIN_WORK {
        return units.max(1);
    }
    let pieces = (threads * PIECES_PER_THREAD).min(total / MIN_WORK).max(2);
    units.div_ceil(pieces).max(1)
}

/// Runs `f(first unit, part)` on pieces of `dst` of `per` units of `unit` elements each, on
/// the pool where there is one.
fn split(pool: Option<&Pool>, dst: &mut [u8], unit: usize, per: usize, f: impl Fn(usize, &mut [u8]) + Sync) {
    let bytes = (unit * per).max(1);
    match pool {
        Some(pool) if dst.len() > bytes => pool.for_each_chunk_mut(dst, bytes, |i, part| f(i * per, part)),
        _ => f(0, dst),
    }
}

/// `native::add::add` on pieces of the operands.
pub fn add(pool: Option<&Pool>, a: &[u8], b: &[u8], params: &AddParams, ty: Int8, clamp: (i32, i32), c: &mut [u8]) {
    // Pieces of whole cache lines.
    let per = piece(pool, c.len().div_ceil(64), 3 * 64);
    split(pool, c, 64, per, |first, part| {
        let at = first * 64;
        add_all(&a[at..at + part.len()], &b[at..at + part.len()], params, ty, clamp, part)
    });
}

/// `native::max_pool::max_pool_lines` on pieces of output lines.
pub fn max_pool(
    pool: Option<&Pool>,
    src: &[u8],
    dims: [usize; 4],
    out: [usize; 2],
    win: Window,
    ty: Int8,
    dst: &mut [u8],
) {
    let [n, _, w, c] = dims;
    let line = out[1] * c;
    let per = piece(pool, n * out[0], line + win.kernel[0] * w * c);
    split(pool, dst, line, per, |first, part| max_pool_lines(src, dims, out, win, ty, first, part));
}

/// `native::quantize::quantize_part` on pieces of pixels (of elements, when not `nhwc`).
pub fn quantize(pool: Option<&Pool>, src: &[u8], dims: [usize; 4], nhwc: bool, q: Affine, dst: &mut [u8]) {
    let unit = if nhwc { dims[1].max(1) } else { 1 };
    let per = piece(pool, dst.len() / unit, 5 * unit);
    // Whole blocks of pixels (`quantize_part`'s interleaving) where the pieces are pixels.
    let per = if nhwc { per.next_multiple_of(BLOCK) } else { per };
    split(pool, dst, unit, per, |first, part| quantize_part(src, dims, nhwc, q, first * unit, part));
}

/// `quantize` that also stores `src` into `copy` (as long) in the same pass: each piece stores
/// the source bytes it reads (`quantize_part_copying`), so the source is read once.
pub fn quantize_copying(
    pool: Option<&Pool>,
    src: &[u8],
    dims: [usize; 4],
    nhwc: bool,
    q: Affine,
    dst: &mut [u8],
    copy: &mut [u8],
) {
    if dst.is_empty() {
        return;
    }
    if !nhwc {
        let per = piece(pool, dst.len(), 5);
        let pieces: Vec<_> = copy.chunks_mut(4 * per).map(|c| Mutex::new(vec![c])).collect();
        split(pool, dst, 1, per, |first, part| {
            quantize_part_copying(src, dims, false, q, first, part, &mut take(&pieces[first / per]))
        });
        return;
    }
    let [_, c, h, w] = dims;
    let plane = h * w;
    if c == 0 || plane == 0 {
        return;
    }
    // Pieces of whole blocks of one image's pixels: piece `i` stores the `i`-th part of each of
    // the image's channel planes.
    let per = piece(pool, plane, 5 * c).next_multiple_of(BLOCK);
    for (b, (dst, copy)) in dst.chunks_exact_mut(plane * c).zip(copy.chunks_exact_mut(4 * plane * c)).enumerate() {
        let mut pieces: Vec<Vec<&mut [u8]>> = (0..plane.div_ceil(per)).map(|_| Vec::with_capacity(c)).collect();
        for channel in copy.chunks_exact_mut(4 * plane) {
            for (i, part) in channel.chunks_mut(4 * per).enumerate() {
                pieces[i].push(part);
            }
        }
        let pieces: Vec<_> = pieces.into_iter().map(Mutex::new).collect();
        split(pool, dst, c, per, |first, part| {
            quantize_part_copying(src, dims, true, q, (b * plane + first) * c, part, &mut take(&pieces[first / per]))
        });
    }
}

/// A piece's slices of the copy, taken by the piece that owns them.
fn take<'a>(slices: &Mutex<Vec<&'a mut [u8]>>) -> Vec<&'a mut [u8]> {
    std::mem::take(&mut *slices.lock().unwrap_or_else(|e| e.into_inner()))
}

/// `native::dequantize::dequantize` on pieces of channel planes (of elements, when not `nhwc`).
pub fn dequantize(pool: Option<&Pool>, src: &[u8], dims: [usize; 4], nhwc: bool, q: Affine, dst: &mut [u8]) {
    let unit = if nhwc { (dims[2] * dims[3]).max(1) } else { 1 };
    let per = piece(pool, dst.len() / (4 * unit), 5 * unit);
    split(pool, dst, 4 * unit, per, |first, part| dequantize_part(src, dims, nhwc, q, first * unit, part));
}

/// `native::global_avg_pool::global_avg_pool` on pieces of each image's channels.
pub fn global_avg_pool(
    pool: Option<&Pool>,
    src: &[u8],
    [n, hw, c]: [usize; 3],
    x: (f32, i32),
    y: (f32, i32),
    ty: Int8,
    dst: &mut [u8],
) {
    if c == 0 {
        return;
    }
    let per = piece(pool, c, hw + 1);
    for (b, image) in dst.chunks_exact_mut(c).take(n).enumerate() {
        split(pool, image, 1, per, |first, part| global_avg_pool_part(src, [n, hw, c], x, y, ty, b * c + first, part));
    }
}
