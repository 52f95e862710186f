//! Schedules: how each tensor of a computation is turned into loops.
//!
//! A `Schedule` holds one stage per tensor. A stage's loops start as its root axes (the
//! data-parallel axes, then the reduction axes) and are transformed by an ordered list of
//! `Relation`s (split, fuse) into leaf axes, whose order `reorder` changes and whose loop kind
//! `vectorize`, `unroll` and `parallel` set. Where a stage is computed is its `Attach`ment.
//!
//! Every primitive validates its arguments and returns a typed `ScheduleError`; a schedule that
//! every primitive accepted always lowers (`lower::lower` cannot fail on it).
//! Every accepted call is recorded as a step of the schedule's trace (`trace`), which replays the
//! same calls onto a fresh definition of the workload; a rejected call leaves the schedule,
//! trace included, unchanged.
//!
//! Non-dividing splits are handled by guards: the outer loop covers `ceil(extent / factor)`
//! tiles and the body runs only where the reconstructed index is inside the original extent.
//!
//! `tensorize` replaces the loops from a leaf inward by a call of a tensor intrinsic once it has
//! proven that they compute exactly the declaration. The proof is redone after every later
//! primitive that could invalidate it (loop transformations, placement, caches); a primitive
//! that would break it is rejected with the mismatch and leaves the schedule unchanged.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::rc::Rc;

use crate::error::{MismatchPart, ScheduleError, TensorizeMismatch};
use crate::expr::{Expr, ExprKind};
use crate::intrin::TensorIntrin;
use crate::mutator::{Mutator, substitute_map, walk_expr};
use crate::proven_plans::ProvenPlans;
use crate::stmt::ForKind;
use crate::te::{IterKind, IterVar, Operation, Tensor, TensorId, compute_vec};
use crate::tensorize::PlannedOperand;
use crate::trace::{IntrinRef, RecordedStep, Step};

/// Identity of a stage within its schedule.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Stage(pub u32);

/// How leaf axes derive from root axes; applied in order (TVM's iteration-variable algebra).
#[derive(Clone, Debug)]
pub enum Relation {
    /// `parent = outer * factor + inner`, `inner` in `0..factor`.
    Split { parent: IterVar, outer: IterVar, inner: IterVar, factor: i64 },
    /// `outer = fused / extent(inner)`, `inner = fused % extent(inner)`.
    Fuse { outer: IterVar, inner: IterVar, fused: IterVar },
}

/// Where a stage's values are computed.
#[derive(Clone, Debug, PartialEq)]
pub enum Attach {
    /// In its own loop nest at the top level of the function, before its consumers.
    Root,
    /// Substituted into every consumer; it has no loops or storage of its own.
    Inline,
    /// Inside the loop `axis` of stage `stage`, for just the region that loop's body reads.
    At { stage: Stage, axis: IterVar },
}

#[derive(Clone, Debug)]
pub struct StageData {
    /// The tensor this stage produces. For stages made by `cache_read`/`cache_write` this is a
    /// new tensor; the body below is what lowering uses.
    pub tensor: Tensor,
    /// Data-parallel root axes (empty for placeholders).
    pub axes: Vec<IterVar>,
    /// Reduction root axes.
    pub reduce_axes: Vec<IterVar>,
    /// The value at a point of `axes` (a `Reduce` over `reduce_axes` for reductions);
    /// `None` for placeholders.
    pub body: Option<Expr>,
    pub relations: Vec<Relation>,
    pub leaves: Vec<IterVar>,
    pub for_kinds: HashMap<IterVar, ForKind>,
    pub attach: Attach,
    pub is_output: bool,
    /// The leaf from which inward the loops are replaced by a call of the intrinsic.
    pub tensorize: Option<(IterVar, TensorIntrin)>,
}

impl StageData {
    pub fn name(&self) -> &str {
        self.tensor.name()
    }

    pub fn is_placeholder(&self) -> bool {
        self.body.is_none()
    }

    pub fn for_kind(&self, leaf: &IterVar) -> ForKind {
        self.for_kinds.get(leaf).copied().unwrap_or(ForKind::Serial)
    }

    /// The tensors this stage's body reads directly.
    pub fn inputs(&self) -> Vec<Tensor> {
        let mut seen = HashSet::default();
        let mut res = Vec::new();
        if let Some(body) = &self.body {
            crate::te::collect_reads(body, &mut seen, &mut res);
        }
        res
    }

    /// The extent of every axis, given the extents of the root axes (TVM's `PassDownDomain`).
    pub fn pass_down_extents(&self, root_extents: &HashMap<IterVar, i64>) -> HashMap<IterVar, i64> {
        let mut extents = root_extents.clone();
        for rel in &self.relations {
            match rel {
                Relation::Split { parent, outer, inner, factor } => {
                    let e = extents[parent];
                    extents.insert(outer.clone(), ceil_div(e, *factor));
                    extents.insert(inner.clone(), *factor);
                }
                Relation::Fuse { outer, inner, fused } => {
                    let e = extents[outer] * extents[inner];
                    extents.insert(fused.clone(), e);
                }
            }
        }
        extents
    }

