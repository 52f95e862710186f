//! Tensorization analysis: the proof that the loops of a stage from one leaf axis inward compute
//! exactly what a tensor intrinsic declares, and the plan of the call's operands. Used by
//! `Schedule::tensorize` (which reports the first difference as a typed error) and by
//! `lower::build_loop_nests` (which emits the call).
//!
//! The loops under the axis (the region) must map one to one onto the declaration's axes, each
//! loop onto an axis of the same kind and extent, such that:
//! * the bodies have the same structure (operators, casts, saturating casts, constants) once each
//!   tensor read of the stage is paired with the declaration input read at the same place, the
//!   pairing being one to one between the tensors the stage reads and the declaration's inputs;
//! * every index of the stage, with its root axes written in leaf loops and simplified (so
//!   `(jo*16 + ji)/16` is `jo` and `%16` is `ji`), is affine in the region's loops, and the flat
//!   position it reads equals `origin + Σ_d decl_index_d · strides_d` for constant strides, where
//!   `decl_index` is the declaration's read at the mapped axes. Strides follow from the loop
//!   mapped to the axis that a declaration dimension has of its own (`decl_tensor_intrin` checks
//!   there is one); every other loop must then agree. All reads of one declaration input must
//!   agree on the origin. The output is checked the same way through the store index.
//! * strides the kind requires (`IntrinKind::required_strides`) hold;
//! * for float outputs, the reduction loops appear in the declaration's order.
//!
//! Integer reductions are exact, associative and commutative, so any order of the loops is
//! accepted for them. The stage may be computed at the root or at a loop of a consumer
//! (`compute_at`); operand tensors must be placeholders, stages computed at the root, or stages
//! computed at a loop of this stage outside the region. Indices and strides are those of the
//! buffers as lowered: a stage computed at a loop holds only its region (`infer_bounds`), from
//! the region's first index, so the proof takes the regions and no stage may be computed inside
//! the region.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::cell::RefCell;

use crate::analysis::linear::Linear;
use crate::error::MismatchPart;
use crate::expr::{Expr, ExprKind, Var};
use crate::intrin::TensorIntrin;
use crate::lower::infer_bounds::{Region, root_extents, root_values};
use crate::mutator::substitute_map;
use crate::passes::simplify::RangedSimplifier;
use crate::schedule::{Attach, Relation, Schedule, Stage};
use crate::te::{IterVar, Tensor};

/// The first difference found between the loop nest and the declaration.
pub(crate) struct Mismatch {
    pub part: MismatchPart,
    pub what: String,
    pub expected: String,
    pub found: String,
}

fn mismatch(
    part: MismatchPart,
    what: impl Into<String>,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Mismatch {
    Mismatch { part, what: what.into(), expected: expected.into(), found: found.into() }
}

/// One operand of the call.
pub(crate) struct PlannedOperand {
    /// The tensor whose buffer holds the region.
    pub tensor: Tensor,
    /// One index per dimension of the tensor's buffer (from its region's first index for a stage
    /// computed at a loop), in the loop variables outside the region.
    pub origin: Vec<Expr>,
    /// Flat element strides, one per dimension of the declaration tensor.
    pub strides: Vec<i64>,
}

/// Whether two plans name the same tensors at structurally equal origins with equal strides.
pub(crate) fn same_plan(a: &[PlannedOperand], b: &[PlannedOperand]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.tensor.id() == b.tensor.id()
                && a.strides == b.strides
                && a.origin.len() == b.origin.len()
                && a.origin.iter().zip(&b.origin).all(|(x, y)| x.structurally_eq(y))
        })
}

/// One read (or the output's store) of the stage, paired with the declaration's.
struct Access {
    /// Declaration input position, or the input count for the output.
    operand: usize,
    tensor: Tensor,
    /// The shape of the buffer holding the tensor.
    shape: Vec<i64>,
    /// The stage's access with root axes in leaf loops, simplified (for messages).
    stage_access: Expr,
    decl_access: Expr,
    /// Flat element coefficient of each region loop (by region position).
    coeffs: Vec<i64>,
    /// Per tensor dimension, the index with every region loop at 0.
    origin: Vec<Expr>,
    /// Per declaration dimension, the coefficient of each declaration axis.
    decl_coeffs: Vec<Vec<i64>>,
    decl_consts: Vec<i64>,
    /// Per declaration dimension, an axis used by no other dimension.
    pins: Vec<usize>,
}

/// Proves that the leaves of `stage` from `axis` inward compute `intrin`'s declaration on the
/// stage's (inlined) `body`; returns the operands of the call, inputs in declaration order, then
/// the output, indexed in their buffers. `axis` must be a leaf of the stage; `regions` are those
/// of `infer_bounds` (every non-inlined stage).
pub(crate) fn plan(
    schedule: &Schedule,
    regions: &HashMap<Stage, Region>,
    stage: Stage,
    axis: &IterVar,
    intrin: &TensorIntrin,
    body: &Expr,
) -> Result<Vec<PlannedOperand>, Mismatch> {
    plan_with_extents(schedule, regions, stage, axis, intrin, body, &HashMap::default())
}

