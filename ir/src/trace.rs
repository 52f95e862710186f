//! Schedules as data: the trace of a schedule's primitive calls, serializable and replayable.
//!
//! Every successful primitive call on a `Schedule` records one `Step` with its decisions (split
//! factors, loop orders, which loop is vectorized, where a stage is computed, the intrinsic a
//! nest is tensorized with); a rejected call records nothing. `Schedule::trace` returns the
//! steps, and `Trace::replay` makes the same calls on a fresh definition of the workload.
//!
//! Steps never name a tensor, an axis or an id: they refer to stages and loops by position, so a
//! trace replays onto a definition rebuilt with fresh ids and other names.
//! * A stage is `StageRef::Definition(i)`, the `i`-th stage `create_schedule` made (a
//!   deterministic walk of the definition: each output after the tensors it reads, in the order
//!   it reads them), or `StageRef::CreatedBy(n)`, the stage step `n` created (`cache_read`,
//!   `cache_write`).
//! * A loop is `LoopRef::Root(i)`, root axis `i` of the stage the argument belongs to (its data
//!   axes, then its reduction axes, in declaration order), or `LoopRef::Output { step, index }`,
//!   output `index` of step `step` (split and split_nparts: outer, inner; tile: x outer,
//!   y outer, x inner, y inner; fuse: the fused loop).
//! * A tensor intrinsic is an `IntrinRef`: its name, its kind and the structural key of its
//!   declaration (`workload::intrin_key`). Replay asks a resolver for the declaration and checks
//!   that the one it gets has the same name, kind and key, so a trace can never tensorize with
//!   an intrinsic whose semantics differ from the one it was recorded with.
//!
//! Replaying a trace makes exactly the calls it records, so it yields the same lowered IR as the
//! schedule it came from; a trace that does not fit the definition is a `TraceError` naming the
//! step, its primitive and why.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::error::ScheduleError;
use crate::intrin::{IntrinKind, TensorIntrin};
use crate::schedule::{Schedule, Stage, create_schedule};
use crate::te::{IterVar, Tensor};

/// A stage of the schedule a trace is replayed into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageRef {
    /// Stage `i` of `create_schedule` on the definition (placeholders included).
    Definition(usize),
    /// The stage created by step `n` of the trace (`cache_read`, `cache_write`).
    CreatedBy(usize),
}

/// A loop of a stage, relative to the stage the step's argument belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopRef {
    /// Root axis `i`: the data-parallel axes, then the reduction axes, in declaration order.
    Root(usize),
    /// Output `index` of step `step` (see the module doc for each primitive's outputs).
    Output { step: usize, index: usize },
}

/// What identifies a tensor intrinsic: the resolver given to `Trace::replay` rebuilds the
/// declaration from it, and replay checks the rebuilt one against all three fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntrinRef {
    pub name: String,
    pub kind: IntrinKind,
    /// `workload::intrin_key` of the declaration: its inputs in call order and its compute,
    /// names and ids aside.
    pub declaration: String,
}

impl IntrinRef {
    pub fn of(intrin: &TensorIntrin) -> IntrinRef {
        IntrinRef { name: intrin.name.clone(), kind: intrin.kind, declaration: crate::workload::intrin_key(intrin) }
    }

    /// True if `intrin` is the intrinsic this refers to.
    pub fn matches(&self, intrin: &TensorIntrin) -> bool {
        *self == IntrinRef::of(intrin)
    }
}

/// A resolver over a fixed set of declarations: the one `IntrinRef::matches`, if any.
pub fn resolve_among(intrins: &[TensorIntrin]) -> impl Fn(&IntrinRef) -> Option<TensorIntrin> + '_ {
    move |r| intrins.iter().find(|i| r.matches(i)).cloned()
}