    /// The value of every axis in terms of the leaf loop variables (TVM's `PassUpIndex`).
    pub fn pass_up_values(&self, extents: &HashMap<IterVar, i64>) -> HashMap<IterVar, Expr> {
        let mut values: HashMap<IterVar, Expr> = self.leaves.iter().map(|l| (l.clone(), l.to_expr())).collect();
        for rel in self.relations.iter().rev() {
            match rel {
                Relation::Split { parent, outer, inner, factor } => {
                    let v = values[outer].clone() * *factor + values[inner].clone();
                    values.insert(parent.clone(), v);
                }
                Relation::Fuse { outer, inner, fused } => {
                    let f = values[fused].clone();
                    let inner_extent = extents[inner];
                    values.insert(outer.clone(), f.clone() / inner_extent);
                    values.insert(inner.clone(), f % inner_extent);
                }
            }
        }
        values
    }

    /// For each non-dividing split, the parent axis, whose value must be checked against its
    /// extent before the body runs.
    pub fn guarded_axes(&self, extents: &HashMap<IterVar, i64>) -> Vec<IterVar> {
        self.relations
            .iter()
            .filter_map(|rel| match rel {
                Relation::Split { parent, factor, .. } if extents[parent] % factor != 0 => Some(parent.clone()),
                _ => None,
            })
            .collect()
    }

    fn leaf_names(&self) -> String {
        self.leaves.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
    }
}

/// The schedule of a computation: one stage per tensor, in a producer-before-consumer order.
#[derive(Clone, Debug)]
pub struct Schedule {
    stages: Vec<StageData>,
    /// Stage order used for lowering: producers before consumers.
    order: Vec<Stage>,
    by_tensor: HashMap<TensorId, Stage>,
    outputs: Vec<Tensor>,
    /// How many stages `create_schedule` made from the definition (`trace::StageRef::Definition`).
    pub(crate) definition_stages: usize,
    /// One entry per successful primitive call (`trace`).
    pub(crate) recorded: Vec<RecordedStep>,
    /// The operand plans of the tensorize requests proven on the schedule as it is.
    proofs: ProvenPlans,
}

/// The largest vector a `vectorize` may request.
pub const MAX_LANES: i64 = 256;

/// A schedule for computing `outputs` with every stage at the root, in default loop order.
pub fn create_schedule(outputs: &[&Tensor]) -> Schedule {
    let mut s = Schedule {
        stages: Vec::new(),
        order: Vec::new(),
        by_tensor: HashMap::default(),
        outputs: Vec::new(),
        definition_stages: 0,
        recorded: Vec::new(),
        proofs: ProvenPlans::default(),
    };
    for out in outputs {
        s.add_tree(out);
        s.outputs.push((*out).clone());
    }
    for out in outputs {
        let stage = s.by_tensor[&out.id()];
        s.stages[stage.0 as usize].is_output = true;
    }
    s.definition_stages = s.stages.len();
    s
}

impl Schedule {
    fn add_tree(&mut self, tensor: &Tensor) {
        if self.by_tensor.contains_key(&tensor.id()) {
            return;
        }
        for input in tensor.inputs() {
            self.add_tree(&input);
        }
        let (axes, body) = match tensor.op() {
            Operation::Placeholder => (Vec::new(), None),
            Operation::Compute { axes, body } => (axes.clone(), Some(body.clone())),
        };
        let stage = self.push_stage(tensor.clone(), axes, body);
        self.order.push(stage);
    }

    fn push_stage(&mut self, tensor: Tensor, axes: Vec<IterVar>, body: Option<Expr>) -> Stage {
        let reduce_axes = match body.as_ref().map(|b| b.kind()) {
            Some(ExprKind::Reduce(r)) => r.axes.clone(),
            _ => Vec::new(),
        };
        let leaves = axes.iter().chain(&reduce_axes).cloned().collect();
        let stage = Stage(self.stages.len() as u32);
        self.proofs.forget_all();
        self.by_tensor.insert(tensor.id(), stage);
        self.stages.push(StageData {
            tensor,
            axes,
            reduce_axes,
            body,
            relations: Vec::new(),
            leaves,
            for_kinds: HashMap::default(),
            attach: Attach::Root,
            is_output: false,
            tensorize: None,
        });
        stage
    }

    /// The stages in lowering order: every producer before its consumers.
    pub fn order(&self) -> &[Stage] {
        &self.order
    }

    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    pub fn stage_data(&self, stage: Stage) -> &StageData {
        &self.stages[stage.0 as usize]
    }

    /// The stage computing `tensor`.
    pub fn stage_of(&self, tensor: &Tensor) -> Result<Stage, ScheduleError> {
        self.by_tensor
            .get(&tensor.id())
            .copied()
            .ok_or_else(|| ScheduleError::UnknownTensor { tensor: tensor.name().to_string() })
    }

    /// The stage of `tensor`, which must be a compute, for primitive `primitive`.
    fn compute_stage(&self, primitive: &'static str, tensor: &Tensor) -> Result<Stage, ScheduleError> {
        let stage = self.stage_of(tensor)?;
        if self.stage_data(stage).is_placeholder() {
            return Err(ScheduleError::NotACompute { primitive, tensor: tensor.name().to_string() });
        }
        Ok(stage)
    }

    /// A stage to change: every proven plan is forgotten (`ProvenPlans`).
    fn data_mut(&mut self, stage: Stage) -> &mut StageData {
        self.proofs.forget_all();
        &mut self.stages[stage.0 as usize]
    }

