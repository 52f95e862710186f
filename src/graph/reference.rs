//! The plain-Rust reference of a partitioned graph: each partition evaluated by the formula its
//! kind (or its op) states, with naive row-major loops. It is the slow twin every compiled
//! partition is tested against, bit for bit, so it shares no code with any fast path: only the
//! graph's own shape inference and window geometry.

use std::collections::BTreeMap;

use half::{bf16, f16};

use super::attrs::{AvgPoolAttrs, BiasAddAttrs, ClipAttrs, QuantParams, ReduceMeanAttrs};
use super::dtype::DataType;
use super::error::{GraphError, OpRef, TensorRef};
use super::finalize::FinalizedGraph;
use super::op::OpKind;
use super::partition::{
    Partition, PartitionId, PartitionKind, QAdd, QConv, QGlobalAvgPool, QMatMul, QMaxPool, QuantTensor,
};
use super::shape::{
    Operand, avg_pool_window, broadcast, conv_window, infer, max_pool_window, permutation, reduce_axes,
};
use super::tensor::{Dim, Shape, TensorId};
use super::value::{Data, Value};
use super::window::Window;

/// Why the reference could not evaluate a graph.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    #[error("{tensor} is not a graph input")]
    NotAnInput { tensor: TensorRef },
    #[error("graph input {tensor} has no value")]
    MissingInput { tensor: TensorRef },
    #[error("graph input {tensor} must be {expected}, found {found}")]
    InputDType { tensor: TensorRef, expected: DataType, found: DataType },
    #[error("graph input {tensor} must have shape {expected}, found {found:?}")]
    InputShape { tensor: TensorRef, expected: Shape, found: Vec<usize> },
    #[error("partition {partition}: {tensor} has no value yet (partitions out of order?)")]
    NotComputed { partition: PartitionId, tensor: TensorRef },
    #[error("graph output {tensor} is computed by no partition")]
    OutputNotComputed { tensor: TensorRef },
    #[error("partition {partition} ({kind}): {reason}")]
    Partition { partition: PartitionId, kind: &'static str, reason: String },
    /// An op's check with the concrete shapes failed (a dimension unknown until now).
    #[error(transparent)]
    Graph(Box<GraphError>),
}

impl From<GraphError> for ReferenceError {
    fn from(e: GraphError) -> ReferenceError {
        ReferenceError::Graph(Box::new(e))
    }
}

/// Evaluates `partitions` (from `graph.get_partitions`, in that order) on `inputs` (one value
/// per graph input) and returns the graph outputs, in the order marked. Errors: an input
/// missing, not a graph input, or of the wrong type or shape; a partition whose inputs are not
/// computed; an op whose checks fail with the concrete shapes.
pub fn run(
    graph: &FinalizedGraph,
    partitions: &[Partition],
    inputs: &[(TensorId, Value)],
) -> Result<Vec<(TensorId, Value)>, ReferenceError> {
    let g = graph.graph();
    let mut env: BTreeMap<TensorId, Value> = BTreeMap::new();
    for (t, v) in inputs {
        let tensor = g.tensor_ref(*t);
        let Some(lt) = graph.tensor(*t).filter(|_| g.inputs().contains(t)) else {
            return Err(ReferenceError::NotAnInput { tensor });
        };
        if lt.dtype != v.dtype() {
            return Err(ReferenceError::InputDType { tensor, expected: lt.dtype, found: v.dtype() });
        }
        if !lt.shape.fits(&Shape::known(v.dims())) {
            return Err(ReferenceError::InputShape { tensor, expected: lt.shape.clone(), found: v.dims().to_vec() });
        }
        env.insert(*t, v.clone());
    }
    if let Some(&t) = g.inputs().iter().find(|t| !env.contains_key(t)) {
        return Err(ReferenceError::MissingInput { tensor: g.tensor_ref(t) });
    }
    for p in partitions {
        let mut values = Vec::with_capacity(p.inputs.len());
        for &t in &p.inputs {
            let v = match (env.get(&t), g.constant_value(t)) {
                (Some(v), _) => v.clone(),
                (None, Some(c)) => (**c).clone(),
                (None, None) => return Err(ReferenceError::NotComputed { partition: p.id, tensor: g.tensor_ref(t) }),
            };
            values.push(v);
        }
        let out = run_partition(graph, p, &values)?;
        let fail = |reason: String| ReferenceError::Partition { partition: p.id, kind: p.kind.name(), reason };
        let [t] = p.outputs[..] else { return Err(fail(format!("expected 1 output, found {}", p.outputs.len()))) };
        env.insert(t, out);
    }
    g.outputs()
        .iter()
        .map(|&t| match (env.get(&t), g.constant_value(t)) {
            (Some(v), _) => Ok((t, v.clone())),
            (None, Some(c)) => Ok((t, (**c).clone())),
            (None, None) => Err(ReferenceError::OutputNotComputed { tensor: g.tensor_ref(t) }),
        })
        .collect()
}

