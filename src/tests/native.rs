//! The engine's native loops (`engine::native`), each compiled variant (portable, AVX2,
//! AVX-512), against their plain scalar twins bit for bit, on random data with the extremes and
//! edge shapes: channel counts that fill no vector, odd sizes, block tails, strides, pads,
//! dilation, both 8-bit types; NaN, infinities and huge values for quantize.

use crate::bench::Lcg;
use crate::engine::native::add::{AddParams, add_in};
use crate::engine::native::max_pool::{Window, max_pool_in, max_pool_lines_in, max_pool_scalar};
use crate::engine::native::quantize::{quantize_in, quantize_part_in, quantize_scalar};
use crate::engine::native::{Affine, Build, Int8};
use crate::tests::skip::skip;

/// Random f32: one in eight special (NaN, infinities, huge, tiny, signed zero, an exact tie of
/// `scale`), the rest spread a little past the type's range in units of `scale`.
fn floats(len: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = Lcg::new(seed);
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        1e30,
        -1e30,
        f32::MIN_POSITIVE / 4.0,
        -0.0,
        0.0,
        2.5 * scale,
        -3.5 * scale,
        127.5 * scale,
        -128.5 * scale,
        255.5 * scale,
    ];
    (0..len)
        .map(|_| {
            let r = rng.next_u32();
            if r.is_multiple_of(8) {
                specials[(r >> 8) as usize % specials.len()]
            } else {
                let u = rng.next_u32() as f32 / (1u32 << 31) as f32;
                (u * 700.0 - 350.0) * scale
            }
        })
        .collect()
}

/// Random bytes, one in four an extreme (0, 0x7f, 0x80 or 0xff).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Lcg::new(seed);
    (0..len)
        .map(|_| {
            let r = rng.next_u32();
            if r.is_multiple_of(4) { [0, 0x7f, 0x80, 0xff][(r >> 8) as usize % 4] } else { (r >> 16) as u8 }
        })
        .collect()
}

#[test]
fn quantize_variants_match_the_scalar_twin() {
    // [n, c, h, w]: planes shorter than, equal to and past the 64-pixel block with tails; three
    // channels (the images' case) and others.
    let shapes = [
        [1, 3, 7, 9],
        [2, 3, 8, 8],
        [1, 3, 13, 13],
        [1, 3, 32, 33],
        [1, 1, 5, 31],
        [2, 5, 11, 7],
        [1, 4, 16, 16],
        [1, 2, 1, 1],
    ];
    let quants = [
        (Int8::U8, 0.018_627_45, 128),
        (Int8::U8, 1.0 / 64.0, 0),
        (Int8::S8, 0.031, 0),
        (Int8::S8, 0.5, -7),
        (Int8::U8, 3.0, 255),
    ];
    for build in Build::ALL {
        let name = format!("{build:?}");
        if !build.available() {
            skip(&name, "the CPU lacks the build's features");
            continue;
        }
        for (si, dims) in shapes.iter().enumerate() {
            for (qi, &(ty, scale, zp)) in quants.iter().enumerate() {
                let len = dims.iter().product();
                let x = floats(len, scale, (si * 10 + qi) as u64);
                let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
                for nhwc in [false, true] {
                    let mut want = vec![0xa5u8; len];
                    quantize_scalar(&x, *dims, nhwc, scale, zp, ty, &mut want);
                    let mut got = vec![0x5au8; len];
                    quantize_in(build, &raw, *dims, nhwc, Affine { scale, zero_point: zp, ty }, &mut got).unwrap();
                    if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
                        let src = if nhwc {
                            let [_, c, h, w] = *dims;
                            let (b, p, ch) = (i / (h * w * c), i / c % (h * w), i % c);
                            x[(b * c + ch) * h * w + p]
                        } else {
                            x[i]
                        };
                        panic!(
                            "{name} {dims:?} nhwc {nhwc} {ty:?} scale {scale} zp {zp}: at {i} got {} want {} (x = {src:e})",
                            got[i], want[i]
                        );
                    }
                }
            }
        }
    }
}

