//! Shape and type inference, one function per op kind, with the attribute checks that need the
//! operands' shapes: given what an op reads, what it writes, or a typed error naming the op,
//! the operand or attribute, what was expected and what was found. Unknown dimensions flow
//! through (a size computed from an unknown dimension is unknown); every check that needs a
//! dimension runs when it is known — at finalization, or again with concrete values in the
//! reference.

use std::fmt::Display;

use super::attrs::{
    AvgPoolAttrs, BiasAddAttrs, ConvAttrs, MatMulAttrs, MaxPoolAttrs, QuantParams, ReduceMeanAttrs, ReshapeAttrs,
    TransposeAttrs, TypeCastAttrs,
};
use super::dtype::DataType;
use super::error::{GraphError, OpRef, TensorRef};
use super::op::OpKind;
use super::tensor::{Dim, Shape};
use super::window::Window;

/// The largest window entry (kernel, stride, pad, dilation) accepted: larger ones describe no
/// tensor that fits in memory, and bounding them keeps every size computation in range.
pub const MAX_WINDOW_ENTRY: i64 = i32::MAX as i64;

/// One input of an op, as inference sees it.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub tensor: &'a TensorRef,
    pub dtype: DataType,
    pub shape: &'a Shape,
}

/// Builds the errors of one op.
struct Check<'a> {
    op: &'a OpRef,
    inputs: &'a [Operand<'a>],
    /// What each input is, for messages.
    roles: &'static [&'static str],
}

/// The role of each input, for messages.
fn roles(kind: &OpKind) -> &'static [&'static str] {
    match kind {
        OpKind::Convolution(_) => &["src", "weights", "bias"],
        OpKind::MatMul(_) | OpKind::Add => &["a", "b"],
        OpKind::BiasAdd(_) => &["src", "bias"],
        _ => &["src"],
    }
}

impl Check<'_> {
    fn operand(&self, i: usize) -> String {
        let role = self.roles.get(i).copied().unwrap_or("input");
        match self.inputs.get(i) {
            Some(o) => format!("input {i} `{role}` ({})", o.tensor),
            None => format!("input {i} `{role}`"),
        }
    }

    fn attr(&self, attribute: &'static str, expected: impl Into<String>, found: impl Display) -> GraphError {
        GraphError::Attribute { op: self.op.clone(), attribute, expected: expected.into(), found: found.to_string() }
    }

    fn dtype(&self, i: usize, expected: impl Into<String>) -> GraphError {
        GraphError::DType {
            op: self.op.clone(),
            operand: self.operand(i),
            expected: expected.into(),
            found: self.inputs[i].dtype,
        }
    }

    fn shape(&self, operand: String, expected: impl Into<String>, found: impl Display) -> GraphError {
        GraphError::Shape { op: self.op.clone(), operand, expected: expected.into(), found: found.to_string() }
    }

    /// The dimensions of input `i` (its rank must be known).
    fn dims(&self, i: usize) -> Result<&[Dim], GraphError> {
        self.inputs[i]
            .shape
            .dims()
            .ok_or_else(|| GraphError::UnknownRank { op: self.op.clone(), tensor: self.inputs[i].tensor.clone() })
    }

    /// Input `i` is a float type.
    fn float(&self, i: usize) -> Result<DataType, GraphError> {
        let t = self.inputs[i].dtype;
        if t.is_float() { Ok(t) } else { Err(self.dtype(i, "f32, f16 or bf16")) }
    }

    /// Input `i` has the type of input 0.
    fn same_type(&self, i: usize) -> Result<(), GraphError> {
        let t = self.inputs[0].dtype;
        if self.inputs[i].dtype == t { Ok(()) } else { Err(self.dtype(i, format!("{t} (the type of input 0)"))) }
    }

    /// Input `i` has a rank in `lo..=hi`.
    fn rank(&self, i: usize, lo: usize, hi: usize) -> Result<&[Dim], GraphError> {
        let dims = self.dims(i)?;
        if (lo..=hi).contains(&dims.len()) {
            Ok(dims)
        } else {
            let expected = if hi == usize::MAX { format!("of rank ≥ {lo}") } else { format!("of rank {lo} to {hi}") };
            Err(self.shape(self.operand(i), expected, Shape::Dims(dims.to_vec())))
        }
    }
}

