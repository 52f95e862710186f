//! Tensor intrinsics: small fixed-size computations that a target implements with a hand-written
//! kernel, declared as tensor expressions so the compiler can prove where they apply.
//!
//! A declaration (`decl_tensor_intrin`) names an `IntrinKind` and gives its exact semantics as a
//! `compute` over placeholders. `Schedule::tensorize` replaces a loop nest by a
//! `StmtKind::Call` of the intrinsic after proving that the nest computes exactly what the
//! declaration says; the loop IR keeps the nest as the call's `fallback`.
//!
//! ```
//! use tensorlift_ir::intrin::{decl_tensor_intrin, IntrinKind};
//! use tensorlift_ir::te::{compute, placeholder, reduce_axis, sum};
//! use tensorlift_ir::DType;
//! // A dot product of 8 i16 pairs into an i32 accumulator, implemented by its loop nest only.
//! let x = placeholder([8], DType::I16, "x").unwrap();
//! let y = placeholder([8], DType::I16, "y").unwrap();
//! let k = reduce_axis(8, "k").unwrap();
//! let dot = compute([1], |_| {
//!     sum(DType::I32, &[&k], x.at([&k]).cast(DType::I32) * y.at([&k]).cast(DType::I32))
//! }, "dot").unwrap();
//! let intrin = decl_tensor_intrin("dot8", IntrinKind::Generic, &dot, &[&x, &y]).unwrap();
//! assert_eq!(intrin.name, "dot8");
//! ```

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::cell::OnceCell;
use std::fmt;
use std::ops::Deref;
use std::rc::Rc;

use crate::analysis::linear::Linear;
use crate::dtype::DType;
use crate::error::TeError;
use crate::expr::{Expr, ExprKind, Var};
use crate::te::{IterVar, Tensor, compute, reduce_axis, sum};

/// What implements an intrinsic. The declaration's compute is the semantics in every case; the
/// kind only tells code generation which kernels may implement it. Serializable as part of a
/// schedule trace (`trace::IntrinRef`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IntrinKind {
    /// `C[m, n] (i32) += Σ_{ko<k/4, ki<4} i32(A[m, ko*4+ki]) * i32(B[ko, n, ki])` with `A: u8[m, k]`
    /// (or `i8[m, k]` for an exact declaration: then both operands are signed),
    /// `B: i8[k/4, n, 4]` (4 consecutive `k` packed per output column) and `C: i32[m, n]`;
    /// exact unless `saturating`, in which case each adjacent pair of products (`ki` = 0, 1 and
    /// 2, 3) is summed and saturated to i16 first (`VPMADDUBSW`), then summed exactly into i32.
    /// The saturating body reduces over `ko` and the pair `kp < 2`:
    /// `Σ_{ko, kp} i32(sat_i16(i32(A[m, ko*4+kp*2])*i32(B[ko, n, kp*2])`
    /// `+ i32(A[m, ko*4+kp*2+1])*i32(B[ko, n, kp*2+1])))`.
    ///
    /// With `segments = S > 1`, the reduction runs over `S` segments of `k` read from `A` at a
    /// free stride (the kernel rows of a convolution, each a row of the padded source):
    /// `A: u8[m, S, k]`, `B: i8[S·k/4, n, 4]` and `C[m, n] += Σ_{ks<S, ko<k/4, ki<4}`
    /// `i32(A[m, ks, ko*4+ki]) * i32(B[ks*(k/4)+ko, n, ki])` (the saturating form likewise, pairs
    /// within a segment).
    ///
    /// A call may compute a range of the segments (`StmtKind::Call::range`): the segments
    /// `first ≤ s < last` only, which is the definition above on an `A` whose elements in the
    /// other segments are 0 (every product of theirs is then 0, a saturated pair 0 + 0 too), so
    /// the i32 sums of the segments in the range are added to `C` and nothing else.
    ///
    /// Layout (checked by `tensorize`, relied on by kernels): the four `ki` of one column are
    /// adjacent (`B` stride 1 along `ki`), the columns of one `ko` follow each other (`B` stride 4
    /// along `n`, so one `ko` step is a dense `n × 4` panel), a row of `A` is contiguous along `k`
    /// and a row of `C` along `n`. Row and segment strides are free.
    Int8Gemm { m: i64, n: i64, k: i64, segments: i64, saturating: bool },
    /// `C[m, n] (i32) += Σ_{ko<k/2, ki<2} i32(A[m, ko*2+ki]) * i32(B[ko, n, ki])` with
    /// `A: i16[m, k]` (an int8 source widened once), `B: i16[k/2, n, 2]` (2 consecutive `k`
    /// packed per output column: the weights widened once when they are prepared) and
    /// `C: i32[m, n]`, summed in wrapping i32 arithmetic like every i32 sum: `VPMADDWD` +
    /// `VPADDD` compute exactly this for every i16 input (their one overflowing case,
    /// `(-32768)²·2`, wraps to the same value). `k` is even. With `segments = S > 1`:
    /// `A: i16[m, S, k]`, `B: i16[S·k/2, n, 2]`, the reduction over segments as for `Int8Gemm`.
    ///
    /// Layout: as `Int8Gemm` with groups of two i16 (`B` stride 1 along `ki` and 2 along `n`;
    /// a group is 4 bytes either way).
    Int16Gemm { m: i64, n: i64, k: i64, segments: i64 },
    /// `C[m, n] (f32) = C[m, n] + A[m, 0]·B[0, n] + A[m, 1]·B[1, n] + … + A[m, k-1]·B[k-1, n]`
    /// with `A: f32[m, k]`, `B: f32[k, n]` and `C: f32[m, n]`, the body
    /// `Σ_{kk<k} A[m, kk] * B[kk, n]` (`f32_gemm_compute`): each product rounded to f32, then
    /// added to the running sum in ascending `kk`, left to right, exactly the fold of a float
    /// `sum` (no fused multiply-add, no reassociation), so results equal the interpreter's bit
    /// for bit (any NaN for a NaN). A resetting call starts the sum at +0.0.
    ///
    /// Layout: a row of `A` is contiguous along `k`, a row of `B` and of `C` along `n`; row
    /// strides are free (`B` is usually a packed panel of `n` columns, so its rows are dense).
    F32Gemm { m: i64, n: i64, k: i64 },
    /// An element-wise map over an `m × n` block, `out[p, c] = f(…)`: the declaration's body
    /// `f` has no reduction and reads each input at `[p, c]` (an `[m, n]` input), at `[c]` (an
    /// `[n]` input: per-column parameters such as per-channel scales) or at `[p]` (an `[m]`
    /// input: per-row parameters such as a softmax row's maximum; `TensorIntrin::map_rows`
    /// says which inputs these are). What `f` computes is
    /// free; code generation compiles the declaration's body itself into a vector kernel where
    /// every operation in it has an exact vector form at the level, and runs the loop nest
    /// elsewhere.
    ///
    /// Layout: every operand is contiguous along `c`; row strides are free.
    Map { m: i64, n: i64 },
    /// A GEMM whose i32 result goes straight through a `Map` (`composite::gemm_map`, which
    /// builds it; the two declarations are `TensorIntrinData::parts`): the call computes
    /// `T = A·B` from zero into a temporary `T: i32[m, N]` exactly as the GEMM declaration
    /// (a resetting call of it, `N` its columns), then `out[p, c] = f(T[p, c], …)` for the
    /// first `n ≤ N` columns exactly as the `[m, n]` Map declaration with `T` as its input 0.
    /// Operands: the GEMM's inputs (`A`, `B`), the Map's inputs after the first, then the Map's
    /// output; `T` is no operand. Never a resetting
    /// call itself (its output is overwritten, as a Map's).
    ///
    /// Layout: as each part requires of its operands.
    GemmMap { m: i64, n: i64 },
    /// A fold of `m` rows of `n` columns into `lanes` partials per row, `out[p, l] =
    /// out[p, l] ⊕ f(…)[p, l] ⊕ f(…)[p, lanes + l] ⊕ … ⊕ f(…)[p, n − lanes + l]`, left to
    /// right in increasing column (the lane order of a row fold, `schedules::nn::FOLD_LANES`):
    /// the declaration's body is one f32 `sum` or `max` over an axis `c < n / lanes` of `f`,
    /// which has no reduction of its own and reads each input at `[p, c·lanes + l]` (an
    /// `[m, n]` input) or at `[p]` (an `[m]` input, per-row parameters). Code generation
    /// compiles `f` as a `Map` body, with one vector accumulator per `lanes`-wide slice and
    /// row, so each partial still folds its columns in the declaration's order.
    ///
    /// Layout: every operand is contiguous along its last axis; row strides are free.
    RowFold { m: i64, n: i64, lanes: i64 },
    /// Implemented only by the equivalent loop nest.
    Generic,
}