/// The quantization that also stores its source (`quantize_part_copying`, the network input's
/// store fused into the first step): the same bytes as the scalar twin, and a copy equal to the
/// source, in both layouts.
#[test]
fn quantize_copying_matches_the_scalar_twin_and_copies_its_source() {
    let shapes = [[1, 3, 7, 9], [2, 3, 8, 8], [1, 3, 32, 33], [2, 5, 11, 7], [1, 1, 5, 31], [1, 3, 224, 224]];
    let (ty, scale, zp) = (Int8::U8, 0.018_627_45, 128);
    for build in Build::ALL {
        let name = format!("{build:?}");
        if !build.available() {
            skip(&name, "the CPU lacks the build's features");
            continue;
        }
        for (si, dims) in shapes.iter().enumerate() {
            let len = dims.iter().product();
            let x = floats(len, scale, 100 + si as u64);
            let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            for nhwc in [false, true] {
                let mut want = vec![0xa5u8; len];
                quantize_scalar(&x, *dims, nhwc, scale, zp, ty, &mut want);
                let (mut got, mut copy) = (vec![0x5au8; len], vec![0x5au8; raw.len()]);
                let q = Affine { scale, zero_point: zp, ty };
                if nhwc {
                    // A part per image, each storing its image's channel planes.
                    let [_, c, h, w] = *dims;
                    let image = c * h * w;
                    for (b, (got, copy)) in got.chunks_mut(image).zip(copy.chunks_mut(4 * image)).enumerate() {
                        let mut planes: Vec<&mut [u8]> = copy.chunks_mut(4 * h * w).collect();
                        quantize_part_in(build, &raw, *dims, true, q, b * image, got, &mut planes).unwrap();
                    }
                } else {
                    quantize_part_in(build, &raw, *dims, false, q, 0, &mut got, &mut [&mut copy[..]]).unwrap();
                }
                assert!(got == want, "{name} {dims:?} nhwc {nhwc}: the quantized bytes differ");
                assert!(copy == raw, "{name} {dims:?} nhwc {nhwc}: the copy differs from the source");
            }
        }
    }
}

/// Values a few ulps from every rounding tie, where any shortcut for the division (a product by
/// `1/scale`, say) would round the other way: each build against the dividing scalar twin.
#[test]
fn quantize_next_to_ties_matches_the_dividing_twin() {
    let quants = [
        (Int8::U8, 0.018_627_45, 128),
        (Int8::U8, 0.007_843_138, 0),
        (Int8::S8, 0.031, 0),
        (Int8::S8, 0.1, -7),
        (Int8::U8, 3.0, 255),
    ];
    for build in Build::ALL {
        let name = format!("{build:?}");
        if !build.available() {
            skip(&name, "the CPU lacks the build's features");
            continue;
        }
        for &(ty, scale, zp) in &quants {
            let (lo, hi) = ty.range();
            let mut x = Vec::new();
            for n in lo - zp - 1..=hi - zp {
                let tie = ((n as f64 + 0.5) * scale as f64) as f32;
                x.extend((-6i32..=6).map(|k| f32::from_bits(tie.to_bits().wrapping_add_signed(k))));
            }
            // Whole images of 3 channels, any tail cut off.
            let plane = x.len() / 3 / 7;
            x.truncate(3 * 7 * plane);
            let dims = [1, 3, 7, plane];
            let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            for nhwc in [false, true] {
                let mut want = vec![0xa5u8; x.len()];
                quantize_scalar(&x, dims, nhwc, scale, zp, ty, &mut want);
                let mut got = vec![0x5au8; x.len()];
                quantize_in(build, &raw, dims, nhwc, Affine { scale, zero_point: zp, ty }, &mut got).unwrap();
                if let Some(i) = (0..x.len()).find(|&i| got[i] != want[i]) {
                    panic!("{name} {ty:?} scale {scale} zp {zp} nhwc {nhwc}: at {i} got {} want {}", got[i], want[i]);
                }
            }
        }
    }
}

