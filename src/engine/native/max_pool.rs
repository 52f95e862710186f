//! Max pooling on 8-bit integers in NHWC: the largest value of each window's positions inside
//! the source (padding never wins). Exact: quantization is monotone, so the maximum of the
//! integers is the integer of the maximum.
//!
//! The window's valid positions are a product of valid rows and valid columns, so the maximum
//! is taken in two passes per output row: over the window's rows, whole source rows of `w · c`
//! contiguous bytes at once, then over the window's columns of that row maximum. Both compare
//! the bytes directly (as u8 or as i8).

use super::{Build, Int8};

/// A 2-D pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pad_begin: [usize; 2],
    pub dilation: [usize; 2],
}

/// Pools `src: [n, h, w, c]` into `dst: [n, oh, ow, c]`: the output lines (rows `oy` of image
/// `b`, numbered `b · oh + oy`) from `first` on that `dst` holds (whole lines of `ow · c` bytes).
#[allow(clippy::too_many_arguments)]
pub fn max_pool_lines(
    src: &[u8],
    dims: [usize; 4],
    out: [usize; 2],
    win: Window,
    ty: Int8,
    first: usize,
    dst: &mut [u8],
) {
    let ran = max_pool_lines_in(Build::best(), src, dims, out, win, ty, first, dst);
    debug_assert!(ran.is_some(), "the best build is available");
}

/// The whole of `max_pool_lines` compiled for `build`.
#[cfg(test)]
pub(crate) fn max_pool_in(
    build: Build,
    src: &[u8],
    dims: [usize; 4],
    out: [usize; 2],
    win: Window,
    ty: Int8,
    dst: &mut [u8],
) -> Option<()> {
    max_pool_lines_in(build, src, dims, out, win, ty, 0, dst)
}

native_builds! {
    /// `max_pool_lines` compiled for `build`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn max_pool_lines_in(
        src: &[u8],
        dims: [usize; 4],
        out: [usize; 2],
        win: Window,
        ty: Int8,
        first: usize,
        dst: &mut [u8],
    ) => max_pool_any
}

#[inline(always)]
fn max_pool_any(src: &[u8], dims: [usize; 4], out: [usize; 2], win: Window, ty: Int8, first: usize, dst: &mut [u8]) {
    // One loop per element type, so that each compares bytes as its own (vpmaxub, vpmaxsb).
    match ty {
        Int8::U8 => max_pool_bytes::<false>(src, dims, out, win, first, dst),
        Int8::S8 => max_pool_bytes::<true>(src, dims, out, win, first, dst),
    }
}

/// The larger byte, as u8 or (`SIGNED`) as i8.
#[inline(always)]
fn max<const SIGNED: bool>(a: u8, b: u8) -> u8 {
    if SIGNED { (a as i8).max(b as i8) as u8 } else { a.max(b) }
}