    /// The operand plan of `stage`'s tensorize request as proven on the schedule as it is
    /// (`None`: not kept; lowering proves it again).
    pub(crate) fn proven_plan(&self, stage: Stage) -> Option<Rc<[PlannedOperand]>> {
        self.proofs.get(stage)
    }

    /// Forgets every proven plan, as any change would (tests compare lowering with and without).
    #[cfg(test)]
    pub(crate) fn forget_proven_plans(&mut self) {
        self.proofs.forget_all();
    }

    fn leaf_position(&self, primitive: &'static str, stage: Stage, axis: &IterVar) -> Result<usize, ScheduleError> {
        let data = self.stage_data(stage);
        data.leaves.iter().position(|l| l == axis).ok_or_else(|| ScheduleError::UnknownAxis {
            primitive,
            stage: data.name().to_string(),
            axis: axis.name().to_string(),
            leaves: data.leaf_names(),
        })
    }

    /// Stages whose bodies read `stage`'s tensor.
    pub fn consumers(&self, stage: Stage) -> Vec<Stage> {
        let id = self.stage_data(stage).tensor.id();
        self.order.iter().copied().filter(|&s| self.stage_data(s).inputs().iter().any(|t| t.id() == id)).collect()
    }

    /// True if `stage`'s root extents are inferred from a consumer at lowering, which makes the
    /// extents of axes derived from them unknown while scheduling.
    fn extents_inferred(&self, stage: Stage) -> bool {
        matches!(self.stage_data(stage).attach, Attach::At { .. })
    }

    /// Extents of every axis of the stage known while scheduling (all of them for root stages;
    /// for compute_at stages only those that do not depend on a data-parallel root extent).
    pub fn known_extents(&self, stage: Stage) -> HashMap<IterVar, i64> {
        let data = self.stage_data(stage);
        let mut known = HashMap::default();
        let inferred = self.extents_inferred(stage);
        for axis in &data.axes {
            if !inferred {
                known.insert(axis.clone(), axis.extent());
            }
        }
        for axis in &data.reduce_axes {
            known.insert(axis.clone(), axis.extent());
        }
        for rel in &data.relations {
            match rel {
                Relation::Split { parent, outer, inner, factor } => {
                    known.insert(inner.clone(), *factor);
                    if let Some(&e) = known.get(parent) {
                        known.insert(outer.clone(), ceil_div(e, *factor));
                    }
                }
                Relation::Fuse { outer, inner, fused } => {
                    if let (Some(&a), Some(&b)) = (known.get(outer), known.get(inner)) {
                        known.insert(fused.clone(), a * b);
                    }
                }
            }
        }
        known
    }

    fn check_not_attach_point(
        &self,
        primitive: &'static str,
        stage: Stage,
        axis: &IterVar,
    ) -> Result<(), ScheduleError> {
        for s in &self.order {
            if let Attach::At { stage: target, axis: at } = &self.stage_data(*s).attach
                && *target == stage
                && at == axis
            {
                return Err(ScheduleError::BadAttachment {
                    primitive,
                    stage: self.stage_data(stage).name().to_string(),
                    reason: format!(
                        "axis {} is where {} is computed (compute_at); transform the loop before compute_at",
                        axis.name(),
                        self.stage_data(*s).name()
                    ),
                });
            }
        }
        Ok(())
    }

    // ---- Loop transformations ----------------------------------------------------------------

    /// Splits `axis` into `outer` (extent `ceil(extent / factor)`) and `inner` (extent `factor`).
    pub fn split(&mut self, tensor: &Tensor, axis: &IterVar, factor: i64) -> Result<(IterVar, IterVar), ScheduleError> {
        let (outer, inner) = self.split_unrecorded(tensor, axis, factor)?;
        let step = Step::Split { stage: self.stage_ref(tensor), axis: self.loop_ref(tensor, axis), factor };
        self.record(step, vec![outer.clone(), inner.clone()], None);
        Ok((outer, inner))
    }

    /// `split` without a trace step, for primitives made of splits.
    fn split_unrecorded(
        &mut self,
        tensor: &Tensor,
        axis: &IterVar,
        factor: i64,
    ) -> Result<(IterVar, IterVar), ScheduleError> {
        self.keeping_tensorize_valid(|s| s.split_step(tensor, axis, factor))
    }

    fn split_step(
        &mut self,
        tensor: &Tensor,
        axis: &IterVar,
        factor: i64,
    ) -> Result<(IterVar, IterVar), ScheduleError> {
        let stage = self.compute_stage("split", tensor)?;
        let pos = self.leaf_position("split", stage, axis)?;
        if factor <= 0 {
            return Err(ScheduleError::BadSplitFactor {
                stage: tensor.name().to_string(),
                axis: axis.name().to_string(),
                found: factor,
            });
        }
        self.check_not_attach_point("split", stage, axis)?;
        let known = self.known_extents(stage).get(axis).copied();
        // A factor beyond a known extent splits off one outer iteration either way; capping it
        // keeps the inner loop from running (guarded) iterations past the extent.
        let factor = known.map_or(factor, |e| factor.min(e.max(1)));
        let outer =
            IterVar::new(format!("{}.outer", axis.name()), known.map_or(0, |e| ceil_div(e, factor)), axis.kind());
        let inner = IterVar::new(format!("{}.inner", axis.name()), factor, axis.kind());
        let data = self.data_mut(stage);
        data.relations.push(Relation::Split {
            parent: axis.clone(),
            outer: outer.clone(),
            inner: inner.clone(),
            factor,
        });
        data.leaves.splice(pos..=pos, [outer.clone(), inner.clone()]);
        let kind = data.for_kinds.remove(axis);
        if let Some(kind) = kind {
            data.for_kinds.insert(inner.clone(), kind);
        }
        Ok((outer, inner))
    }