/// `plan` with the loops of `shorter` (leaves of the region) over fewer iterations than their
/// extents: the proof that the first iterations of those loops (a split's partial last tile)
/// compute `intrin`, a declaration of that many points along the axes they map to
/// (`intrin_tail::shrink_axis`).
pub(crate) fn plan_with_extents(
    schedule: &Schedule,
    regions: &HashMap<Stage, Region>,
    stage: Stage,
    axis: &IterVar,
    intrin: &TensorIntrin,
    body: &Expr,
    shorter: &HashMap<IterVar, i64>,
) -> Result<Vec<PlannedOperand>, Mismatch> {
    let data = schedule.stage_data(stage);
    let pos = data.leaves.iter().position(|l| l == axis).expect("tensorize axis is a leaf");
    let region = &data.leaves[pos..];
    let decl = &intrin.output;
    let decl_body = decl.body().expect("a declaration is a compute");
    let decl_axes: Vec<IterVar> = decl.axes().iter().cloned().chain(decl.reduce_axes()).collect();
    let names = |axes: &[IterVar]| axes.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ");

    if data.attach == Attach::Inline {
        let what = format!("stage {}", data.name());
        return Err(mismatch(MismatchPart::Placement, what, "computed at the root or at a loop", "compute_inline"));
    }
    for &other in schedule.order() {
        if let Attach::At { stage: at, axis: at_axis } = &schedule.stage_data(other).attach
            && *at == stage
            && region.contains(at_axis)
        {
            let what = format!("stage {}", schedule.stage_data(other).name());
            let expected = format!("computed outside the loops under {axis}");
            return Err(mismatch(MismatchPart::Placement, what, expected, format!("compute_at {at_axis}")));
        }
    }
    let saturating = |e: &Expr| {
        let mut found = false;
        e.for_each(&mut |n| found |= matches!(n.kind(), ExprKind::SaturatingCast(_)));
        found
    };
    if saturating(decl_body) != saturating(body) {
        let describe = |sat: bool| if sat { "saturating casts" } else { "exact arithmetic (no saturating cast)" };
        let expected = format!("{} as in `{decl_body}`", describe(saturating(decl_body)));
        let found = format!("{} in `{body}`", describe(saturating(body)));
        return Err(mismatch(MismatchPart::Saturation, "body", expected, found));
    }
    if region.len() != decl_axes.len() {
        let expected = format!("{} ({})", decl_axes.len(), names(&decl_axes));
        let found = format!("{} ({})", region.len(), names(region));
        return Err(mismatch(MismatchPart::LoopCount, format!("loops under {axis}"), expected, found));
    }
    let fused = fused_leaves(&data.relations);
    if let Some(leaf) = region.iter().find(|l| fused.contains(*l)) {
        let expected = "a loop made by splits only";
        return Err(mismatch(MismatchPart::FusedLoop, format!("loop {leaf}"), expected, "a loop derived from fuse"));
    }
    let kinds = |axes: &[IterVar]| {
        let reduce = axes.iter().filter(|a| a.is_reduce()).count();
        format!("{} data-parallel and {reduce} reduction", axes.len() - reduce)
    };
    if kinds(region) != kinds(&decl_axes) {
        return Err(mismatch(MismatchPart::AxisKind, format!("loops under {axis}"), kinds(&decl_axes), kinds(region)));
    }
    if decl.dtype() != data.tensor.dtype() {
        let what = format!("output {}", data.name());
        return Err(mismatch(
            MismatchPart::OutputDType,
            what,
            decl.dtype().to_string(),
            data.tensor.dtype().to_string(),
        ));
    }
    let (decl_source, source) = match (decl_body.kind(), body.kind()) {
        (ExprKind::Reduce(d), ExprKind::Reduce(s)) if d.reducer == s.reducer => (&d.source, &s.source),
        (ExprKind::Reduce(_), _) | (_, ExprKind::Reduce(_)) => {
            let describe = |e: &Expr| match e.kind() {
                ExprKind::Reduce(r) => format!("a {} reduction", r.reducer.name()),
                _ => "an element-wise compute".to_string(),
            };
            return Err(mismatch(
                MismatchPart::Reducer,
                format!("output {}", data.name()),
                describe(decl_body),
                describe(body),
            ));
        }
        _ => (decl_body, body),
    };
    let read = distinct_reads(source);
    if read.len() != intrin.inputs.len() {
        let list = |ts: &[Tensor]| ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
        let expected = format!("{} ({})", intrin.inputs.len(), list(&intrin.inputs));
        let found = format!("{} ({})", read.len(), list(&read));
        return Err(mismatch(MismatchPart::OperandCount, "tensors read", expected, found));
    }
    let mut pairing = Pairing { intrin, tensor_of: vec![None; intrin.inputs.len()], reads: Vec::new() };
    pairing.walk(source, decl_source)?;
    for tensor in pairing.tensor_of.iter().flatten() {
        // A stage computed at a loop of another stage exists only inside that stage's loops.
        let found = match schedule.stage_of(tensor).map(|s| &schedule.stage_data(s).attach) {
            Ok(Attach::Root) => continue,
            Ok(Attach::At { stage: at, .. }) if *at == stage => continue,
            Ok(Attach::At { stage: at, axis }) => format!("compute_at {}.{axis}", schedule.stage_data(*at).name()),
            Ok(Attach::Inline) => "compute_inline".to_string(),
            Err(_) => "a tensor outside the schedule".to_string(),
        };
        let expected =
            format!("a placeholder, a stage computed at the root or one computed at a loop of {}", data.name());
        return Err(mismatch(MismatchPart::Placement, format!("operand {tensor}"), expected, found));
    }

    let storage = Storage { schedule, regions };
    let own = &regions[&stage];
    let mut extents = data.pass_down_extents(&root_extents(data, own));
    let roots: HashMap<Var, Expr> =
        root_values(data, own, &extents).into_iter().map(|(a, v)| (a.var().clone(), v)).collect();
    // Root values follow from the splits' factors; only the loops' ranges shrink.
    for (leaf, &extent) in shorter {
        if region.contains(leaf) && (1..=extents[leaf]).contains(&extent) {
            extents.insert(leaf.clone(), extent);
        }
    }
    let ranges: Vec<(Var, i64)> = data.leaves.iter().map(|l| (l.var().clone(), extents[l])).collect();
    let decl_position: HashMap<Var, usize> = decl_axes.iter().enumerate().map(|(i, a)| (a.var().clone(), i)).collect();
    let simplifier = RefCell::new(RangedSimplifier::new(&ranges));
    let ctx = AccessCtx { region, roots: &roots, simplifier, decl_position: &decl_position, axis, storage };
    let mut accesses = Vec::new();
    for (operand, tensor, stage_idx, decl_idx) in pairing.reads {
        accesses.push(ctx.access(operand, tensor, &stage_idx, &intrin.inputs[operand], &decl_idx)?);
    }
    let out_idx: Vec<Expr> = data.axes.iter().map(|a| a.to_expr()).collect();
    let decl_out_idx: Vec<Expr> = decl.axes().iter().map(|a| a.to_expr()).collect();
    accesses.push(ctx.access(intrin.inputs.len(), data.tensor.clone(), &out_idx, decl, &decl_out_idx)?);

    // Try every mapping of loops to axes of the same kind, the identity-like order first; report
    // the failure that got furthest.
    let positions = |reduce: bool, axes: &[IterVar]| -> Vec<usize> {
        axes.iter().enumerate().filter(|(_, a)| a.is_reduce() == reduce).map(|(i, _)| i).collect()
    };
    let (region_dp, region_red) = (positions(false, region), positions(true, region));
    let (decl_dp, decl_red) = (positions(false, &decl_axes), positions(true, &decl_axes));
    let mut best: Option<(u8, Mismatch)> = None;
    for dp in permutations(region_dp.len()) {
        for red in permutations(region_red.len()) {
            let mut sigma = vec![0; region.len()];
            for (i, &q) in region_dp.iter().enumerate() {
                sigma[q] = decl_dp[dp[i]];
            }
            for (i, &q) in region_red.iter().enumerate() {
                sigma[q] = decl_red[red[i]];
            }
            match check_mapping(&ctx, &sigma, &decl_axes, &extents, intrin, &accesses) {
                Ok(operands) => return Ok(operands),
                Err((phase, m)) => {
                    if best.as_ref().is_none_or(|(p, _)| phase > *p) {
                        best = Some((phase, m));
                    }
                }
            }
        }
    }
    Err(best.expect("at least one mapping was tried").1)
}

/// Leaves that are, or are split from, a fused loop.
fn fused_leaves(relations: &[Relation]) -> HashSet<IterVar> {
    let mut fused = HashSet::default();
    for rel in relations {
        match rel {
            Relation::Fuse { fused: f, .. } => {
                fused.insert(f.clone());
            }
            Relation::Split { parent, outer, inner, .. } if fused.contains(parent) => {
                fused.insert(outer.clone());
                fused.insert(inner.clone());
            }
            Relation::Split { .. } => {}
        }
    }
    fused
}

/// The tensors `expr` reads, in order of first appearance.
fn distinct_reads(expr: &Expr) -> Vec<Tensor> {
    let mut seen = Vec::new();
    expr.for_each(&mut |e| {
        if let ExprKind::TensorRead(t, _) = e.kind()
            && !seen.contains(t)
        {
            seen.push(t.clone());
        }
    });
    seen
}

/// All permutations of `0..n`, in lexicographic order (the identity first).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut result = Vec::new();
    for first in 0..n {
        for rest in permutations(n - 1) {
            let mut p = vec![first];
            p.extend(rest.into_iter().map(|r| if r >= first { r + 1 } else { r }));
            result.push(p);
        }
    }
    result
}

/// The structural comparison of the stage's body with the declaration's.
struct Pairing<'a> {
    intrin: &'a TensorIntrin,
    /// Per declaration input, the stage tensor read in its place.
    tensor_of: Vec<Option<Tensor>>,
    /// (declaration input, stage tensor, stage indices, declaration indices) per read.
    reads: Vec<(usize, Tensor, Vec<Expr>, Vec<Expr>)>,
}

impl Pairing<'_> {
    fn walk(&mut self, stage: &Expr, decl: &Expr) -> Result<(), Mismatch> {
        let differ = || mismatch(MismatchPart::Body, "body", format!("`{decl}`"), format!("`{stage}`"));
        match (stage.kind(), decl.kind()) {
            (ExprKind::TensorRead(x, x_idx), ExprKind::TensorRead(d, d_idx)) => {
                let operand = self.intrin.inputs.iter().position(|t| t == d).expect("declarations read their inputs");
                if x.dtype() != d.dtype() {
                    let what = format!("operand {x} (for {d})");
                    return Err(mismatch(
                        MismatchPart::OperandDType,
                        what,
                        d.dtype().to_string(),
                        x.dtype().to_string(),
                    ));
                }
                let taken_by_other =
                    self.tensor_of.iter().enumerate().any(|(k, t)| k != operand && t.as_ref() == Some(x));
                match &self.tensor_of[operand] {
                    Some(t) if t != x => return Err(differ()),
                    _ if taken_by_other => return Err(differ()),
                    _ => self.tensor_of[operand] = Some(x.clone()),
                }
                self.reads.push((operand, x.clone(), x_idx.clone(), d_idx.clone()));
                Ok(())
            }
            (ExprKind::Var(_), _) | (_, ExprKind::Var(_)) => Err(differ()),
            _ if stage.same_head(decl) && stage.children().len() == decl.children().len() => {
                stage.children().into_iter().zip(decl.children()).try_for_each(|(s, d)| self.walk(s, d))
            }
            _ => Err(differ()),
        }
    }
}

struct AccessCtx<'a> {
    region: &'a [IterVar],
    /// Root axis variables to their values in leaf loops.
    roots: &'a HashMap<Var, Expr>,
    /// Simplifies within every leaf loop with its extent (`RangedSimplifier`).
    simplifier: RefCell<RangedSimplifier>,
    decl_position: &'a HashMap<Var, usize>,
    axis: &'a IterVar,
    storage: Storage<'a>,
}