/// The output type and shape of `kind` reading `inputs`; the input count was checked when the
/// op was added.
pub fn infer(op: &OpRef, kind: &OpKind, inputs: &[Operand<'_>]) -> Result<(DataType, Shape), GraphError> {
    let c = Check { op, inputs, roles: roles(kind) };
    match kind {
        OpKind::Convolution(a) => convolution(&c, a),
        OpKind::MatMul(a) => matmul(&c, a),
        OpKind::BiasAdd(a) => bias_add(&c, a),
        OpKind::Add => add(&c),
        OpKind::ReLU => Ok((c.float(0)?, inputs[0].shape.clone())),
        OpKind::Clip(a) => {
            if a.min.is_nan() || a.max.is_nan() || a.min > a.max {
                return Err(c.attr("min, max", "not NaN with min ≤ max", format!("min {} max {}", a.min, a.max)));
            }
            Ok((c.float(0)?, inputs[0].shape.clone()))
        }
        OpKind::MaxPool(a) => max_pool(&c, a),
        OpKind::AvgPool(a) => avg_pool(&c, a),
        OpKind::GlobalAveragePool => {
            let t = c.float(0)?;
            let dims = c.rank(0, 3, usize::MAX)?;
            let out = dims.iter().enumerate().map(|(i, &d)| if i < 2 { d } else { Dim::Known(1) }).collect();
            Ok((t, Shape::Dims(out)))
        }
        OpKind::ReduceMean(a) => reduce_mean(&c, a),
        OpKind::Dequantize(p) => {
            let t = inputs[0].dtype;
            if !(t.is_int8() || t == DataType::S32) {
                return Err(c.dtype(0, "u8, s8 or s32"));
            }
            quant_params(&c, p, t)?;
            Ok((DataType::F32, inputs[0].shape.clone()))
        }
        OpKind::Quantize(a) => {
            if inputs[0].dtype != DataType::F32 {
                return Err(c.dtype(0, "f32"));
            }
            if !a.dtype.is_int8() {
                return Err(c.attr("dtype", "u8 or s8", a.dtype));
            }
            quant_params(&c, &a.params, a.dtype)?;
            Ok((a.dtype, inputs[0].shape.clone()))
        }
        OpKind::TypeCast(a) => type_cast(&c, a),
        OpKind::StaticReshape(a) => reshape(&c, a),
        OpKind::StaticTranspose(a) => transpose(&c, a),
        OpKind::Reorder => Ok((inputs[0].dtype, inputs[0].shape.clone())),
    }
}

/// Checks one window list: `len` entries, each in `lo..=MAX_WINDOW_ENTRY`.
fn window_list(c: &Check<'_>, name: &'static str, v: &[i64], len: usize, lo: i64) -> Result<Vec<usize>, GraphError> {
    if v.len() != len {
        return Err(c.attr(name, format!("{len} entries (one per spatial dimension)"), format!("{v:?}")));
    }
    if let Some(bad) = v.iter().find(|&&x| x < lo || x > MAX_WINDOW_ENTRY) {
        let what = if lo == 0 { "non-negative" } else { "positive" };
        return Err(c.attr(name, format!("{what} and at most {MAX_WINDOW_ENTRY}"), format!("{bad} in {v:?}")));
    }
    Ok(v.iter().map(|&x| x as usize).collect())
}

/// The validated window of a convolution whose weights have kernel `kernel`.
pub fn conv_window(op: &OpRef, a: &ConvAttrs, kernel: &[usize]) -> Result<Window, GraphError> {
    conv_window_checked(&Check { op, inputs: &[], roles: &[] }, a, kernel)
}

fn conv_window_checked(c: &Check<'_>, a: &ConvAttrs, kernel: &[usize]) -> Result<Window, GraphError> {
    let n = kernel.len();
    Ok(Window {
        kernel: kernel.to_vec(),
        strides: window_list(c, "strides", &a.strides, n, 1)?,
        pads_begin: window_list(c, "pads_begin", &a.pads_begin, n, 0)?,
        pads_end: window_list(c, "pads_end", &a.pads_end, n, 0)?,
        dilations: window_list(c, "dilations", &a.dilations, n, 1)?,
        ceil_mode: false,
    })
}

/// Output spatial dimensions of `w` over `spatial` (unknown inputs give unknown outputs).
fn window_output(c: &Check<'_>, w: &Window, spatial: &[Dim]) -> Result<Vec<Dim>, GraphError> {
    let mut out = Vec::with_capacity(spatial.len());
    for (axis, d) in spatial.iter().enumerate() {
        out.push(match d {
            Dim::Unknown => Dim::Unknown,
            Dim::Known(n) => match w.output_size(axis, *n) {
                Some(o) => Dim::Known(o),
                None => {
                    let expected = format!(
                        "at least the window's extent {} less the padding {} in spatial dimension {axis}",
                        w.span(axis),
                        w.pads_begin[axis] + w.pads_end[axis]
                    );
                    return Err(c.shape(c.operand(0), expected, Shape::Dims(spatial.to_vec())));
                }
            },
        });
    }
    Ok(out)
}

fn convolution(c: &Check<'_>, a: &ConvAttrs) -> Result<(DataType, Shape), GraphError> {
    let t = c.float(0)?;
    let x = c.rank(0, 3, 5)?;
    c.same_type(1)?;
    let w = c.dims(1)?;
    if w.len() != x.len() {
        return Err(c.shape(c.operand(1), format!("of rank {} (as the source)", x.len()), Shape::Dims(w.to_vec())));
    }
    if a.groups < 1 || a.groups > MAX_WINDOW_ENTRY {
        return Err(c.attr("groups", format!("positive and at most {MAX_WINDOW_ENTRY}"), a.groups));
    }
    let groups = a.groups as usize;
    if let Dim::Known(ch) = x[1]
        && ch % groups != 0
    {
        return Err(c.attr("groups", format!("a divisor of the {ch} input channels"), groups));
    }
    if let Dim::Known(oc) = w[0]
        && oc % groups != 0
    {
        return Err(c.attr("groups", format!("a divisor of the {oc} output channels"), groups));
    }
    if let (Dim::Known(ch), Dim::Known(wc)) = (x[1], w[1])
        && wc * groups != ch
    {
        let expected = format!("[{}, {}, ..] (input channels / groups = {ch} / {groups})", w[0], ch / groups);
        return Err(c.shape(c.operand(1), expected, Shape::Dims(w.to_vec())));
    }
    let kernel: Option<Vec<usize>> = w[2..].iter().map(|d| d.known()).collect();
    // An unknown kernel size leaves the output size unknown; the attributes are still checked.
    let probe: Vec<usize> = kernel.clone().unwrap_or_else(|| vec![1; x.len() - 2]);
    let window = conv_window_checked(c, a, &probe)?;
    if let Some(k) = kernel.as_ref().and_then(|k| k.iter().position(|&k| k == 0)) {
        return Err(c.shape(
            c.operand(1),
            format!("a kernel of positive sizes (dimension {})", k + 2),
            Shape::Dims(w.to_vec()),
        ));
    }
    let spatial = if kernel.is_some() { window_output(c, &window, &x[2..])? } else { vec![Dim::Unknown; x.len() - 2] };
    if c.inputs.len() == 3 {
        c.same_type(2)?;
        let b = c.rank(2, 1, 1)?;
        if !b[0].fits(w[0]) {
            return Err(c.shape(c.operand(2), format!("[{}] (one per output channel)", w[0]), Shape::Dims(b.to_vec())));
        }
    }
    let mut out = vec![x[0], w[0]];
    out.extend(spatial);
    Ok((t, Shape::Dims(out)))
}

/// numpy broadcasting of two shapes; `None` when a pair of known dimensions conflicts.
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let at = |v: &[Dim], i: usize| if i + v.len() >= n { v[i + v.len() - n] } else { Dim::Known(1) };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (Dim::Known(x), Dim::Known(y)) if x == y || y == 1 => Some(Dim::Known(x)),
            (Dim::Known(1), y) | (y, Dim::Known(1)) => Some(y),
            (Dim::Known(_), Dim::Known(_)) => None,
            (Dim::Unknown, Dim::Known(y)) | (Dim::Known(y), Dim::Unknown) => Some(Dim::Known(y)),
            (Dim::Unknown, Dim::Unknown) => Some(Dim::Unknown),
        })
        .collect()
}