/// Evaluates one partition on `values`, the values of `partition.inputs` in that order, and
/// returns the value of its output: the reference a compiled partition is compared with.
/// Errors: values that do not fit the partition (count, types, shapes), an op whose checks
/// fail with the concrete shapes.
pub fn run_partition(graph: &FinalizedGraph, p: &Partition, values: &[Value]) -> Result<Value, ReferenceError> {
    let g = graph.graph();
    if values.len() != p.inputs.len() {
        return Err(ReferenceError::Partition {
            partition: p.id,
            kind: p.kind.name(),
            reason: format!("expected {} input values, found {}", p.inputs.len(), values.len()),
        });
    }
    let fail = |reason: String| ReferenceError::Partition { partition: p.id, kind: p.kind.name(), reason };
    let out = match &p.kind {
        PartitionKind::Single(kind) | PartitionKind::Unsupported { op: kind, .. } => {
            let Some(&id) = p.ops.first() else { return Err(fail("no op".into())) };
            let op = graph.op(id).ok_or_else(|| fail(format!("{id} is not an op of the graph")))?;
            // The op's inputs in its own order (the partition lists each tensor once).
            let args: Vec<&Value> = op
                .inputs
                .iter()
                .map(|t| p.inputs.iter().position(|i| i == t).map(|k| &values[k]))
                .collect::<Option<_>>()
                .ok_or_else(|| fail("an op input is not a partition input".into()))?;
            eval_op(&g.op_ref(id), kind, &args, &args_refs(graph, &op.inputs))?
        }
        PartitionKind::QuantizedConv(c) => match (&c.residual, values) {
            (None, _) => quantized_conv(c, one(values).map_err(fail)?).map_err(fail)?,
            // The other operand is the last input (the only one when it is also the source).
            (Some(r), [x] | [x, _]) => {
                let y = quantized_conv(c, x).map_err(fail)?;
                let other = values.last().unwrap_or(x);
                let (a, b) = if r.conv_is_a { (&y, other) } else { (other, &y) };
                quantized_add(&r.add, a, b).map_err(fail)?
            }
            (Some(_), _) => return Err(fail(format!("expected 1 or 2 inputs, found {}", values.len()))),
        },
        PartitionKind::QuantizedMatMul(m) => quantized_matmul(m, one(values).map_err(fail)?).map_err(fail)?,
        PartitionKind::QuantizedAdd(a) => {
            let (x, y) = match values {
                [x] => (x, x),
                [x, y] => (x, y),
                _ => return Err(fail(format!("expected 1 or 2 inputs, found {}", values.len()))),
            };
            quantized_add(a, x, y).map_err(fail)?
        }
        PartitionKind::QuantizedMaxPool(m) => quantized_max_pool(m, one(values).map_err(fail)?).map_err(fail)?,
        PartitionKind::QuantizedGlobalAvgPool(a) => {
            quantized_global_avg_pool(a, one(values).map_err(fail)?).map_err(fail)?
        }
    };
    Ok(out)
}

fn args_refs(graph: &FinalizedGraph, inputs: &[TensorId]) -> Vec<TensorRef> {
    inputs.iter().map(|&t| graph.graph().tensor_ref(t)).collect()
}

fn one(values: &[Value]) -> Result<&Value, String> {
    match values {
        [v] => Ok(v),
        _ => Err(format!("expected 1 input, found {}", values.len())),
    }
}

// ---------------------------------------------------------------------------------------------
// Index helpers.

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The multi-index of flat index `i` in `dims`.
fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        if dims[d] > 0 {
            idx[d] = i % dims[d];
            i /= dims[d];
        }
    }
    idx
}

/// The flat index in an operand of dims `d` that numpy broadcasting maps output index `o` to.
fn broadcast_index(o: &[usize], d: &[usize]) -> usize {
    let off = o.len() - d.len();
    let s = strides(d);
    (0..d.len()).map(|j| if d[j] == 1 { 0 } else { o[j + off] * s[j] }).sum()
}

/// A window over up to three spatial dimensions, padded to exactly three (missing ones: size
/// 1, kernel 1, stride 1, no padding), with the output sizes.
struct Geometry {
    d: [usize; 3],
    k: [usize; 3],
    o: [usize; 3],
    w: Window,
}