    /// Splits `axis` into `nparts` outer iterations: `split` with factor `ceil(extent / nparts)`.
    pub fn split_nparts(
        &mut self,
        tensor: &Tensor,
        axis: &IterVar,
        nparts: i64,
    ) -> Result<(IterVar, IterVar), ScheduleError> {
        let stage = self.compute_stage("split", tensor)?;
        self.leaf_position("split", stage, axis)?;
        if nparts <= 0 {
            return Err(ScheduleError::BadSplitFactor {
                stage: tensor.name().to_string(),
                axis: axis.name().to_string(),
                found: nparts,
            });
        }
        let extent = self.known_extent("split", stage, axis)?;
        let (outer, inner) = self.split_unrecorded(tensor, axis, ceil_div(extent, nparts))?;
        let step = Step::SplitNparts { stage: self.stage_ref(tensor), axis: self.loop_ref(tensor, axis), nparts };
        self.record(step, vec![outer.clone(), inner.clone()], None);
        Ok((outer, inner))
    }

    fn known_extent(&self, primitive: &'static str, stage: Stage, axis: &IterVar) -> Result<i64, ScheduleError> {
        self.known_extents(stage).get(axis).copied().ok_or_else(|| ScheduleError::NonConstantExtent {
            primitive,
            stage: self.stage_data(stage).name().to_string(),
            axis: axis.name().to_string(),
        })
    }

    /// Splits `x` by `x_factor` and `y` by `y_factor` and orders the loops
    /// `x.outer, y.outer, x.inner, y.inner`. Returns them in that order. On an error the schedule
    /// is unchanged.
    pub fn tile(
        &mut self,
        tensor: &Tensor,
        x: &IterVar,
        y: &IterVar,
        x_factor: i64,
        y_factor: i64,
    ) -> Result<(IterVar, IterVar, IterVar, IterVar), ScheduleError> {
        let before = self.clone();
        let tiled = self.split_unrecorded(tensor, x, x_factor).and_then(|(xo, xi)| {
            let (yo, yi) = self.split_unrecorded(tensor, y, y_factor)?;
            self.reorder_unrecorded(tensor, &[&xo, &yo, &xi, &yi])?;
            Ok((xo, yo, xi, yi))
        });
        let Ok((xo, yo, xi, yi)) = tiled else {
            *self = before;
            return tiled;
        };
        let (x, y) = (self.loop_ref(tensor, x), self.loop_ref(tensor, y));
        self.record(
            Step::Tile { stage: self.stage_ref(tensor), x, y, x_factor, y_factor },
            vec![xo.clone(), yo.clone(), xi.clone(), yi.clone()],
            None,
        );
        Ok((xo, yo, xi, yi))
    }

    /// Fuses two adjacent loops, `outer` directly outside `inner`, into one.
    pub fn fuse(&mut self, tensor: &Tensor, outer: &IterVar, inner: &IterVar) -> Result<IterVar, ScheduleError> {
        let fused = self.keeping_tensorize_valid(|s| s.fuse_step(tensor, outer, inner))?;
        let (outer, inner) = (self.loop_ref(tensor, outer), self.loop_ref(tensor, inner));
        self.record(Step::Fuse { stage: self.stage_ref(tensor), outer, inner }, vec![fused.clone()], None);
        Ok(fused)
    }

    fn fuse_step(&mut self, tensor: &Tensor, outer: &IterVar, inner: &IterVar) -> Result<IterVar, ScheduleError> {
        let stage = self.compute_stage("fuse", tensor)?;
        let outer_pos = self.leaf_position("fuse", stage, outer)?;
        let inner_pos = self.leaf_position("fuse", stage, inner)?;
        let data = self.stage_data(stage);
        if inner_pos != outer_pos + 1 {
            return Err(ScheduleError::FuseNotAdjacent {
                stage: data.name().to_string(),
                outer: outer.name().to_string(),
                inner: inner.name().to_string(),
                outer_pos,
                inner_pos,
                leaves: data.leaf_names(),
            });
        }
        if outer.kind() != inner.kind() {
            let (reduce, data_par) = if outer.is_reduce() { (outer, inner) } else { (inner, outer) };
            return Err(ScheduleError::FuseMixedKinds {
                stage: data.name().to_string(),
                reduce: reduce.name().to_string(),
                data_par: data_par.name().to_string(),
            });
        }
        self.check_not_attach_point("fuse", stage, outer)?;
        self.check_not_attach_point("fuse", stage, inner)?;
        let known = self.known_extents(stage);
        let extent = match (known.get(outer), known.get(inner)) {
            (Some(a), Some(b)) => a * b,
            _ => 0,
        };
        let fused = IterVar::new(format!("{}.{}.fused", outer.name(), inner.name()), extent, outer.kind());
        let data = self.data_mut(stage);
        data.relations.push(Relation::Fuse { outer: outer.clone(), inner: inner.clone(), fused: fused.clone() });
        data.leaves.splice(outer_pos..=inner_pos, [fused.clone()]);
        data.for_kinds.remove(outer);
        data.for_kinds.remove(inner);
        Ok(fused)
    }