fn matmul(c: &Check<'_>, a: &MatMulAttrs) -> Result<(DataType, Shape), GraphError> {
    let t = c.float(0)?;
    c.same_type(1)?;
    let x = c.rank(0, 2, usize::MAX)?;
    let y = c.rank(1, 2, usize::MAX)?;
    let (m, k) = if a.transpose_a { (x[x.len() - 1], x[x.len() - 2]) } else { (x[x.len() - 2], x[x.len() - 1]) };
    let (k2, n) = if a.transpose_b { (y[y.len() - 1], y[y.len() - 2]) } else { (y[y.len() - 2], y[y.len() - 1]) };
    if !k.fits(k2) {
        let expected = format!("a reduction dimension of {k} (as `a`'s)");
        return Err(c.shape(c.operand(1), expected, Shape::Dims(y.to_vec())));
    }
    let batch = broadcast(&x[..x.len() - 2], &y[..y.len() - 2]).ok_or_else(|| {
        c.shape(
            c.operand(1),
            format!("batch dimensions that broadcast with {}", Shape::Dims(x.to_vec())),
            Shape::Dims(y.to_vec()),
        )
    })?;
    let mut out = batch;
    out.extend([m, n]);
    Ok((t, Shape::Dims(out)))
}

fn bias_add(c: &Check<'_>, a: &BiasAddAttrs) -> Result<(DataType, Shape), GraphError> {
    let t = c.float(0)?;
    c.same_type(1)?;
    let x = c.dims(0)?;
    if a.axis < 0 || a.axis as u64 >= x.len() as u64 {
        return Err(c.attr("axis", format!("in 0..{}", x.len()), a.axis));
    }
    let b = c.rank(1, 1, 1)?;
    let d = x[a.axis as usize];
    if !b[0].fits(d) {
        return Err(c.shape(c.operand(1), format!("[{d}] (the size of axis {})", a.axis), Shape::Dims(b.to_vec())));
    }
    Ok((t, Shape::Dims(x.to_vec())))
}