impl Geometry {
    fn new(w: &Window, spatial: &[usize]) -> Result<Geometry, String> {
        if spatial.len() > 3 || spatial.len() != w.rank() {
            return Err(format!("{} spatial dimensions for a window of {}", spatial.len(), w.rank()));
        }
        let mut g = Geometry {
            d: [1; 3],
            k: [1; 3],
            o: [1; 3],
            w: Window {
                kernel: vec![1; 3],
                strides: vec![1; 3],
                pads_begin: vec![0; 3],
                pads_end: vec![0; 3],
                dilations: vec![1; 3],
                ceil_mode: w.ceil_mode,
            },
        };
        for a in 0..spatial.len() {
            g.d[a] = spatial[a];
            g.k[a] = w.kernel[a];
            g.w.kernel[a] = w.kernel[a];
            g.w.strides[a] = w.strides[a];
            g.w.pads_begin[a] = w.pads_begin[a];
            g.w.pads_end[a] = w.pads_end[a];
            g.w.dilations[a] = w.dilations[a];
            g.o[a] = w.output_size(a, spatial[a]).ok_or_else(|| format!("the window does not fit {spatial:?}"))?;
        }
        Ok(g)
    }

    /// The input position of tap `k` for output `o` on axis `a`, if inside the input.
    fn at(&self, a: usize, o: usize, k: usize) -> Option<usize> {
        let p = self.w.position(a, o, k);
        (p >= 0 && (p as usize) < self.d[a]).then_some(p as usize)
    }

    fn spatial_len(&self) -> usize {
        self.d.iter().product()
    }

    /// Every output position and, for each, every tap inside the input as a flat spatial index
    /// (taps row-major).
    fn for_each(&self, mut f: impl FnMut(usize, &mut dyn Iterator<Item = usize>)) {
        let mut out = 0;
        for o0 in 0..self.o[0] {
            for o1 in 0..self.o[1] {
                for o2 in 0..self.o[2] {
                    let mut taps = (0..self.k[0]).flat_map(move |k0| {
                        (0..self.k[1]).flat_map(move |k1| (0..self.k[2]).map(move |k2| (k0, k1, k2)))
                    });
                    let mut inside = std::iter::from_fn(|| {
                        for (k0, k1, k2) in taps.by_ref() {
                            if let (Some(i0), Some(i1), Some(i2)) =
                                (self.at(0, o0, k0), self.at(1, o1, k1), self.at(2, o2, k2))
                            {
                                return Some((i0 * self.d[1] + i1) * self.d[2] + i2);
                            }
                        }
                        None
                    });
                    f(out, &mut inside);
                    out += 1;
                }
            }
        }
    }

    /// The taps inside the input of flat output position `out` (row-major over `o`): (flat
    /// spatial index in the input, flat index in the kernel), in `for_each`'s order.
    fn taps_of(&self, out: usize, taps: &mut Vec<(usize, usize)>) {
        taps.clear();
        let (o0, o1, o2) = (out / (self.o[1] * self.o[2]), out / self.o[2] % self.o[1], out % self.o[2]);
        for k0 in 0..self.k[0] {
            for k1 in 0..self.k[1] {
                for k2 in 0..self.k[2] {
                    if let (Some(i0), Some(i1), Some(i2)) = (self.at(0, o0, k0), self.at(1, o1, k1), self.at(2, o2, k2))
                    {
                        taps.push(((i0 * self.d[1] + i1) * self.d[2] + i2, (k0 * self.k[1] + k1) * self.k[2] + k2));
                    }
                }
            }
        }
    }

    /// The flat index in the kernel of each tap inside the input, in the same order as
    /// `for_each` gives taps.
    fn for_each_with_kernel(&self, mut f: impl FnMut(usize, &[(usize, usize)])) {
        let mut taps = Vec::with_capacity(self.k.iter().product());
        for out in 0..self.out_len() {
            self.taps_of(out, &mut taps);
            f(out, &taps);
        }
    }

    fn out_len(&self) -> usize {
        self.o.iter().product()
    }

    /// The output sizes of the `rank` real spatial dimensions.
    fn out_dims(&self, rank: usize) -> Vec<usize> {
        self.o[..rank].to_vec()
    }
}

// ---------------------------------------------------------------------------------------------
// Requantization (the formulas of `partition`).

/// `clamp(round_half_even(v) + zp, lo, hi)`, with `v` clamped to `[lo − zp, hi − zp]` before
/// rounding as MLAS does (the same for every non-NaN `v`; NaN gives `lo`).
fn requantize(v: f32, zp: i32, (lo, hi): (i32, i32)) -> i32 {
    let lo_f = (lo - zp) as f32;
    let hi_f = (hi - zp) as f32;
    let v = if v > lo_f { v } else { lo_f };
    let v = if v < hi_f { v } else { hi_f };
    v.round_ties_even() as i32 + zp
}