#[test]
fn max_pool_variants_match_the_scalar_twin() {
    // (kernel, stride, pad, dilation), square; pad 1 with kernel 1 gives windows wholly in the
    // padding (the type's minimum).
    let windows = [
        (3, 2, 1, 1),
        (3, 1, 1, 1),
        (2, 2, 0, 1),
        (2, 1, 0, 1),
        (3, 2, 0, 1),
        (3, 1, 2, 2),
        (1, 1, 1, 1),
        (1, 2, 0, 1),
    ];
    let shapes = [[1, 9, 9, 64], [2, 7, 6, 3], [1, 12, 11, 67], [1, 5, 5, 1], [1, 8, 8, 32], [1, 3, 4, 130]];
    for build in Build::ALL {
        let name = format!("{build:?}");
        if !build.available() {
            skip(&name, "the CPU lacks the build's features");
            continue;
        }
        for (si, &[n, h, w, c]) in shapes.iter().enumerate() {
            for &(k, s, p, d) in &windows {
                let extent = (k - 1) * d + 1;
                if h + 2 * p < extent || w + 2 * p < extent {
                    continue;
                }
                let (oh, ow) = ((h + 2 * p - extent) / s + 1, (w + 2 * p - extent) / s + 1);
                let win = Window { kernel: [k, k], stride: [s, s], pad_begin: [p, p], dilation: [d, d] };
                let src = bytes(n * h * w * c, si as u64 * 31 + k as u64);
                for ty in [Int8::U8, Int8::S8] {
                    let len = n * oh * ow * c;
                    let mut want = vec![0xa5u8; len];
                    max_pool_scalar(&src, [n, h, w, c], [oh, ow], win, ty, &mut want);
                    let mut got = vec![0x5au8; len];
                    max_pool_in(build, &src, [n, h, w, c], [oh, ow], win, ty, &mut got).unwrap();
                    if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
                        panic!("{name} [{n}, {h}, {w}, {c}] {win:?} {ty:?}: at {i} got {} want {}", got[i], want[i]);
                    }
                }
            }
        }
    }
}