/// Where tensors are stored as lowered.
struct Storage<'a> {
    schedule: &'a Schedule,
    regions: &'a HashMap<Stage, Region>,
}

impl Storage<'_> {
    /// The shape of the buffer holding `tensor` and, for a stage computed at a loop (whose
    /// buffer holds its region), the global index of the buffer's first element.
    fn of(&self, tensor: &Tensor) -> (Vec<i64>, Option<Vec<Expr>>) {
        let at_loop = self.schedule.stage_of(tensor).ok().filter(|&s| {
            matches!(self.schedule.stage_data(s).attach, Attach::At { .. }) && self.regions.contains_key(&s)
        });
        match at_loop {
            Some(s) => {
                let region = &self.regions[&s];
                (region.extents(), Some(region.dims.iter().map(|(min, _)| min.clone()).collect()))
            }
            None => (tensor.shape().to_vec(), None),
        }
    }
}

impl AccessCtx<'_> {
    fn simplify(&self, e: &Expr) -> Expr {
        self.simplifier.borrow_mut().simplify(e)
    }

    fn access(
        &self,
        operand: usize,
        tensor: Tensor,
        idx: &[Expr],
        decl_tensor: &Tensor,
        decl_idx: &[Expr],
    ) -> Result<Access, Mismatch> {
        let (shape, first) = self.storage.of(&tensor);
        let mut idx: Vec<Expr> = idx.iter().map(|i| self.simplify(&substitute_map(i, self.roots))).collect();
        let stage_access = tensor.at_vec(idx.clone());
        if let Some(first) = first {
            idx = idx.iter().zip(first).map(|(i, f)| self.simplify(&(i.clone() - f))).collect();
        }
        let decl_access = decl_tensor.at_vec(decl_idx.to_vec());
        let position: HashMap<&Var, usize> = self.region.iter().enumerate().map(|(q, l)| (l.var(), q)).collect();
        let strides = row_major_strides(&shape);
        let mut coeffs = vec![0i64; self.region.len()];
        for (index, stride) in idx.iter().zip(&strides) {
            for (term, coeff) in Linear::of(index).terms {
                match term.as_var().and_then(|v| position.get(v)) {
                    Some(&q) => coeffs[q] += coeff * stride,
                    None if self.region.iter().any(|l| term.uses_var(l.var())) => {
                        let what = format!("operand {tensor}");
                        let expected = format!("an index affine in the loops under {}", self.axis);
                        return Err(mismatch(
                            MismatchPart::NonAffine,
                            what,
                            expected,
                            format!("`{index}` in `{stage_access}`"),
                        ));
                    }
                    None => {}
                }
            }
        }
        let at_zero: HashMap<Var, Expr> = self.region.iter().map(|l| (l.var().clone(), Expr::index(0))).collect();
        let origin = idx.iter().map(|i| self.simplify(&substitute_map(i, &at_zero))).collect();
        let axes = self.decl_position.len();
        let mut decl_coeffs = Vec::new();
        let mut decl_consts = Vec::new();
        for index in decl_idx {
            let form = Linear::of(index);
            let mut row = vec![0i64; axes];
            for (term, coeff) in &form.terms {
                let v = term.as_var().expect("declaration indices are affine in its axes");
                row[self.decl_position[v]] += coeff;
            }
            decl_coeffs.push(row);
            decl_consts.push(form.constant);
        }
        // The axis of its own with the smallest coefficient, so strides divide exactly.
        let pins = (0..decl_coeffs.len())
            .map(|d| {
                (0..axes)
                    .filter(|&a| {
                        decl_coeffs[d][a] != 0 && (0..decl_coeffs.len()).all(|e| e == d || decl_coeffs[e][a] == 0)
                    })
                    .min_by_key(|&a| decl_coeffs[d][a].abs())
                    .expect("every declaration dimension has an axis of its own")
            })
            .collect();
        Ok(Access { operand, tensor, shape, stage_access, decl_access, coeffs, origin, decl_coeffs, decl_consts, pins })
    }
}

fn row_major_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Checks one mapping `sigma` (region position to declaration axis position). Errors carry a
/// phase (how far the mapping got) so the most informative failure can be reported.
fn check_mapping(
    ctx: &AccessCtx,
    sigma: &[usize],
    decl_axes: &[IterVar],
    extents: &HashMap<IterVar, i64>,
    intrin: &TensorIntrin,
    accesses: &[Access],
) -> Result<Vec<PlannedOperand>, (u8, Mismatch)> {
    for (q, leaf) in ctx.region.iter().enumerate() {
        let target = &decl_axes[sigma[q]];
        if extents[leaf] != target.extent() {
            let expected = format!("{} (declaration axis {target})", target.extent());
            return Err((
                1,
                mismatch(MismatchPart::Extent, format!("loop {leaf}"), expected, extents[leaf].to_string()),
            ));
        }
    }
    let mut inverse = vec![0; sigma.len()];
    for (q, &a) in sigma.iter().enumerate() {
        inverse[a] = q;
    }
    let operand_count = intrin.inputs.len() + 1;
    let ranks: Vec<usize> = intrin.operand_tensors().iter().map(|t| t.shape().len()).collect();
    let required = intrin.kind.required_strides(&ranks);
    let mut operands = Vec::new();
    for operand in 0..operand_count {
        let of_operand: Vec<&Access> = accesses.iter().filter(|a| a.operand == operand).collect();
        let first = of_operand[0];
        let what = format!("operand {}", first.tensor);
        let mut strides = Vec::new();
        for (d, &pin) in first.pins.iter().enumerate() {
            // A loop of one iteration never advances: its dimension takes the stride the kind
            // requires, whatever the stage's index would step by.
            let fixed = required.get(operand).and_then(|req| req.get(d).copied().flatten());
            if let Some(r) = fixed.filter(|_| extents[&ctx.region[inverse[pin]]] == 1) {
                strides.push(r);
                continue;
            }
            let (c, a) = (first.coeffs[inverse[pin]], first.decl_coeffs[d][pin]);
            if c % a != 0 {
                let leaf = &ctx.region[inverse[pin]];
                let expected = format!("`{}` to advance a multiple of {a} elements per {leaf}", first.decl_access);
                return Err((
                    2,
                    mismatch(MismatchPart::AxisDependence, what, expected, format!("{c} in `{}`", first.stage_access)),
                ));
            }
            strides.push(c / a);
        }
        let flat_origin = |access: &Access| {
            let tensor_strides = row_major_strides(&access.shape);
            let point: Expr =
                access.origin.iter().zip(&tensor_strides).fold(Expr::index(0), |acc, (o, s)| acc + o.clone() * *s);
            let shift: i64 = access.decl_consts.iter().zip(&strides).map(|(b, s)| b * s).sum();
            point - shift
        };
        for access in &of_operand {
            for (q, leaf) in ctx.region.iter().enumerate() {
                let expected: i64 = (0..strides.len()).map(|d| access.decl_coeffs[d][sigma[q]] * strides[d]).sum();
                if access.coeffs[q] != expected && extents[leaf] != 1 {
                    let axis = &decl_axes[sigma[q]];
                    let expected =
                        format!("`{}` to advance {expected} elements per {leaf} (as {axis})", access.decl_access);
                    let found = format!("{} in `{}`", access.coeffs[q], access.stage_access);
                    return Err((2, mismatch(MismatchPart::AxisDependence, what, expected, found)));
                }
            }
            let offset = ctx.simplify(&(flat_origin(access) - flat_origin(first)));
            if offset.as_int() != Some(0) {
                let expected = format!("`{}` at the position of `{}`", access.decl_access, first.decl_access);
                let found = format!("`{}` against `{}`", access.stage_access, first.stage_access);
                return Err((2, mismatch(MismatchPart::AxisDependence, what, expected, found)));
            }
        }
        if let Some(req) = required.get(operand) {
            // Innermost dimensions first: their layout is what kernels depend on most.
            for (d, r) in req.iter().enumerate().rev() {
                if let Some(r) = *r
                    && strides[d] != r
                {
                    let axis = &decl_axes[first.pins[d]];
                    let unit = if r == 1 { "element" } else { "elements" };
                    let expected = format!("`{}` to advance {r} {unit} per {axis}", first.decl_access);
                    return Err((
                        3,
                        mismatch(
                            MismatchPart::Stride,
                            what,
                            expected,
                            format!("{} in `{}`", strides[d], first.stage_access),
                        ),
                    ));
                }
            }
        }
        // The origin of a read at the declaration's zero offsets, or the first read shifted back.
        let base = of_operand.iter().find(|a| a.decl_consts.iter().all(|&b| b == 0));
        let origin = match base {
            Some(a) => a.origin.clone(),
            None => {
                let shift: i64 = first.decl_consts.iter().zip(&strides).map(|(b, s)| b * s).sum();
                let mut origin = first.origin.clone();
                let last = origin.len() - 1;
                origin[last] = ctx.simplify(&(origin[last].clone() - shift));
                origin
            }
        };
        operands.push(PlannedOperand { tensor: first.tensor.clone(), origin, strides });
    }
    if intrin.output.dtype().is_float() {
        let order: Vec<usize> =
            ctx.region.iter().enumerate().filter(|(_, l)| l.is_reduce()).map(|(q, _)| sigma[q]).collect();
        if order.windows(2).any(|w| w[0] > w[1]) {
            let reduce: Vec<&IterVar> = ctx.region.iter().filter(|l| l.is_reduce()).collect();
            let expected: Vec<&str> = decl_axes.iter().filter(|a| a.is_reduce()).map(|a| a.name()).collect();
            let found: Vec<String> =
                reduce.iter().zip(&order).map(|(l, &a)| format!("{l} as {}", decl_axes[a])).collect();
            let expected = format!("loops in the declaration's order ({})", expected.join(", "));
            return Err((4, mismatch(MismatchPart::FloatOrder, "reduction loops", expected, found.join(", "))));
        }
    }
    Ok(operands)
}