fn int_values(v: &Value, q: &QuantTensor, what: &str) -> Result<Vec<i32>, String> {
    if v.dtype() != q.dtype {
        return Err(format!("{what} must be {}, found {}", q.dtype, v.dtype()));
    }
    v.data().to_i32().ok_or_else(|| format!("{what} must be an integer tensor"))
}

fn check_dims(found: &[usize], expected: &[Dim], what: &str) -> Result<(), String> {
    if Shape::Dims(expected.to_vec()).fits(&Shape::known(found)) {
        Ok(())
    } else {
        Err(format!("{what} must have shape {}, found {found:?}", Shape::Dims(expected.to_vec())))
    }
}

fn int_value(dims: &[usize], dtype: DataType, v: Vec<i32>) -> Result<Value, String> {
    let data = Data::from_i32(dtype, v).ok_or_else(|| format!("a result outside {dtype}"))?;
    Value::new(dims, data).map_err(|e| e.to_string())
}

/// `QConv`'s formula.
fn quantized_conv(c: &QConv, x: &Value) -> Result<Value, String> {
    check_dims(x.dims(), &c.src_dims, "the source")?;
    let xs = int_values(x, &c.src, "the source")?;
    let dims = x.dims();
    if dims.len() < 3 || c.weight_dims.len() != dims.len() || c.groups == 0 {
        return Err(format!("source {dims:?} and weights {:?} do not fit", c.weight_dims));
    }
    let (n, ch) = (dims[0], dims[1]);
    let oc = c.weight_dims[0];
    let (cg, ocg) = (ch / c.groups, oc / c.groups);
    if cg != c.weight_dims[1] || cg * c.groups != ch || ocg * c.groups != oc {
        return Err(format!("weights {:?} do not fit {ch} channels in {} groups", c.weight_dims, c.groups));
    }
    let klen_declared: usize = c.weight_dims.iter().product();
    if c.weights.len() != klen_declared
        || !(c.weight_scales.len() == 1 || c.weight_scales.len() == oc)
        || c.bias.as_ref().is_some_and(|b| b.len() != oc)
    {
        return Err(format!(
            "{} weights, {} weight scales and {:?} biases do not fit weights {:?}",
            c.weights.len(),
            c.weight_scales.len(),
            c.bias.as_ref().map(Vec::len),
            c.weight_dims
        ));
    }
    let window = Window { kernel: c.weight_dims[2..].to_vec(), ..c.window.clone() };
    let geo = Geometry::new(&window, &dims[2..])?;
    let (sp, klen, olen) = (geo.spatial_len(), geo.k.iter().product::<usize>(), geo.out_len());
    let scale = |o: usize| {
        let ws = if c.weight_scales.len() == 1 { c.weight_scales[0] } else { c.weight_scales[o] };
        c.src.scale * ws / c.dst.scale
    };
    let zp = c.src.zero_point;
    // The operands with the channels innermost, so that each tap is a dot product of two
    // contiguous rows: the source less its zero point `[n, spatial, ch]`, the weights
    // `[oc, taps, cg]`.
    let mut xt = vec![0i32; n * sp * ch];
    for b in 0..n {
        for i in 0..ch {
            for p in 0..sp {
                xt[(b * sp + p) * ch + i] = xs[(b * ch + i) * sp + p].wrapping_sub(zp);
            }
        }
    }
    let mut wt = vec![0i32; oc * klen * cg];
    for o in 0..oc {
        for i in 0..cg {
            for k in 0..klen {
                wt[(o * klen + k) * cg + i] = i32::from(c.weights[(o * cg + i) * klen + k]);
            }
        }
    }
    let dot = |x: &[i32], w: &[i32]| x.iter().zip(w).fold(0i32, |acc, (a, b)| acc.wrapping_add(a.wrapping_mul(*b)));
    // Output positions `[n · olen]`, each `oc` values (position-major; transposed at the end).
    let position = |bp: usize, row: &mut [i32], taps: &mut Vec<(usize, usize)>| {
        let (b, pos) = (bp / olen, bp % olen);
        geo.taps_of(pos, taps);
        for (o, y) in row.iter_mut().enumerate() {
            let g = o / ocg;
            let mut acc = 0i32;
            for &(xi, ki) in taps.iter() {
                let x = &xt[(b * sp + xi) * ch + g * cg..][..cg];
                acc = acc.wrapping_add(dot(x, &wt[(o * klen + ki) * cg..][..cg]));
            }
            let bias = c.bias.as_ref().map_or(0, |v| v[o]);
            *y = requantize(acc.wrapping_add(bias) as f32 * scale(o), c.dst.zero_point, c.clamp);
        }
    };
    let mut by_position = vec![0i32; n * olen * oc];
    // The positions are independent: spread over the cores (the tuner computes a task's
    // reference before its search, and the tests compare many partitions with it).
    if oc > 0 && olen > 0 {
        let positions = n * olen;
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, positions);
        let per = positions.div_ceil(threads);
        std::thread::scope(|scope| {
            for (t, chunk) in by_position.chunks_mut(per * oc).enumerate() {
                let position = &position;
                scope.spawn(move || {
                    let mut taps = Vec::with_capacity(klen);
                    for (i, row) in chunk.chunks_mut(oc).enumerate() {
                        position(t * per + i, row, &mut taps);
                    }
                });
            }
        });
    }
    let mut out = vec![0i32; n * oc * olen];
    for b in 0..n {
        for pos in 0..olen {
            for o in 0..oc {
                out[(b * oc + o) * olen + pos] = by_position[(b * olen + pos) * oc + o];
            }
        }
    }
    let mut out_dims = vec![n, oc];
    out_dims.extend(geo.out_dims(dims.len() - 2));
    int_value(&out_dims, c.dst.dtype, out)
}