/// One primitive call with its decisions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "primitive", rename_all = "snake_case")]
pub enum Step {
    /// Outputs: outer, inner.
    Split {
        stage: StageRef,
        axis: LoopRef,
        factor: i64,
    },
    /// Outputs: outer, inner.
    SplitNparts {
        stage: StageRef,
        axis: LoopRef,
        nparts: i64,
    },
    /// Outputs: x outer, y outer, x inner, y inner.
    Tile {
        stage: StageRef,
        x: LoopRef,
        y: LoopRef,
        x_factor: i64,
        y_factor: i64,
    },
    /// Output: the fused loop.
    Fuse {
        stage: StageRef,
        outer: LoopRef,
        inner: LoopRef,
    },
    Reorder {
        stage: StageRef,
        order: Vec<LoopRef>,
    },
    Vectorize {
        stage: StageRef,
        axis: LoopRef,
    },
    Unroll {
        stage: StageRef,
        axis: LoopRef,
    },
    Parallel {
        stage: StageRef,
        axis: LoopRef,
    },
    /// `axis` is a loop of `consumer`.
    ComputeAt {
        stage: StageRef,
        consumer: StageRef,
        axis: LoopRef,
    },
    ComputeInline {
        stage: StageRef,
    },
    ComputeRoot {
        stage: StageRef,
    },
    /// Creates a stage (the copy).
    CacheRead {
        stage: StageRef,
        readers: Vec<StageRef>,
    },
    /// Creates a stage (the new tensor computing the original definition).
    CacheWrite {
        stage: StageRef,
    },
    Tensorize {
        stage: StageRef,
        axis: LoopRef,
        intrin: IntrinRef,
    },
}

impl Step {
    /// The name of the schedule primitive the step calls.
    pub fn primitive(&self) -> &'static str {
        match self {
            Step::Split { .. } => "split",
            Step::SplitNparts { .. } => "split_nparts",
            Step::Tile { .. } => "tile",
            Step::Fuse { .. } => "fuse",
            Step::Reorder { .. } => "reorder",
            Step::Vectorize { .. } => "vectorize",
            Step::Unroll { .. } => "unroll",
            Step::Parallel { .. } => "parallel",
            Step::ComputeAt { .. } => "compute_at",
            Step::ComputeInline { .. } => "compute_inline",
            Step::ComputeRoot { .. } => "compute_root",
            Step::CacheRead { .. } => "cache_read",
            Step::CacheWrite { .. } => "cache_write",
            Step::Tensorize { .. } => "tensorize",
        }
    }
}

/// The primitive calls that made a schedule, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    pub steps: Vec<Step>,
}

/// A step a schedule recorded, with what replay needs to resolve later references to it.
#[derive(Clone, Debug)]
pub(crate) struct RecordedStep {
    pub step: Step,
    /// The loops the call returned, in `LoopRef::Output` order.
    pub outputs: Vec<IterVar>,
    /// The stage the call created.
    pub created: Option<Stage>,
}

/// A trace that does not fit the definition it is replayed onto.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("trace step {step} ({primitive}): {reason}")]
pub struct TraceError {
    /// The index of the step in `Trace::steps`.
    pub step: usize,
    pub primitive: &'static str,
    pub reason: TraceErrorKind,
}

/// Why a step does not fit.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TraceErrorKind {
    #[error("the definition has no stage {index} (stage count: {stages})")]
    StageOutOfRange { index: usize, stages: usize },
    #[error("the stage created by step {step} does not exist ({why})")]
    NoCreatedStage { step: usize, why: String },
    #[error("stage {stage} has no root axis {index} (root axis count: {axes})")]
    RootAxisOutOfRange { stage: String, index: usize, axes: usize },
    #[error("output {index} of step {step} does not exist ({why})")]
    NoSuchOutput { step: usize, index: usize, why: String },
    #[error("the resolver knows no tensor intrinsic {name}")]
    UnknownIntrinsic { name: String },
    #[error(
        "the resolver gave a different declaration for tensor intrinsic {name}: expected {expected:?}, found {found:?}"
    )]
    IntrinsicMismatch { name: String, expected: Box<IntrinRef>, found: Box<IntrinRef> },
    /// The primitive rejected the call (boxed: it is the largest of these errors).
    #[error(transparent)]
    Primitive(Box<ScheduleError>),
}

impl Schedule {
    /// The trace of every primitive call this schedule accepted, in order.
    pub fn trace(&self) -> Trace {
        Trace { steps: self.recorded.iter().map(|r| r.step.clone()).collect() }
    }

    /// Records a successful call on the stage of `tensor`.
    pub(crate) fn record(&mut self, step: Step, outputs: Vec<IterVar>, created: Option<&Tensor>) {
        let created = created.map(|t| self.stage_of(t).expect("a created tensor has a stage"));
        self.recorded.push(RecordedStep { step, outputs, created });
    }