impl IntrinKind {
    /// The flat element stride each operand (inputs in declaration order, then the output, of
    /// the ranks `ranks`) must have along each dimension of its declaration tensor; `None` where
    /// any stride is fine.
    pub fn required_strides(&self, ranks: &[usize]) -> Vec<Vec<Option<i64>>> {
        match self {
            IntrinKind::Int8Gemm { segments, .. } | IntrinKind::Int16Gemm { segments, .. } => {
                let pack = self.pack().expect("a GEMM kind");
                let a = if *segments > 1 { vec![None, None, Some(1)] } else { vec![None, Some(1)] };
                vec![a, vec![None, Some(pack), Some(1)], vec![None, Some(1)]]
            }
            IntrinKind::F32Gemm { .. } => vec![vec![None, Some(1)]; 3],
            // `[m, n]` or `[n]` operands: unit stride along `c`, whatever the rows'.
            IntrinKind::Map { .. } | IntrinKind::RowFold { .. } => {
                ranks.iter().map(|&rank| (0..rank).map(|d| (d + 1 == rank).then_some(1)).collect()).collect()
            }
            // Built by `composite::gemm_map` from calls already checked, never tensorized.
            IntrinKind::GemmMap { .. } | IntrinKind::Generic => vec![Vec::new(); ranks.len()],
        }
    }
}

impl IntrinKind {
    /// Consecutive `k` packed per column of `B` in an integer GEMM kind: 4 bytes, or 2 i16
    /// (`F32Gemm` packs none: its `B` is `[k, n]`).
    pub fn pack(&self) -> Option<i64> {
        match self {
            IntrinKind::Int8Gemm { .. } => Some(4),
            IntrinKind::Int16Gemm { .. } => Some(2),
            IntrinKind::F32Gemm { .. }
            | IntrinKind::Map { .. }
            | IntrinKind::GemmMap { .. }
            | IntrinKind::RowFold { .. }
            | IntrinKind::Generic => None,
        }
    }
}

/// The segments of a GEMM whose calls may take a segment range (`StmtKind::Call::range`): an
/// `Int8Gemm` or `Int16Gemm` declaration of `S > 1` segments, or a `GemmMap` whose GEMM part
/// is one. Segment `s` reads `A[·, s, ·]` and the `k/pack` rows of `B` from `s·k/pack` on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Segments {
    /// `S`.
    pub count: i64,
    /// `k` of one segment.
    pub k: i64,
    /// Consecutive `k` per group of `B` (`IntrinKind::pack`).
    pub pack: i64,
    /// Rows of `A` (`m`).
    pub m: i64,
}

/// `intrin`'s segments, if its calls may take a segment range (see `Segments`).
pub fn segmented_gemm(intrin: &TensorIntrin) -> Option<Segments> {
    let gemm = match (&intrin.kind, &intrin.parts) {
        (IntrinKind::GemmMap { .. }, Some((gemm, _))) => gemm.kind,
        (kind, _) => *kind,
    };
    match gemm {
        IntrinKind::Int8Gemm { m, k, segments, .. } | IntrinKind::Int16Gemm { m, k, segments, .. } if segments > 1 => {
            Some(Segments { count: segments, k, pack: gemm.pack()?, m })
        }
        _ => None,
    }
}

/// The value a resetting call (`StmtKind::Call::reset`) of `intrin` sets its output to: the
/// identity of the declaration's reduction, when that is a constant.
pub fn reset_value(intrin: &TensorIntrin) -> Option<Expr> {
    let body = intrin.output.body()?;
    let ExprKind::Reduce(r) = body.kind() else { return None };
    let identity = r.reducer.identity(body.dtype());
    matches!(identity.kind(), ExprKind::Int(_) | ExprKind::Float(_)).then_some(identity)
}