/// `QMatMul`'s formula.
fn quantized_matmul(m: &QMatMul, x: &Value) -> Result<Value, String> {
    check_dims(x.dims(), &m.src_dims, "the source")?;
    let xs = int_values(x, &m.src, "the source")?;
    let [k, n] = m.weight_dims;
    let &[rows, kx] = x.dims() else { return Err(format!("the source must be [M, K], found {:?}", x.dims())) };
    let scales_ok = m.weight_scales.len() == 1 || m.weight_scales.len() == n;
    if kx != k || m.weights.len() != k * n || !scales_ok || m.bias.as_ref().is_some_and(|b| b.len() != n) {
        return Err(format!("the source [{rows}, {kx}] does not fit weights [{k}, {n}]"));
    }
    // `w[kk, col]` of `[K, N]`, stored `[N, K]` where transposed.
    let w =
        |kk: usize, col: usize| i32::from(m.weights[if m.weights_transposed { col * k + kk } else { kk * n + col }]);
    let mut out = vec![0i32; rows * n];
    for r in 0..rows {
        for col in 0..n {
            let mut acc = 0i32;
            for kk in 0..k {
                acc = acc.wrapping_add((xs[r * k + kk] - m.src.zero_point) * w(kk, col));
            }
            let ws = if m.weight_scales.len() == 1 { m.weight_scales[0] } else { m.weight_scales[col] };
            let s = m.src.scale * ws / m.dst.scale;
            let bias = m.bias.as_ref().map_or(0, |b| b[col]);
            out[r * n + col] = requantize(acc.wrapping_add(bias) as f32 * s, m.dst.zero_point, m.clamp);
        }
    }
    int_value(&[rows, n], m.dst.dtype, out)
}

/// `QAdd`'s formula.
fn quantized_add(q: &QAdd, a: &Value, b: &Value) -> Result<Value, String> {
    check_dims(a.dims(), &q.a_dims, "input a")?;
    check_dims(b.dims(), &q.b_dims, "input b")?;
    let av = int_values(a, &q.a, "input a")?;
    let bv = int_values(b, &q.b, "input b")?;
    let known = |d: &[usize]| d.iter().map(|&x| Dim::Known(x)).collect::<Vec<_>>();
    let out_dims: Vec<usize> = broadcast(&known(a.dims()), &known(b.dims()))
        .and_then(|d| d.iter().map(|x| x.known()).collect())
        .ok_or_else(|| format!("{:?} and {:?} do not broadcast", a.dims(), b.dims()))?;
    let r_a = q.a.scale / q.dst.scale;
    let r_b = q.b.scale / q.dst.scale;
    let fixed = q.dst.zero_point as f32 - (r_a * q.a.zero_point as f32 + r_b * q.b.zero_point as f32);
    let len: usize = out_dims.iter().product();
    let mut out = Vec::with_capacity(len);
    for i in 0..len {
        let o = unravel(i, &out_dims);
        let x = av[broadcast_index(&o, a.dims())] as f32;
        let y = bv[broadcast_index(&o, b.dims())] as f32;
        let v = x.mul_add(r_a, y.mul_add(r_b, fixed));
        // The zero point is already in `fixed`.
        out.push(requantize(v, 0, q.clamp));
    }
    int_value(&out_dims, q.dst.dtype, out)
}

/// `QMaxPool`'s formula.
fn quantized_max_pool(m: &QMaxPool, x: &Value) -> Result<Value, String> {
    check_dims(x.dims(), &m.src_dims, "the source")?;
    if x.dtype() != m.dtype {
        return Err(format!("the source must be {}, found {}", m.dtype, x.dtype()));
    }
    let xs = x.data().to_i32().ok_or("the source must be an integer tensor")?;
    let lowest = m.dtype.int_range().map_or(i32::MIN, |r| r.0);
    pool_i32(&m.window, x.dims(), &xs, lowest).and_then(|(dims, v)| int_value(&dims, m.dtype, v))
}