#[cfg(test)]
mod tests {
    use super::{plan, same_plan};
    use crate::dtype::DType;
    use crate::error::{MismatchPart, ScheduleError};
    use crate::expr::Expr;
    use crate::interp::{Array, eval_te, run_func};
    use crate::intrin::{Int8GemmSize, IntrinKind, TensorIntrin, decl_tensor_intrin, int8_gemm_compute};
    use crate::lower::lower;
    use crate::mutator::{Mutator, walk_stmt};
    use crate::schedule::{Schedule, create_schedule};
    use crate::stmt::{Func, Stmt, StmtKind};
    use crate::te::{IterVar, Tensor, compute, max, placeholder, reduce_axis, sum};

    fn gemm_intrin(m: i64, n: i64, k: i64, saturating: bool) -> TensorIntrin {
        let a = placeholder([m, k], DType::U8, "A").unwrap();
        let b = placeholder([k / 4, n, 4], DType::I8, "B").unwrap();
        let c = int8_gemm_compute(&a, &b, Int8GemmSize { m, n, k, segments: 1 }, saturating, "C").unwrap();
        decl_tensor_intrin("gemm", IntrinKind::Int8Gemm { m, n, k, segments: 1, saturating }, &c, &[&a, &b]).unwrap()
    }

    /// `C[i, j] = Σ_{ko, ki} i32(A[i, ko*4 + ki]) * i32(Bp[j/nr, ko, j%nr, ki])`, built by `body`.
    struct Packed {
        a: Tensor,
        bp: Tensor,
        nr: i64,
    }

    impl Packed {
        fn new(m: i64, n: i64, k: i64, nr: i64) -> Packed {
            Packed {
                a: placeholder([m, k], DType::U8, "A").unwrap(),
                bp: placeholder([n / nr, k / 4, nr, 4], DType::I8, "Bp").unwrap(),
                nr,
            }
        }

        fn a_at(&self, i: &Expr, ko: &IterVar, ki: &IterVar) -> Expr {
            self.a.at([i, &(ko * 4 + ki)])
        }

        fn b_at(&self, j: &Expr, ko: &IterVar, ki: &IterVar) -> Expr {
            self.bp.at([&(j / self.nr), &ko.to_expr(), &(j % self.nr), &ki.to_expr()])
        }

        /// The matmul with `source(A read, B read)` summed over `ko, ki`.
        fn matmul(&self, source: impl Fn(Expr, Expr) -> Expr) -> Tensor {
            let (m, k) = (self.a.shape()[0], self.a.shape()[1]);
            let n = self.bp.shape()[0] * self.nr;
            let ko = reduce_axis(k / 4, "ko").unwrap();
            let ki = reduce_axis(4, "ki").unwrap();
            let body = |i: &[Expr]| {
                sum(DType::I32, &[&ko, &ki], source(self.a_at(&i[0], &ko, &ki), self.b_at(&i[1], &ko, &ki)))
            };
            compute([m, n], body, "C").unwrap()
        }

        fn exact(&self) -> Tensor {
            self.matmul(|a, b| a.cast(DType::I32) * b.cast(DType::I32))
        }
    }

    /// Splits rows by `mr` and columns by `nr`, orders `i.outer, j.outer, <reduce>, i.inner,
    /// j.inner`; returns the schedule and the leaves in that order.
    fn tiled(c: &Tensor, mr: i64, nr: i64) -> (Schedule, Vec<IterVar>) {
        let mut s = create_schedule(&[c]);
        let (io, jo, ii, ji) = s.tile(c, &c.axis(0), &c.axis(1), mr, nr).unwrap();
        let mut leaves = vec![io, jo];
        leaves.extend(c.reduce_axes());
        leaves.extend([ii, ji]);
        s.reorder(c, &leaves.iter().collect::<Vec<_>>()).unwrap();
        (s, leaves)
    }

    #[track_caller]
    fn expect_mismatch(result: Result<(), ScheduleError>, part: MismatchPart, text: &str) -> String {
        let err = result.expect_err("tensorize must fail");
        let message = err.to_string();
        match &err {
            ScheduleError::TensorizeMismatch(m) => assert_eq!(m.part, part, "{message}"),
            other => panic!("expected a TensorizeMismatch, found {other:?}"),
        }
        assert!(message.contains(text), "`{text}` not in: {message}");
        message
    }