fn add(c: &Check<'_>) -> Result<(DataType, Shape), GraphError> {
    let t = c.float(0)?;
    c.same_type(1)?;
    let (x, y) = (c.dims(0)?, c.dims(1)?);
    let out = broadcast(x, y).ok_or_else(|| {
        c.shape(
            c.operand(1),
            format!("a shape that broadcasts with {}", Shape::Dims(x.to_vec())),
            Shape::Dims(y.to_vec()),
        )
    })?;
    Ok((t, Shape::Dims(out)))
}

/// The validated window of a pooling op over `spatial` dimensions.
fn pool_window(
    c: &Check<'_>,
    kernel: &[i64],
    strides: &[i64],
    pads: (&[i64], &[i64]),
    dilations: Option<&[i64]>,
    ceil_mode: bool,
    spatial: usize,
) -> Result<Window, GraphError> {
    let kernel = window_list(c, "kernel", kernel, spatial, 1)?;
    let w = Window {
        strides: window_list(c, "strides", strides, spatial, 1)?,
        pads_begin: window_list(c, "pads_begin", pads.0, spatial, 0)?,
        pads_end: window_list(c, "pads_end", pads.1, spatial, 0)?,
        dilations: match dilations {
            Some(d) => window_list(c, "dilations", d, spatial, 1)?,
            None => vec![1; spatial],
        },
        kernel,
        ceil_mode,
    };
    for (name, pads) in [("pads_begin", &w.pads_begin), ("pads_end", &w.pads_end)] {
        if let Some(axis) = (0..spatial).find(|&i| pads[i] >= w.kernel[i]) {
            return Err(c.attr(
                name,
                format!("smaller than the kernel {:?} (onnxruntime's rule)", w.kernel),
                format!("{} at spatial dimension {axis}", pads[axis]),
            ));
        }
    }
    Ok(w)
}

/// The validated window of a max pooling.
pub fn max_pool_window(op: &OpRef, a: &MaxPoolAttrs, spatial: usize) -> Result<Window, GraphError> {
    let c = Check { op, inputs: &[], roles: &[] };
    pool_window(&c, &a.kernel, &a.strides, (&a.pads_begin, &a.pads_end), Some(&a.dilations), a.ceil_mode, spatial)
}

/// The validated window of an average pooling.
pub fn avg_pool_window(op: &OpRef, a: &AvgPoolAttrs, spatial: usize) -> Result<Window, GraphError> {
    let c = Check { op, inputs: &[], roles: &[] };
    pool_window(&c, &a.kernel, &a.strides, (&a.pads_begin, &a.pads_end), None, a.ceil_mode, spatial)
}