fn pool_i32(w: &Window, dims: &[usize], xs: &[i32], lowest: i32) -> Result<(Vec<usize>, Vec<i32>), String> {
    if dims.len() < 3 {
        return Err(format!("the source must have rank ≥ 3, found {dims:?}"));
    }
    let geo = Geometry::new(w, &dims[2..])?;
    let (planes, sp, olen) = (dims[0] * dims[1], geo.spatial_len(), geo.out_len());
    let mut out = vec![lowest; planes * olen];
    for p in 0..planes {
        geo.for_each(|pos, taps| {
            let mut m = lowest;
            for i in taps {
                let v = xs[p * sp + i];
                if v > m {
                    m = v;
                }
            }
            out[p * olen + pos] = m;
        });
    }
    let mut out_dims = dims[..2].to_vec();
    out_dims.extend(geo.out_dims(dims.len() - 2));
    Ok((out_dims, out))
}

/// `QGlobalAvgPool`'s formula.
fn quantized_global_avg_pool(a: &QGlobalAvgPool, x: &Value) -> Result<Value, String> {
    check_dims(x.dims(), &a.src_dims, "the source")?;
    let xs = int_values(x, &a.src, "the source")?;
    let dims = x.dims();
    if dims.len() < 3 {
        return Err(format!("the source must have rank ≥ 3, found {dims:?}"));
    }
    let p: usize = dims[2..].iter().product();
    let s = a.src.scale / (a.dst.scale * p as f32);
    let range = a.dst.range();
    let out: Vec<i32> = (0..dims[0] * dims[1])
        .map(|plane| {
            let sum = xs[plane * p..(plane + 1) * p].iter().fold(0i32, |acc, &v| acc.wrapping_add(v));
            let acc = sum.wrapping_sub(a.src.zero_point.wrapping_mul(p as i32));
            requantize(acc as f32 * s, a.dst.zero_point, range)
        })
        .collect();
    let mut out_dims = dims[..2].to_vec();
    out_dims.extend(std::iter::repeat_n(1, dims.len() - 2));
    int_value(&out_dims, a.dst.dtype, out)
}

// ---------------------------------------------------------------------------------------------
// Single ops, as `OpKind` defines them.