    /// Puts the given loops, in the given order, into the positions they occupy now.
    pub fn reorder(&mut self, tensor: &Tensor, order: &[&IterVar]) -> Result<(), ScheduleError> {
        self.reorder_unrecorded(tensor, order)?;
        let order = order.iter().map(|a| self.loop_ref(tensor, a)).collect();
        self.record(Step::Reorder { stage: self.stage_ref(tensor), order }, Vec::new(), None);
        Ok(())
    }

    /// `reorder` without a trace step, for `tile`.
    fn reorder_unrecorded(&mut self, tensor: &Tensor, order: &[&IterVar]) -> Result<(), ScheduleError> {
        self.keeping_tensorize_valid(|s| s.reorder_step(tensor, order))
    }

    fn reorder_step(&mut self, tensor: &Tensor, order: &[&IterVar]) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("reorder", tensor)?;
        let mut positions = Vec::with_capacity(order.len());
        let mut seen = HashSet::default();
        for axis in order {
            positions.push(self.leaf_position("reorder", stage, axis)?);
            if !seen.insert((*axis).clone()) {
                return Err(ScheduleError::DuplicateAxis {
                    stage: tensor.name().to_string(),
                    axis: axis.name().to_string(),
                });
            }
        }
        let mut slots = positions.clone();
        slots.sort_unstable();
        let data = self.data_mut(stage);
        for (slot, axis) in slots.into_iter().zip(order) {
            data.leaves[slot] = (*axis).clone();
        }
        Ok(())
    }

    /// Marks a loop to be vectorized: its iterations become the lanes of vector operations.
    /// The extent must be a compile-time constant of at most `MAX_LANES`.
    pub fn vectorize(&mut self, tensor: &Tensor, axis: &IterVar) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("vectorize", tensor)?;
        self.leaf_position("vectorize", stage, axis)?;
        let extent = self.known_extent("vectorize", stage, axis)?;
        if extent > MAX_LANES {
            return Err(ScheduleError::TooManyLanes {
                stage: tensor.name().to_string(),
                axis: axis.name().to_string(),
                found: extent,
                max: MAX_LANES,
            });
        }
        self.data_mut(stage).for_kinds.insert(axis.clone(), ForKind::Vectorized);
        self.record(
            Step::Vectorize { stage: self.stage_ref(tensor), axis: self.loop_ref(tensor, axis) },
            Vec::new(),
            None,
        );
        Ok(())
    }

    /// Marks a loop to be fully unrolled. The extent must be a compile-time constant.
    pub fn unroll(&mut self, tensor: &Tensor, axis: &IterVar) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("unroll", tensor)?;
        self.leaf_position("unroll", stage, axis)?;
        self.known_extent("unroll", stage, axis)?;
        self.data_mut(stage).for_kinds.insert(axis.clone(), ForKind::Unrolled);
        self.record(
            Step::Unroll { stage: self.stage_ref(tensor), axis: self.loop_ref(tensor, axis) },
            Vec::new(),
            None,
        );
        Ok(())
    }

    /// Marks a data-parallel loop to run its iterations on the thread pool.
    pub fn parallel(&mut self, tensor: &Tensor, axis: &IterVar) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("parallel", tensor)?;
        self.leaf_position("parallel", stage, axis)?;
        if axis.is_reduce() {
            return Err(ScheduleError::ParallelReduction {
                stage: tensor.name().to_string(),
                axis: axis.name().to_string(),
            });
        }
        self.data_mut(stage).for_kinds.insert(axis.clone(), ForKind::Parallel);
        self.record(
            Step::Parallel { stage: self.stage_ref(tensor), axis: self.loop_ref(tensor, axis) },
            Vec::new(),
            None,
        );
        Ok(())
    }

    // ---- Placement -----------------------------------------------------------------------------

    /// Computes `producer` inside loop `axis` of `consumer`, for just the region that one
    /// iteration of `axis` reads. `consumer` must read `producer` directly and be its only reader.
    pub fn compute_at(&mut self, producer: &Tensor, consumer: &Tensor, axis: &IterVar) -> Result<(), ScheduleError> {
        self.keeping_tensorize_valid(|s| s.compute_at_step(producer, consumer, axis))?;
        let step = Step::ComputeAt {
            stage: self.stage_ref(producer),
            consumer: self.stage_ref(consumer),
            axis: self.loop_ref(consumer, axis),
        };
        self.record(step, Vec::new(), None);
        Ok(())
    }

    fn compute_at_step(&mut self, producer: &Tensor, consumer: &Tensor, axis: &IterVar) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("compute_at", producer)?;
        let target = self.compute_stage("compute_at", consumer)?;
        stays_at_root_for_its_gathers("compute_at", producer)?;
        self.leaf_position("compute_at", target, axis)?;
        let consumers = self.consumers(stage);
        if !consumers.contains(&target) {
            let names: Vec<&str> = consumers.iter().map(|c| self.stage_data(*c).name()).collect();
            return Err(ScheduleError::NotAConsumer {
                stage: producer.name().to_string(),
                target: consumer.name().to_string(),
                consumers: if names.is_empty() { "none".to_string() } else { names.join(", ") },
            });
        }
        if let Some(other) = consumers.iter().find(|c| **c != target) {
            return Err(ScheduleError::MultipleConsumers {
                stage: producer.name().to_string(),
                target: consumer.name().to_string(),
                other: self.stage_data(*other).name().to_string(),
            });
        }
        self.check_attachable("compute_at", stage)?;
        if self.stage_data(target).attach == Attach::Inline {
            return Err(ScheduleError::BadAttachment {
                primitive: "compute_at",
                stage: producer.name().to_string(),
                reason: format!("{} is inlined and has no loops", consumer.name()),
            });
        }
        let previous =
            std::mem::replace(&mut self.data_mut(stage).attach, Attach::At { stage: target, axis: axis.clone() });
        // Vectorized or unrolled loops must keep a constant extent now that roots are inferred.
        let known = self.known_extents(stage);
        let data = self.stage_data(stage);
        let unknown = data
            .for_kinds
            .iter()
            .find(|(leaf, kind)| matches!(kind, ForKind::Vectorized | ForKind::Unrolled) && !known.contains_key(*leaf));
        if let Some((leaf, kind)) = unknown {
            let (leaf, primitive) =
                (leaf.name().to_string(), if *kind == ForKind::Vectorized { "vectorize" } else { "unroll" });
            self.data_mut(stage).attach = previous;
            return Err(ScheduleError::NonConstantExtent { primitive, stage: producer.name().to_string(), axis: leaf });
        }
        Ok(())
    }

    /// Substitutes `tensor`'s definition into its consumers; it gets no loops or storage.
    pub fn compute_inline(&mut self, tensor: &Tensor) -> Result<(), ScheduleError> {
        self.keeping_tensorize_valid(|s| s.compute_inline_step(tensor))?;
        self.record(Step::ComputeInline { stage: self.stage_ref(tensor) }, Vec::new(), None);
        Ok(())
    }

    fn compute_inline_step(&mut self, tensor: &Tensor) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("compute_inline", tensor)?;
        stays_at_root_for_its_gathers("compute_inline", tensor)?;
        if !self.stage_data(stage).reduce_axes.is_empty() {
            return Err(ScheduleError::BadAttachment {
                primitive: "compute_inline",
                stage: tensor.name().to_string(),
                reason: "a reduction cannot be inlined".to_string(),
            });
        }
        self.check_attachable("compute_inline", stage)?;
        if let Some(attached) = self
            .order
            .iter()
            .find(|s| matches!(&self.stage_data(**s).attach, Attach::At { stage: t, .. } if *t == stage))
        {
            return Err(ScheduleError::BadAttachment {
                primitive: "compute_inline",
                stage: tensor.name().to_string(),
                reason: format!("{} is computed inside its loops (compute_at)", self.stage_data(*attached).name()),
            });
        }
        self.data_mut(stage).attach = Attach::Inline;
        Ok(())
    }

    /// Computes `tensor` in its own loop nest at the top level (the default).
    pub fn compute_root(&mut self, tensor: &Tensor) -> Result<(), ScheduleError> {
        self.keeping_tensorize_valid(|s| s.compute_root_step(tensor))?;
        self.record(Step::ComputeRoot { stage: self.stage_ref(tensor) }, Vec::new(), None);
        Ok(())
    }

    fn compute_root_step(&mut self, tensor: &Tensor) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("compute_root", tensor)?;
        self.data_mut(stage).attach = Attach::Root;
        Ok(())
    }

    fn check_attachable(&self, primitive: &'static str, stage: Stage) -> Result<(), ScheduleError> {
        if self.stage_data(stage).is_output {
            return Err(ScheduleError::BadAttachment {
                primitive,
                stage: self.stage_data(stage).name().to_string(),
                reason: "an output is always computed at the root".to_string(),
            });
        }
        Ok(())
    }

    // ---- Tensorization --------------------------------------------------------------------------

    /// Replaces the loops of `tensor` from leaf `axis` inward by a call of `intrin`, after
    /// proving that they compute exactly what its declaration says (the rules are in
    /// `ir/src/tensorize.rs`): the loops map one to one onto the declaration's axes with equal
    /// kinds and extents, the bodies have the same structure, and every access is the
    /// declaration's access through a constant-stride view, with the strides the intrinsic's
    /// kind requires. Lowering emits the call with the original loops as its fallback (under
    /// `if <tail guards hold everywhere in the region> { call } else { loops }` when a split
    /// inside does not divide its extent, or the region of a stage computed at a loop may leave
    /// the tensor); a reduction's reset is an ordinary loop nest before the call, or the call's
    /// own (`StmtKind::Call::reset`) where the region holds the whole reduction. The first
    /// difference found is a `ScheduleError::TensorizeMismatch`.
    ///
    /// Tensorizing a stage again replaces its previous request.
    pub fn tensorize(&mut self, tensor: &Tensor, axis: &IterVar, intrin: &TensorIntrin) -> Result<(), ScheduleError> {
        let stage = self.compute_stage("tensorize", tensor)?;
        self.leaf_position("tensorize", stage, axis)?;
        // Only this stage's plan depends on its request: the others' stay proven.
        self.proofs.forget(stage);
        let previous = self.stages[stage.0 as usize].tensorize.replace((axis.clone(), intrin.clone()));
        let checked = self.check_tensorized(&[stage]);
        if checked.is_err() {
            self.proofs.forget(stage);
            self.stages[stage.0 as usize].tensorize = previous;
            return checked;
        }
        let step = Step::Tensorize {
            stage: self.stage_ref(tensor),
            axis: self.loop_ref(tensor, axis),
            intrin: IntrinRef::of(intrin),
        };
        self.record(step, Vec::new(), None);
        Ok(())
    }

    /// Re-proves the tensorize requests of `stages` (those that have one) on the current
    /// schedule, the first failure first.
    fn check_tensorized(&self, stages: &[Stage]) -> Result<(), ScheduleError> {
        if stages.iter().all(|&s| self.stage_data(s).tensorize.is_none()) {
            return Ok(());
        }
        let bodies = crate::lower::inline_stages::inline_stages(self);
        let regions = crate::lower::infer_bounds::infer_bounds(self, &bodies);
        stages.iter().try_for_each(|&stage| self.check_tensorized_with(stage, &bodies, &regions))
    }

    fn check_tensorized_with(
        &self,
        stage: Stage,
        bodies: &HashMap<Stage, Expr>,
        regions: &HashMap<Stage, crate::lower::infer_bounds::Region>,
    ) -> Result<(), ScheduleError> {
        let data = self.stage_data(stage);
        let Some((axis, intrin)) = &data.tensorize else { return Ok(()) };
        self.leaf_position("tensorize", stage, axis)?;
        let error = |m: crate::tensorize::Mismatch| {
            ScheduleError::TensorizeMismatch(Box::new(TensorizeMismatch {
                stage: data.name().to_string(),
                axis: axis.name().to_string(),
                intrin: intrin.name.clone(),
                part: m.part,
                what: m.what,
                expected: m.expected,
                found: m.found,
            }))
        };
        let Some(body) = bodies.get(&stage) else {
            let m = crate::tensorize::Mismatch {
                part: MismatchPart::Placement,
                what: format!("stage {}", data.name()),
                expected: "computed at the root or at a loop".to_string(),
                found: "compute_inline".to_string(),
            };
            return Err(error(m));
        };
        let planned = crate::tensorize::plan(self, regions, stage, axis, intrin, body).map_err(error)?;
        self.proofs.keep(stage, planned);
        Ok(())
    }

    /// Runs a primitive; if any stage is tensorized and the result breaks its proof, restores
    /// the schedule and returns the mismatch.
    fn keeping_tensorize_valid<T>(
        &mut self,
        primitive: impl FnOnce(&mut Schedule) -> Result<T, ScheduleError>,
    ) -> Result<T, ScheduleError> {
        if self.stages.iter().all(|s| s.tensorize.is_none()) {
            return primitive(self);
        }
        let before = self.clone();
        let result = primitive(self).and_then(|value| {
            self.check_tensorized(&self.order)?;
            Ok(value)
        });
        if result.is_err() {
            *self = before;
        }
        result
    }

    // ---- Caches --------------------------------------------------------------------------------

    /// Adds a stage that copies `tensor` into a new tensor `<name>.local`, and makes `readers`
    /// read the copy. Returns the copy, which can then be placed with `compute_at`.
    pub fn cache_read(&mut self, tensor: &Tensor, readers: &[&Tensor]) -> Result<Tensor, ScheduleError> {
        let cache = self.keeping_tensorize_valid(|s| s.cache_read_step(tensor, readers))?;
        let readers = readers.iter().map(|r| self.stage_ref(r)).collect();
        self.record(Step::CacheRead { stage: self.stage_ref(tensor), readers }, Vec::new(), Some(&cache));
        Ok(cache)
    }

    fn cache_read_step(&mut self, tensor: &Tensor, readers: &[&Tensor]) -> Result<Tensor, ScheduleError> {
        let source = self.stage_of(tensor)?;
        // The copy runs at the root, where a stage computed inside another's loops does not exist.
        if let Attach::At { stage: target, .. } = &self.stage_data(source).attach {
            return Err(ScheduleError::BadAttachment {
                primitive: "cache_read",
                stage: tensor.name().to_string(),
                reason: format!(
                    "it is computed inside the loops of {} (compute_at); cache it before compute_at or compute_root it",
                    self.stage_data(*target).name()
                ),
            });
        }
        let mut reader_stages = Vec::new();
        for reader in readers {
            let stage = self.compute_stage("cache_read", reader)?;
            if !self.stage_data(stage).inputs().iter().any(|t| t == tensor) {
                return Err(ScheduleError::NotAReader {
                    tensor: tensor.name().to_string(),
                    reader: reader.name().to_string(),
                });
            }
            reader_stages.push(stage);
        }
        let cache = copy_of(tensor, &format!("{}.local", tensor.name()));
        let cache_stage = self.push_stage(cache.clone(), cache.axes().to_vec(), cache.body().cloned());
        let at = self.order.iter().position(|s| *s == source).expect("source stage is ordered") + 1;
        self.order.insert(at, cache_stage);
        for stage in reader_stages {
            let data = self.data_mut(stage);
            data.body = data.body.as_ref().map(|b| replace_reads(b, tensor, &cache));
        }
        Ok(cache)
    }

    /// Computes `tensor` into a new tensor `<name>.local` and makes `tensor`'s own stage a copy
    /// of it. Returns the new tensor, which carries the original definition (and its reduction
    /// axes, with fresh identities) and can be scheduled like any compute.
    pub fn cache_write(&mut self, tensor: &Tensor) -> Result<Tensor, ScheduleError> {
        let cache = self.keeping_tensorize_valid(|s| s.cache_write_step(tensor))?;
        self.record(Step::CacheWrite { stage: self.stage_ref(tensor) }, Vec::new(), Some(&cache));
        Ok(cache)
    }

    fn cache_write_step(&mut self, tensor: &Tensor) -> Result<Tensor, ScheduleError> {
        let stage = self.compute_stage("cache_write", tensor)?;
        let data = self.stage_data(stage);
        if !data.relations.is_empty() || data.attach != Attach::Root {
            return Err(ScheduleError::BadAttachment {
                primitive: "cache_write",
                stage: tensor.name().to_string(),
                reason: "cache_write must come before any other primitive on the stage".to_string(),
            });
        }
        // The definition moves to the new stage, away from loops another stage is computed in.
        if let Some(attached) = self
            .order
            .iter()
            .find(|s| matches!(&self.stage_data(**s).attach, Attach::At { stage: t, .. } if *t == stage))
        {
            return Err(ScheduleError::BadAttachment {
                primitive: "cache_write",
                stage: tensor.name().to_string(),
                reason: format!(
                    "{} is computed inside its loops (compute_at); cache_write before compute_at",
                    self.stage_data(*attached).name()
                ),
            });
        }
        let body = data.body.clone().expect("compute stage has a body");
        let old_axes = data.axes.clone();
        let name = format!("{}.local", tensor.name());
        let cache = compute_vec(
            tensor.shape().to_vec(),
            |idx| {
                let map = old_axes.iter().map(|a| a.var().clone()).zip(idx.iter().cloned()).collect();
                fresh_reduce_axes(&substitute_map(&body, &map))
            },
            &name,
        )
        .expect("a copy of a well-typed body is well typed");
        let cache_stage = self.push_stage(cache.clone(), cache.axes().to_vec(), cache.body().cloned());
        let at = self.order.iter().position(|s| *s == stage).expect("stage is ordered");
        self.order.insert(at, cache_stage);
        let data = self.data_mut(stage);
        let copy = cache.at_vec(data.axes.iter().map(|a| a.to_expr()).collect());
        data.body = Some(copy);
        data.reduce_axes.clear();
        data.leaves = data.axes.clone();
        data.for_kinds.clear();
        Ok(cache)
    }
}

