//! Auto-tensorize for int8 contractions: recognize `out[..] = Σ_r i32(A[..]) · i32(B[..])` with
//! a u8 `A` and an i8 `B` (matmul, batched matmul, convolutions with one group), rewrite the
//! definition into the packed GEMM the micro-kernels read, and tensorize its tiles with
//! `intrin::gemm_segmented_microkernel`.
//!
//! The output's axes are classified by which operand they index: both (batch), only `A` (rows
//! of the GEMM: the last such axis is the kernel's `mr` rows), only `B` (exactly one: the
//! kernel's `nr` columns). The reduction axes, flattened in declaration order, are the GEMM's
//! `K`. The rewrite:
//! * `A` is read in place where it is a placeholder indexed by a single reduction axis last (a
//!   matmul, a 1×1 convolution) and already the kernel's dtype; otherwise a copy
//!   `<out>.gemm_a[batch…, rows…, K']` (im2col for a convolution; padding stages inlined into
//!   it) holds it in the kernel's dtype, `K` padded to `K'` (a multiple of the packing) with
//!   zeros by padding one reduction axis (`padded_extents`), so the copy still has one loop
//!   per axis;
//! * `B` is packed per batch as `nn::pack_b_vnni` (bytes) or `nn::pack_b_i16` (i16 pairs) lay it
//!   out: `<out>.gemm_b[batch…, ⌈N/nr⌉, K'/P, nr, P]`, zeros outside `B`;
//! * the output keeps its name, shape and dtype: `Σ_{ko, ki} i32(A'[.., ko·P + ki]) ·
//!   i32(Bp[.., n/nr, ko, n%nr, ki])`, equal to the definition for every input (the padding
//!   multiplies zeros), so the call's arguments are the original inputs and the output.
//!
//! Where `B` is a constant (a placeholder the definition declares known at compile time, as
//! weights are), the packing is not part of the call: the output reads a placeholder
//! `<out>.gemm_b` of the packed shape instead, and the packing stage is a function of its own
//! (`Prepared`), scheduled like the per-call one, that the caller runs once on the raw `B`.
//!
//! The kernel form: u8 bytes and `vpdpbusd` with VNNI, or without it where the operands' value
//! ranges prove the AVX2 triple exact (`ir::intrin::pair_sums_fit_i16`); otherwise both
//! operands pre-widened to i16 pairs (`Int16Gemm`, exact on every input).

use std::collections::HashMap;

use ir::expr::{ExprKind, select};
use ir::intrin::pair_sums_fit_i16;
use ir::mutator::substitute_map;
use ir::schedule::{Schedule, create_schedule};
use ir::te::{IterVar, Reducer, Tensor, compute_vec, placeholder_vec, placeholder_vec_in_range, reduce_axis, sum};
use ir::{DType, Expr, ScheduleError, TeError, Var};

use super::analysis::{StageInfo, StageKind};
use super::annotate::{lanes, parallelize, vectorize_injective};
use super::tiling::dividing_tiles;
use crate::intrin::gemm_segmented_microkernel;

/// A tensor read: the tensor and its index expressions in the definition's variables.
#[derive(Clone, Debug)]
pub struct Read {
    pub tensor: Tensor,
    pub indices: Vec<Expr>,
}

/// A recognized int8 contraction (see the module doc).
#[derive(Clone, Debug)]
pub struct Contraction {
    pub output: Tensor,
    pub a: Read,
    pub b: Read,
    pub axes: Vec<IterVar>,
    pub reduce: Vec<IterVar>,
    /// Output axis positions indexing both operands.
    pub batch: Vec<usize>,
    /// The output axes outside the GEMM tiles: the batch and the rows other than `rows`, in
    /// output order.
    pub outer: Vec<usize>,
    /// The output axis of the kernel's rows.
    pub rows: usize,
    /// The output axis of the kernel's columns.
    pub cols: usize,
}

/// How the kernel reads its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmForm {
    /// u8 × i8 bytes, four `k` per group (`vpdpbusd`, or the AVX2 triple where proven exact).
    Bytes,
    /// Both operands widened to i16, two `k` per pair (`vpmaddwd`).
    I16Pairs,
}