/// Evaluates one op on concrete values: its checks first (with the concrete shapes), then its
/// formula.
fn eval_op(op: &OpRef, kind: &OpKind, args: &[&Value], refs: &[TensorRef]) -> Result<Value, ReferenceError> {
    let shapes: Vec<Shape> = args.iter().map(|v| Shape::known(v.dims())).collect();
    let operands: Vec<Operand<'_>> = args
        .iter()
        .zip(&shapes)
        .zip(refs)
        .map(|((v, s), r)| Operand { tensor: r, dtype: v.dtype(), shape: s })
        .collect();
    let (dtype, shape) = infer(op, kind, &operands)?;
    let out_dims = shape.concrete().unwrap_or_default();
    let float = |v: &Value| v.data().to_f32().unwrap_or_default();
    let x = args[0];
    let result: Vec<f32> = match kind {
        OpKind::Convolution(a) => {
            let w = args[1];
            let window = conv_window(op, a, &w.dims()[2..])?;
            conv_f32(&window, a.groups as usize, x, w, args.get(2).copied())
        }
        OpKind::MatMul(a) => {
            matmul_f32(&float(x), x.dims(), &float(args[1]), args[1].dims(), a.transpose_a, a.transpose_b, &out_dims)
        }
        OpKind::BiasAdd(BiasAddAttrs { axis }) => {
            let (xs, b) = (float(x), float(args[1]));
            let s = strides(x.dims());
            let axis = *axis as usize;
            xs.iter().enumerate().map(|(i, &v)| v + b[(i / s[axis]) % x.dims()[axis]]).collect()
        }
        OpKind::Add => {
            let (a, b) = (float(x), float(args[1]));
            (0..out_dims.iter().product())
                .map(|i| {
                    let o = unravel(i, &out_dims);
                    a[broadcast_index(&o, x.dims())] + b[broadcast_index(&o, args[1].dims())]
                })
                .collect()
        }
        OpKind::ReLU => float(x).into_iter().map(|v| if v < 0.0 { 0.0 } else { v }).collect(),
        OpKind::Clip(ClipAttrs { min, max }) => float(x)
            .into_iter()
            .map(|v| {
                if v < *min {
                    *min
                } else if v > *max {
                    *max
                } else {
                    v
                }
            })
            .collect(),
        OpKind::MaxPool(a) => {
            let window = max_pool_window(op, a, x.dims().len() - 2)?;
            if x.dtype().is_int8() {
                let xs = x.data().to_i32().unwrap_or_default();
                let lowest = x.dtype().int_range().map_or(0, |r| r.0);
                let (dims, v) = pool_i32(&window, x.dims(), &xs, lowest).map_err(|e| shape_error(op, e))?;
                return int_value(&dims, x.dtype(), v).map_err(|e| shape_error(op, e));
            }
            let lowest = match x.dtype() {
                DataType::F16 => f16::MIN.to_f32(),
                DataType::Bf16 => bf16::MIN.to_f32(),
                _ => f32::MIN,
            };
            pool_f32(&window, x.dims(), &float(x), |taps, _| {
                let mut m = lowest;
                for v in taps {
                    if v > m {
                        m = v;
                    }
                }
                m
            })
        }
        OpKind::AvgPool(a) => avg_pool(op, a, x, &float(x))?,
        OpKind::GlobalAveragePool => {
            let p: usize = x.dims()[2..].iter().product();
            float(x).chunks(p.max(1)).map(|c| c.iter().fold(0.0f32, |s, &v| s + v) / p as f32).collect()
        }
        OpKind::ReduceMean(a) => reduce_mean(op, a, x.dims(), &float(x))?,
        OpKind::Dequantize(p) => {
            let xs = x.data().to_i32().unwrap_or_default();
            let per = per_channel(p, x.dims());
            xs.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (s, z) = p.get(per(i));
                    v.wrapping_sub(z) as f32 * s
                })
                .collect()
        }
        OpKind::Quantize(a) => {
            let range = a.dtype.int_range().unwrap_or((0, 0));
            let per = per_channel(&a.params, x.dims());
            let q: Vec<i32> = float(x)
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (s, z) = a.params.get(per(i));
                    requantize(v / s, z, range)
                })
                .collect();
            return int_value(&out_dims, a.dtype, q).map_err(|e| shape_error(op, e));
        }
        OpKind::TypeCast(_) => float(x),
        OpKind::StaticReshape(_) | OpKind::Reorder => {
            return Value::new(&out_dims, x.data().clone()).map_err(|e| shape_error(op, e.to_string()));
        }
        OpKind::StaticTranspose(a) => {
            let perm = permutation(op, a, x.dims().len())?;
            let s = strides(x.dims());
            let idx: Vec<usize> = (0..x.len())
                .map(|i| unravel(i, &out_dims).iter().enumerate().map(|(ax, &o)| o * s[perm[ax]]).sum())
                .collect();
            return Value::new(&out_dims, x.data().gather(&idx)).map_err(|e| shape_error(op, e.to_string()));
        }
    };
    let data = Data::from_f32(dtype, result).ok_or_else(|| shape_error(op, format!("a float result as {dtype}")))?;
    Value::new(&out_dims, data).map_err(|e| shape_error(op, e.to_string()))
}

fn shape_error(op: &OpRef, found: String) -> ReferenceError {
    GraphError::Shape { op: op.clone(), operand: "the result".into(), expected: "what the op defines".into(), found }
        .into()
}

/// The channel of flat index `i` for per-channel parameters (0 per tensor).
fn per_channel<'a>(p: &'a QuantParams, dims: &'a [usize]) -> impl Fn(usize) -> usize + 'a {
    let s = strides(dims);
    move |i| match p.axis {
        Some(a) => (i / s[a as usize]) % dims[a as usize],
        None => 0,
    }
}

fn conv_f32(w: &Window, groups: usize, x: &Value, wt: &Value, b: Option<&Value>) -> Vec<f32> {
    let (xs, ws) = (x.data().to_f32().unwrap_or_default(), wt.data().to_f32().unwrap_or_default());
    let bs = b.and_then(|b| b.data().to_f32());
    let dims = x.dims();
    let (n, ch, oc) = (dims[0], dims[1], wt.dims()[0]);
    let (cg, ocg) = (ch / groups, oc / groups);
    let Ok(geo) = Geometry::new(w, &dims[2..]) else { return vec![] };
    let (sp, klen, olen) = (geo.spatial_len(), geo.k.iter().product::<usize>(), geo.out_len());
    let mut out = vec![0.0f32; n * oc * olen];
    for bi in 0..n {
        for o in 0..oc {
            let g = o / ocg;
            geo.for_each_with_kernel(|pos, taps| {
                let mut acc = 0.0f32;
                for ic in 0..cg {
                    let xbase = (bi * ch + g * cg + ic) * sp;
                    let wbase = (o * cg + ic) * klen;
                    for &(xi, ki) in taps {
                        acc += xs[xbase + xi] * ws[wbase + ki];
                    }
                }
                out[(bi * oc + o) * olen + pos] = match &bs {
                    Some(b) => acc + b[o],
                    None => acc,
                };
            });
        }
    }
    out
}

