//! Auto-tensorize for contractions: recognize `out[..] = Σ_r i32(A[..]) · i32(B[..])` with
//! a u8 `A` and an i8 `B` (matmul, batched matmul, convolutions with one group), or the f32
//! `out[..] = Σ_r A[..] · B[..]` of two f32 operands, rewrite the definition into the packed
//! GEMM the micro-kernels read, and tensorize its tiles with
//! `intrin::gemm_segmented_microkernel` (int8) or `intrin::f32_gemm_microkernel` (f32).
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
//!
//! An f32 contraction (`GemmForm::F32`) is rewritten the same way with groups of one `k`: `A`
//! in place or copied, `B` packed as `<out>.gemm_b[batch…, ⌈N/nr⌉, K, nr]`, and the GEMM
//! `Σ_k A'[.., k] · Bp[.., n/nr, k, n%nr]` keeps the definition's flat reduction order
//! (declaration order, last axis fastest) and its products, so every element folds the same
//! rounded products in the same order as the definition (`IntrinKind::F32Gemm`). Its `A` is
//! one segment: no direct form.

use rustc_hash::FxHashMap as HashMap;

use ir::analysis::linear::Linear;
use ir::expr::{BinOp, CmpOp, ExprKind, min as index_min, select};
use ir::intrin::pair_sums_fit_i16;
use ir::mutator::{Mutator, substitute_map, walk_expr};
use ir::schedule::{Schedule, create_schedule};
use ir::te::{IterVar, Reducer, Tensor, compute_vec, placeholder_vec, placeholder_vec_in_range, reduce_axis, sum};
use ir::{DType, Expr, ScheduleError, TeError, Var};

use super::analysis::{StageInfo, StageKind};
use super::annotate::{lanes, parallelize, vectorize_injective};
use super::tiling::dividing_tiles;
use crate::intrin::{f32_gemm_microkernel, gemm_segmented_microkernel};

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
    /// The element-wise output stage that reads the contraction, where the contraction is not
    /// itself an output (a requantization epilogue): rebuilt on the rewritten accumulator.
    pub epilogue: Option<Tensor>,
}

/// Reads of `from` in an expression: whether each is at exactly `axes`, and the expression with
/// them turned into reads of `to` (when given).
struct ReadsOf<'a> {
    from: &'a Tensor,
    to: Option<&'a Tensor>,
    axes: &'a [Var],
    elementwise: bool,
    found: bool,
}

impl Mutator for ReadsOf<'_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let expr = walk_expr(self, expr);
        match expr.kind() {
            ExprKind::TensorRead(t, idx) if t == self.from => {
                let same = idx.len() == self.axes.len()
                    && idx.iter().zip(self.axes).all(|(e, v)| matches!(e.kind(), ExprKind::Var(w) if w == v));
                self.elementwise &= same;
                self.found = true;
                match self.to {
                    Some(to) => to.at_vec(idx.clone()),
                    None => expr,
                }
            }
            _ => expr,
        }
    }
}

/// The element-wise epilogue of `st` among `stages`: the one output stage reading it, an
/// injective stage of its shape that reads it only at its own indices; or why there is none.
pub fn epilogue_of(st: &StageInfo, stages: &[StageInfo]) -> Result<Tensor, String> {
    let not = |why: &str| {
        Err(format!(
            "not an output, and {why} (the rewrite replaces an output stage or the accumulator of one element-wise output)"
        ))
    };
    if st.consumers != 1 {
        return not(&format!("read by {} stages", st.consumers));
    }
    let reads = |e: &StageInfo| -> Option<bool> {
        let body = e.tensor.body()?;
        let axes: Vec<Var> = e.tensor.axes().iter().map(|a| a.var().clone()).collect();
        let mut m = ReadsOf { from: &st.tensor, to: None, axes: &axes, elementwise: true, found: false };
        let _ = m.mutate_expr(body);
        m.found.then_some(m.elementwise)
    };
    let Some(consumer) = stages.iter().find(|e| e.tensor.id() != st.tensor.id() && reads(e).is_some()) else {
        return not("no stage reads it");
    };
    if !consumer.is_output || !matches!(consumer.kind, StageKind::Injective) {
        return not(&format!("its consumer {} is not an element-wise output", consumer.tensor.name()));
    }
    if consumer.tensor.shape() != st.tensor.shape() || reads(consumer) != Some(true) {
        return not(&format!("its consumer {} does not read it element by element", consumer.tensor.name()));
    }
    Ok(consumer.tensor.clone())
}

/// `epilogue` rebuilt on `acc` in place of the accumulator `from` it read.
fn rebuild_epilogue(epilogue: &Tensor, from: &Tensor, acc: &Tensor) -> Result<Tensor, TeError> {
    let body = epilogue.body().cloned().unwrap_or_else(|| epilogue.at_vec(vec![]));
    let old: Vec<Var> = epilogue.axes().iter().map(|a| a.var().clone()).collect();
    compute_vec(
        epilogue.shape().to_vec(),
        |i| {
            let mut m = ReadsOf { from, to: Some(acc), axes: &old, elementwise: true, found: false };
            let replaced = m.mutate_expr(&body);
            let map: HashMap<Var, Expr> = old.iter().cloned().zip(i.iter().cloned()).collect();
            substitute_map(&replaced, &map)
        },
        epilogue.name(),
    )
}