    /// The reference to the stage of `tensor`, which a primitive just accepted.
    pub(crate) fn stage_ref(&self, tensor: &Tensor) -> StageRef {
        let stage = self.stage_of(tensor).expect("a primitive accepted the tensor");
        match self.recorded.iter().position(|r| r.created == Some(stage)) {
            Some(step) => StageRef::CreatedBy(step),
            None => StageRef::Definition(stage.0 as usize),
        }
    }

    /// The reference to `axis`, a loop of the stage of `tensor` that a primitive just accepted.
    pub(crate) fn loop_ref(&self, tensor: &Tensor, axis: &IterVar) -> LoopRef {
        let data = self.stage_data(self.stage_of(tensor).expect("a primitive accepted the tensor"));
        if let Some(i) = data.axes.iter().chain(&data.reduce_axes).position(|a| a == axis) {
            return LoopRef::Root(i);
        }
        self.recorded
            .iter()
            .enumerate()
            .find_map(|(step, r)| r.outputs.iter().position(|o| o == axis).map(|index| LoopRef::Output { step, index }))
            .expect("every loop is a root axis or the output of a recorded step")
    }

    fn resolve_stage(&self, stage: StageRef) -> Result<Tensor, TraceErrorKind> {
        let found = match stage {
            StageRef::Definition(index) if index < self.definition_stages => Stage(index as u32),
            StageRef::Definition(index) => {
                return Err(TraceErrorKind::StageOutOfRange { index, stages: self.definition_stages });
            }
            StageRef::CreatedBy(step) => match self.recorded.get(step) {
                Some(RecordedStep { created: Some(stage), .. }) => *stage,
                Some(r) => {
                    let why = format!("that step is a {}, which creates none", r.step.primitive());
                    return Err(TraceErrorKind::NoCreatedStage { step, why });
                }
                None => return Err(TraceErrorKind::NoCreatedStage { step, why: NOT_EARLIER.to_string() }),
            },
        };
        Ok(self.stage_data(found).tensor.clone())
    }

    fn resolve_loop(&self, tensor: &Tensor, axis: LoopRef) -> Result<IterVar, TraceErrorKind> {
        match axis {
            LoopRef::Root(index) => {
                let data = self.stage_data(self.stage_of(tensor).expect("resolved stages are in the schedule"));
                let roots: Vec<&IterVar> = data.axes.iter().chain(&data.reduce_axes).collect();
                roots.get(index).map(|a| (*a).clone()).ok_or_else(|| TraceErrorKind::RootAxisOutOfRange {
                    stage: tensor.name().to_string(),
                    index,
                    axes: roots.len(),
                })
            }
            LoopRef::Output { step, index } => {
                let Some(r) = self.recorded.get(step) else {
                    return Err(TraceErrorKind::NoSuchOutput { step, index, why: NOT_EARLIER.to_string() });
                };
                r.outputs.get(index).cloned().ok_or_else(|| TraceErrorKind::NoSuchOutput {
                    step,
                    index,
                    why: format!("that step is a {} with {} outputs", r.step.primitive(), r.outputs.len()),
                })
            }
        }
    }

    fn resolve_loops(&self, tensor: &Tensor, axes: &[LoopRef]) -> Result<Vec<IterVar>, TraceErrorKind> {
        axes.iter().map(|a| self.resolve_loop(tensor, *a)).collect()
    }

