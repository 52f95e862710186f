//! Every resnet-18 table layer (R1..R11, FC), as `tensorlift resnet18` runs it (a graph of one
//! quantized partition, `engine::TableGraph`, compiled by the engine's `Spec::compile_in`),
//! against two references that share no code with the compiled path: the graph's own
//! (`reference::run_partition`), and one in plain Rust written here, a direct convolution (a
//! dense layer) in i32 from the raw u8 and s8 arrays, then the requantization written out from
//! the partition's documented semantics (onnxruntime's QLinearConv order: `f32(acc + bias)`
//! times `(src_scale · w_scale[c]) / dst_scale`, round half to even, plus the zero point,
//! saturated). The two references must agree with each other as well.
//!
//! The data are the command's (`layer::LayerData`, full-range weights), the knobs the engine's
//! defaults on every core, the layout NHWC; every level this CPU has is checked (the levels it
//! lacks are reported skipped), on the whole output of every layer, bit for bit (the
//! references, the costly part in a debug build, are computed once per layer and serve every
//! level).

use ir::interp::Array;
use schedules::resnet18::{self, ConvLayer, DenseLayer, Layer, WeightBits};
use tensorlift::engine::TableGraph;
use tensorlift::graph::Data;
use tensorlift::layer::{KernelCache, LayerData};
use tensorlift::{CompileOptions, IsaLevel, Target};

/// The values of an integer array, as raw bytes of its type.
fn u8s(a: &Array) -> Vec<u8> {
    a.to_i64_vec().into_iter().map(|v| u8::try_from(v).expect("a u8 value")).collect()
}

fn i8s(a: &Array) -> Vec<i8> {
    a.to_i64_vec().into_iter().map(|v| i8::try_from(v).expect("an i8 value")).collect()
}

/// The layer's quantization as plain numbers: source scale and zero point, per-channel weight
/// scales, the i32 bias, destination scale and zero point.
struct Quant {
    src_scale: f32,
    src_zp: i32,
    wei_scales: Vec<f32>,
    bias: Vec<i32>,
    dst_scale: f32,
    dst_zp: i32,
}

impl Quant {
    fn of(data: &LayerData) -> Quant {
        let attrs = &data.quant.attrs;
        // What the plain formula below covers: per-tensor activations, per-channel weights, a u8
        // destination, no post-op.
        assert_eq!((attrs.src.scales.mask, attrs.src.zero_points.mask, attrs.dst.scales.mask), (0, 0, 0));
        assert_eq!((attrs.wei_scales.mask, attrs.dst_dtype, attrs.post_ops.len()), (1, ir::DType::U8, 0));
        Quant {
            src_scale: attrs.src.scales.values[0],
            src_zp: attrs.src.zero_points.values[0],
            wei_scales: attrs.wei_scales.values.clone(),
            bias: data.quant.bias_q.clone(),
            dst_scale: attrs.dst.scales.values[0],
            dst_zp: attrs.dst.zero_points.values[0],
        }
    }

    /// onnxruntime's requantization of output channel `oc` from `centered`, the exact sum of
    /// `(src − zp_src) · wei`: `S = (scale_src · scale_wei[oc]) / scale_dst` (two f32
    /// roundings, this order), `v = f32(centered + bias[oc]) · S`, then round half to even,
    /// plus `zp_dst`, saturated to u8.
    fn requantize(&self, oc: usize, centered: i32) -> u8 {
        let s = self.src_scale * self.wei_scales[oc] / self.dst_scale;
        let v = centered.wrapping_add(self.bias[oc]) as f32 * s;
        let r = v.round_ties_even() + self.dst_zp as f32;
        r.clamp(0.0, 255.0) as u8
    }
}