fn matmul_f32(a: &[f32], ad: &[usize], b: &[f32], bd: &[usize], ta: bool, tb: bool, out: &[usize]) -> Vec<f32> {
    let (ra, rb, ro) = (ad.len(), bd.len(), out.len());
    let (m, k) = if ta { (ad[ra - 1], ad[ra - 2]) } else { (ad[ra - 2], ad[ra - 1]) };
    let n = out[ro - 1];
    let batch = &out[..ro - 2];
    let (abatch, bbatch) = (&ad[..ra - 2], &bd[..rb - 2]);
    let (amat, bmat) = (ad[ra - 2] * ad[ra - 1], bd[rb - 2] * bd[rb - 1]);
    let count: usize = batch.iter().product();
    let mut y = Vec::with_capacity(count * m * n);
    for bi in 0..count {
        let o = unravel(bi, batch);
        let (ab, bb) = (broadcast_index(&o, abatch) * amat, broadcast_index(&o, bbatch) * bmat);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for kk in 0..k {
                    let av = if ta { a[ab + kk * m + i] } else { a[ab + i * k + kk] };
                    let bv = if tb { b[bb + j * k + kk] } else { b[bb + kk * n + j] };
                    acc += av * bv;
                }
                y.push(acc);
            }
        }
    }
    y
}

fn pool_f32(
    w: &Window,
    dims: &[usize],
    xs: &[f32],
    f: impl Fn(&mut dyn Iterator<Item = f32>, usize) -> f32,
) -> Vec<f32> {
    let Ok(geo) = Geometry::new(w, &dims[2..]) else { return vec![] };
    let (planes, sp, olen) = (dims[0] * dims[1], geo.spatial_len(), geo.out_len());
    let mut out = vec![0.0; planes * olen];
    for p in 0..planes {
        geo.for_each(|pos, taps| {
            let mut values = taps.map(|i| xs[p * sp + i]);
            out[p * olen + pos] = f(&mut values, pos);
        });
    }
    out
}

fn avg_pool(op: &OpRef, a: &AvgPoolAttrs, x: &Value, xs: &[f32]) -> Result<Vec<f32>, ReferenceError> {
    let dims = x.dims();
    let window = avg_pool_window(op, a, dims.len() - 2)?;
    let geo = Geometry::new(&window, &dims[2..]).map_err(|e| shape_error(op, e))?;
    // Per output position: the taps inside the padded extent −pb..D + pe, per axis.
    let padded = |axis: usize, o: usize| {
        (0..geo.k[axis])
            .filter(|&k| {
                let p = geo.w.position(axis, o, k);
                p >= -(geo.w.pads_begin[axis] as i128) && p < (geo.d[axis] + geo.w.pads_end[axis]) as i128
            })
            .count()
    };
    let include_pad = a.count_include_pad;
    let counts: Vec<usize> = (0..geo.o[0])
        .flat_map(|o0| (0..geo.o[1]).flat_map(move |o1| (0..geo.o[2]).map(move |o2| (o0, o1, o2))))
        .map(|(o0, o1, o2)| padded(0, o0) * padded(1, o1) * padded(2, o2))
        .collect();
    Ok(pool_f32(&window, dims, xs, |taps, pos| {
        let mut sum = 0.0f32;
        let mut inside = 0usize;
        for v in taps {
            sum += v;
            inside += 1;
        }
        let count = if include_pad { counts[pos] } else { inside };
        sum / count as f32
    }))
}

fn reduce_mean(op: &OpRef, a: &ReduceMeanAttrs, dims: &[usize], xs: &[f32]) -> Result<Vec<f32>, ReferenceError> {
    let axes = reduce_axes(op, a, dims.len())?;
    let kept: Vec<usize> = (0..dims.len()).filter(|d| !axes.contains(d)).collect();
    let kept_dims: Vec<usize> = kept.iter().map(|&d| dims[d]).collect();
    let red_dims: Vec<usize> = axes.iter().map(|&d| dims[d]).collect();
    let count: usize = red_dims.iter().product();
    let s = strides(dims);
    let outs: usize = kept_dims.iter().product();
    Ok((0..outs)
        .map(|o| {
            let oi = unravel(o, &kept_dims);
            let base: usize = kept.iter().zip(&oi).map(|(&d, &i)| i * s[d]).sum();
            let sum = (0..count).fold(0.0f32, |acc, r| {
                let ri = unravel(r, &red_dims);
                acc + xs[base + axes.iter().zip(&ri).map(|(&d, &i)| i * s[d]).sum::<usize>()]
            });
            sum / count as f32
        })
        .collect())
}