/// Whether `a0·b0 + a1·b1` stays in i16 for every `a` in `[a_lo, a_hi]` and `b` in
/// `[b_lo, b_hi]`: then the saturating pair sum of `VPMADDUBSW` equals the exact one, and the
/// saturating `Int8Gemm` declaration computes the exact one on such operands.
pub fn pair_sums_fit_i16((a_lo, a_hi): (i64, i64), (b_lo, b_hi): (i64, i64)) -> bool {
    let corners = [a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi];
    let (lo, hi) = (corners.iter().min().copied(), corners.iter().max().copied());
    matches!((lo, hi), (Some(lo), Some(hi)) if 2 * lo >= i16::MIN.into() && 2 * hi <= i16::MAX.into())
}

/// A declared intrinsic (see the module doc).
#[derive(Debug)]
pub struct TensorIntrinData {
    /// The name calls print with.
    pub name: String,
    pub kind: IntrinKind,
    /// Placeholders, in call order.
    pub inputs: Vec<Tensor>,
    /// A compute over `inputs`: the semantics. A reduction means the call updates its output:
    /// every output element folds the reduction's values into its current value (the reset is
    /// the ordinary init statement the compiler emits before the call, or the call's own where
    /// it covers the whole reduction: `StmtKind::Call::reset`).
    /// For `IntrinKind::GemmMap`, the Map's output, whose body reads the GEMM's result as the
    /// Map's input 0 (not one of `inputs`): the semantics is `parts`.
    pub output: Tensor,
    /// `IntrinKind::GemmMap` only: the GEMM and the Map declarations it chains.
    pub parts: Option<(TensorIntrin, TensorIntrin)>,
}

/// A declared intrinsic; cheap to clone, identity is the declaration (pointer equality).
#[derive(Clone)]
pub struct TensorIntrin(Rc<Declared>);

/// A declaration and its key (`workload::intrin_key`), computed once: the declaration never
/// changes, and its key is asked for by the schedule's trace and again by code generation.
struct Declared {
    data: TensorIntrinData,
    key: OnceCell<String>,
}

impl TensorIntrin {
    /// A declaration from its parts, for `composite` (which checks them).
    pub(crate) fn from_data(data: TensorIntrinData) -> TensorIntrin {
        TensorIntrin(Rc::new(Declared { data, key: OnceCell::new() }))
    }

    /// The declaration's key, computed by `compute` the first time it is asked for.
    pub(crate) fn key_with(&self, compute: impl FnOnce() -> String) -> &str {
        self.0.key.get_or_init(compute)
    }

    /// The tensors the operands of a call stand for: the inputs in order, then the output.
    pub fn operand_tensors(&self) -> Vec<&Tensor> {
        self.0.data.inputs.iter().chain(std::iter::once(&self.0.data.output)).collect()
    }

    /// Per input of a `Map` or `RowFold` declaration: whether it is a per-row input (`[m]`,
    /// read at `[p]`; `check_map` lets an input be read in one form only). All `false` for
    /// other kinds.
    pub fn map_rows(&self) -> Vec<bool> {
        let (IntrinKind::Map { .. } | IntrinKind::RowFold { .. }, Some(body)) = (self.kind, self.output.body()) else {
            return vec![false; self.inputs.len()];
        };
        let p = self.output.axes()[0].var().clone();
        let mut rows = vec![false; self.inputs.len()];
        body.for_each(&mut |e| {
            if let ExprKind::TensorRead(t, idx) = e.kind()
                && let [index] = idx.as_slice()
                && index.as_var() == Some(&p)
                && let Some(k) = self.inputs.iter().position(|i| i.id() == t.id())
            {
                rows[k] = true;
            }
        });
        rows
    }
}

impl Deref for TensorIntrin {
    type Target = TensorIntrinData;
    fn deref(&self) -> &TensorIntrinData {
        &self.0.data
    }
}

impl PartialEq for TensorIntrin {
    fn eq(&self, other: &TensorIntrin) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for TensorIntrin {}

impl fmt::Debug for TensorIntrin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TensorIntrin").field(&self.0.data).finish()
    }
}

impl fmt::Display for TensorIntrin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.data.name)
    }
}

/// Declares an intrinsic whose semantics is `output`, a compute reading exactly the placeholders
/// `inputs` (given in call order).
///
/// Errors (`TeError::BadIntrinsic`) if `output` is a placeholder, an input is not a placeholder
/// or is given twice, `output` reads a tensor that is not an input or does not read an input, an
/// input is indexed by something other than an affine form of the declaration's axes in which
/// each dimension has an axis of its own (which makes its strides recoverable), or, for
/// `Int8Gemm`, the shapes, dtypes or body differ from the kind's definition.
pub fn decl_tensor_intrin(
    name: &str,
    kind: IntrinKind,
    output: &Tensor,
    inputs: &[&Tensor],
) -> Result<TensorIntrin, TeError> {
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: name.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    let Some(body) = output.body() else {
        return Err(bad("output", "a compute".into(), format!("placeholder {output}")));
    };
    let mut seen = HashSet::default();
    for input in inputs {
        if !input.is_placeholder() {
            return Err(bad("inputs", "placeholders".into(), format!("compute {input}")));
        }
        if !seen.insert(input.id()) {
            return Err(bad("inputs", "distinct tensors".into(), format!("{input} twice")));
        }
    }
    let read = output.inputs();
    if let Some(extra) = read.iter().find(|t| !seen.contains(&t.id())) {
        return Err(bad("output", "to read only the inputs".into(), format!("a read of {extra} in `{body}`")));
    }
    if let Some(unread) = inputs.iter().find(|t| !read.contains(t)) {
        return Err(bad("inputs", format!("tensors read by `{body}`"), format!("{unread}, which it does not read")));
    }
    let axes: HashSet<Var> = output.axes().iter().chain(&output.reduce_axes()).map(|a| a.var().clone()).collect();
    let mut reads = Vec::new();
    body.for_each(&mut |e| {
        if let ExprKind::TensorRead(t, idx) = e.kind() {
            reads.push((t.clone(), idx.clone()));
        }
    });
    for (tensor, indices) in &reads {
        if let Err(found) = check_index(indices, &axes) {
            let expected = "an affine form of the declaration's axes in which every dimension has an axis of its own";
            return Err(bad(&format!("read of {tensor}"), expected.into(), format!("`{found}`")));
        }
    }
    match kind {
        IntrinKind::Int8Gemm { m, n, k, segments, saturating } => {
            let form = if saturating { GemmForm::Saturating } else { GemmForm::Exact8 };
            check_gemm(name, output, inputs, Int8GemmSize { m, n, k, segments }, form)?;
        }
        IntrinKind::Int16Gemm { m, n, k, segments } => {
            check_gemm(name, output, inputs, Int8GemmSize { m, n, k, segments }, GemmForm::Exact16)?;
        }
        IntrinKind::F32Gemm { m, n, k } => check_f32_gemm(name, output, inputs, (m, n, k))?,
        IntrinKind::Map { m, n } => check_map(name, output, (m, n), &reads)?,
        IntrinKind::RowFold { m, n, lanes } => check_row_fold(name, output, (m, n, lanes), &reads)?,
        IntrinKind::GemmMap { .. } => {
            let expected = "a kind declared by a compute (composite::gemm_map builds GemmMap)";
            return Err(bad("kind", expected.into(), "GemmMap".into()));
        }
        IntrinKind::Generic => {}
    }
    let inputs = inputs.iter().map(|t| (*t).clone()).collect();
    let data = TensorIntrinData { name: name.to_string(), kind, inputs, output: output.clone(), parts: None };
    Ok(TensorIntrin::from_data(data))
}

