//! Max pooling on 8-bit integers in NHWC: the largest value of each window's positions inside
//! the source (padding never wins). Exact: quantization is monotone, so the maximum of the
//! integers is the integer of the maximum.
//!
//! The window's valid positions are a product of valid rows and valid columns, so the maximum
//! is taken in two passes: over the windows' columns of each source row (once per row, whatever
//! the number of output lines that read it), then over each output line's window rows of those
//! results. Both compare the bytes directly (as u8 or as i8).

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

/// The valid window positions of output `o` along one axis: source positions `first + i ·
/// dilation`, `i < count` (none when the window lies in the padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Taps {
    first: usize,
    count: usize,
}

/// The taps of output `o` along `axis` (0 rows, 1 columns) of a source `size` long.
#[inline(always)]
fn taps(o: usize, axis: usize, win: Window, size: usize) -> Taps {
    let (k, s, p, d) = (win.kernel[axis], win.stride[axis], win.pad_begin[axis], win.dilation[axis].max(1));
    let start = o * s;
    // Position `start + kx · d − p` is valid when `p ≤ start + kx · d < size + p`.
    let lo = if start >= p { 0 } else { (p - start).div_ceil(d) };
    let hi = if size + p > start { (size + p - start).div_ceil(d).min(k) } else { 0 };
    let count = hi.saturating_sub(lo);
    let first = if count > 0 { start + lo * d - p } else { 0 };
    Taps { first, count }
}

/// The pooling on bytes compared as u8 or (`SIGNED`) as i8. A window entirely in the padding
/// (not possible with pads below the kernel) stores the type's minimum.
///
/// Each source row's maximum over every output column's window (`ow · c` bytes) is computed
/// once and kept while later lines of the part read it (as many rows as the window has); each
/// output line is then the maximum of its window rows' results, stored once.
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
    let len = ow * c;
    let columns: Vec<Taps> = (0..ow).map(|ox| taps(ox, 1, win, w)).collect();
    // The kept row results and the (image, source row) each holds; `slots[i]` holds the line's
    // `i`-th window row.
    let keep = win.kernel[0].max(1);
    let mut kept = vec![min; keep * len];
    let mut tags: Vec<Option<(usize, usize)>> = vec![None; keep];
    let mut slots: Vec<Option<usize>> = Vec::with_capacity(keep);
    let mut used = vec![false; keep];
    let lines = (dst.len() / len).min((n * oh).saturating_sub(first));
    for (k, line) in dst.chunks_exact_mut(len).take(lines).enumerate() {
        let (b, oy) = ((first + k) / oh, (first + k) % oh);
        let image = &src[b * h * w * c..][..h * w * c];
        let rows = taps(oy, 0, win, h);
        let y_of = |i: usize| rows.first + i * win.dilation[0].max(1);
        // The rows kept first, then the others computed into slots this line does not read.
        used.fill(false);
        slots.clear();
        for i in 0..rows.count {
            let s = tags.iter().position(|&t| t == Some((b, y_of(i))));
            if let Some(s) = s {
                used[s] = true;
            }
            slots.push(s);
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.is_none() {
                let s = used.iter().position(|&u| !u).expect("as many slots as window rows");
                used[s] = true;
                let y = y_of(i);
                row_max::<SIGNED>(
                    &image[y * w * c..][..w * c],
                    c,
                    &columns,
                    win.dilation[1].max(1),
                    &mut kept[s * len..][..len],
                );
                tags[s] = Some((b, y));
                *slot = Some(s);
            }
        }
        let row = |i: usize| &kept[slots[i].expect("every window row has a slot") * len..][..len];
        match rows.count {
            0 => line.fill(min),
            1 => line.copy_from_slice(row(0)),
            2 => {
                for ((o, &a), &b) in line.iter_mut().zip(row(0)).zip(row(1)) {
                    *o = max::<SIGNED>(a, b);
                }
            }
            count => {
                for (((o, &a), &b), &c) in line.iter_mut().zip(row(0)).zip(row(1)).zip(row(2)) {
                    *o = max::<SIGNED>(max::<SIGNED>(a, b), c);
                }
                for i in 3..count {
                    for (o, &v) in line.iter_mut().zip(row(i)) {
                        *o = max::<SIGNED>(*o, v);
                    }
                }
            }
        }
    }
}

/// `out[ox] = max_i row[columns[ox].first + i · dilation]` for pixels of `c` bytes (the type's
/// minimum where a window has no valid column).
#[inline(always)]
fn row_max<const SIGNED: bool>(row: &[u8], c: usize, columns: &[Taps], dilation: usize, out: &mut [u8]) {
    // Whole vectors per pixel when the channels allow (loops of fixed length, in registers).
    match c {
        c if c % 64 == 0 => row_max_vectors::<SIGNED, 64>(row, c, columns, dilation, out),
        c if c % 32 == 0 => row_max_vectors::<SIGNED, 32>(row, c, columns, dilation, out),
        c if c % 16 == 0 => row_max_vectors::<SIGNED, 16>(row, c, columns, dilation, out),
        _ => row_max_pixels::<SIGNED>(row, c, columns, dilation, out),
    }
}

/// `row_max` in pieces of `L` bytes (`L` divides `c`), each piece's maximum in a register.
#[inline(always)]
fn row_max_vectors<const SIGNED: bool, const L: usize>(
    row: &[u8],
    c: usize,
    columns: &[Taps],
    dilation: usize,
    out: &mut [u8],
) {
    let min = if SIGNED { 0x80 } else { 0 };
    let piece = |x: usize, j: usize| -> [u8; L] { row[x * c + j..][..L].try_into().expect("L bytes") };
    for (px, t) in out.chunks_exact_mut(c).zip(columns) {
        if t.count == 0 {
            px.fill(min);
            continue;
        }
        let x = |i: usize| t.first + i * dilation;
        for (j, o) in (0..c).step_by(L).zip(px.chunks_exact_mut(L)) {
            let mut acc = piece(t.first, j);
            let mut next = 1;
            if t.count >= 3 {
                // Three taps (the usual 3-wide window) without the loop's bookkeeping.
                let (a, b) = (piece(x(1), j), piece(x(2), j));
                for l in 0..L {
                    acc[l] = max::<SIGNED>(max::<SIGNED>(acc[l], a[l]), b[l]);
                }
                next = 3;
            }
            for i in next..t.count {
                let v = piece(x(i), j);
                for l in 0..L {
                    acc[l] = max::<SIGNED>(acc[l], v[l]);
                }
            }
            o.copy_from_slice(&acc);
        }
    }
}

/// `row_max` for any `c`: each pixel's bytes at once, in the output.
#[inline(always)]
fn row_max_pixels<const SIGNED: bool>(row: &[u8], c: usize, columns: &[Taps], dilation: usize, out: &mut [u8]) {
    let min = if SIGNED { 0x80 } else { 0 };
    for (px, t) in out.chunks_exact_mut(c).zip(columns) {
        if t.count == 0 {
            px.fill(min);
            continue;
        }
        px.copy_from_slice(&row[t.first * c..][..c]);
        for i in 1..t.count {
            for (o, &v) in px.iter_mut().zip(&row[(t.first + i * dilation) * c..][..c]) {
                *o = max::<SIGNED>(*o, v);
            }
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