/// How the kernel reads its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmForm {
    /// u8 × i8 bytes, four `k` per group (`vpdpbusd`, or the AVX2 triple where proven exact).
    Bytes,
    /// Both operands widened to i16, two `k` per pair (`vpmaddwd`).
    I16Pairs,
    /// f32 × f32 summed in f32, one `k` per group (`IntrinKind::F32Gemm`).
    F32,
}

impl GemmForm {
    pub fn name(self) -> &'static str {
        match self {
            GemmForm::Bytes => "u8",
            GemmForm::I16Pairs => "i16",
            GemmForm::F32 => "f32",
        }
    }
    fn pack(self) -> i64 {
        match self {
            GemmForm::Bytes => 4,
            GemmForm::I16Pairs => 2,
            GemmForm::F32 => 1,
        }
    }
    fn a_dtype(self) -> DType {
        match self {
            GemmForm::Bytes => DType::U8,
            GemmForm::I16Pairs => DType::I16,
            GemmForm::F32 => DType::F32,
        }
    }
    fn b_dtype(self) -> DType {
        match self {
            GemmForm::Bytes => DType::I8,
            GemmForm::I16Pairs => DType::I16,
            GemmForm::F32 => DType::F32,
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

/// `e` as a read of an f32 tensor under casts to f32 only (which change no value).
fn read_f32(e: &Expr) -> Option<Read> {
    match e.kind() {
        ExprKind::Cast(inner) if e.dtype() == DType::F32 => read_f32(inner),
        ExprKind::TensorRead(t, idx) if t.dtype() == DType::F32 => {
            Some(Read { tensor: t.clone(), indices: idx.clone() })
        }
        _ => None,
    }
}

fn uses(read: &Read, v: &Var) -> bool {
    read.indices.iter().any(|e| e.uses_var(v))
}

/// The contraction `st` computes, or why it is none.
pub fn recognize(st: &StageInfo, stages: &[StageInfo]) -> Result<Contraction, String> {
    if !matches!(st.kind, StageKind::Reduction { .. }) {
        return Err("not a reduction".into());
    }
    let epilogue = if st.is_output { None } else { Some(epilogue_of(st, stages)?) };
    let body = st.tensor.body().ok_or("no body")?;
    let ExprKind::Reduce(r) = body.kind() else { return Err("not a reduction".into()) };
    if r.reducer != Reducer::Sum || ![DType::I32, DType::F32].contains(&body.dtype()) {
        return Err(format!("a {} into {}, not a sum into i32 or f32", r.reducer.name(), body.dtype()));
    }
    let ExprKind::Binary(ir::expr::BinOp::Mul, x, y) = r.source.kind() else {
        return Err("the summand is not a product of two operands".into());
    };
    let (a, b) = if body.dtype() == DType::F32 {
        let (Some(x), Some(y)) = (read_f32(x), read_f32(y)) else {
            return Err("a factor of the f32 product is not a read of an f32 tensor".into());
        };
        // B is the operand the output's last (contiguous) axis indexes alone, the columns the
        // kernel stores as vectors: the second factor, unless only the first is (the product
        // commutes exactly).
        let last_only =
            |p: &Read, q: &Read| st.spatial.last().is_some_and(|ax| uses(p, ax.var()) && !uses(q, ax.var()));
        if last_only(&x, &y) && !last_only(&y, &x) { (y, x) } else { (x, y) }
    } else {
        let (Some(x), Some(y)) = (read_under_casts(x), read_under_casts(y)) else {
            return Err("a factor of the product is not a (cast) tensor read".into());
        };
        match (x.tensor.dtype(), y.tensor.dtype()) {
            (DType::U8, DType::I8) => (x, y),
            (DType::I8, DType::U8) => (y, x),
            (p, q) => return Err(format!("operands {p} × {q}, not u8 × i8 into i32")),
        }
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
        return Err("no output axis indexes only the first operand (no GEMM rows)".into());
    };
    let [col] = cols[..] else {
        return Err(format!(
            "{} output axes index only the second operand, expected one (a depthwise or grouped \
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
        epilogue,
    })
}

/// The kernel form for these options: f32 for an f32 contraction; bytes with VNNI or where
/// ranges prove the triple exact, else i16 pairs; with the reason, for the listing.
pub fn form_for(c: &Contraction, vnni: bool) -> (GemmForm, String) {
    if c.output.dtype() == DType::F32 {
        return (GemmForm::F32, "f32: rounded products summed in the definition's order".into());
    }
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

/// The direct form of `A` (as the `x86_conv` template reads its padded source): each GEMM row
/// reads `A` in place of an im2col copy, one segment per value of the reduction axis outside
/// the kernel row (a convolution's kernel rows), each segment `seg_k` contiguous elements of
/// `A`'s last dimension, or of its last two flattened (a kernel row spans pixels × channels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Direct {
    /// The reduction axis (position in `Contraction::reduce`) whose values are the segments.
    pub segment: Option<usize>,
    /// `A`'s last two dimensions are read as one (the kernel row `rx·C + rc`).
    pub flatten: bool,
    /// Elements of one segment: the extents of the last reduction axis, times the one before
    /// it where `flatten` — that one padded to `rx_padded` so that a segment is whole groups
    /// (the stem's 7·3 read as 8·3: the eighth pixel's bytes multiply the packing's zeros).
    pub seg_k: i64,
    /// The extent of the kernel row's pixel axis as the segments lay it out (its own unless
    /// padded).
    pub rx_padded: i64,
    /// Flat rows: the GEMM's rows run over the source rows too (`FlatRows`).
    pub flat: Option<FlatRows>,
}

/// Flat rows (the template's `FlatRows`): at stride 1, output pixel `(y, x)` reads the source
/// from flat pixel `y·WS + x` on, so the GEMM's rows are the virtual pixels `v = y·WS + x`
/// (`WS` the source row's pixels): one call covers pixels of several output rows (a 7×7 layer's
/// 49 in calls of up to 64 rows instead of 7). The `x ≥ OW` pixels computed between rows are
/// discarded by the output's copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatRows {
    /// The output axis of the rows (`y`), folded into the GEMM's rows.
    pub y: usize,
    /// Pixels of a source row and source rows (`A`'s third and second last extents).
    pub ws: i64,
    pub hs: i64,
    /// Virtual pixels up to the last output pixel: `(OH - 1)·WS + OW`.
    pub v: i64,
}

/// The flat rows of direct form `d`, or why they do not apply: the kernel row spans pixels ×
/// channels, `A`'s third last index is `y + ry` (+ a constant) and its second last `x + rx`
/// (+ a constant): stride 1, and no other row axis of extent above 1.
pub fn flat_rows(c: &Contraction, d: &Direct) -> Result<FlatRows, String> {
    let idx = &c.a.indices;
    let rank = idx.len();
    if !d.flatten || rank < 3 {
        return Err("the kernel row is not pixels × channels of a source of rows".into());
    }
    let r = c.reduce.len();
    let rows: Vec<usize> =
        c.outer.iter().copied().filter(|&i| !c.batch.contains(&i) && c.axes[i].extent() > 1).collect();
    let [y] = rows[..] else {
        return Err(format!("{} output axes besides the GEMM's rows index only A, expected one", rows.len()));
    };
    let terms = |e: &Expr, want: &[&Var]| {
        let lin = Linear::of(e);
        lin.terms.len() == want.len() && want.iter().all(|v| lin.terms.iter().any(|(t, k)| *k == 1 && is_var(t, v)))
    };
    let x = c.axes[c.rows].var();
    let mut dim3 = vec![c.axes[y].var()];
    if let Some(s) = d.segment {
        dim3.push(c.reduce[s].var());
    }
    if !terms(&idx[rank - 3], &dim3) || !terms(&idx[rank - 2], &[x, c.reduce[r - 2].var()]) {
        return Err("A is not read at stride 1 as [.., y + ry, x + rx, rc]".into());
    }
    let (yv, seg) = (c.axes[y].var(), d.segment.map(|s| c.reduce[s].var()));
    if idx[..rank - 3].iter().any(|e| e.uses_var(yv) || e.uses_var(x) || seg.is_some_and(|v| e.uses_var(v))) {
        return Err("a leading index of A uses the rows or the segments".into());
    }
    let shape = c.a.tensor.shape();
    let (hs, ws) = (shape[rank - 3], shape[rank - 2]);
    Ok(FlatRows { y, ws, hs, v: (c.axes[y].extent() - 1) * ws + c.axes[c.rows].extent() })
}

/// The `mr` choices of flat rows: whole tiles of 16 rows up to 64 where they do not exceed
/// the rows rounded up to a tile, and all `v` rows in one call where they are at most 64 (the
/// GEMM's rows are padded to whole `mr`).
pub fn flat_mr_choices(f: &FlatRows) -> Vec<i64> {
    let mut out: Vec<i64> = [16, 32, 48, 64].into_iter().filter(|m| *m <= ceil_div(f.v, 16) * 16).collect();
    if f.v <= 64 {
        out.push(f.v);
    }
    out.sort_unstable();
    out.dedup();
    out
}

impl Direct {
    pub fn segments(&self, c: &Contraction) -> i64 {
        self.segment.map_or(1, |s| c.reduce[s].extent())
    }

    /// The reduction extents as `K'` lays them out: the declared ones, the pixel axis of a
    /// flattened kernel row padded to `rx_padded`.
    fn extents(&self, c: &Contraction) -> Vec<i64> {
        let r = c.reduce.len();
        let mut e: Vec<i64> = c.reduce.iter().map(|a| a.extent()).collect();
        if self.flatten {
            e[r - 2] = self.rx_padded;
        }
        e
    }

    /// Elements past the kernel row that a padded segment reads.
    fn overhang(&self, c: &Contraction) -> i64 {
        let r = c.reduce.len();
        if self.flatten { (self.rx_padded - c.reduce[r - 2].extent()) * c.reduce[r - 1].extent() } else { 0 }
    }
}

/// Whether `e` is `v` itself.
fn is_var(e: &Expr, v: &Var) -> bool {
    matches!(e.kind(), ExprKind::Var(x) if x == v)
}

/// The direct form of `c`'s `A` for `form`, or why it does not apply. `A`'s last index must be
/// the last reduction axis `rc`; the axis before it, `rx`, is either of extent 1 or indexes the
/// dimension before with coefficient 1 (`x·s + rx`, spatial axes only besides) while `rc`
/// spans all of `A`'s last dimension, so that `rx·C + rc` is one contiguous run; at most one
/// other reduction axis has an extent above 1 (the segments); a segment is whole groups of the
/// kernel's packing, or where `rx` spans the row, made so by padding `rx`.
pub fn direct(c: &Contraction, form: GemmForm) -> Result<Direct, String> {
    if form == GemmForm::F32 {
        return Err("the f32 kernel reads A as one segment".into());
    }
    let r = c.reduce.len();
    if r == 1 {
        return Err("one reduction axis: the GEMM's K, read as the direct form would".into());
    }
    let idx = &c.a.indices;
    let rank = idx.len();
    let rc = &c.reduce[r - 1];
    if !idx.last().is_some_and(|e| is_var(e, rc.var())) {
        return Err(format!("A's last index is not the reduction axis {}", rc.name()));
    }
    if idx[..rank - 1].iter().any(|e| e.uses_var(rc.var())) {
        return Err(format!("{} indexes more than A's last dimension", rc.name()));
    }
    let rx = (r >= 2 && c.reduce[r - 2].extent() > 1).then(|| &c.reduce[r - 2]);
    let mut seg_k = rc.extent();
    let mut rx_padded = 1;
    if let Some(rx) = rx {
        let c_extent = c.a.tensor.shape()[rank - 1];
        if rank < 2 || rc.extent() != c_extent {
            return Err(format!("{} does not span A's last dimension ({c_extent})", rc.name()));
        }
        let lin = Linear::of(&idx[rank - 2]);
        let spatial = |t: &Expr| c.axes.iter().any(|a| is_var(t, a.var()));
        let rx_once = lin.terms.iter().filter(|(t, k)| is_var(t, rx.var()) && *k == 1).count() == 1;
        let others_spatial = lin.terms.iter().all(|(t, _)| is_var(t, rx.var()) || spatial(t));
        if !rx_once || !others_spatial || idx[..rank - 2].iter().any(|e| e.uses_var(rx.var())) {
            return Err(format!("A's second last index is not spatial axes + {}", rx.name()));
        }
        rx_padded = (rx.extent()..).find(|e| (e * rc.extent()) % form.pack() == 0).unwrap_or(rx.extent());
        seg_k *= rx_padded;
    }
    let inner = if rx.is_some() { r - 2 } else { r - 1 };
    let mut outer = (0..inner).filter(|&i| c.reduce[i].extent() > 1);
    let segment = outer.next();
    if outer.next().is_some() {
        return Err("more than one reduction axis outside the kernel row".into());
    }
    if let Some(s) = segment
        && idx[rank - 1..].iter().chain(rx.map(|_| &idx[rank - 2])).any(|e| e.uses_var(c.reduce[s].var()))
    {
        return Err(format!("{} indexes the kernel row", c.reduce[s].name()));
    }
    if seg_k % form.pack() != 0 {
        return Err(format!("a kernel row of {seg_k} is not whole groups of {}", form.pack()));
    }
    Ok(Direct { segment, flatten: rx.is_some(), seg_k, rx_padded, flat: None })
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
    /// The contraction's result (its name, shape and dtype): the GEMM, or a copy of its columns.
    pub acc: Tensor,
    /// The definition's output: `acc`, or the contraction's element-wise epilogue rebuilt on it.
    pub output: Tensor,
    /// `K'`, the reduction padded to whole groups.
    pub k: i64,
    /// The reduction axes' extents as `K'` lays them out (`k = ((r0·E1 + r1)·E2 + r2)…`): the
    /// declared ones, one of them padded where `K` is not a whole number of groups.
    pub extents: Vec<i64>,
    /// The kernel's segments and the elements of each (`segments · seg_k = k`): one of `K'`,
    /// or in the direct form the kernel rows.
    pub segments: i64,
    pub seg_k: i64,
    /// The GEMM's axes: positions of its rows, columns and outer loops (the output's, or with
    /// flat rows the output's without `y`, the rows the virtual pixels).
    pub gemm_rows: usize,
    pub gemm_cols: usize,
    pub gemm_outer: Vec<usize>,
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
    let mut map = HashMap::default();
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
/// reads the packed `B` as a placeholder (`Rewritten::prepared_b`); with `direct`, the GEMM
/// reads `A` in its direct form (in place, or a copy of `A` in the kernel's dtype with the
/// padding inlined and, where the kernel row spans two dimensions, those two flattened).
pub fn rewrite(
    c: &Contraction,
    form: GemmForm,
    nr: i64,
    prepare_b: bool,
    direct: Option<&Direct>,
    mr: i64,
) -> Result<Rewritten, TeError> {
    let p = form.pack();
    let flat = direct.and_then(|d| d.flat.as_ref());
    // Output axes as the GEMM has them: all, or with flat rows all but `y`.
    let kept: Vec<usize> = (0..c.axes.len()).filter(|&i| flat.is_none_or(|f| f.y != i)).collect();
    let at = |i: usize| kept.iter().position(|&k| k == i).unwrap_or(0);
    // With flat rows, the virtual pixels padded to whole tiles of `mr`.
    let vp = flat.map(|f| ceil_div(f.v, mr.max(1)) * mr.max(1));
    let k: i64 = c.reduce.iter().map(|r| r.extent()).product();
    let extents = match direct {
        Some(d) => d.extents(c),
        None => padded_extents(&c.reduce.iter().map(|r| r.extent()).collect::<Vec<_>>(), p),
    };
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
    let a_copy = if let Some(d) = direct {
        direct_copy(c, form, d, vp.unwrap_or(0))?
    } else if in_place {
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
    // f32: no group axis (groups of one `k`).
    let grouped = form != GemmForm::F32;
    shape.extend([ceil_div(n, nr), kp / p, nr]);
    if grouped {
        shape.push(p);
    }
    let packed_b = compute_vec(
        shape,
        |i| {
            let col = &i[nb] * nr + &i[nb + 2];
            let kk = if grouped { &i[nb + 1] * p + &i[nb + 3] } else { i[nb + 1].clone() };
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
                Some(valid) => select(valid, value, Expr::zero(form.b_dtype())),
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
    let (segments, seg_k) = match direct {
        Some(d) => (d.segments(c), d.seg_k),
        None => (1, kp),
    };
    let ks = if segments > 1 { Some(reduce_axis(segments, "ks")?) } else { None };
    let (ko, ki) = (reduce_axis(seg_k / p, "ko")?, reduce_axis(p, "ki")?);
    // The GEMM's columns padded to whole panels, so that every tile runs the kernel.
    let mut gemm_shape: Vec<i64> = kept.iter().map(|&i| c.axes[i].extent()).collect();
    gemm_shape[at(c.cols)] = ceil_div(n, nr) * nr;
    if let Some(vp) = vp {
        gemm_shape[at(c.rows)] = vp;
    }
    let padded = n % nr != 0 || flat.is_some();
    let gemm_name = if padded { format!("{name}.gemm_c") } else { name.to_string() };
    let gemm = compute_vec(
        gemm_shape,
        |g| {
            // The output's index: `y` 0 and `x` the virtual pixel with flat rows.
            let i: Vec<Expr> = (0..c.axes.len())
                .map(|ax| if kept.contains(&ax) { g[at(ax)].clone() } else { Expr::index(0) })
                .collect();
            let i = &i[..];
            let kk = if grouped { &ko * p + &ki } else { ko.to_expr() };
            let a = match (direct, &a_copy) {
                (Some(d), _) => direct_read(c, d, a_copy.as_ref(), i, ks.as_ref(), kk),
                (None, None) => {
                    let mut map: HashMap<Var, Expr> = HashMap::default();
                    for (pos, ax) in c.axes.iter().enumerate() {
                        map.insert(ax.var().clone(), i[pos].clone());
                    }
                    map.insert(c.reduce[0].var().clone(), kk);
                    substituted(&c.a, &map)
                }
                (None, Some(copy)) => {
                    let mut idx: Vec<Expr> = a_axes.iter().map(|&ax| i[ax].clone()).collect();
                    idx.push(kk);
                    copy.at_vec(idx)
                }
            };
            let mut idx: Vec<Expr> = c.batch.iter().map(|&ax| i[ax].clone()).collect();
            let col = &i[c.cols];
            let group = match &ks {
                Some(ks) => ks * (seg_k / p) + &ko,
                None => ko.to_expr(),
            };
            idx.extend([col / nr, group, col % nr]);
            if !grouped {
                // One `k` per group: `ko` is `k` itself, in the definition's order.
                return sum(DType::F32, &[&ko], a * read_b.at_vec(idx));
            }
            idx.push(ki.to_expr());
            let b = read_b.at_vec(idx);
            let reduce: Vec<&IterVar> = ks.iter().chain([&ko, &ki]).collect();
            sum(DType::I32, &reduce, a.cast(DType::I32) * b.cast(DType::I32))
        },
        &gemm_name,
    )?;
    let output = if padded {
        compute_vec(
            c.axes.iter().map(|a| a.extent()).collect(),
            |i| {
                let idx: Vec<Expr> = kept
                    .iter()
                    .map(|&ax| match flat {
                        Some(f) if ax == c.rows => &i[f.y] * f.ws + &i[ax],
                        _ => i[ax].clone(),
                    })
                    .collect();
                gemm.at_vec(idx)
            },
            name,
        )?
    } else {
        gemm.clone()
    };
    let result = match &c.epilogue {
        Some(e) => rebuild_epilogue(e, &c.output, &output)?,
        None => output.clone(),
    };
    let (gemm_rows, gemm_cols) = (at(c.rows), at(c.cols));
    let gemm_outer = c.outer.iter().filter(|&&i| kept.contains(&i)).map(|&i| at(i)).collect();
    Ok(Rewritten {
        a_copy,
        packed_b,
        prepared_b,
        gemm,
        acc: output,
        output: result,
        k: kp,
        extents,
        segments,
        seg_k,
        gemm_rows,
        gemm_cols,
        gemm_outer,
    })
}

/// `A` as the direct form reads it where it is not read in place: in the kernel's dtype, its
/// last two dimensions flattened where `d.flatten` (`<out>.gemm_a`); `None` in place (a
/// placeholder of the kernel's dtype, nothing flattened).
fn direct_copy(c: &Contraction, form: GemmForm, d: &Direct, vp: i64) -> Result<Option<Tensor>, TeError> {
    let a = &c.a.tensor;
    if !d.flatten && a.is_placeholder() && a.dtype() == form.a_dtype() {
        return Ok(None);
    }
    let shape = a.shape();
    let rank = shape.len();
    let name = format!("{}.gemm_a", c.output.name());
    if let Some(f) = &d.flat {
        // The source's last three dimensions as one, long enough for the last tile's reads
        // (zeros past the source: virtual pixels past the last output pixel read them).
        let ch = shape[rank - 1];
        let lin = |e: &Expr| Linear::of(e).constant;
        let (c3, c2) = (lin(&c.a.indices[rank - 3]), lin(&c.a.indices[rank - 2]));
        let reach = ((c3 + d.segments(c) - 1) * f.ws + c2 + vp - 1) * ch + d.seg_k;
        let size = f.hs * f.ws * ch;
        let mut flat: Vec<i64> = shape[..rank - 3].to_vec();
        // Whole source rows, so that the copy splits into rows, pixels and channels.
        flat.push(ceil_div(size.max(reach), f.ws * ch) * f.ws * ch);
        let copy = compute_vec(
            flat,
            |i| {
                let t = &i[rank - 3];
                let mut idx: Vec<Expr> = i[..rank - 3].to_vec();
                let row = index_min(t / (f.ws * ch), Expr::index(f.hs - 1));
                idx.extend([row, t / ch % f.ws, t % ch]);
                let value = a.at_vec(idx).cast(form.a_dtype());
                if reach > size { select(t.clone().lt(size), value, Expr::int(form.a_dtype(), 0)) } else { value }
            },
            &name,
        )?;
        return Ok(Some(copy));
    }
    if d.flatten {
        let (pixels, ch) = (shape[rank - 2], shape[rank - 1]);
        if ch % DENSE_ROW_LANES != 0
            && let Some(copy) = dense_rows_copy(c, form, d, &name)?
        {
            return Ok(Some(copy));
        }
        let mut flat: Vec<i64> = shape[..rank - 2].to_vec();
        // The last segment's overhang past the row: zeros (they multiply zeros of the packing).
        let overhang = d.overhang(c);
        flat.push(pixels * ch + overhang);
        let copy = compute_vec(
            flat,
            |i| {
                let t = &i[rank - 2];
                let mut idx: Vec<Expr> = i[..rank - 2].to_vec();
                if overhang > 0 {
                    idx.extend([index_min(t / ch, Expr::index(pixels - 1)), t % ch]);
                    select(t.clone().lt(pixels * ch), a.at_vec(idx).cast(form.a_dtype()), Expr::int(form.a_dtype(), 0))
                } else {
                    idx.extend([t / ch, t % ch]);
                    a.at_vec(idx).cast(form.a_dtype())
                }
            },
            &name,
        )?;
        Ok(Some(copy))
    } else {
        Ok(Some(compute_vec(shape.to_vec(), |i| a.at_vec(i.to_vec()).cast(form.a_dtype()), &name)?))
    }
}

/// The lanes of a dense row copy's vectors (`dense_rows_copy`), and what its rows are rounded
/// up to: where a pixel's channels do not fill them (the stem's 3), the row's bytes are copied
/// along the row, as the template copies its padded rows.
pub const DENSE_ROW_LANES: i64 = 16;

/// The flattened copy of `A` (`direct_copy`) as rows of bytes, or `None` where a row would hold
/// no pixel of the source: element `t` of a row is pixel `t / C`'s channel `t % C`, rows
/// rounded up to whole `DENSE_ROW_LANES` (zeros past the row's pixels and the overhang). Where
/// `A` is a padding stage (`select(inside, value, zero)`), its body is inlined here with the
/// padding's bounds on the pixel (`x + k ≥ 0`, `x + k < E`) as bounds on `t`, and the value
/// read at the offset clamped into them: `partition_loops` then splits each row at the
/// padding and the interior is one dense copy (a pixel's channels decoded out of `t` would
/// keep every pixel a select of `C` lanes).
fn dense_rows_copy(c: &Contraction, form: GemmForm, d: &Direct, name: &str) -> Result<Option<Tensor>, TeError> {
    let a = &c.a.tensor;
    let shape = a.shape();
    let rank = shape.len();
    let (pixels, ch) = (shape[rank - 2], shape[rank - 1]);
    let row = pixels * ch + d.overhang(c);
    let mut flat: Vec<i64> = shape[..rank - 2].to_vec();
    flat.push(ceil_div(row, DENSE_ROW_LANES) * DENSE_ROW_LANES);
    // A padding stage's condition, value and padding value over its own axes, else `A` read.
    let axes = a.axes();
    let parts = match a.body().map(|b| b.kind()) {
        Some(ExprKind::Select(cond, t, f)) if axes.len() == rank => Some((cond.clone(), t.clone(), f.clone())),
        _ => None,
    };
    let (mut lo, mut hi) = (0, pixels);
    let mut rest: Vec<Expr> = Vec::new();
    if let Some((cond, _, _)) = &parts {
        let x = axes[rank - 2].var();
        for term in conjuncts(cond) {
            match pixel_bound(&term, x) {
                Some(Bound::Lo(b)) => lo = lo.max(b),
                Some(Bound::Hi(b)) => hi = hi.min(b),
                None => rest.push(term),
            }
        }
    }
    if hi <= lo {
        return Ok(None);
    }
    let copy = compute_vec(
        flat,
        |i| {
            let t = &i[rank - 2];
            // The offset clamped into the pixels the bounds keep (exact inside them).
            let ct = index_min(ir::expr::max(t - lo * ch, Expr::index(0)), Expr::index((hi - lo) * ch - 1));
            let inside = t.clone().ge(lo * ch) & t.clone().lt(hi * ch);
            let zero = Expr::int(form.a_dtype(), 0);
            let Some((_, value, padding)) = &parts else {
                let mut idx: Vec<Expr> = i[..rank - 2].to_vec();
                idx.extend([&ct / ch + lo, &ct % ch]);
                return select(inside, a.at_vec(idx).cast(form.a_dtype()), zero);
            };
            let map = |x: Expr, k: Expr| -> HashMap<Var, Expr> {
                let mut map: HashMap<Var, Expr> = HashMap::default();
                for (j, ax) in axes[..rank - 2].iter().enumerate() {
                    map.insert(ax.var().clone(), i[j].clone());
                }
                map.insert(axes[rank - 2].var().clone(), x);
                map.insert(axes[rank - 1].var().clone(), k);
                map
            };
            let clamped = map(&ct / ch + lo, &ct % ch);
            let cond = rest.iter().fold(inside, |acc, e| acc & substitute_map(e, &clamped));
            let value = substitute_map(value, &clamped).cast(form.a_dtype());
            // Outside the bounds: the padding value at the pixel itself, zeros past the row.
            let at_t = map(t / ch, t % ch);
            let padding = substitute_map(padding, &at_t).cast(form.a_dtype());
            let padding = select(t.clone().lt(pixels * ch), padding, zero);
            select(cond, value, padding)
        },
        name,
    )?;
    Ok(Some(copy))
}

/// The terms of a conjunction (`a & b & …`).
fn conjuncts(e: &Expr) -> Vec<Expr> {
    match e.kind() {
        ExprKind::Binary(BinOp::And, l, r) => {
            let mut out = conjuncts(l);
            out.extend(conjuncts(r));
            out
        }
        _ => vec![e.clone()],
    }
}

/// A bound on a pixel: `x ≥ b` or `x < b`.
enum Bound {
    Lo(i64),
    Hi(i64),
}

/// `term` as a bound on `x`, where it compares `x + k` with a constant.
fn pixel_bound(term: &Expr, x: &Var) -> Option<Bound> {
    let ExprKind::Cmp(op, l, r) = term.kind() else { return None };
    let (l, r) = (Linear::of(l), Linear::of(r));
    let [(e, 1)] = l.terms.as_slice() else { return None };
    if !r.terms.is_empty() || !is_var(e, x) {
        return None;
    }
    // `x + k op 0`.
    let k = l.constant - r.constant;
    match op {
        CmpOp::Ge => Some(Bound::Lo(-k)),
        CmpOp::Gt => Some(Bound::Lo(-k + 1)),
        CmpOp::Lt => Some(Bound::Hi(-k)),
        CmpOp::Le => Some(Bound::Hi(-k + 1)),
        _ => None,
    }
}

/// The GEMM's read of `A` in the direct form at output index `i`, segment `ks` and kernel-row
/// element `kk`: `A`'s index with the segment axis `ks`, every other reduction axis of the row
/// 0 and the row's element added to the last (flattened) dimension.
fn direct_read(c: &Contraction, d: &Direct, copy: Option<&Tensor>, i: &[Expr], ks: Option<&IterVar>, kk: Expr) -> Expr {
    let mut map: HashMap<Var, Expr> = HashMap::default();
    for (pos, ax) in c.axes.iter().enumerate() {
        map.insert(ax.var().clone(), i[pos].clone());
    }
    for (j, r) in c.reduce.iter().enumerate() {
        let v = match (d.segment, ks) {
            (Some(s), Some(ks)) if s == j => ks.to_expr(),
            _ => Expr::index(0),
        };
        map.insert(r.var().clone(), v);
    }
    let idx: Vec<Expr> = c.a.indices.iter().map(|e| substitute_map(e, &map)).collect();
    let rank = idx.len();
    let source = copy.unwrap_or(&c.a.tensor);
    if let Some(f) = &d.flat {
        let ch = c.a.tensor.shape()[rank - 1];
        let mut flat: Vec<Expr> = idx[..rank - 3].to_vec();
        flat.push(&idx[rank - 3] * (f.ws * ch) + &idx[rank - 2] * ch + kk);
        return source.at_vec(flat);
    }
    if d.flatten {
        let ch = c.a.tensor.shape()[rank - 1];
        let mut flat: Vec<Expr> = idx[..rank - 2].to_vec();
        flat.push(&idx[rank - 2] * ch + kk);
        source.at_vec(flat)
    } else {
        let mut idx = idx;
        idx[rank - 1] = kk;
        source.at_vec(idx)
    }
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
///
/// With `epilogue_at_tile` (the `.epi` sketches, `super::epilogue`), the epilogue is tensorized
/// per output row as a Map, which lowering fuses into the GEMM's tile calls; its outer loops
/// of more than one iteration on the thread pool.
#[allow(clippy::too_many_arguments)]
pub fn schedule(
    c: &Contraction,
    form: GemmForm,
    point: GemmPoint,
    vector_bytes: i64,
    inline: &[Tensor],
    prepare_b: bool,
    direct: Option<&Direct>,
    epilogue_at_tile: bool,
) -> Result<Tensorized, TensorizeError> {
    let rw = rewrite(c, form, point.nr, prepare_b, direct, point.mr).map_err(TensorizeError::Rewrite)?;
    let row_map = match epilogue_at_tile && rw.output.id() != rw.acc.id() {
        true => Some(super::epilogue::row_map(&rw.output, &rw.acc).map_err(TensorizeError::Epilogue)?),
        false => None,
    };
    let (m, n) = (rw.gemm.shape()[rw.gemm_rows], c.axes[c.cols].extent());
    let (mr, nr) = (point.mr.min(m), point.nr.min(n));
    let intrin = match form {
        GemmForm::F32 => f32_gemm_microkernel(mr, nr, rw.seg_k),
        _ => gemm_segmented_microkernel(mr, nr, rw.segments, rw.seg_k, form.a_dtype()),
    }
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
            // one (a convolution's channels); in the direct form, a flattened row split into
            // its pixels' channels.
            let mut last = copy.axis(copy.axes().len() - 1);
            let extents = &rw.extents;
            let mut span = if direct.is_some() { last.extent() } else { rw.k };
            // The loop the thread pool runs: the first leading axis of more than one value, or
            // where the copy is one flat row, its pixels.
            let rank = copy.axes().len();
            let mut first = copy.axes()[..rank - 1].iter().find(|a| a.extent() > 1).cloned();
            let ch = c.a.tensor.shape()[c.a.tensor.shape().len() - 1];
            let dense_rows = direct.is_some_and(|d| d.flatten && d.flat.is_none())
                && ch % DENSE_ROW_LANES != 0
                && span % DENSE_ROW_LANES == 0;
            if dense_rows {
                // Rows of bytes (`dense_rows_copy`): vectors along the row, dense between the
                // padding that `partition_loops` splits off.
                let (_, lanes) = s.split(copy, &last, DENSE_ROW_LANES)?;
                s.vectorize(copy, &lanes)?;
            } else if let Some(d) = direct.filter(|d| d.flatten) {
                // Source rows (with flat rows), then pixels, then channels: one loop each, so
                // that the decoding of the flat index folds away and the channels are one
                // dense vector read.
                let ch = c.a.tensor.shape()[c.a.tensor.shape().len() - 1];
                let factors = d.flat.as_ref().map(|f| f.ws * ch).into_iter().chain([ch]);
                for factor in factors {
                    if factor < span {
                        let (outer, inner) = s.split(copy, &last, factor)?;
                        first = first.or(Some(outer));
                        last = inner;
                        span = factor;
                    }
                }
            } else if direct.is_none() && extents.iter().product::<i64>() == rw.k {
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
            if let Some(f) = f.filter(|f| *f > 1 && !dense_rows) {
                if f < span {
                    let (_, vi) = s.split(copy, &last, f)?;
                    s.vectorize(copy, &vi)?;
                } else {
                    s.vectorize(copy, &last)?;
                }
            }
            let first = first.or_else(|| copy.axes().iter().find(|a| a.extent() > 1).cloned());
            if let Some(first) = first {
                parallelize(s, copy, &[first], point.threads)?;
            }
        }
        if rw.prepared_b.is_none() {
            schedule_packing(s, &rw.packed_b, c.batch.len(), point.threads)?;
        }
        if rw.acc.id() != rw.gemm.id() && rw.acc.id() != rw.output.id() {
            // The copy of the GEMM's columns is read once per element by the epilogue.
            s.compute_inline(&rw.acc)?;
        }
        if let Some(map) = &row_map {
            // One Map per output row; the outer loops of one iteration (a batch of one) are not
            // fused into the parallel loop, so the Map nest keeps one loop (`fuse_epilogues`).
            let axes = rw.output.axes().to_vec();
            let row = &axes[axes.len() - 2];
            let outer: Vec<IterVar> = axes[..axes.len() - 2].iter().filter(|a| a.extent() > 1).cloned().collect();
            parallelize(s, &rw.output, &outer, point.threads)?;
            s.tensorize(&rw.output, row, map)?;
        } else if rw.output.id() != rw.gemm.id() {
            let outer = vectorize_injective(s, &rw.output, lanes(vector_bytes, rw.output.dtype().bytes()))?;
            parallelize(s, &rw.output, &outer, point.threads)?;
        }
        let out = &rw.gemm;
        let axes = out.axes().to_vec();
        let (m, n) = (axes[rw.gemm_rows].extent(), axes[rw.gemm_cols].extent());
        let (mr, nr) = (point.mr.min(m), point.nr.min(n));
        let (ro, ri) = s.split(out, &axes[rw.gemm_rows], mr)?;
        let (co, ci) = s.split(out, &axes[rw.gemm_cols], nr)?;
        let mut outer: Vec<IterVar> = rw.gemm_outer.iter().map(|&i| axes[i].clone()).collect();
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

/// The packing of `B` (`bp`, with `nb` batch axes first): a panel's group of `k` values as one
/// vector of `nr × P` lanes, stored contiguously; its reads are `P` rows of `nr` columns of
/// `B` interleaved, which the code generator loads as whole rows and shuffles together (a
/// vector per `k` would store lane by lane). Panels on the thread pool.
fn schedule_packing(s: &mut Schedule, bp: &Tensor, nb: usize, threads: usize) -> Result<(), ScheduleError> {
    let b_axes = bp.axes().to_vec();
    let (jo, ko, ji) = (&b_axes[nb], &b_axes[nb + 1], &b_axes[nb + 2]);
    let mut order: Vec<&IterVar> = b_axes[..nb].iter().collect();
    order.extend([jo, ko, ji]);
    // f32 panels have no group axis: a row of `nr` columns of `B` is one vector.
    order.extend(b_axes.get(nb + 3));
    s.reorder(bp, &order)?;
    s.vectorize(bp, ji)?;
    if let Some(ki) = b_axes.get(nb + 3) {
        s.vectorize(bp, ki)?;
    }
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
    /// The epilogue's row Map could not be declared (`super::epilogue::row_map`).
    Epilogue(String),
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