/// `IntrinKind::Map`: an `[m, n]` output without reduction whose every read is `x[p, c]` of an
/// `[m, n]` input, `x[c]` of an `[n]` input or `x[p]` of an `[m]` input, `p, c` being the
/// output's axes; a one-dimensional input is read in one of its two forms only.
fn check_map(name: &str, output: &Tensor, (m, n): (i64, i64), reads: &[(Tensor, Vec<Expr>)]) -> Result<(), TeError> {
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: name.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    if output.shape() != [m, n] || !output.reduce_axes().is_empty() {
        let found = format!("{:?} with {} reduction axes", output.shape(), output.reduce_axes().len());
        return Err(bad("Map output", format!("[{m}, {n}] without reduction"), found));
    }
    let (p, c) = (output.axes()[0].to_expr(), output.axes()[1].to_expr());
    // `index` equals the axis itself (as an affine form: `0*64 + j` is `j`).
    let is_var = |index: &Expr, axis: &Expr| {
        let form = Linear::of(index);
        let terms: Vec<_> = form.terms.iter().filter(|(_, c)| *c != 0).collect();
        form.constant == 0
            && matches!(terms.as_slice(), [(t, 1)] if t.as_var().is_some() && t.as_var() == axis.as_var())
    };
    // Per one-dimensional input: read per row (`true`) or per column.
    let mut forms: HashMap<_, bool> = HashMap::default();
    for (tensor, index) in reads {
        let row = tensor.shape() == [m, n] && index.len() == 2 && is_var(&index[0], &p) && is_var(&index[1], &c);
        let column = tensor.shape() == [n] && index.len() == 1 && is_var(&index[0], &c);
        let per_row = tensor.shape() == [m] && index.len() == 1 && is_var(&index[0], &p);
        let found = || {
            format!(
                "{tensor}{:?} read at [{}]",
                tensor.shape(),
                index.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
            )
        };
        if !row && !column && !per_row {
            let expected = format!("x[{p}, {c}] of x: [{m}, {n}], x[{c}] of x: [{n}] or x[{p}] of x: [{m}]");
            return Err(bad("Map read", expected, found()));
        }
        if (column || per_row) && *forms.entry(tensor.id()).or_insert(per_row) != per_row {
            return Err(bad("Map read", format!("{tensor} read either per row or per column"), found()));
        }
    }
    Ok(())
}

/// `IntrinKind::RowFold`: an f32 `[m, lanes]` output whose body is one `sum` or `max` over a
/// single axis `c` of extent `n / lanes` (`n` a multiple of `lanes`), and whose every read is
/// `x[p, c·lanes + l]` of an f32 `[m, n]` input or `x[p]` of an f32 `[m]` input, `p, l` being
/// the output's axes.
fn check_row_fold(
    name: &str,
    output: &Tensor,
    (m, n, lanes): (i64, i64, i64),
    reads: &[(Tensor, Vec<Expr>)],
) -> Result<(), TeError> {
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: name.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    let reduce = output.body().and_then(|b| match b.kind() {
        ExprKind::Reduce(r) => Some(r.clone()),
        _ => None,
    });
    let fold = reduce.as_ref().filter(|r| {
        matches!(r.reducer, crate::te::Reducer::Sum | crate::te::Reducer::Max)
            && r.axes.len() == 1
            && lanes > 0
            && n % lanes == 0
            && r.axes[0].extent() == n / lanes
            && !contains_reduce(&r.source)
    });
    let Some(fold) = fold.filter(|_| output.shape() == [m, lanes] && output.dtype() == DType::F32) else {
        let found = format!(
            "{} {:?} `{}`",
            output.dtype(),
            output.shape(),
            output.body().map(|b| b.to_string()).unwrap_or_default()
        );
        let expected =
            format!("f32 [{m}, {lanes}], one sum or max over {} chunks of {lanes} columns", n / lanes.max(1));
        return Err(bad("RowFold output", expected, found));
    };
    let (p, l, c) = (output.axes()[0].var().clone(), output.axes()[1].var().clone(), fold.axes[0].var().clone());
    let is = |index: &Expr, want: &[(&Var, i64)]| Linear::of(index).is_sum_of(want);
    for (tensor, index) in reads {
        let element = tensor.shape() == [m, n]
            && index.len() == 2
            && is(&index[0], &[(&p, 1)])
            && is(&index[1], &[(&c, lanes), (&l, 1)]);
        let per_row = tensor.shape() == [m] && index.len() == 1 && is(&index[0], &[(&p, 1)]);
        if !(element || per_row) || tensor.dtype() != DType::F32 {
            let found = format!(
                "{} {tensor}{:?} read at [{}]",
                tensor.dtype(),
                tensor.shape(),
                index.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
            );
            let expected = format!("f32 x[{p}, {c}*{lanes} + {l}] of x: [{m}, {n}] or x[{p}] of x: [{m}]");
            return Err(bad("RowFold read", expected, found));
        }
    }
    Ok(())
}