    /// Makes the call `step` records.
    fn apply(
        &mut self,
        step: &Step,
        resolver: &dyn Fn(&IntrinRef) -> Option<TensorIntrin>,
    ) -> Result<(), TraceErrorKind> {
        let rejected = |e: ScheduleError| TraceErrorKind::Primitive(Box::new(e));
        match step {
            Step::Split { stage, axis, factor } => {
                let t = self.resolve_stage(*stage)?;
                let axis = self.resolve_loop(&t, *axis)?;
                self.split(&t, &axis, *factor).map_err(rejected)?;
            }
            Step::SplitNparts { stage, axis, nparts } => {
                let t = self.resolve_stage(*stage)?;
                let axis = self.resolve_loop(&t, *axis)?;
                self.split_nparts(&t, &axis, *nparts).map_err(rejected)?;
            }
            Step::Tile { stage, x, y, x_factor, y_factor } => {
                let t = self.resolve_stage(*stage)?;
                let (x, y) = (self.resolve_loop(&t, *x)?, self.resolve_loop(&t, *y)?);
                self.tile(&t, &x, &y, *x_factor, *y_factor).map_err(rejected)?;
            }
            Step::Fuse { stage, outer, inner } => {
                let t = self.resolve_stage(*stage)?;
                let (outer, inner) = (self.resolve_loop(&t, *outer)?, self.resolve_loop(&t, *inner)?);
                self.fuse(&t, &outer, &inner).map_err(rejected)?;
            }
            Step::Reorder { stage, order } => {
                let t = self.resolve_stage(*stage)?;
                let order = self.resolve_loops(&t, order)?;
                self.reorder(&t, &order.iter().collect::<Vec<_>>()).map_err(rejected)?;
            }
            Step::Vectorize { stage, axis } => {
                let t = self.resolve_stage(*stage)?;
                let axis = self.resolve_loop(&t, *axis)?;
                self.vectorize(&t, &axis).map_err(rejected)?;
            }
            Step::Unroll { stage, axis } => {
                let t = self.resolve_stage(*stage)?;
                let axis = self.resolve_loop(&t, *axis)?;
                self.unroll(&t, &axis).map_err(rejected)?;
            }
            Step::Parallel { stage, axis } => {
                let t = self.resolve_stage(*stage)?;
                let axis = self.resolve_loop(&t, *axis)?;
                self.parallel(&t, &axis).map_err(rejected)?;
            }
            Step::ComputeAt { stage, consumer, axis } => {
                let (t, c) = (self.resolve_stage(*stage)?, self.resolve_stage(*consumer)?);
                let axis = self.resolve_loop(&c, *axis)?;
                self.compute_at(&t, &c, &axis).map_err(rejected)?;
            }
            Step::ComputeInline { stage } => {
                let t = self.resolve_stage(*stage)?;
                self.compute_inline(&t).map_err(rejected)?;
            }
            Step::ComputeRoot { stage } => {
                let t = self.resolve_stage(*stage)?;
                self.compute_root(&t).map_err(rejected)?;
            }
            Step::CacheRead { stage, readers } => {
                let t = self.resolve_stage(*stage)?;
                let readers = readers.iter().map(|r| self.resolve_stage(*r)).collect::<Result<Vec<_>, _>>()?;
                self.cache_read(&t, &readers.iter().collect::<Vec<_>>()).map_err(rejected)?;
            }
            Step::CacheWrite { stage } => {
                let t = self.resolve_stage(*stage)?;
                self.cache_write(&t).map_err(rejected)?;
            }
            Step::Tensorize { stage, axis, intrin } => {
                let t = self.resolve_stage(*stage)?;
                let axis = self.resolve_loop(&t, *axis)?;
                let Some(found) = resolver(intrin) else {
                    return Err(TraceErrorKind::UnknownIntrinsic { name: intrin.name.clone() });
                };
                let found_ref = IntrinRef::of(&found);
                if found_ref != *intrin {
                    return Err(TraceErrorKind::IntrinsicMismatch {
                        name: intrin.name.clone(),
                        expected: Box::new(intrin.clone()),
                        found: Box::new(found_ref),
                    });
                }
                self.tensorize(&t, &axis, &found).map_err(rejected)?;
            }
        }
        Ok(())
    }
}

/// Why a reference to a step that has not run yet fails: steps may only refer to earlier ones.
const NOT_EARLIER: &str = "a step may only refer to an earlier step";

impl Trace {
    /// Makes the trace's calls on a new schedule of `outputs`, resolving tensor intrinsics with
    /// `resolver`. The first step that does not fit is the error; the result's own trace equals
    /// this one.
    pub fn replay(
        &self,
        outputs: &[&Tensor],
        resolver: &dyn Fn(&IntrinRef) -> Option<TensorIntrin>,
    ) -> Result<Schedule, TraceError> {
        let mut s = create_schedule(outputs);
        for (index, step) in self.steps.iter().enumerate() {
            s.apply(step, resolver).map_err(|reason| TraceError {
                step: index,
                primitive: step.primitive(),
                reason,
            })?;
        }
        Ok(s)
    }
}