/// The convolution's output `u8[OC, OH, OW]` (NCHW, batch 1): per output element, the exact
/// i32 sum of `(src − zp) · wei` over its taps, padding a real zero, then `requantize`.
///
/// This runs as a debug build, where every loop iteration costs, so the loops are long: each
/// input channel is centered, padded with zeros and split by the stride into phases (the
/// phase `(py, px)` holds the padded pixels `(yy·stride + py, xx·stride + px)`, in rows of
/// `WQ = ⌈(W + 2·pad) / stride⌉`), so that the output `(oy, ox)` reads tap `(ky, kx)` in phase
/// `(ky mod stride, kx mod stride)` at row `oy + ky/stride`, column `ox + kx/stride`. One loop
/// per tap then runs over the whole output as rows of `WQ` columns, whose columns past `OW`
/// (computed from reads that wrap into the next row) are dropped.
fn plain_conv(c: &ConvLayer, data: &LayerData) -> Vec<u8> {
    let q = Quant::of(data);
    let (src, wei) = (u8s(&data.src), i8s(&data.wei));
    // Slices, not vectors, in the loops: indexing a slice needs no call in a debug build.
    let (src, wei): (&[u8], &[i8]) = (&src, &wei);
    let [ic_n, h, w, oc_n, k] = [c.ic, c.h, c.w, c.oc, c.k].map(|v| v as usize);
    let (s, pad) = (c.stride as usize, c.pad as usize);
    let (oh, ow) = (c.oh() as usize, c.ow() as usize);
    let wq = (w + 2 * pad).div_ceil(s);
    // The rows the output reads, and one more for the reads of its dropped columns.
    let hq = oh + (k - 1) / s + 1;
    let phase_len = hq * wq;
    let mut phases = vec![0i32; ic_n * s * s * phase_len];
    for ic in 0..ic_n {
        for y in 0..h {
            let (py, yy) = ((y + pad) % s, (y + pad) / s);
            if yy >= hq {
                continue;
            }
            for x in 0..w {
                let (px, xx) = ((x + pad) % s, (x + pad) / s);
                let at = ((ic * s + py) * s + px) * phase_len + yy * wq + xx;
                phases[at] = i32::from(src[(ic * h + y) * w + x]) - q.src_zp;
            }
        }
    }
    let phases: &[i32] = &phases;
    let mut out = vec![0u8; oc_n * oh * ow];
    let mut acc = vec![0i32; oh * wq];
    let acc: &mut [i32] = &mut acc;
    for oc in 0..oc_n {
        acc.fill(0);
        for ic in 0..ic_n {
            for ky in 0..k {
                for kx in 0..k {
                    let tap = i32::from(wei[((oc * ic_n + ic) * k + ky) * k + kx]);
                    let first = ((ic * s + ky % s) * s + kx % s) * phase_len;
                    let phase = &phases[first..first + phase_len];
                    let (mut j, mut i) = (0, (ky / s) * wq + kx / s);
                    while j < acc.len() {
                        acc[j] += phase[i] * tap;
                        j += 1;
                        i += 1;
                    }
                }
            }
        }
        for oy in 0..oh {
            for ox in 0..ow {
                out[(oc * oh + oy) * ow + ox] = q.requantize(oc, acc[oy * wq + ox]);
            }
        }
    }
    out
}

/// The dense layer's output `u8[OC]` (batch 1), as `plain_conv`.
fn plain_dense(d: &DenseLayer, data: &LayerData) -> Vec<u8> {
    let q = Quant::of(data);
    let (src, wei) = (u8s(&data.src), i8s(&data.wei));
    let ic_n = d.in_features as usize;
    (0..d.out_features as usize)
        .map(|oc| {
            let row = &wei[oc * ic_n..(oc + 1) * ic_n];
            let sum: i32 = src.iter().zip(row).map(|(&s, &w)| (i32::from(s) - q.src_zp) * i32::from(w)).sum();
            q.requantize(oc, sum)
        })
        .collect()
}

/// The NHWC output `found` (`[OH, OW, OC]`, the dense layer's `[OC]`) against the NCHW
/// `expected`: the first difference, with its place.
fn first_difference(layer: Layer, expected: &[u8], found: &[u8]) -> Option<String> {
    if expected.len() != found.len() {
        return Some(format!("{} output bytes, expected {}", found.len(), expected.len()));
    }
    let (oc_n, pixels) = match layer {
        Layer::Conv(c) => (c.oc as usize, (c.oh() * c.ow()) as usize),
        Layer::Dense(d) => (d.out_features as usize, 1),
    };
    for p in 0..pixels {
        for oc in 0..oc_n {
            let (e, f) = (expected[oc * pixels + p], found[p * oc_n + oc]);
            if e != f {
                return Some(format!("channel {oc}, pixel {p}: expected {e}, found {f}"));
            }
        }
    }
    None
}

#[test]
fn every_table_layer_at_every_level_here_equals_the_graph_and_a_plain_rust_reference() {
    let levels = crate::skip::levels_here(IsaLevel::ALL);
    assert!(levels.contains(&IsaLevel::Scalar));
    let mut failures = Vec::new();
    for layer in resnet18::layers() {
        let table = TableGraph::new(layer, WeightBits::Eight).expect("a table layer");
        let plain = match layer {
            Layer::Conv(c) => plain_conv(&c, &table.data),
            Layer::Dense(d) => plain_dense(&d, &table.data),
        };
        // The data exercise the requantization: most outputs are neither 0 nor 255.
        let inside = plain.iter().filter(|&&v| v != 0 && v != 255).count();
        assert!(inside * 10 > plain.len() * 9, "{}: {inside} of {} inside (0, 255)", layer.name(), plain.len());
        let reference = table.reference().expect("the graph's reference");
        let Data::U8(graph) = reference.data() else { panic!("{}: a u8 reference, found {reference}", layer.name()) };
        assert!(graph == &plain, "{}: the graph's reference differs from the plain one", layer.name());
        let src = table.src_bytes();
        for &level in &levels {
            let options = CompileOptions { target: Target::Level(level), ..Default::default() };
            let compiled = table.compile(&KernelCache::new(), None, &options).expect("compiles");
            let mut found = vec![0u8; plain.len()];
            compiled.run(&src, &mut found).expect("runs");
            if let Some(difference) = first_difference(layer, &plain, &found) {
                failures.push(format!("{} at {level} ({:?}): {difference}", layer.name(), compiled.knobs()));
            }
        }
    }
    assert!(failures.is_empty(), "outputs that differ from the references:\n{}", failures.join("\n"));
}