impl GemmForm {
    pub fn name(self) -> &'static str {
        match self {
            GemmForm::Bytes => "u8",
            GemmForm::I16Pairs => "i16",
        }
    }
    fn pack(self) -> i64 {
        match self {
            GemmForm::Bytes => 4,
            GemmForm::I16Pairs => 2,
        }
    }
    fn a_dtype(self) -> DType {
        match self {
            GemmForm::Bytes => DType::U8,
            GemmForm::I16Pairs => DType::I16,
        }
    }
    fn b_dtype(self) -> DType {
        match self {
            GemmForm::Bytes => DType::I8,
            GemmForm::I16Pairs => DType::I16,
        }
    }
}

/// `e` without casts, as a tensor read.
fn read_under_casts(e: &Expr) -> Option<Read> {
    match e.kind() {
        ExprKind::Cast(inner) => read_under_casts(inner),
        ExprKind::TensorRead(t, idx) => Some(Read { tensor: t.clone(), indices: idx.clone() }),
        _ => None,
    }
}

fn uses(read: &Read, v: &Var) -> bool {
    read.indices.iter().any(|e| e.uses_var(v))
}

/// The contraction `st` computes, or why it is none.
pub fn recognize(st: &StageInfo) -> Result<Contraction, String> {
    if !matches!(st.kind, StageKind::Reduction { .. }) {
        return Err("not a reduction".into());
    }
    if !st.is_output {
        return Err("not an output (the rewrite replaces an output stage)".into());
    }
    let body = st.tensor.body().ok_or("no body")?;
    let ExprKind::Reduce(r) = body.kind() else { return Err("not a reduction".into()) };
    if r.reducer != Reducer::Sum || body.dtype() != DType::I32 {
        return Err(format!("a {} into {}, not a sum into i32", r.reducer.name(), body.dtype()));
    }
    let ExprKind::Binary(ir::expr::BinOp::Mul, x, y) = r.source.kind() else {
        return Err("the summand is not a product of two operands".into());
    };
    let (Some(x), Some(y)) = (read_under_casts(x), read_under_casts(y)) else {
        return Err("a factor of the product is not a (cast) tensor read".into());
    };
    let (a, b) = match (x.tensor.dtype(), y.tensor.dtype()) {
        (DType::U8, DType::I8) => (x, y),
        (DType::I8, DType::U8) => (y, x),
        (p, q) => return Err(format!("operands {p} × {q}, not u8 × i8")),
    };
    for rv in &r.axes {
        if !uses(&a, rv.var()) || !uses(&b, rv.var()) {
            return Err(format!("reduction axis {} does not index both operands", rv.name()));
        }
    }
    let (mut batch, mut rows, mut cols) = (Vec::new(), Vec::new(), Vec::new());
    for (i, ax) in st.spatial.iter().enumerate() {
        match (uses(&a, ax.var()), uses(&b, ax.var())) {
            (true, true) => batch.push(i),
            (true, false) => rows.push(i),
            (false, true) => cols.push(i),
            (false, false) if ax.extent() == 1 => batch.push(i),
            (false, false) => return Err(format!("axis {} indexes neither operand", ax.name())),
        }
    }
    let Some(&row) = rows.iter().rev().find(|&&i| st.spatial[i].extent() > 1).or(rows.last()) else {
        return Err("no output axis indexes only the u8 operand (no GEMM rows)".into());
    };
    let [col] = cols[..] else {
        return Err(format!(
            "{} output axes index only the i8 operand, expected one (a depthwise or grouped \
             convolution has none)",
            cols.len()
        ));
    };
    // The other row axes are outer loops of the GEMM, like the batch (which also indexes B).
    let mut outer = batch.clone();
    outer.extend(rows.iter().filter(|&&i| i != row));
    outer.sort_unstable();
    Ok(Contraction {
        output: st.tensor.clone(),
        a,
        b,
        axes: st.spatial.clone(),
        reduce: r.axes.clone(),
        batch,
        outer,
        rows: row,
        cols: col,
    })
}

/// The kernel form for these options: bytes with VNNI or where ranges prove the triple exact,
/// else i16 pairs; with the reason, for the listing.
pub fn form_for(c: &Contraction, vnni: bool) -> (GemmForm, String) {
    let range = |t: &Tensor| {
        t.value_range()
            .or_else(|| t.dtype().scalar.int_range().map(|(lo, hi)| (lo as i64, hi as i64)))
            .unwrap_or((0, 0))
    };
    if vnni {
        return (GemmForm::Bytes, "VNNI: u8 source bytes (vpdpbusd, exact on any operands)".into());
    }
    let (ra, rb) = (range(&c.a.tensor), range(&c.b.tensor));
    if pair_sums_fit_i16(ra, rb) {
        (GemmForm::Bytes, format!("no VNNI, ranges {ra:?} × {rb:?} prove the AVX2 triple exact"))
    } else {
        (GemmForm::I16Pairs, format!("no VNNI, ranges {ra:?} × {rb:?} do not fit i16 pair sums: i16 pairs"))
    }
}