fn pooled(c: &Check<'_>, w: &Window, x: &[Dim]) -> Result<Shape, GraphError> {
    let mut out = vec![x[0], x[1]];
    out.extend(window_output(c, w, &x[2..])?);
    Ok(Shape::Dims(out))
}

fn max_pool(c: &Check<'_>, a: &MaxPoolAttrs) -> Result<(DataType, Shape), GraphError> {
    let t = c.inputs[0].dtype;
    if !(t.is_float() || t.is_int8()) {
        return Err(c.dtype(0, "f32, f16, bf16, u8 or s8"));
    }
    let x = c.rank(0, 3, 5)?;
    let w = pool_window(
        c,
        &a.kernel,
        &a.strides,
        (&a.pads_begin, &a.pads_end),
        Some(&a.dilations),
        a.ceil_mode,
        x.len() - 2,
    )?;
    Ok((t, pooled(c, &w, x)?))
}

fn avg_pool(c: &Check<'_>, a: &AvgPoolAttrs) -> Result<(DataType, Shape), GraphError> {
    let t = c.float(0)?;
    let x = c.rank(0, 3, 5)?;
    let w = pool_window(c, &a.kernel, &a.strides, (&a.pads_begin, &a.pads_end), None, a.ceil_mode, x.len() - 2)?;
    Ok((t, pooled(c, &w, x)?))
}

/// The reduced axes of a `ReduceMean` over rank `rank`, normalized and sorted.
pub fn reduce_axes(op: &OpRef, a: &ReduceMeanAttrs, rank: usize) -> Result<Vec<usize>, GraphError> {
    let c = Check { op, inputs: &[], roles: &[] };
    let mut axes = Vec::with_capacity(a.axes.len());
    for &axis in &a.axes {
        let norm = if axis < 0 { axis.checked_add(rank as i64) } else { Some(axis) };
        match norm {
            Some(n) if (0..rank as i64).contains(&n) && !axes.contains(&(n as usize)) => axes.push(n as usize),
            _ => {
                return Err(c.attr(
                    "axes",
                    format!("distinct axes in {}..{rank}", -(rank as i64)),
                    format!("{:?}", a.axes),
                ));
            }
        }
    }
    if axes.is_empty() {
        return Err(c.attr("axes", "at least one axis", "[]"));
    }
    axes.sort_unstable();
    Ok(axes)
}

fn reduce_mean(c: &Check<'_>, a: &ReduceMeanAttrs) -> Result<(DataType, Shape), GraphError> {
    let t = c.float(0)?;
    let x = c.dims(0)?;
    let axes = reduce_axes(c.op, a, x.len())?;
    let out = x
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), a.keep_dims) {
            (false, _) => Some(d),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect();
    Ok((t, Shape::Dims(out)))
}

/// Checks quantization parameters for a tensor of integer type `int` shaped as input 0.
fn quant_params(c: &Check<'_>, p: &QuantParams, int: DataType) -> Result<(), GraphError> {
    if p.scales.is_empty() {
        return Err(c.attr("scales", "at least one scale", "none"));
    }
    if p.zero_points.len() != p.scales.len() {
        return Err(c.attr("zero_points", format!("{} values (one per scale)", p.scales.len()), p.zero_points.len()));
    }
    if let Some((i, s)) = p.scales.iter().enumerate().find(|(_, s)| !(s.is_finite() && **s > 0.0)) {
        return Err(c.attr("scales", "finite and positive", format!("{s} at index {i}")));
    }
    let (lo, hi) = if int == DataType::S32 { (0, 0) } else { int.int_range().unwrap_or((0, 0)) };
    if let Some((i, z)) = p.zero_points.iter().enumerate().find(|(_, z)| !(lo..=hi).contains(*z)) {
        return Err(c.attr("zero_points", format!("in {lo}..={hi} (for {int})"), format!("{z} at index {i}")));
    }
    match p.axis {
        None if p.scales.len() != 1 => {
            Err(c.attr("scales", "1 value for per-tensor quantization (no axis)", format!("{} values", p.scales.len())))
        }
        None => Ok(()),
        Some(axis) => {
            let dims = c.dims(0)?;
            if axis < 0 || axis as u64 >= dims.len() as u64 {
                return Err(c.attr("axis", format!("in 0..{}", dims.len()), axis));
            }
            match dims[axis as usize] {
                Dim::Known(n) if n != p.scales.len() => Err(c.attr(
                    "scales",
                    format!("{n} values (the size of axis {axis})"),
                    format!("{} values", p.scales.len()),
                )),
                _ => Ok(()),
            }
        }
    }
}