/// A compute tensor equal to `tensor` element for element.
fn copy_of(tensor: &Tensor, name: &str) -> Tensor {
    compute_vec(tensor.shape().to_vec(), |idx| tensor.at_vec(idx.to_vec()), name)
        .expect("an element-wise copy is well typed")
}

/// `expr` with the reduction axes of its top-level `Reduce` replaced by new axes, so two stages
/// never share an axis identity.
fn fresh_reduce_axes(expr: &Expr) -> Expr {
    let ExprKind::Reduce(r) = expr.kind() else { return expr.clone() };
    let fresh: Vec<IterVar> = r.axes.iter().map(|a| IterVar::new(a.name(), a.extent(), IterKind::Reduce)).collect();
    let map = r.axes.iter().map(|a| a.var().clone()).zip(fresh.iter().map(|f| f.to_expr())).collect();
    let source = substitute_map(&r.source, &map);
    let axes: Vec<&IterVar> = fresh.iter().collect();
    r.reducer.reduce(expr.dtype(), &axes, source)
}

struct ReplaceReads<'a> {
    from: &'a Tensor,
    to: &'a Tensor,
}

impl Mutator for ReplaceReads<'_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let expr = walk_expr(self, expr);
        match expr.kind() {
            ExprKind::TensorRead(t, idx) if t == self.from => self.to.at_vec(idx.clone()),
            _ => expr,
        }
    }
}

/// `expr` with every read of `from` turned into the same read of `to`.
fn replace_reads(expr: &Expr, from: &Tensor, to: &Tensor) -> Expr {
    ReplaceReads { from, to }.mutate_expr(expr)
}

/// A stage with a gather checked at run time (`te::compute`) is computed over its whole domain,
/// as the definition is: computed at or inlined into a consumer, only the points the consumer
/// reads would be checked, and a gather out of bounds elsewhere would go unreported.
fn stays_at_root_for_its_gathers(primitive: &'static str, tensor: &Tensor) -> Result<(), ScheduleError> {
    match crate::te::unproven_gather(tensor) {
        None => Ok(()),
        Some((input, index)) => Err(ScheduleError::BadAttachment {
            primitive,
            stage: tensor.name().to_string(),
            reason: format!(
                "it reads {input} at `{index}`, an index computed from data that is not proven inside {input}; \
                 such a read is checked at run time over the whole stage, so the stage stays at the root \
                 (clamp or guard the index, or declare the index tensor with placeholder_in_range)"
            ),
        }),
    }
}

pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    // Not `(a + b - 1) / b`, which overflows for a factor near i64::MAX.
    if a <= 0 { a / b } else { (a - 1) / b + 1 }
}