/// The rewritten definition.
pub struct Rewritten {
    pub a_copy: Option<Tensor>,
    /// The packing of `B` (a compute over the raw `B`).
    pub packed_b: Tensor,
    /// Where `B` is prepared once: the placeholder of the packed `B` the output reads (the
    /// main function's argument in place of the raw `B`); `None`: the output reads `packed_b`.
    pub prepared_b: Option<Tensor>,
    /// The tensorized GEMM: the output itself, or where `nr` does not divide the columns
    /// `<out>.gemm_c`, the output with its columns padded to whole panels (the padding
    /// multiplies the packed `B`'s zero columns).
    pub gemm: Tensor,
    /// The definition's output (its name, shape and dtype): the GEMM, or a copy of its columns.
    pub output: Tensor,
    /// `K'`, the reduction padded to whole groups.
    pub k: i64,
    /// The reduction axes' extents as `K'` lays them out (`k = ((r0·E1 + r1)·E2 + r2)…`): the
    /// declared ones, one of them padded where `K` is not a whole number of groups.
    pub extents: Vec<i64>,
}

/// The reduction extents padded so that their product is a multiple of `p`: `K` is padded by
/// padding one axis (the one that adds the fewest zeros, the outermost on ties), not the flat
/// index, so that the copy of `A` still splits into one loop per axis and decodes no index.
fn padded_extents(extents: &[i64], p: i64) -> Vec<i64> {
    let k: i64 = extents.iter().product();
    if k % p == 0 || extents.is_empty() {
        return extents.to_vec();
    }
    let mut best: Option<Vec<i64>> = None;
    for j in 0..extents.len() {
        let others = k / extents[j];
        let e = (extents[j]..).find(|e| (others * e) % p == 0).unwrap_or(extents[j]);
        let mut candidate = extents.to_vec();
        candidate[j] = e;
        let product = |v: &Vec<i64>| v.iter().product::<i64>();
        if best.as_ref().is_none_or(|b| product(&candidate) < product(b)) {
            best = Some(candidate);
        }
    }
    best.unwrap_or_else(|| extents.to_vec())
}