/// The pooling on bytes compared as u8 or (`SIGNED`) as i8. A window entirely in the padding
/// (not possible with pads below the kernel) stores the type's minimum.
#[inline(always)]
fn max_pool_bytes<const SIGNED: bool>(
    src: &[u8],
    [n, h, w, c]: [usize; 4],
    [oh, ow]: [usize; 2],
    win: Window,
    first: usize,
    dst: &mut [u8],
) {
    if c == 0 || ow == 0 {
        return;
    }
    let min = if SIGNED { 0x80 } else { 0 };
    let mut rows = vec![min; w * c];
    let mut ys = Vec::with_capacity(win.kernel[0]);
    let lines = (dst.len() / (ow * c)).min((n * oh).saturating_sub(first));
    for (k, line) in dst.chunks_exact_mut(ow * c).take(lines).enumerate() {
        let (b, oy) = ((first + k) / oh, (first + k) % oh);
        let image = &src[b * h * w * c..][..h * w * c];
        let row = |y: usize| &image[y * w * c..][..w * c];
        ys.clear();
        ys.extend(
            (0..win.kernel[0])
                .map(|ky| (oy * win.stride[0] + ky * win.dilation[0]).wrapping_sub(win.pad_begin[0]))
                .filter(|&y| y < h),
        );
        match ys[..] {
            [] => rows.fill(min),
            [y] => rows.copy_from_slice(row(y)),
            [y0, y1] => {
                for ((m, &a), &b) in rows.iter_mut().zip(row(y0)).zip(row(y1)) {
                    *m = max::<SIGNED>(a, b);
                }
            }
            [y0, y1, y2, ref rest @ ..] => {
                for (((m, &a), &b), &c) in rows.iter_mut().zip(row(y0)).zip(row(y1)).zip(row(y2)) {
                    *m = max::<SIGNED>(max::<SIGNED>(a, b), c);
                }
                for &y in rest {
                    for (m, &v) in rows.iter_mut().zip(row(y)) {
                        *m = max::<SIGNED>(*m, v);
                    }
                }
            }
        }
        // Whole vectors per pixel when the channels allow (a loop of fixed length).
        match c {
            c if c % 64 == 0 => columns::<SIGNED, 64>(&rows, w, c, win, line),
            c if c % 32 == 0 => columns::<SIGNED, 32>(&rows, w, c, win, line),
            c if c % 16 == 0 => columns::<SIGNED, 16>(&rows, w, c, win, line),
            _ => columns::<SIGNED, 1>(&rows, w, c, win, line),
        }
    }
}

/// The maximum over the window's columns: `line[ox] = max_kx rows[ox · stride + kx · dilation −
/// pad]` for pixels of `c` bytes, in pieces of `L` bytes (`L` divides `c`).
#[inline(always)]
fn columns<const SIGNED: bool, const L: usize>(rows: &[u8], w: usize, c: usize, win: Window, line: &mut [u8]) {
    let min = if SIGNED { 0x80 } else { 0 };
    for (ox, px) in line.chunks_exact_mut(c).enumerate() {
        let mut first = true;
        for kx in 0..win.kernel[1] {
            let x = (ox * win.stride[1] + kx * win.dilation[1]).wrapping_sub(win.pad_begin[1]);
            if x >= w {
                continue;
            }
            let from = &rows[x * c..][..c];
            if first {
                px.copy_from_slice(from);
                first = false;
                continue;
            }
            for (o, r) in px.chunks_exact_mut(L).zip(from.chunks_exact(L)) {
                let (o, r): (&mut [u8; L], &[u8; L]) = (o.try_into().expect("L bytes"), r.try_into().expect("L bytes"));
                for i in 0..L {
                    o[i] = max::<SIGNED>(o[i], r[i]);
                }
            }
        }
        if first {
            px.fill(min);
        }
    }
}

/// The plain loop on i32 values: every window position of every output, one element at a time.
#[cfg(test)]
pub(crate) fn max_pool_scalar(
    src: &[u8],
    [n, h, w, c]: [usize; 4],
    [oh, ow]: [usize; 2],
    win: Window,
    ty: Int8,
    dst: &mut [u8],
) {
    let value = |b: u8| match ty {
        Int8::U8 => b as i32,
        Int8::S8 => b as i8 as i32,
    };
    let min = match ty {
        Int8::U8 => 0,
        Int8::S8 => -128,
    };
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for ch in 0..c {
                    let mut best = min;
                    for ky in 0..win.kernel[0] {
                        for kx in 0..win.kernel[1] {
                            let y = (oy * win.stride[0] + ky * win.dilation[0]) as isize - win.pad_begin[0] as isize;
                            let x = (ox * win.stride[1] + kx * win.dilation[1]) as isize - win.pad_begin[1] as isize;
                            if (0..h as isize).contains(&y) && (0..w as isize).contains(&x) {
                                best = best.max(value(src[((b * h + y as usize) * w + x as usize) * c + ch]));
                            }
                        }
                    }
                    dst[((b * oh + oy) * ow + ox) * c + ch] = best as u8;
                }
            }
        }
    }
}