/// Whether `e` holds a reduction.
fn contains_reduce(e: &Expr) -> bool {
    let mut found = false;
    e.for_each(&mut |x| found |= matches!(x.kind(), ExprKind::Reduce(_)));
    found
}

/// `Ok` if every index is affine in `axes` and each dimension has an axis used by no other
/// dimension; otherwise the offending index (or the whole access).
fn check_index(indices: &[Expr], axes: &HashSet<Var>) -> Result<(), String> {
    let forms: Vec<Linear> = indices.iter().map(Linear::of).collect();
    for (index, form) in indices.iter().zip(&forms) {
        let affine = form.terms.iter().all(|(t, _)| t.as_var().is_some_and(|v| axes.contains(v)));
        if !affine {
            return Err(index.to_string());
        }
    }
    let uses = |form: &Linear, v: &Var| form.terms.iter().any(|(t, c)| *c != 0 && t.as_var() == Some(v));
    for (d, form) in forms.iter().enumerate() {
        let own = form.terms.iter().any(|(t, c)| {
            *c != 0 && forms.iter().enumerate().all(|(e, other)| e == d || !uses(other, t.as_var().expect("affine")))
        });
        if !own {
            return Err(indices.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "));
        }
    }
    Ok(())
}

/// The sizes of an `Int8Gemm` or `Int16Gemm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int8GemmSize {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub segments: i64,
}

impl Int8GemmSize {
    /// The shape of `A`: `[m, k]`, or `[m, segments, k]`.
    pub fn a_shape(&self) -> Vec<i64> {
        if self.segments > 1 { vec![self.m, self.segments, self.k] } else { vec![self.m, self.k] }
    }
}

/// The GEMM kinds' definitions: which dtypes and packing `check_gemm` expects.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum GemmForm {
    /// `Int8Gemm`, exact: `A` u8 or i8, `B` i8 packed by 4.
    Exact8,
    /// `Int8Gemm`, saturating: `A` u8, `B` i8 packed by 4.
    Saturating,
    /// `Int16Gemm`: `A` and `B` i16, `B` packed by 2.
    Exact16,
}

fn check_gemm(
    name: &str,
    output: &Tensor,
    inputs: &[&Tensor],
    size: Int8GemmSize,
    form: GemmForm,
) -> Result<(), TeError> {
    let Int8GemmSize { m, n, k, segments } = size;
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: name.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    let (kind, pack) = if form == GemmForm::Exact16 { ("Int16Gemm", 2) } else { ("Int8Gemm", 4) };
    if m <= 0 || n <= 0 || k <= 0 || k % pack != 0 || segments <= 0 {
        return Err(bad(
            &format!("{kind} sizes"),
            format!("m, n, segments > 0 and k a positive multiple of {pack}"),
            format!("m={m}, n={n}, k={k}, segments={segments}"),
        ));
    }
    if inputs.len() != 2 {
        return Err(bad(&format!("{kind} inputs"), "2 (A, B)".into(), inputs.len().to_string()));
    }
    let describe = |t: &Tensor| format!("{}{:?}", t.dtype(), t.shape());
    let (a_dtype, b_dtype) = match form {
        // An i8 A is exact only: the saturating form is `VPMADDUBSW`'s, whose A is unsigned.
        GemmForm::Exact8 if inputs[0].dtype() == DType::I8 => (DType::I8, DType::I8),
        GemmForm::Exact8 | GemmForm::Saturating => (DType::U8, DType::I8),
        GemmForm::Exact16 => (DType::I16, DType::I16),
    };
    let expected = [
        ("A", inputs[0], a_dtype, size.a_shape()),
        ("B", inputs[1], b_dtype, vec![segments * k / pack, n, pack]),
        ("C (output)", output, DType::I32, vec![m, n]),
    ];
    for (role, tensor, dtype, shape) in expected {
        if tensor.dtype() != dtype || tensor.shape() != shape.as_slice() {
            return Err(bad(&format!("{kind} operand {role}"), format!("{dtype}{shape:?}"), describe(tensor)));
        }
    }
    let canonical = match form {
        GemmForm::Exact16 => int16_gemm_compute(inputs[0], inputs[1], size, name),
        _ => int8_gemm_compute(inputs[0], inputs[1], size, form == GemmForm::Saturating, name),
    }
    .expect("the GEMM definitions are well typed for valid sizes and operands");
    let body = output.body().expect("checked to be a compute");
    let canonical_body = canonical.body().expect("a compute");
    let mut vars: HashMap<Var, Var> =
        output.axes().iter().zip(canonical.axes()).map(|(a, b)| (a.var().clone(), b.var().clone())).collect();
    if !alpha_eq(body, canonical_body, &mut vars) {
        return Err(bad(&format!("{kind} body"), format!("`{canonical_body}`"), format!("`{body}`")));
    }
    Ok(())
}

/// The product `i32(A[row, (ks,) ko*pack + ki]) * i32(B[(ks*(k/pack) +) ko, col, ki])` of the
/// GEMM kinds, over the segment axis `ks` when there is one.
fn gemm_product(
    a: &Tensor,
    b: &Tensor,
    (ks, ko): (Option<&IterVar>, &IterVar),
    k: i64,
    pack: i64,
) -> impl Fn(&Expr, &Expr, Expr) -> Expr {
    let (a, b, ks, ko) = (a.clone(), b.clone(), ks.cloned(), ko.clone());
    move |row: &Expr, col: &Expr, ki: Expr| {
        let (a_index, group) = match &ks {
            Some(ks) => (vec![row.clone(), ks.to_expr(), &ko * pack + ki.clone()], ks * (k / pack) + &ko),
            None => (vec![row.clone(), &ko * pack + ki.clone()], ko.to_expr()),
        };
        a.at_vec(a_index).cast(DType::I32) * b.at([&group, col, &ki]).cast(DType::I32)
    }
}