/// Whether the reduction index `k` (laid out by `padded`) falls inside the declared extents.
fn inside(reduce: &[IterVar], padded: &[i64], map: &HashMap<Var, Expr>) -> Option<Expr> {
    reduce.iter().zip(padded).filter(|(r, e)| r.extent() != **e).fold(None, |acc, (r, _)| {
        let c = map[r.var()].lt(r.extent());
        Some(match acc {
            Some(a) => a & c,
            None => c,
        })
    })
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The reduction axes' values at flat reduction index `k` (declaration order, last fastest).
fn decode(reduce: &[IterVar], extents: &[i64], k: &Expr) -> HashMap<Var, Expr> {
    let mut map = HashMap::new();
    let mut stride = 1;
    for (i, (r, &e)) in reduce.iter().zip(extents).enumerate().rev() {
        let q = if stride == 1 { k.clone() } else { k / stride };
        let v = if i == 0 { q } else { &q % e };
        map.insert(r.var().clone(), v);
        stride *= e;
    }
    map
}

fn substituted(read: &Read, map: &HashMap<Var, Expr>) -> Expr {
    read.tensor.at_vec(read.indices.iter().map(|e| substitute_map(e, map)).collect())
}

/// Rewrites `c` for the kernel `form` with panels of `nr` columns; with `prepare_b`, the output
/// reads the packed `B` as a placeholder (`Rewritten::prepared_b`).
pub fn rewrite(c: &Contraction, form: GemmForm, nr: i64, prepare_b: bool) -> Result<Rewritten, TeError> {
    let p = form.pack();
    let k: i64 = c.reduce.iter().map(|r| r.extent()).product();
    let extents = padded_extents(&c.reduce.iter().map(|r| r.extent()).collect::<Vec<_>>(), p);
    let kp: i64 = extents.iter().product();
    let n = c.axes[c.cols].extent();
    let name = c.output.name();
    // A in place: a placeholder read at `[.., r]` by the only reduction axis, of the kernel's dtype.
    let in_place = c.a.tensor.is_placeholder()
        && c.reduce.len() == 1
        && k % p == 0
        && c.a.tensor.dtype() == form.a_dtype()
        && c.a.indices.last().is_some_and(|e| matches!(e.kind(), ExprKind::Var(v) if v == c.reduce[0].var()))
        && c.a.indices[..c.a.indices.len() - 1].iter().all(|e| !e.uses_var(c.reduce[0].var()));
    let a_axes: Vec<usize> = (0..c.axes.len()).filter(|&i| i != c.cols).collect();
    let a_copy = if in_place {
        None
    } else {
        let mut shape: Vec<i64> = a_axes.iter().map(|&i| c.axes[i].extent()).collect();
        shape.push(kp);
        Some(compute_vec(
            shape,
            |i| {
                let kk = &i[a_axes.len()];
                let mut map = decode(&c.reduce, &extents, kk);
                let valid = inside(&c.reduce, &extents, &map);
                for (pos, &ax) in a_axes.iter().enumerate() {
                    map.insert(c.axes[ax].var().clone(), i[pos].clone());
                }
                let value = substituted(&c.a, &map).cast(form.a_dtype());
                match valid {
                    Some(valid) => select(valid, value, Expr::int(form.a_dtype(), 0)),
                    None => value,
                }
            },
            &format!("{name}.gemm_a"),
        )?)
    };
    let nb = c.batch.len();
    let mut shape: Vec<i64> = c.batch.iter().map(|&i| c.axes[i].extent()).collect();
    shape.extend([ceil_div(n, nr), kp / p, nr, p]);
    let packed_b = compute_vec(
        shape,
        |i| {
            let (col, kk) = (&i[nb] * nr + &i[nb + 2], &i[nb + 1] * p + &i[nb + 3]);
            let mut map = decode(&c.reduce, &extents, &kk);
            let valid = inside(&c.reduce, &extents, &map);
            for (pos, &ax) in c.batch.iter().enumerate() {
                map.insert(c.axes[ax].var().clone(), i[pos].clone());
            }
            map.insert(c.axes[c.cols].var().clone(), col.clone());
            let value = substituted(&c.b, &map).cast(form.b_dtype());
            let valid = match (valid, n % nr != 0) {
                (Some(v), true) => Some(v & col.lt(n)),
                (Some(v), false) => Some(v),
                (None, true) => Some(col.lt(n)),
                (None, false) => None,
            };
            match valid {
                Some(valid) => select(valid, value, Expr::int(form.b_dtype(), 0)),
                None => value,
            }
        },
        &format!("{name}.gemm_b"),
    )?;
    // The packed `B` as an argument: of the packing's shape and dtype, in `B`'s declared range
    // widened to hold the padding's zeros.
    let prepared_b = if prepare_b {
        let shape = packed_b.shape().to_vec();
        let dtype = packed_b.dtype();
        Some(match c.b.tensor.value_range() {
            Some((lo, hi)) => placeholder_vec_in_range(shape, dtype, lo.min(0)..=hi.max(0), packed_b.name())?,
            None => placeholder_vec(shape, dtype, packed_b.name())?,
        })
    } else {
        None
    };
    let read_b = prepared_b.as_ref().unwrap_or(&packed_b);
    let (ko, ki) = (reduce_axis(kp / p, "ko")?, reduce_axis(p, "ki")?);
    // The GEMM's columns padded to whole panels, so that every tile runs the kernel.
    let mut gemm_shape: Vec<i64> = c.axes.iter().map(|a| a.extent()).collect();
    gemm_shape[c.cols] = ceil_div(n, nr) * nr;
    let padded = n % nr != 0;
    let gemm_name = if padded { format!("{name}.gemm_c") } else { name.to_string() };
    let gemm = compute_vec(
        gemm_shape,
        |i| {
            let kk = &ko * p + &ki;
            let a = match &a_copy {
                None => {
                    let mut map: HashMap<Var, Expr> = HashMap::new();
                    for (pos, ax) in c.axes.iter().enumerate() {
                        map.insert(ax.var().clone(), i[pos].clone());
                    }
                    map.insert(c.reduce[0].var().clone(), kk);
                    substituted(&c.a, &map)
                }
                Some(copy) => {
                    let mut idx: Vec<Expr> = a_axes.iter().map(|&ax| i[ax].clone()).collect();
                    idx.push(kk);
                    copy.at_vec(idx)
                }
            };
            let mut idx: Vec<Expr> = c.batch.iter().map(|&ax| i[ax].clone()).collect();
            let col = &i[c.cols];
            idx.extend([col / nr, ko.to_expr(), col % nr, ki.to_expr()]);
            let b = read_b.at_vec(idx);
            sum(DType::I32, &[&ko, &ki], a.cast(DType::I32) * b.cast(DType::I32))
        },
        &gemm_name,
    )?;
    let output = if padded {
        compute_vec(c.axes.iter().map(|a| a.extent()).collect(), |i| gemm.at_vec(i.to_vec()), name)?
    } else {
        gemm.clone()
    };
    Ok(Rewritten { a_copy, packed_b, prepared_b, gemm, output, k: kp, extents })
}

/// The decisions of a tensorized point.
#[derive(Clone, Copy, Debug)]
pub struct GemmPoint {
    pub mr: i64,
    pub nr: i64,
    /// Column tiles outside row tiles.
    pub cols_outer: bool,
    pub threads: usize,
}

/// The `mr` choices: the divisors of the row extent in 4..=32 (all of it when smaller than 4).
pub fn mr_choices(c: &Contraction) -> Vec<i64> {
    let m = c.axes[c.rows].extent();
    let mut out: Vec<i64> = (4..=32.min(m)).filter(|d| m % d == 0).collect();
    if out.is_empty() {
        out.push(m.min(8));
    }
    out
}

/// The `nr` choices: 16, 32 and 64 where they divide `N` or pad it by at most an eighth (the
/// GEMM's columns are padded to whole panels, `Rewritten::gemm`), and `N` itself up to 64.
pub fn nr_choices(c: &Contraction) -> Vec<i64> {
    let n = c.axes[c.cols].extent();
    let mut out: Vec<i64> = dividing_tiles(n, 16, 64).into_iter().filter(|d| *d >= 16 || *d == n).collect();
    for nr in [16, 32, 64] {
        let waste = ceil_div(n, nr) * nr - n;
        if nr < n && waste > 0 && waste * 8 <= n {
            out.push(nr);
        }
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        out.push(16);
    }
    out
}

/// A tensorized point's schedules.
pub struct Tensorized {
    /// The per-call function's schedule, on `output`.
    pub schedule: Schedule,
    pub output: Tensor,
    /// Where `B` is prepared once: the packing's own schedule, the packing (its output) and the
    /// placeholder the per-call function reads in its place.
    pub prepare: Option<(Schedule, Tensor, Tensor)>,
}

/// Rewrites and schedules `c` at `point`: inlines the definition's injective stages into the
/// `A` copy, vectorizes the copy, tiles the output by `mr × nr` and tensorizes each tile; the
/// packing of `B` is a stage of the call, or with `prepare_b` a function of its own.
pub fn schedule(
    c: &Contraction,
    form: GemmForm,
    point: GemmPoint,
    vector_bytes: i64,
    inline: &[Tensor],
    prepare_b: bool,
) -> Result<Tensorized, TensorizeError> {
    let rw = rewrite(c, form, point.nr, prepare_b).map_err(TensorizeError::Rewrite)?;
    let (m, n) = (c.axes[c.rows].extent(), c.axes[c.cols].extent());
    let intrin = gemm_segmented_microkernel(point.mr.min(m), point.nr.min(n), 1, rw.k, form.a_dtype())
        .map_err(TensorizeError::Rewrite)?;
    let mut s = create_schedule(&[&rw.output]);
    let run = |s: &mut Schedule| -> Result<(), ScheduleError> {
        if let Some(copy) = &rw.a_copy {
            for t in inline {
                if s.stage_of(t).is_ok() {
                    s.compute_inline(t)?;
                }
            }
            // The flat reduction index split into one loop per reduction axis, so that its
            // decoding folds away and each vector reads contiguous elements of the innermost
            // one (a convolution's channels).
            let mut last = copy.axis(copy.axes().len() - 1);
            let extents = &rw.extents;
            let mut span = rw.k;
            if extents.iter().product::<i64>() == rw.k {
                // One loop per reduction axis (`k = ((r0·E1 + r1)·E2 + r2)…`).
                for i in 1..extents.len() {
                    let factor: i64 = extents[i..].iter().product();
                    if factor > 1 && factor < span {
                        let (_, inner) = s.split(copy, &last, factor)?;
                        last = inner;
                        span = factor;
                    }
                }
            }
            let f = dividing_tiles(span, 2, lanes(vector_bytes, form.a_dtype().bytes()) * 2).into_iter().max();
            if let Some(f) = f.filter(|f| *f > 1) {
                if f < span {
                    let (_, vi) = s.split(copy, &last, f)?;
                    s.vectorize(copy, &vi)?;
                } else {
                    s.vectorize(copy, &last)?;
                }
            }
            let first = copy.axes().iter().find(|a| a.extent() > 1).cloned();
            if let Some(first) = first {
                parallelize(s, copy, &[first], point.threads)?;
            }
        }
        if rw.prepared_b.is_none() {
            schedule_packing(s, &rw.packed_b, c.batch.len(), point.threads)?;
        }
        if rw.output.id() != rw.gemm.id() {
            let outer = vectorize_injective(s, &rw.output, lanes(vector_bytes, rw.output.dtype().bytes()))?;
            parallelize(s, &rw.output, &outer, point.threads)?;
        }
        let out = &rw.gemm;
        let axes = out.axes().to_vec();
        let (m, n) = (axes[c.rows].extent(), axes[c.cols].extent());
        let (mr, nr) = (point.mr.min(m), point.nr.min(n));
        let (ro, ri) = s.split(out, &axes[c.rows], mr)?;
        let (co, ci) = s.split(out, &axes[c.cols], nr)?;
        let mut outer: Vec<IterVar> = c.outer.iter().map(|&i| axes[i].clone()).collect();
        if point.cols_outer {
            outer.extend([co, ro]);
        } else {
            outer.extend([ro, co]);
        }
        let reduce = out.reduce_axes();
        let order: Vec<&IterVar> = outer.iter().chain(&reduce).chain([&ri, &ci]).collect();
        s.reorder(out, &order)?;
        s.vectorize(out, &ci)?;
        parallelize(s, out, &outer, point.threads)?;
        s.tensorize(out, &reduce[0], &intrin)
    };
    run(&mut s).map_err(TensorizeError::Schedule)?;
    let prepare = match rw.prepared_b {
        None => None,
        Some(arg) => {
            let mut p = create_schedule(&[&rw.packed_b]);
            schedule_packing(&mut p, &rw.packed_b, c.batch.len(), point.threads).map_err(TensorizeError::Schedule)?;
            Some((p, rw.packed_b, arg))
        }
    };
    Ok(Tensorized { schedule: s, output: rw.output, prepare })
}

/// The packing of `B` (`bp`, with `nb` batch axes first): the panel's columns as one vector per
/// `k` (contiguous in `B` for a matmul), panels on the thread pool.
fn schedule_packing(s: &mut Schedule, bp: &Tensor, nb: usize, threads: usize) -> Result<(), ScheduleError> {
    let b_axes = bp.axes().to_vec();
    let (jo, ko, ji, ki) = (&b_axes[nb], &b_axes[nb + 1], &b_axes[nb + 2], &b_axes[nb + 3]);
    let mut order: Vec<&IterVar> = b_axes[..nb].iter().collect();
    order.extend([jo, ko, ki, ji]);
    s.reorder(bp, &order)?;
    s.vectorize(bp, ji)?;
    let mut panels: Vec<IterVar> = b_axes[..nb].to_vec();
    panels.push(jo.clone());
    parallelize(s, bp, &panels, threads)?;
    Ok(())
}

/// Why a tensorized point could not be built.
#[derive(Debug)]
pub enum TensorizeError {
    Rewrite(TeError),
    Schedule(ScheduleError),
}

#[cfg(test)]
mod tests {
    use super::padded_extents;

    #[test]
    fn k_is_padded_on_the_axis_that_adds_the_fewest_zeros() {
        // R1's 7·7·3 = 147: a 7 padded to 8 (168) beats the channels padded to 4 (196).
        assert_eq!(padded_extents(&[7, 7, 3], 2), [8, 7, 3]);
        assert_eq!(padded_extents(&[7, 7, 3], 4), [8, 7, 3]);
        assert_eq!(padded_extents(&[3, 3, 6], 4), [4, 3, 6]);
        // Whole groups already, or one axis: unchanged, or padded as the flat index would be.
        assert_eq!(padded_extents(&[3, 3, 8], 4), [3, 3, 8]);
        assert_eq!(padded_extents(&[147], 4), [148]);
        assert_eq!(padded_extents(&[], 4), Vec::<i64>::new());
    }
}