fn type_cast(c: &Check<'_>, a: &TypeCastAttrs) -> Result<(DataType, Shape), GraphError> {
    let from = c.inputs[0].dtype;
    let ok = matches!(
        (from, a.dtype),
        (DataType::F32, DataType::F16 | DataType::Bf16) | (DataType::F16 | DataType::Bf16, DataType::F32)
    );
    if !ok {
        let expected = match from {
            DataType::F32 => "f16 or bf16 (a conversion from f32)".to_string(),
            DataType::F16 | DataType::Bf16 => "f32".to_string(),
            _ => return Err(c.dtype(0, "f32, f16 or bf16")),
        };
        return Err(c.attr("dtype", expected, a.dtype));
    }
    Ok((a.dtype, c.inputs[0].shape.clone()))
}

/// The element count of `dims`, if every dimension is known and the product fits.
fn count(dims: &[Dim]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, d| d.known().and_then(|n| acc.checked_mul(n)))
}

fn reshape(c: &Check<'_>, a: &ReshapeAttrs) -> Result<(DataType, Shape), GraphError> {
    let x = c.dims(0)?;
    let mut out = Vec::with_capacity(a.shape.len());
    let mut infer = None;
    for (i, &s) in a.shape.iter().enumerate() {
        out.push(match s {
            -1 if infer.is_none() => {
                infer = Some(i);
                Dim::Unknown
            }
            0 => match x.get(i) {
                Some(&d) => d,
                None => {
                    return Err(c.attr(
                        "shape",
                        format!("a 0 only below the input's rank {}", x.len()),
                        format!("{:?}", a.shape),
                    ));
                }
            },
            s if s >= 1 => Dim::Known(usize::try_from(s).unwrap_or(usize::MAX)),
            _ => return Err(c.attr("shape", "entries ≥ 1, 0 (copy) or a single -1 (infer)", format!("{:?}", a.shape))),
        });
    }
    let total = count(x);
    let known: Option<usize> = out
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != infer)
        .try_fold(1usize, |acc, (_, d)| d.known().and_then(|n| acc.checked_mul(n)));
    let mismatch = || {
        c.attr("shape", format!("as many elements as the input {}", Shape::Dims(x.to_vec())), format!("{:?}", a.shape))
    };
    match (infer, total, known) {
        (Some(i), Some(t), Some(k)) => {
            if k == 0 || t % k != 0 {
                return Err(mismatch());
            }
            out[i] = Dim::Known(t / k);
        }
        (None, Some(t), Some(k)) if t != k => return Err(mismatch()),
        _ => {}
    }
    Ok((c.inputs[0].dtype, Shape::Dims(out)))
}

/// The validated permutation of a transpose over rank `rank`.
pub fn permutation(op: &OpRef, a: &TransposeAttrs, rank: usize) -> Result<Vec<usize>, GraphError> {
    let c = Check { op, inputs: &[], roles: &[] };
    let mut seen = vec![false; rank];
    let mut perm = Vec::with_capacity(rank);
    for &p in &a.perm {
        match usize::try_from(p) {
            Ok(i) if i < rank && !seen[i] => {
                seen[i] = true;
                perm.push(i);
            }
            _ => return Err(c.attr("perm", format!("a permutation of 0..{rank}"), format!("{:?}", a.perm))),
        }
    }
    if perm.len() != rank {
        return Err(c.attr("perm", format!("a permutation of 0..{rank}"), format!("{:?}", a.perm)));
    }
    Ok(perm)
}

fn transpose(c: &Check<'_>, a: &TransposeAttrs) -> Result<(DataType, Shape), GraphError> {
    let x = c.dims(0)?;
    let perm = permutation(c.op, a, x.len())?;
    Ok((c.inputs[0].dtype, Shape::Dims(perm.iter().map(|&p| x[p]).collect())))
}