/// The definition of `IntrinKind::Int8Gemm` over the placeholders `a` and `b` (of the shapes the
/// kind gives), named `name`. Errors as `compute` does (e.g. for a size that is not positive).
pub fn int8_gemm_compute(
    a: &Tensor,
    b: &Tensor,
    size: Int8GemmSize,
    saturating: bool,
    name: &str,
) -> Result<Tensor, TeError> {
    let Int8GemmSize { m, n, k, segments } = size;
    let i32 = DType::I32;
    let ks = (segments > 1).then(|| reduce_axis(segments, "ks")).transpose()?;
    let ko = reduce_axis(k / 4, "ko")?;
    let product = gemm_product(a, b, (ks.as_ref(), &ko), k, 4);
    let axes = |inner: &IterVar| -> Vec<IterVar> { ks.iter().chain([&ko, inner]).cloned().collect() };
    if saturating {
        let kp = reduce_axis(2, "kp")?;
        let reduce = axes(&kp);
        compute(
            [m, n],
            |i| {
                let pair = product(&i[0], &i[1], &kp * 2) + product(&i[0], &i[1], &kp * 2 + 1);
                sum(i32, &reduce.iter().collect::<Vec<_>>(), pair.saturating_cast(DType::I16).cast(i32))
            },
            name,
        )
    } else {
        let ki = reduce_axis(4, "ki")?;
        let reduce = axes(&ki);
        compute([m, n], |i| sum(i32, &reduce.iter().collect::<Vec<_>>(), product(&i[0], &i[1], ki.to_expr())), name)
    }
}

/// The definition of `IntrinKind::Int16Gemm` over the placeholders `a` and `b`, named `name`.
pub fn int16_gemm_compute(a: &Tensor, b: &Tensor, size: Int8GemmSize, name: &str) -> Result<Tensor, TeError> {
    let Int8GemmSize { m, n, k, segments } = size;
    let ks = (segments > 1).then(|| reduce_axis(segments, "ks")).transpose()?;
    let ko = reduce_axis(k / 2, "ko")?;
    let ki = reduce_axis(2, "ki")?;
    let product = gemm_product(a, b, (ks.as_ref(), &ko), k, 2);
    let reduce: Vec<IterVar> = ks.iter().chain([&ko, &ki]).cloned().collect();
    compute([m, n], |i| sum(DType::I32, &reduce.iter().collect::<Vec<_>>(), product(&i[0], &i[1], ki.to_expr())), name)
}

/// The definition of `IntrinKind::F32Gemm` over the placeholders `a: f32[m, k]` and
/// `b: f32[k, n]`: `C[i, j] = Σ_{kk} A[i, kk] * B[kk, j]` in f32, named `name`.
pub fn f32_gemm_compute(a: &Tensor, b: &Tensor, (m, n, k): (i64, i64, i64), name: &str) -> Result<Tensor, TeError> {
    let kk = reduce_axis(k, "kk")?;
    compute([m, n], |i| sum(DType::F32, &[&kk], a.at([&i[0], &kk.to_expr()]) * b.at([&kk.to_expr(), &i[1]])), name)
}

/// `IntrinKind::F32Gemm`: the shapes and dtypes of the kind, and its definition's body.
fn check_f32_gemm(name: &str, output: &Tensor, inputs: &[&Tensor], (m, n, k): (i64, i64, i64)) -> Result<(), TeError> {
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: name.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    if m <= 0 || n <= 0 || k <= 0 {
        return Err(bad("F32Gemm sizes", "m, n, k > 0".into(), format!("m={m}, n={n}, k={k}")));
    }
    if inputs.len() != 2 {
        return Err(bad("F32Gemm inputs", "2 (A, B)".into(), inputs.len().to_string()));
    }
    let expected = [("A", inputs[0], vec![m, k]), ("B", inputs[1], vec![k, n]), ("C (output)", output, vec![m, n])];
    for (role, tensor, shape) in expected {
        if tensor.dtype() != DType::F32 || tensor.shape() != shape.as_slice() {
            let found = format!("{}{:?}", tensor.dtype(), tensor.shape());
            return Err(bad(&format!("F32Gemm operand {role}"), format!("f32{shape:?}"), found));
        }
    }
    let canonical = f32_gemm_compute(inputs[0], inputs[1], (m, n, k), name)
        .expect("the GEMM definition is well typed for valid sizes and operands");
    let (body, canonical_body) =
        (output.body().expect("checked to be a compute"), canonical.body().expect("a compute"));
    let mut vars: HashMap<Var, Var> =
        output.axes().iter().zip(canonical.axes()).map(|(a, b)| (a.var().clone(), b.var().clone())).collect();
    if !alpha_eq(body, canonical_body, &mut vars) {
        return Err(bad("F32Gemm body", format!("`{canonical_body}`"), format!("`{body}`")));
    }
    Ok(())
}