/// Non-square windows (kernel, stride, pad and dilation each differing between rows and
/// columns), end pads other than the begin pads, and the loop run on parts of the output lines
/// that start past the first (as the thread pool's pieces do), each part against the whole
/// scalar twin's lines.
#[test]
fn max_pool_non_square_windows_and_parts_match_the_scalar_twin() {
    // ([kernel], [stride], [pad begin], [pad end], [dilation]).
    let windows = [
        ([3, 2], [2, 1], [1, 0], [1, 1], [1, 1]),
        ([2, 3], [1, 2], [0, 1], [1, 0], [1, 1]),
        ([3, 3], [2, 3], [1, 2], [0, 2], [1, 1]),
        ([3, 2], [1, 1], [2, 1], [2, 1], [2, 2]),
        ([1, 3], [3, 1], [0, 1], [0, 1], [1, 3]),
        ([5, 4], [2, 2], [2, 1], [2, 3], [1, 1]),
        ([4, 1], [1, 2], [3, 0], [0, 0], [1, 1]),
    ];
    let shapes = [[2, 13, 10, 64], [1, 9, 14, 32], [3, 7, 5, 16], [1, 11, 8, 3], [2, 6, 9, 48], [1, 12, 12, 128]];
    for build in Build::ALL {
        let name = format!("{build:?}");
        if !build.available() {
            skip(&name, "the CPU lacks the build's features");
            continue;
        }
        for (si, &[n, h, w, c]) in shapes.iter().enumerate() {
            for (wi, &(kernel, stride, pad, end, dilation)) in windows.iter().enumerate() {
                let extent = |a: usize| (kernel[a] - 1) * dilation[a] + 1;
                let (eh, ew) = (h + pad[0] + end[0], w + pad[1] + end[1]);
                if eh < extent(0) || ew < extent(1) {
                    continue;
                }
                let (oh, ow) = ((eh - extent(0)) / stride[0] + 1, (ew - extent(1)) / stride[1] + 1);
                let win = Window { kernel, stride, pad_begin: pad, dilation };
                let src = bytes(n * h * w * c, (si * 16 + wi) as u64);
                let line = ow * c;
                for ty in [Int8::U8, Int8::S8] {
                    let mut want = vec![0xa5u8; n * oh * line];
                    max_pool_scalar(&src, [n, h, w, c], [oh, ow], win, ty, &mut want);
                    let mut whole = vec![0x5au8; want.len()];
                    max_pool_in(build, &src, [n, h, w, c], [oh, ow], win, ty, &mut whole).unwrap();
                    let what = format!("{name} [{n}, {h}, {w}, {c}] {win:?} {ty:?}");
                    if let Some(i) = (0..want.len()).find(|&i| whole[i] != want[i]) {
                        panic!("{what}: at {i} got {} want {}", whole[i], want[i]);
                    }
                    // Parts of 1, 2, 3 and 5 lines from every start, across images too.
                    for part in [1, 2, 3, 5] {
                        for first in 0..n * oh {
                            let lines = part.min(n * oh - first);
                            let mut got = vec![0x5au8; lines * line];
                            max_pool_lines_in(build, &src, [n, h, w, c], [oh, ow], win, ty, first, &mut got).unwrap();
                            let expect = &want[first * line..][..lines * line];
                            if let Some(i) = (0..got.len()).find(|&i| got[i] != expect[i]) {
                                panic!(
                                    "{what}: part of {part} from line {first}: at {i} got {} want {}",
                                    got[i], expect[i]
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The add as onnxruntime's AVX2 kernel states it, element by element: `ra = sa / sc`,
/// `rb = sb / sc`, `fixed = zc − (ra·za + rb·zb)`, `c = fma(a, ra, fma(b, rb, fixed))`, rounded
/// half to even and clamped.
fn add_twin(a: &[u8], b: &[u8], p: &AddParams, ty: Int8, (lo, hi): (i32, i32), c: &mut [u8]) {
    let value = |x: u8| match ty {
        Int8::U8 => x as f32,
        Int8::S8 => x as i8 as f32,
    };
    let (ra, rb) = (p.a.0 / p.c.0, p.b.0 / p.c.0);
    let fixed = p.c.1 as f32 - (ra * p.a.1 as f32 + rb * p.b.1 as f32);
    for i in 0..c.len() {
        let v = value(a[i]).mul_add(ra, value(b[i]).mul_add(rb, fixed));
        c[i] = (v.round_ties_even() as i32).clamp(lo, hi) as u8;
    }
}

#[test]
fn add_variants_match_the_scalar_twin() {
    let cases = [
        (Int8::U8, AddParams { a: (0.02, 128), b: (0.03, 120), c: (0.04, 130) }, (0, 255)),
        (Int8::U8, AddParams { a: (0.05, 0), b: (0.05, 0), c: (0.1, 0) }, (0, 255)),
        (Int8::U8, AddParams { a: (0.011, 3), b: (0.3, 250), c: (0.02, 0) }, (0, 200)),
        (Int8::S8, AddParams { a: (0.02, 0), b: (0.03, -5), c: (0.025, 3) }, (-128, 127)),
        (Int8::S8, AddParams { a: (0.5, -128), b: (0.25, 127), c: (0.125, 0) }, (0, 127)),
    ];
    for build in Build::ALL {
        let name = format!("{build:?}");
        if !build.available() {
            skip(&name, "the CPU lacks the build's features");
            continue;
        }
        for (ci, (ty, params, clamp)) in cases.iter().enumerate() {
            for len in [1, 15, 16, 17, 63, 64, 65, 1000, 4099] {
                let (a, b) = (bytes(len, ci as u64 * 2 + 1), bytes(len, ci as u64 * 2 + 2));
                let mut want = vec![0xa5u8; len];
                add_twin(&a, &b, params, *ty, *clamp, &mut want);
                let mut got = vec![0x5au8; len];
                add_in(build, &a, &b, params, *ty, *clamp, &mut got).unwrap();
                if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
                    panic!(
                        "{name} {ty:?} {params:?} len {len}: at {i} ({}, {}) got {} want {}",
                        a[i], b[i], got[i], want[i]
                    );
                }
            }
        }
    }
}

/// The split loops (`native::split`) on pools of two and three threads, and on none, against
/// the plain twins, at sizes the split cuts into several pieces and odd ones.
#[test]
fn split_loops_on_a_pool_equal_the_one_thread_loops() {
    use crate::engine::native::split;
    use crate::runtime::host::{Pool, pool};
    let pools: Vec<Option<std::sync::Arc<Pool>>> =
        vec![None, Some(pool(2).expect("a pool of 2")), Some(pool(3).expect("a pool of 3"))];
    for (pi, pool) in pools.iter().enumerate() {
        let pool = pool.as_deref();
        let at = |what: String| format!("pool {pi} ({} threads): {what}", pool.map_or(1, Pool::threads));

        // Add.
        let params = AddParams { a: (0.02, 128), b: (0.03, 120), c: (0.04, 130) };
        for len in [200_704, 100_003, 40_000, 1000] {
            let (a, b) = (bytes(len, 7), bytes(len, 8));
            let mut want = vec![0xa5u8; len];
            add_twin(&a, &b, &params, Int8::U8, (0, 255), &mut want);
            let mut got = vec![0x5au8; len];
            split::add(pool, &a, &b, &params, Int8::U8, (0, 255), &mut got);
            assert!(got == want, "{}", at(format!("add of {len}")));
        }

        // Max pool: ResNet's 3×3 stride 2 at 112², and odd shapes.
        let cases = [([1, 112, 112, 64], (3, 2, 1)), ([2, 30, 17, 67], (3, 2, 1)), ([1, 41, 40, 32], (2, 1, 0))];
        for ([n, h, w, c], (k, s, p)) in cases {
            let (oh, ow) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
            let win = Window { kernel: [k, k], stride: [s, s], pad_begin: [p, p], dilation: [1, 1] };
            let src = bytes(n * h * w * c, 9);
            for ty in [Int8::U8, Int8::S8] {
                let mut want = vec![0xa5u8; n * oh * ow * c];
                max_pool_scalar(&src, [n, h, w, c], [oh, ow], win, ty, &mut want);
                let mut got = vec![0x5au8; want.len()];
                split::max_pool(pool, &src, [n, h, w, c], [oh, ow], win, ty, &mut got);
                assert!(got == want, "{}", at(format!("max pool {:?} {ty:?}", [n, h, w, c])));
            }
        }

        // Quantize: the network's input, and odd shapes, NHWC and not.
        for dims in [[1, 3, 224, 224], [2, 5, 61, 33], [1, 1, 100, 101]] {
            let len = dims.iter().product();
            let x = floats(len, 0.018_627_45, 11);
            let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            for nhwc in [false, true] {
                let mut want = vec![0xa5u8; len];
                quantize_scalar(&x, dims, nhwc, 0.018_627_45, 128, Int8::U8, &mut want);
                let mut got = vec![0x5au8; len];
                let q = Affine { scale: 0.018_627_45, zero_point: 128, ty: Int8::U8 };
                split::quantize(pool, &raw, dims, nhwc, q, &mut got);
                assert!(got == want, "{}", at(format!("quantize {dims:?} nhwc {nhwc}")));
                // The same with the source stored as it is read (the network input's buffer).
                let (mut got, mut copy) = (vec![0x5au8; len], vec![0x5au8; raw.len()]);
                split::quantize_copying(pool, &raw, dims, nhwc, q, &mut got, &mut copy);
                assert!(got == want, "{}", at(format!("quantize copying {dims:?} nhwc {nhwc}")));
                assert!(copy == raw, "{}", at(format!("the copy of quantize copying {dims:?} nhwc {nhwc}")));
            }
        }

        // Dequantize, NHWC to NCHW and in order: `f32(q − zp) · scale` element by element.
        for [n, c, h, w] in [[2, 48, 23, 19], [1, 64, 40, 40], [1, 1000, 1, 1]] {
            let src = bytes(n * c * h * w, 12);
            for (ty, nhwc) in [(Int8::U8, true), (Int8::S8, true), (Int8::S8, false)] {
                let value = |b: u8| if ty == Int8::S8 { b as i8 as i32 } else { b as i32 };
                let mut want = Vec::with_capacity(src.len() * 4);
                for i in 0..src.len() {
                    let (b, ch, p) = (i / (c * h * w), i / (h * w) % c, i % (h * w));
                    let q = if nhwc { src[(b * h * w + p) * c + ch] } else { src[i] };
                    want.extend(((value(q) - 3) as f32 * 0.0625).to_le_bytes());
                }
                let mut got = vec![0x5au8; want.len()];
                split::dequantize(
                    pool,
                    &src,
                    [n, c, h, w],
                    nhwc,
                    Affine { scale: 0.0625, zero_point: 3, ty },
                    &mut got,
                );
                assert!(got == want, "{}", at(format!("dequantize {:?} {ty:?} nhwc {nhwc}", [n, c, h, w])));
            }
        }

        // Global average pool: `saturate(round_half_even(f32(Σ x − zx·N) · sx / (sy · f32(N))) + zy)`.
        for [n, hw, c] in [[1, 49, 512], [2, 300, 97], [1, 3, 5]] {
            let src = bytes(n * hw * c, 13);
            let (x, y) = ((0.05f32, 7), (0.03f32, 120));
            let scale = x.0 / (y.0 * hw as f32);
            let mut want = vec![0u8; n * c];
            for b in 0..n {
                for ch in 0..c {
                    let sum: i64 = (0..hw).map(|p| src[(b * hw + p) * c + ch] as i64).sum();
                    let v = ((sum - x.1 as i64 * hw as i64) as f32 * scale).round_ties_even() as i64 + y.1 as i64;
                    want[b * c + ch] = v.clamp(0, 255) as u8;
                }
            }
            let mut got = vec![0x5au8; want.len()];
            split::global_avg_pool(pool, &src, [n, hw, c], x, y, Int8::U8, &mut got);
            assert!(got == want, "{}", at(format!("global avg pool {:?}", [n, hw, c])));
        }
    }
}