    /// The function with every call replaced by its fallback.
    fn fallbacks_only(f: &Func) -> Func {
        struct Fallbacks;
        impl Mutator for Fallbacks {
            fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
                let walked = walk_stmt(self, stmt);
                match walked.kind() {
                    StmtKind::Call { fallback, .. } => fallback.clone(),
                    _ => walked,
                }
            }
        }
        Func { name: f.name.clone(), params: f.params.clone(), body: Fallbacks.mutate_stmt(&f.body) }
    }

    fn count_calls(f: &Func) -> usize {
        let mut calls = 0;
        crate::mutator::for_each_stmt(&f.body, &mut |s| calls += matches!(s.kind(), StmtKind::Call { .. }) as usize);
        calls
    }

    fn pseudo_random(len: i64, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                lo + ((state >> 33) % (hi - lo + 1) as u64) as i64
            })
            .collect()
    }

    /// Runs `f` (parameters `A, Bp, C`) and its fallback-only version on the given inputs and
    /// checks both against the definition `c`; returns C.
    fn run_checked(f: &Func, (a, bp, c): (&Tensor, &Tensor, &Tensor), a_vals: &[i64], b_vals: &[i64]) -> Vec<i64> {
        let a_arr = Array::from_i64(DType::U8, a.shape(), a_vals);
        let b_arr = Array::from_i64(DType::I8, bp.shape(), b_vals);
        let want = eval_te(&[c], &[(a, &a_arr), (bp, &b_arr)]).unwrap().remove(0);
        // C starts with garbage: a resetting call must not fold it in.
        let garbage =
            Array::from_i64(DType::I32, c.shape(), &pseudo_random(c.shape().iter().product(), 99, -9999, 9999));
        for func in [f.clone(), fallbacks_only(f)] {
            let mut args = vec![a_arr.clone(), b_arr.clone(), garbage.clone()];
            run_func(&func, &mut args).unwrap();
            assert!(args[2].bits_eq(&want), "{:?}\n{func}", args[2].first_difference(&want));
        }
        want.to_i64_vec()
    }

    // ---- Accepted nests ----------------------------------------------------------------------

    #[test]
    fn a_gemm_tile_is_tensorized_and_runs_the_declaration() {
        let p = Packed::new(12, 32, 16, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 16, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert_eq!(count_calls(&f), 1, "{f}");
        // The region holds the whole reduction: the call resets its tile, no init nest precedes it.
        assert!(f.to_string().contains("call reset gemm(A[i.outer*64] strides [16, 1], Bp[j.outer*256] strides [64, 4, 1], C[i.outer*128 + j.outer*16] strides [32, 1])"), "{f}");
        assert!(!f.to_string().contains("= 0i32"), "{f}");
        run_checked(
            &f,
            (&p.a, &p.bp, &c),
            &pseudo_random(12 * 16, 1, 0, 255),
            &pseudo_random(2 * 4 * 16 * 4, 2, -128, 127),
        );
    }

    #[test]
    fn loops_of_one_iteration_take_the_required_stride() {
        // One-column panels: `j/1` is the panel and `j%1` is 0, so the tile's column loop steps
        // through panels (16 elements) in the stage, yet never steps in a 1-column tile.
        let p = Packed::new(3, 2, 16, 1);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 1, 1);
        s.tensorize(&c, &leaves[2], &gemm_intrin(1, 1, 16, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert!(f.to_string().contains("Bp[j.outer*16] strides [4, 4, 1]"), "{f}");
        run_checked(&f, (&p.a, &p.bp, &c), &pseudo_random(48, 21, 0, 255), &pseudo_random(32, 22, -128, 127));
    }

    #[test]
    fn the_proven_plan_is_kept_for_lowering_until_the_schedule_changes() {
        let p = Packed::new(12, 32, 16, 16);
        let c = p.exact();
        let intrin = gemm_intrin(4, 16, 16, false);
        let (mut s, leaves) = tiled(&c, 4, 16);
        s.tensorize(&c, &leaves[2], &intrin).unwrap();
        let stage = s.stage_of(&c).unwrap();
        let fresh = |s: &Schedule| {
            let bodies = crate::lower::inline_stages::inline_stages(s);
            let regions = crate::lower::infer_bounds::infer_bounds(s, &bodies);
            plan(s, &regions, stage, &leaves[2], &intrin, &bodies[&stage]).ok().unwrap()
        };
        // Kept, and what planning again on the same schedule gives.
        let kept = s.proven_plan(stage).expect("the proof keeps its plan");
        assert_eq!(kept.len(), 3);
        assert!(same_plan(&kept, &fresh(&s)));
        // Lowering from the kept plan and from a fresh one emit the same function.
        let from_kept = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        let mut forgotten = s.clone();
        forgotten.forget_proven_plans();
        assert!(forgotten.proven_plan(stage).is_none());
        let from_fresh = lower(&forgotten, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert_eq!(from_kept.to_string(), from_fresh.to_string());
        // A split outside the region re-proves the request: the plan kept is the new loops'.
        let (outer, _) = s.split(&c, &leaves[0], 1).unwrap();
        let resplit = s.proven_plan(stage).expect("the split re-proves the request");
        assert!(same_plan(&resplit, &fresh(&s)));
        assert!(!same_plan(&resplit, &kept));
        // A primitive that does not re-prove forgets it; lowering plans the call again.
        s.parallel(&c, &outer).unwrap();
        assert!(s.proven_plan(stage).is_none());
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert_eq!(count_calls(&f), 1, "{f}");
        run_checked(
            &f,
            (&p.a, &p.bp, &c),
            &pseudo_random(12 * 16, 7, 0, 255),
            &pseudo_random(2 * 4 * 16 * 4, 8, -128, 127),
        );
    }

    #[test]
    fn integer_regions_may_be_ordered_freely_and_start_at_data_parallel_loops() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        let [io, jo, ko, ki, ii, ji] = leaves.as_slice() else { unreachable!() };
        // The region (i.inner, ki, j.inner, ko) starts before the first reduction loop.
        s.reorder(&c, &[io, jo, ii, ki, ji, ko]).unwrap();
        s.tensorize(&c, ii, &gemm_intrin(4, 16, 8, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert_eq!(count_calls(&f), 1, "{f}");
        run_checked(&f, (&p.a, &p.bp, &c), &pseudo_random(64, 3, 0, 255), &pseudo_random(128, 4, -128, 127));
    }

    #[test]
    fn a_partial_last_tile_calls_the_declaration_of_its_height() {
        let p = Packed::new(10, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        let text = f.to_string();
        // Rows 8 and 9: a resetting call of two rows at the same operands.
        let tile = "(A[i.outer*32] strides [8, 1], Bp[0] strides [64, 4, 1], C[i.outer*64] strides [16, 1])";
        let expected = format!(
            "    if i.outer < 2 {{\n      call reset gemm{tile}\n    }} else {{\n      call reset gemm_i2{tile}\n"
        );
        assert!(text.contains(&expected), "{text}");
        assert_eq!(count_calls(&f), 2, "{f}");
        run_checked(&f, (&p.a, &p.bp, &c), &pseudo_random(80, 5, 0, 255), &pseudo_random(128, 6, -128, 127));
    }

    #[test]
    fn row_and_column_tails_call_declarations_of_their_rows_and_columns() {
        // 10 × 40 in 4 × 16 tiles (B one panel of all 40 columns): tails of 2 rows, of 8
        // columns, and the corner of both.
        let a = placeholder([10, 8], DType::U8, "A").unwrap();
        let b = placeholder([2, 40, 4], DType::I8, "B").unwrap();
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let c = compute(
            [10, 40],
            |i| {
                let product = a.at([&i[0], &(&ko * 4 + &ki)]).cast(DType::I32)
                    * b.at([&ko.to_expr(), &i[1], &ki.to_expr()]).cast(DType::I32);
                sum(DType::I32, &[&ko, &ki], product)
            },
            "C",
        )
        .unwrap();
        let (mut s, leaves) = tiled(&c, 4, 16);
        s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)).unwrap();
        let f = lower(&s, &[&a, &b, &c], "gemm").unwrap();
        let mut names = Vec::new();
        crate::mutator::for_each_stmt(&f.body, &mut |s| {
            if let StmtKind::Call { intrin, .. } = s.kind() {
                names.push(intrin.name.clone());
            }
        });
        names.sort();
        assert_eq!(names, ["gemm", "gemm_i2", "gemm_i2_j8", "gemm_j8"], "{f}");
        run_checked(&f, (&a, &b, &c), &pseudo_random(80, 5, 0, 255), &pseudo_random(2 * 40 * 4, 6, -128, 127));
    }

    #[test]
    fn tails_of_a_split_of_a_split_are_called_only_where_their_guards_decide_them() {
        // 11 rows split by 4, each 4 split by 3: both guards step along the same loop, with
        // remainders 2 (of 11) and 1 (of 4). A tile of 1 row (rows 3 and 7) takes the call of
        // one row; the 2-row tail's condition never holds (rows 8..10 are a whole tile), and
        // the tile past the end (row 11) runs the fallback, which computes nothing.
        let p = Packed::new(11, 16, 8, 16);
        let c = p.exact();
        let mut s = create_schedule(&[&c]);
        let (io, ii) = s.split(&c, &c.axis(0), 4).unwrap();
        let (iio, iii) = s.split(&c, &ii, 3).unwrap();
        let (jo, ji) = s.split(&c, &c.axis(1), 16).unwrap();
        let [ko, ki] = [0, 1].map(|r| c.reduce_axes()[r].clone());
        s.reorder(&c, &[&io, &iio, &jo, &ko, &ki, &iii, &ji]).unwrap();
        s.tensorize(&c, &ko, &gemm_intrin(3, 16, 8, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert!(f.to_string().contains("call reset gemm_i1("), "{f}");
        run_checked(&f, (&p.a, &p.bp, &c), &pseudo_random(88, 7, 0, 255), &pseudo_random(128, 8, -128, 127));
    }

    #[test]
    fn an_outer_reduction_loop_calls_the_kernel_once_per_step() {
        let p = Packed::new(8, 16, 16, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        let (outer, inner) = s.split(&c, &leaves[2], 2).unwrap();
        s.tensorize(&c, &inner, &gemm_intrin(4, 16, 8, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        let text = f.to_string();
        let expected = format!(
            "    for {outer} in 0..2 {{\n      call gemm(A[i.outer*64 + ko.outer*8] strides [16, 1], Bp[ko.outer*128]"
        );
        assert!(text.contains(&expected), "{text}");
        run_checked(&f, (&p.a, &p.bp, &c), &pseudo_random(128, 11, 0, 255), &pseudo_random(256, 12, -128, 127));
    }

    #[test]
    fn operands_computed_at_a_loop_outside_the_region_are_read_in_their_region_buffers() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)).unwrap();
        let cached = s.cache_read(&p.a, &[&c]).unwrap();
        // Four rows of A per i.outer, copied inside it: the call reads the copy from its start.
        s.compute_at(&cached, &c, &leaves[1]).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
        assert!(f.to_string().contains("call reset gemm(A.local[0] strides [8, 1]"), "{f}");
        run_checked(&f, (&p.a, &p.bp, &c), &pseudo_random(64, 15, 0, 255), &pseudo_random(128, 16, -128, 127));
    }

    /// `D[i, j] = C[i, j] * 3` over `rows` rows, the GEMM `C` tensorized (4 × 16 tiles) and
    /// computed at `D`'s split of `i` by 4; returns the lowered function's text after checking
    /// it (and its fallbacks) against the definition.
    fn gemm_computed_at_its_consumer(rows: i64) -> String {
        let p = Packed::new(rows, 32, 8, 16);
        let c = p.exact();
        let d = compute([rows, 32], |i| c.at([&i[0], &i[1]]) * Expr::int(DType::I32, 3), "D").unwrap();
        let mut s = create_schedule(&[&d]);
        let (rows_outer, _) = s.split(&d, &d.axis(0), 4).unwrap();
        let (io, jo, ii, ji) = s.tile(&c, &c.axis(0), &c.axis(1), 4, 16).unwrap();
        let [ko, ki] = [0, 1].map(|r| c.reduce_axes()[r].clone());
        s.reorder(&c, &[&io, &jo, &ko, &ki, &ii, &ji]).unwrap();
        s.compute_at(&c, &d, &rows_outer).unwrap();
        s.tensorize(&c, &ko, &gemm_intrin(4, 16, 8, false)).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &d], "gemm_then_scale").unwrap();
        let a = Array::from_i64(DType::U8, p.a.shape(), &pseudo_random(rows * 8, 17, 0, 255));
        let b = Array::from_i64(DType::I8, p.bp.shape(), &pseudo_random(2 * 2 * 16 * 4, 18, -128, 127));
        let want = eval_te(&[&d], &[(&p.a, &a), (&p.bp, &b)]).unwrap().remove(0);
        for func in [f.clone(), fallbacks_only(&f)] {
            let mut args = vec![a.clone(), b.clone(), Array::zeros(DType::I32, &[rows, 32])];
            run_func(&func, &mut args).unwrap();
            assert!(args[2].bits_eq(&want), "{:?}\n{func}", args[2].first_difference(&want));
        }
        f.to_string()
    }

    #[test]
    fn a_tensorized_stage_computed_at_a_loop_calls_into_its_region_buffer() {
        let text = gemm_computed_at_its_consumer(8);
        // C holds 4 rows: the call writes its tile at the column panel, whatever i.outer is.
        assert!(text.contains("C[j.outer*16] strides [32, 1])"), "{text}");
        assert!(!text.contains("if "), "{text}");
    }

    #[test]
    fn a_region_sticking_out_of_the_tensor_runs_the_fallback() {
        // Rows 8..12 of the last region: 10 and 11 are outside C.
        let text = gemm_computed_at_its_consumer(10);
        assert!(text.contains("} else {"), "{text}");
    }

    #[test]
    fn element_wise_intrinsics_overwrite_and_guard_their_tails() {
        // add8: Z[i] = X[i] + Y[i] on 8 i16 lanes; the stage adds two 2-D tensors row by row.
        let (x, y) = (placeholder([8], DType::I16, "X").unwrap(), placeholder([8], DType::I16, "Y").unwrap());
        let z = compute([8], |i| x.at([&i[0]]) + y.at([&i[0]]), "Z").unwrap();
        let add8 = decl_tensor_intrin("add8", IntrinKind::Generic, &z, &[&x, &y]).unwrap();
        let (p, q) = (placeholder([3, 20], DType::I16, "P").unwrap(), placeholder([3, 20], DType::I16, "Q").unwrap());
        let r = compute([3, 20], |i| p.at([&i[0], &i[1]]) + q.at([&i[0], &i[1]]), "R").unwrap();
        let mut s = create_schedule(&[&r]);
        let (_, inner) = s.split(&r, &r.axis(1), 8).unwrap();
        s.vectorize(&r, &inner).unwrap();
        s.tensorize(&r, &inner, &add8).unwrap();
        let f = lower(&s, &[&p, &q, &r], "add").unwrap();
        let text = f.to_string();
        assert!(text.contains("if j.outer < 2 {\n        call add8(P[i*20 + j.outer*8] strides [1], Q[i*20 + j.outer*8] strides [1], R[i*20 + j.outer*8] strides [1])\n      } else {"), "{text}");
        let p_arr = Array::from_i64(DType::I16, &[3, 20], &pseudo_random(60, 13, -32768, 32767));
        let q_arr = Array::from_i64(DType::I16, &[3, 20], &pseudo_random(60, 14, -32768, 32767));
        let want = eval_te(&[&r], &[(&p, &p_arr), (&q, &q_arr)]).unwrap().remove(0);
        for func in [f.clone(), fallbacks_only(&f)] {
            let mut args = vec![p_arr.clone(), q_arr.clone(), Array::zeros(DType::I16, &[3, 20])];
            run_func(&func, &mut args).unwrap();
            assert!(args[2].bits_eq(&want), "{func}");
        }
        // A reduction stage is not an element-wise intrinsic.
        let k = reduce_axis(8, "k").unwrap();
        let total =
            compute([3], |i| sum(DType::I16, &[&k], p.at([&i[0], &k.to_expr()]) + q.at([&i[0], &k.to_expr()])), "T")
                .unwrap();
        let mut s = create_schedule(&[&total]);
        expect_mismatch(
            s.tensorize(&total, &k, &add8),
            MismatchPart::AxisKind,
            "expected 1 data-parallel and 0 reduction",
        );
    }

    /// The boundary values of u8 and i8 in every lane position and every combination within a
    /// pair: row `r` holds `(a0, a1, a1, a0)`, column `q` holds `(b0, b1, b1, b0)` with each
    /// pair drawn from the grid, followed by a random `ko` block.
    fn boundary_grid() -> (Vec<i64>, Vec<i64>) {
        let grid_a = [0, 1, 127, 128, 254, 255];
        let grid_b = [-128, -127, -1, 0, 1, 127];
        let (m, n, k) = (36, 48, 8);
        let random_a = pseudo_random(m * 4, 7, 0, 255);
        let mut a = vec![0; (m * k) as usize];
        for r in 0..36usize {
            let (x, y) = (grid_a[r / 6], grid_a[r % 6]);
            a[r * 8..r * 8 + 4].copy_from_slice(&[x, y, y, x]);
            a[r * 8 + 4..r * 8 + 8].copy_from_slice(&random_a[r * 4..r * 4 + 4]);
        }
        // Bp[jo, ko, ji, ki] for nr = 16: column q = jo*16 + ji.
        let random_b = pseudo_random(n * 4, 8, -128, 127);
        let mut b = vec![0; (n * k) as usize];
        for q in 0..48usize {
            let (jo, ji) = (q / 16, q % 16);
            let lanes = if q < 36 {
                let (x, y) = (grid_b[q / 6], grid_b[q % 6]);
                [x, y, y, x]
            } else {
                [random_b[q * 4], random_b[q * 4 + 1], random_b[q * 4 + 2], random_b[q * 4 + 3]]
            };
            for ko in 0..2usize {
                let at = ((jo * 2 + ko) * 16 + ji) * 4;
                let values = if ko == 0 { lanes } else { [random_b[q * 4 + 3], random_b[q * 4], lanes[1], lanes[2]] };
                b[at..at + 4].copy_from_slice(&values);
            }
        }
        (a, b)
    }

    #[test]
    fn calls_equal_their_fallbacks_on_boundary_values_exact_and_saturating() {
        for saturating in [false, true] {
            let p = Packed::new(36, 48, 8, 16);
            let c = if saturating {
                let bp = p.bp.clone();
                let a = p.a.clone();
                let (ko, kp) = (reduce_axis(2, "ko").unwrap(), reduce_axis(2, "kp").unwrap());
                let product = |i: &[Expr], o: i64| {
                    let ki = &kp * 2 + o;
                    let a_ik = a.at([&i[0], &(&ko * 4 + ki.clone())]).cast(DType::I32);
                    a_ik * bp.at([&(&i[1] / 16), &ko.to_expr(), &(&i[1] % 16), &ki]).cast(DType::I32)
                };
                compute(
                    [36, 48],
                    |i| {
                        sum(
                            DType::I32,
                            &[&ko, &kp],
                            (product(i, 0) + product(i, 1)).saturating_cast(DType::I16).cast(DType::I32),
                        )
                    },
                    "C",
                )
                .unwrap()
            } else {
                p.exact()
            };
            let (mut s, leaves) = tiled(&c, 4, 16);
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, saturating)).unwrap();
            let f = lower(&s, &[&p.a, &p.bp, &c], "gemm").unwrap();
            assert_eq!(count_calls(&f), 1, "{f}");
            let (a, b) = boundary_grid();
            let result = run_checked(&f, (&p.a, &p.bp, &c), &a, &b);
            // An independent reference: VPMADDUBSW saturates each pair sum to i16.
            let pair = |x: i64| if saturating { x.clamp(-32768, 32767) } else { x };
            for (i, j) in (0..36).flat_map(|i| (0..48).map(move |j| (i, j))) {
                let product =
                    |ko: usize, ki: usize| a[i * 8 + ko * 4 + ki] * b[(((j / 16) * 2 + ko) * 16 + j % 16) * 4 + ki];
                let want: i64 = (0..2)
                    .map(|ko| pair(product(ko, 0) + product(ko, 1)) + pair(product(ko, 2) + product(ko, 3)))
                    .sum();
                assert_eq!(result[i * 48 + j], want, "C[{i}, {j}]");
            }
            // Row (255, 255, 255, 255) against column (127, 127, 127, 127) saturates both pairs.
            let block =
                |i: usize, j: usize| (0..4).map(|ki| a[i * 8 + ki] * b[((j / 16) * 32 + j % 16) * 4 + ki]).sum::<i64>();
            assert_eq!(block(35, 35), 4 * 255 * 127);
            assert_eq!(pair(2 * 255 * 127), if saturating { 32767 } else { 64770 });
        }
    }

    /// `C[0, 0]` for `a = (255, 255, 0, 0)` and `b = (127, 127, 0, 0)`, through a lowered call.
    fn seed_example(saturating: bool) -> i64 {
        let a = placeholder([1, 4], DType::U8, "A").unwrap();
        let b = placeholder([1, 16, 4], DType::I8, "B").unwrap();
        let c = int8_gemm_compute(&a, &b, Int8GemmSize { m: 1, n: 16, k: 4, segments: 1 }, saturating, "C").unwrap();
        let mut s = create_schedule(&[&c]);
        let first = s.stage_data(s.stage_of(&c).unwrap()).leaves[0].clone();
        s.tensorize(&c, &first, &gemm_intrin(1, 16, 4, saturating)).unwrap();
        let f = lower(&s, &[&a, &b, &c], "seed").unwrap();
        assert_eq!(count_calls(&f), 1, "{f}");
        let mut b_vals = vec![0; 64];
        b_vals[..4].copy_from_slice(&[127, 127, 0, 0]);
        let mut args = vec![
            Array::from_i64(DType::U8, &[1, 4], &[255, 255, 0, 0]),
            Array::from_i64(DType::I8, &[1, 16, 4], &b_vals),
            Array::zeros(DType::I32, &[1, 16]),
        ];
        run_func(&f, &mut args).unwrap();
        args[2].to_i64_vec()[0]
    }

    #[test]
    fn the_onednn_example_is_exact_or_saturates_by_declaration() {
        assert_eq!(seed_example(false), 64770);
        assert_eq!(seed_example(true), 32767);
    }

    // ---- Every kind of mismatch --------------------------------------------------------------

    #[test]
    fn mismatch_placement_of_a_stage_inside_the_region() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        let intrin = gemm_intrin(4, 16, 8, false);
        s.tensorize(&c, &leaves[2], &intrin).unwrap();
        let cached = s.cache_read(&p.a, &[&c]).unwrap();
        let before = lower(&s, &[&p.a, &p.bp, &c], "f").unwrap().to_string();
        let err = s.compute_at(&cached, &c, &leaves[3]).map_err(|e| e.to_string()).unwrap_err();
        assert!(
            err.contains(
                "placement (stage A.local): expected computed outside the loops under ko, found compute_at ki"
            ),
            "{err}"
        );
        // The rejected primitive left the schedule as it was.
        assert_eq!(lower(&s, &[&p.a, &p.bp, &c], "f").unwrap().to_string(), before);
        let (mut fresh, leaves) = tiled(&c, 4, 16);
        let cached = fresh.cache_read(&p.a, &[&c]).unwrap();
        fresh.compute_at(&cached, &c, &leaves[3]).unwrap();
        expect_mismatch(fresh.tensorize(&c, &leaves[2], &intrin), MismatchPart::Placement, "placement (stage A.local)");
    }

    #[test]
    fn mismatch_saturation() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        let message = expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, true)),
            MismatchPart::Saturation,
            "saturation (body): expected saturating casts",
        );
        assert!(message.contains("found exact arithmetic"), "{message}");
    }

    #[test]
    fn mismatch_loop_count() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        expect_mismatch(
            s.tensorize(&c, &leaves[1], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::LoopCount,
            "loop count (loops under j.outer): expected 4 (i, j, ko, ki), found 5 (j.outer, ko, ki, i.inner, j.inner)",
        );
    }

    #[test]
    fn mismatch_fused_loop() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        let fused = s.fuse(&c, &leaves[2], &leaves[3]).unwrap();
        let (outer, _) = s.split(&c, &fused, 4).unwrap();
        expect_mismatch(
            s.tensorize(&c, &outer, &gemm_intrin(4, 16, 8, false)),
            MismatchPart::FusedLoop,
            "fused loop (loop ko.ki.fused.outer)",
        );
    }

    #[test]
    fn mismatch_axis_kinds() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        let [io, jo, ko, ki, ii, ji] = leaves.as_slice() else { unreachable!() };
        s.reorder(&c, &[io, ko, jo, ki, ii, ji]).unwrap();
        expect_mismatch(
            s.tensorize(&c, jo, &gemm_intrin(4, 16, 8, false)),
            MismatchPart::AxisKind,
            "expected 2 data-parallel and 2 reduction, found 3 data-parallel and 1 reduction",
        );
    }

    #[test]
    fn mismatch_output_dtype() {
        let p = Packed::new(8, 16, 8, 16);
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let c = compute(
            [8, 16],
            |i| {
                sum(
                    DType::I64,
                    &[&ko, &ki],
                    p.a_at(&i[0], &ko, &ki).cast(DType::I64) * p.b_at(&i[1], &ko, &ki).cast(DType::I64),
                )
            },
            "C",
        )
        .unwrap();
        let (mut s, leaves) = tiled(&c, 4, 16);
        expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::OutputDType,
            "output dtype (output C): expected i32, found i64",
        );
    }

    #[test]
    fn mismatch_reducer() {
        let p = Packed::new(8, 16, 8, 16);
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let c = compute(
            [8, 16],
            |i| {
                max(
                    DType::I32,
                    &[&ko, &ki],
                    p.a_at(&i[0], &ko, &ki).cast(DType::I32) * p.b_at(&i[1], &ko, &ki).cast(DType::I32),
                )
            },
            "C",
        )
        .unwrap();
        let (mut s, leaves) = tiled(&c, 4, 16);
        expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::Reducer,
            "expected a sum reduction, found a max reduction",
        );
    }

    #[test]
    fn mismatch_operand_count() {
        let p = Packed::new(8, 16, 8, 16);
        let scale = placeholder([16], DType::I32, "S").unwrap();
        let c = p.matmul(|a, b| a.cast(DType::I32) * b.cast(DType::I32));
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let scaled = compute(
            [8, 16],
            |i| {
                let product = p.a_at(&i[0], &ko, &ki).cast(DType::I32) * p.b_at(&i[1], &ko, &ki).cast(DType::I32);
                sum(DType::I32, &[&ko, &ki], product * scale.at([&i[1]]))
            },
            "C",
        )
        .unwrap();
        drop(c);
        let (mut s, leaves) = tiled(&scaled, 4, 16);
        expect_mismatch(
            s.tensorize(&scaled, &leaves[2], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::OperandCount,
            "operand count (tensors read): expected 2 (A, B), found 3 (A, Bp, S)",
        );
    }

    #[test]
    fn mismatch_operand_dtype() {
        let a = placeholder([8, 8], DType::I8, "A").unwrap();
        let p = Packed::new(8, 16, 8, 16);
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let c = compute(
            [8, 16],
            |i| {
                sum(
                    DType::I32,
                    &[&ko, &ki],
                    a.at([&i[0], &(&ko * 4 + &ki)]).cast(DType::I32) * p.b_at(&i[1], &ko, &ki).cast(DType::I32),
                )
            },
            "C",
        )
        .unwrap();
        let (mut s, leaves) = tiled(&c, 4, 16);
        expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::OperandDType,
            "operand dtype (operand A (for A)): expected u8, found i8",
        );
    }

    #[test]
    fn mismatch_body_structure() {
        let p = Packed::new(8, 16, 8, 16);
        let sum_of_casts = p.matmul(|a, b| a.cast(DType::I32) + b.cast(DType::I32));
        let (mut s, leaves) = tiled(&sum_of_casts, 4, 16);
        expect_mismatch(
            s.tensorize(&sum_of_casts, &leaves[2], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::Body,
            "body (body): expected `i32(A[i, ko*4 + ki])*i32(B[ko, j, ki])`, found `i32(A[i, ko*4 + ki]) + i32(Bp[j/16, ko, j%16, ki])`",
        );
        let narrow = p.matmul(|a, b| (a.cast(DType::I16) * b.cast(DType::I16)).cast(DType::I32));
        let (mut s, leaves) = tiled(&narrow, 4, 16);
        expect_mismatch(
            s.tensorize(&narrow, &leaves[2], &gemm_intrin(4, 16, 8, false)),
            MismatchPart::Body,
            "expected `i32(A[i, ko*4 + ki])*i32(B[ko, j, ki])`",
        );
    }

    #[test]
    fn mismatch_extent() {
        let p = Packed::new(8, 16, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 16);
        expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(8, 16, 8, false)),
            MismatchPart::Extent,
            "extent (loop i.inner): expected 8 (declaration axis i), found 4",
        );
    }

    #[test]
    fn mismatch_non_affine_access() {
        // B packed for 16 columns, but the tile is 32 wide: (j.outer*32 + j.inner)/16.
        let p = Packed::new(8, 32, 8, 16);
        let c = p.exact();
        let (mut s, leaves) = tiled(&c, 4, 32);
        expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 32, 8, false)),
            MismatchPart::NonAffine,
            "non-affine access (operand Bp): expected an index affine in the loops under ko, found `j.outer*2 + j.inner/16` in `Bp[j.outer*2 + j.inner/16, ko, j.inner%16, ki]`",
        );
    }

    #[test]
    fn mismatch_axis_dependence() {
        // A read as A[i, ki*8 + ko]: k's two parts swapped.
        let a = placeholder([8, 32], DType::U8, "A").unwrap();
        let p = Packed::new(8, 16, 32, 16);
        let (ko, ki) = (reduce_axis(8, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let c = compute(
            [8, 16],
            |i| {
                sum(
                    DType::I32,
                    &[&ko, &ki],
                    a.at([&i[0], &(&ki * 8 + &ko)]).cast(DType::I32) * p.b_at(&i[1], &ko, &ki).cast(DType::I32),
                )
            },
            "C",
        )
        .unwrap();
        let (mut s, leaves) = tiled(&c, 4, 16);
        expect_mismatch(
            s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 32, false)),
            MismatchPart::AxisDependence,
            "axis dependence (operand A): expected `A[i, ko*4 + ki]` to advance 32 elements per ko (as ko), found 1 in `A[i.outer*4 + i.inner, ki*8 + ko]`",
        );
    }

    #[test]
    fn mismatch_stride_of_an_unpacked_operand() {
        let a = placeholder([8, 16], DType::U8, "A").unwrap();
        let b = placeholder([16, 64], DType::I8, "B").unwrap();
        let k = reduce_axis(16, "k").unwrap();
        let c = compute(
            [8, 64],
            |i| sum(DType::I32, &[&k], a.at([&i[0], &k]).cast(DType::I32) * b.at([&k, &i[1]]).cast(DType::I32)),
            "C",
        )
        .unwrap();
        let mut s = create_schedule(&[&c]);
        let (io, jo, ii, ji) = s.tile(&c, &c.axis(0), &c.axis(1), 4, 16).unwrap();
        let (ko, ki) = s.split(&c, &k, 4).unwrap();
        s.reorder(&c, &[&io, &jo, &ko, &ki, &ii, &ji]).unwrap();
        expect_mismatch(
            s.tensorize(&c, &ko, &gemm_intrin(4, 16, 16, false)),
            MismatchPart::Stride,
            "stride (operand B): expected `B[ko, j, ki]` to advance 1 element per ki, found 64 in `B[k.outer*4 + k.inner, j.outer*16 + j.inner]`",
        );
    }

    /// `D[j] = Σ_{ko, ki} X[ko*8 + ki] * W[ko*8 + ki, j]` on `dtype`, and a stage computing the
    /// same with `k` split by 8.
    fn dot(dtype: DType) -> (TensorIntrin, Tensor, IterVar) {
        let x = placeholder([16], dtype, "X").unwrap();
        let w = placeholder([16, 4], dtype, "W").unwrap();
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(8, "ki").unwrap());
        let decl =
            compute([4], |j| sum(dtype, &[&ko, &ki], x.at([&(&ko * 8 + &ki)]) * w.at([&(&ko * 8 + &ki), &j[0]])), "D")
                .unwrap();
        let intrin = decl_tensor_intrin("dot", IntrinKind::Generic, &decl, &[&x, &w]).unwrap();
        let xs = placeholder([16], dtype, "Xs").unwrap();
        let ws = placeholder([16, 4], dtype, "Ws").unwrap();
        let k = reduce_axis(16, "k").unwrap();
        let stage =
            compute([4], |j| sum(dtype, &[&k], xs.at([&k.to_expr()]) * ws.at([&k.to_expr(), &j[0]])), "S").unwrap();
        (intrin, stage, k)
    }

    #[test]
    fn mismatch_float_reduction_order() {
        for dtype in [DType::F32, DType::I32] {
            let (intrin, stage, k) = dot(dtype);
            let mut s = create_schedule(&[&stage]);
            let (ko, ki) = s.split(&stage, &k, 8).unwrap();
            s.reorder(&stage, &[&ki, &ko, &stage.axis(0)]).unwrap();
            let result = s.tensorize(&stage, &ki, &intrin);
            if dtype.is_float() {
                expect_mismatch(
                    result,
                    MismatchPart::FloatOrder,
                    "float reduction order (reduction loops): expected loops in the declaration's order (ko, ki), found k.inner as ki, k.outer as ko",
                );
            } else {
                result.expect("integer reductions are order-independent");
            }
            // In the declaration's order, floats are accepted too.
            let mut s = create_schedule(&[&stage]);
            let (ko, ki) = s.split(&stage, &k, 8).unwrap();
            s.reorder(&stage, &[&ko, &ki, &stage.axis(0)]).unwrap();
            s.tensorize(&stage, &ko, &intrin).unwrap();
        }
    }

    // ---- Later primitives keep the proof -----------------------------------------------------

    #[test]
    fn primitives_that_break_a_tensorized_region_are_rejected_and_change_nothing() {
        let p = Packed::new(8, 16, 8, 16);
        let shifted = compute([8, 8], |i| p.a.at([&i[0], &i[1]]) + 1, "A1").unwrap();
        let (ko, ki) = (reduce_axis(2, "ko").unwrap(), reduce_axis(4, "ki").unwrap());
        let c = compute(
            [8, 16],
            |i| {
                sum(
                    DType::I32,
                    &[&ko, &ki],
                    shifted.at([&i[0], &(&ko * 4 + &ki)]).cast(DType::I32) * p.b_at(&i[1], &ko, &ki).cast(DType::I32),
                )
            },
            "C",
        )
        .unwrap();
        let (mut s, leaves) = tiled(&c, 4, 16);
        s.tensorize(&c, &leaves[2], &gemm_intrin(4, 16, 8, false)).unwrap();
        let lowered = |s: &Schedule| lower(s, &[&p.a, &p.bp, &c], "f").unwrap().to_string();
        let before = lowered(&s);
        let err = s.split(&c, &leaves[5], 8).unwrap_err();
        assert!(err.to_string().contains("loop count (loops under ko): expected 4"), "{err}");
        let err = s.compute_inline(&shifted).unwrap_err();
        assert!(matches!(&err, ScheduleError::TensorizeMismatch(m) if m.part == MismatchPart::Body), "{err}");
        let err = s.fuse(&c, &leaves[4], &leaves[5]).unwrap_err();
        assert!(err.to_string().contains("loop count (loops under ko): expected 4 (i, j, ko, ki), found 3"), "{err}");
        assert_eq!(lowered(&s), before);
        // Transformations outside the region keep the call.
        let fused = s.fuse(&c, &leaves[0], &leaves[1]).unwrap();
        s.parallel(&c, &fused).unwrap();
        let f = lower(&s, &[&p.a, &p.bp, &c], "f").unwrap();
        assert_eq!(count_calls(&f), 1, "{f}");
        let a_vals = pseudo_random(64, 9, 0, 254);
        let a_arr = Array::from_i64(DType::U8, &[8, 8], &a_vals);
        let b_arr = Array::from_i64(DType::I8, p.bp.shape(), &pseudo_random(128, 10, -128, 127));
        let want = eval_te(&[&c], &[(&p.a, &a_arr), (&p.bp, &b_arr)]).unwrap().remove(0);
        let mut args = vec![a_arr, b_arr, Array::zeros(DType::I32, &[8, 16])];
        run_func(&f, &mut args).unwrap();
        assert!(args[2].bits_eq(&want));
    }
}