/// Equality up to renaming of bound variables: `vars` maps variables of `a` to those of `b`
/// (output axes given by the caller, reduction axes added where the reductions are met).
fn alpha_eq(a: &Expr, b: &Expr, vars: &mut HashMap<Var, Var>) -> bool {
    match (a.kind(), b.kind()) {
        (ExprKind::Var(x), ExprKind::Var(y)) => vars.get(x).unwrap_or(x) == y,
        (ExprKind::Reduce(r), ExprKind::Reduce(s)) => {
            let same_axes = r.axes.len() == s.axes.len()
                && r.axes.iter().zip(&s.axes).all(|(x, y): (&IterVar, &IterVar)| x.extent() == y.extent());
            if a.dtype() != b.dtype() || r.reducer != s.reducer || !same_axes {
                return false;
            }
            for (x, y) in r.axes.iter().zip(&s.axes) {
                vars.insert(x.var().clone(), y.var().clone());
            }
            alpha_eq(&r.source, &s.source, vars)
        }
        _ => {
            a.same_head(b)
                && a.children().len() == b.children().len()
                && a.children().iter().zip(b.children()).all(|(x, y)| alpha_eq(x, y, vars))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::placeholder;

    fn gemm_operands(m: i64, n: i64, k: i64) -> (Tensor, Tensor) {
        (placeholder([m, k], DType::U8, "A").unwrap(), placeholder([k / 4, n, 4], DType::I8, "B").unwrap())
    }

    #[test]
    fn the_int8_gemm_definition_is_accepted_in_both_forms() {
        for saturating in [false, true] {
            let (a, b) = gemm_operands(2, 16, 8);
            let c =
                int8_gemm_compute(&a, &b, Int8GemmSize { m: 2, n: 16, k: 8, segments: 1 }, saturating, "C").unwrap();
            let kind = IntrinKind::Int8Gemm { m: 2, n: 16, k: 8, segments: 1, saturating };
            let intrin = decl_tensor_intrin("g", kind, &c, &[&a, &b]).unwrap();
            assert_eq!(intrin.operand_tensors().len(), 3);
            assert_eq!(intrin, intrin.clone());
        }
    }

    #[test]
    fn int8_gemm_declarations_must_match_the_kind() {
        let (a, b) = gemm_operands(2, 16, 8);
        let exact = int8_gemm_compute(&a, &b, Int8GemmSize { m: 2, n: 16, k: 8, segments: 1 }, false, "C").unwrap();
        let kind = |saturating| IntrinKind::Int8Gemm { m: 2, n: 16, k: 8, segments: 1, saturating };
        let err = decl_tensor_intrin("g", kind(true), &exact, &[&a, &b]).unwrap_err();
        assert!(matches!(&err, TeError::BadIntrinsic { what, .. } if what == "Int8Gemm body"), "{err}");
        assert!(err.to_string().contains("sat_i16("), "{err}");
        let err = decl_tensor_intrin(
            "g",
            IntrinKind::Int8Gemm { m: 4, n: 16, k: 8, segments: 1, saturating: false },
            &exact,
            &[&a, &b],
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "tensor intrinsic g: Int8Gemm operand A: expected u8[4, 8], found u8[2, 8]");
        let err = decl_tensor_intrin(
            "g",
            IntrinKind::Int8Gemm { m: 2, n: 16, k: 6, segments: 1, saturating: false },
            &exact,
            &[&a, &b],
        )
        .unwrap_err();
        assert!(err.to_string().contains("k a positive multiple of 4"), "{err}");
    }

    #[test]
    fn an_i8_a_is_declared_exact_only() {
        let size = Int8GemmSize { m: 2, n: 16, k: 8, segments: 1 };
        let a = placeholder([2, 8], DType::I8, "A").unwrap();
        let b = placeholder([2, 16, 4], DType::I8, "B").unwrap();
        let kind = |saturating| IntrinKind::Int8Gemm { m: 2, n: 16, k: 8, segments: 1, saturating };
        let exact = int8_gemm_compute(&a, &b, size, false, "C").unwrap();
        decl_tensor_intrin("g", kind(false), &exact, &[&a, &b]).unwrap();
        let saturating = int8_gemm_compute(&a, &b, size, true, "C").unwrap();
        let err = decl_tensor_intrin("g", kind(true), &saturating, &[&a, &b]).unwrap_err();
        assert_eq!(err.to_string(), "tensor intrinsic g: Int8Gemm operand A: expected u8[2, 8], found i8[2, 8]");
    }

    #[test]
    fn the_int16_gemm_definition_is_exact_over_pairs_of_i16() {
        let size = Int8GemmSize { m: 2, n: 16, k: 6, segments: 1 };
        let a = placeholder([2, 6], DType::I16, "A").unwrap();
        let b = placeholder([3, 16, 2], DType::I16, "B").unwrap();
        let c = int16_gemm_compute(&a, &b, size, "C").unwrap();
        assert_eq!(
            c.body().unwrap().to_string(),
            "sum[ko in 0..3, ki in 0..2](i32(A[i, ko*2 + ki])*i32(B[ko, j, ki]))"
        );
        let kind = IntrinKind::Int16Gemm { m: 2, n: 16, k: 6, segments: 1 };
        decl_tensor_intrin("g", kind, &c, &[&a, &b]).unwrap();
        assert_eq!(kind.required_strides(&[2, 3, 2])[1], vec![None, Some(2), Some(1)]);
        // Byte operands belong to `Int8Gemm`; an odd k has no pairs.
        let (a8, b8) = gemm_operands(2, 16, 8);
        let int8 = int8_gemm_compute(&a8, &b8, Int8GemmSize { k: 8, ..size }, false, "C").unwrap();
        let err = decl_tensor_intrin("g", IntrinKind::Int16Gemm { m: 2, n: 16, k: 8, segments: 1 }, &int8, &[&a8, &b8])
            .unwrap_err();
        assert_eq!(err.to_string(), "tensor intrinsic g: Int16Gemm operand A: expected i16[2, 8], found u8[2, 8]");
        let err = decl_tensor_intrin("g", IntrinKind::Int16Gemm { m: 2, n: 16, k: 5, segments: 1 }, &c, &[&a, &b])
            .unwrap_err();
        assert!(err.to_string().contains("k a positive multiple of 2, found m=2, n=16, k=5"), "{err}");
    }

    #[test]
    fn the_f32_gemm_definition_is_an_ordered_float_sum_of_products() {
        let a = placeholder([3, 5], DType::F32, "A").unwrap();
        let b = placeholder([5, 16], DType::F32, "B").unwrap();
        let c = f32_gemm_compute(&a, &b, (3, 16, 5), "C").unwrap();
        assert_eq!(c.body().unwrap().to_string(), "sum[kk in 0..5](A[i, kk]*B[kk, j])");
        let kind = IntrinKind::F32Gemm { m: 3, n: 16, k: 5 };
        let intrin = decl_tensor_intrin("g", kind, &c, &[&a, &b]).unwrap();
        assert_eq!(reset_value(&intrin).map(|e| e.to_string()), Some(Expr::float(DType::F32, 0.0).to_string()));
        assert_eq!(kind.required_strides(&[2, 2, 2]), vec![vec![None, Some(1)]; 3]);
        assert_eq!(kind.pack(), None);
        // Another size, dtype or body is not the kind's.
        let err = decl_tensor_intrin("g", IntrinKind::F32Gemm { m: 3, n: 16, k: 4 }, &c, &[&a, &b]).unwrap_err();
        assert_eq!(err.to_string(), "tensor intrinsic g: F32Gemm operand A: expected f32[3, 4], found f32[3, 5]");
        let kk = reduce_axis(5, "kk").unwrap();
        let swapped = compute(
            [3, 16],
            |i| sum(DType::F32, &[&kk], b.at([&kk.to_expr(), &i[1]]) * a.at([&i[0], &kk.to_expr()])),
            "C",
        )
        .unwrap();
        let err = decl_tensor_intrin("g", kind, &swapped, &[&a, &b]).unwrap_err();
        assert!(matches!(&err, TeError::BadIntrinsic { what, .. } if what == "F32Gemm body"), "{err}");
        let (a8, b8) = gemm_operands(3, 16, 8);
        let int8 = int8_gemm_compute(&a8, &b8, Int8GemmSize { m: 3, n: 16, k: 8, segments: 1 }, false, "C").unwrap();
        let err = decl_tensor_intrin("g", IntrinKind::F32Gemm { m: 3, n: 16, k: 8 }, &int8, &[&a8, &b8]).unwrap_err();
        assert!(err.to_string().contains("F32Gemm operand A: expected f32[3, 8], found u8[3, 8]"), "{err}");
    }

    #[test]
    fn a_map_reads_its_inputs_at_the_point_or_the_column() {
        let x = placeholder([3, 8], DType::I32, "x").unwrap();
        let scale = placeholder([8], DType::F32, "scale").unwrap();
        let kind = IntrinKind::Map { m: 3, n: 8 };
        let y = compute([3, 8], |i| x.at([&i[0], &i[1]]).cast(DType::F32) * scale.at([&i[1]]), "y").unwrap();
        decl_tensor_intrin("requantize", kind, &y, &[&x, &scale]).unwrap();
        assert_eq!(kind.required_strides(&[2, 1, 2]), vec![vec![None, Some(1)], vec![Some(1)], vec![None, Some(1)]]);
        assert_eq!(decl_tensor_intrin("requantize", kind, &y, &[&x, &scale]).unwrap().map_rows(), [false, false]);
        // A per-row parameter, read at the row.
        let per_row = placeholder([3], DType::F32, "per_row").unwrap();
        let z = compute([3, 8], |i| x.at([&i[0], &i[1]]).cast(DType::F32) * per_row.at([&i[0]]), "z").unwrap();
        let decl = decl_tensor_intrin("shift", kind, &z, &[&x, &per_row]).unwrap();
        assert_eq!(decl.map_rows(), [false, true]);
        // A column-sized input read at the row is neither.
        let z = compute([3, 8], |i| x.at([&i[0], &i[1]]).cast(DType::F32) * scale.at([&i[0]]), "z").unwrap();
        let err = decl_tensor_intrin("shift", kind, &z, &[&x, &scale]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor intrinsic shift: Map read: expected x[i, j] of x: [3, 8], x[j] of x: [8] or x[i] of x: [3], \
             found scale[8] read at [i]"
        );
        // A square block's one-dimensional input is read per row or per column, not both.
        let sq = placeholder([4, 4], DType::F32, "sq").unwrap();
        let v = placeholder([4], DType::F32, "v").unwrap();
        let both = compute([4, 4], |i| sq.at([&i[0], &i[1]]) * v.at([&i[0]]) + v.at([&i[1]]), "b").unwrap();
        let err = decl_tensor_intrin("both", IntrinKind::Map { m: 4, n: 4 }, &both, &[&sq, &v]).unwrap_err();
        assert!(err.to_string().contains("Map read: expected v read either per row or per column"), "{err}");
        // Neither a reduction nor another block size.
        let k = reduce_axis(8, "k").unwrap();
        let total = compute([3, 8], |i| sum(DType::I32, &[&k], x.at([&i[0], &k.to_expr()])), "t").unwrap();
        let err = decl_tensor_intrin("t", kind, &total, &[&x]).unwrap_err();
        assert!(err.to_string().contains("Map output: expected [3, 8] without reduction"), "{err}");
        let err = decl_tensor_intrin("y", IntrinKind::Map { m: 3, n: 16 }, &y, &[&x, &scale]).unwrap_err();
        assert!(err.to_string().contains("Map output: expected [3, 16] without reduction, found [3, 8]"), "{err}");
    }

    #[test]
    fn segmented_int8_gemm_reads_a_through_a_segment_axis() {
        let size = Int8GemmSize { m: 2, n: 16, k: 8, segments: 3 };
        let a = placeholder([2, 3, 8], DType::U8, "A").unwrap();
        let b = placeholder([6, 16, 4], DType::I8, "B").unwrap();
        let c = int8_gemm_compute(&a, &b, size, false, "C").unwrap();
        assert_eq!(
            c.body().unwrap().to_string(),
            "sum[ks in 0..3, ko in 0..2, ki in 0..4](i32(A[i, ks, ko*4 + ki])*i32(B[ks*2 + ko, j, ki]))"
        );
        let kind = IntrinKind::Int8Gemm { m: 2, n: 16, k: 8, segments: 3, saturating: false };
        decl_tensor_intrin("g", kind, &c, &[&a, &b]).unwrap();
        let (flat, _) = gemm_operands(2, 16, 8);
        let err = decl_tensor_intrin("g", kind, &c, &[&flat, &b]).unwrap_err();
        assert!(err.to_string().contains("output: expected to read only the inputs"), "{err}");
    }

    #[test]
    fn generic_declarations_are_checked_for_their_reads() {
        let x = placeholder([8], DType::I32, "x").unwrap();
        let y = placeholder([8], DType::I32, "y").unwrap();
        let twice = compute([8], |i| x.at([&i[0]]) * 2, "twice").unwrap();
        let err = decl_tensor_intrin("t", IntrinKind::Generic, &twice, &[&x, &y]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor intrinsic t: inputs: expected tensors read by `x[i]*2i32`, found y, which it does not read"
        );
        let err = decl_tensor_intrin("t", IntrinKind::Generic, &twice, &[]).unwrap_err();
        assert!(err.to_string().contains("found a read of x"), "{err}");
        let err = decl_tensor_intrin("t", IntrinKind::Generic, &x, &[&x]).unwrap_err();
        assert!(err.to_string().contains("expected a compute, found placeholder x"), "{err}");
        let err = decl_tensor_intrin("t", IntrinKind::Generic, &twice, &[&twice]).unwrap_err();
        assert!(err.to_string().contains("expected placeholders, found compute twice"), "{err}");
        let square = placeholder([4, 4], DType::I32, "s").unwrap();
        let diagonal = compute([4], |i| square.at([&i[0], &i[0]]), "diag").unwrap();
        let err = decl_tensor_intrin("d", IntrinKind::Generic, &diagonal, &[&square]).unwrap_err();
        assert!(err.to_string().contains("found `i, i`"), "{err}");
        let gather = compute([2], |i| x.at([&(&i[0] * &i[0])]), "gather").unwrap();
        let err = decl_tensor_intrin("g", IntrinKind::Generic, &gather, &[&x]).unwrap_err();
        assert!(err.to_string().contains("found `i*i`"), "{err}");
    }
}
