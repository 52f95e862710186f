//! Sketch generation: the rules applied to a definition's stages, each sketch a plan of
//! schedule primitive calls whose open decisions a point fills in.

use ir::Tensor;
use ir::schedule::create_schedule;

use super::analysis::{StageInfo, StageKind, stages};
use super::annotate::{lanes, parallelize, thread_choices, vectorize_injective};
use super::fold_stage::{row_fold, rows_choices, tensorize_fold_rows};
use super::inline::{apply_inline, inline_candidates};
use super::map_stage::tensorize_rows;
use super::tensorize::Tensorized;
use super::tensorize::{
    Contraction, Direct, GemmForm, GemmPoint, TensorizeError, direct, flat_mr_choices, flat_rows, form_for, mr_choices,
    nr_choices, recognize,
};
use super::tiling::{TilePlan, plan as tile_plan};
use super::{AutoError, Decision, PointDefinition, Prepare, RuleNote, Scheduled, Sketch, SpaceOptions};

/// The decisions of a sketch being built.
#[derive(Default)]
pub struct DecisionSet {
    pub decisions: Vec<Decision>,
}

impl DecisionSet {
    /// Declares a decision; returns its index in the point's values.
    pub fn add(&mut self, name: String, choices: Vec<i64>) -> usize {
        self.decisions.push(Decision { name, choices });
        self.decisions.len() - 1
    }
}

/// A point's values, by decision index.
pub struct Values<'a>(pub &'a [i64]);

impl Values<'_> {
    pub fn get(&self, i: usize) -> i64 {
        self.0[i]
    }
}

/// The Map declaration of one row of the element-wise stage `t` where the target has Map
/// kernels (vectors of 32 bytes or more) and a row fills a vector (`map_stage`).
fn map_rows(t: &Tensor, options: &SpaceOptions) -> Option<ir::intrin::TensorIntrin> {
    if options.vector_bytes < 32 {
        return None;
    }
    super::map_stage::row_map(t, options.vector_bytes / 4)
}

/// The `RowFold` declaration of `rows` rows of the row-fold stage `t` where the target has Map
/// kernels (`fold_stage`).
fn fold_rows(t: &Tensor, rows: i64, options: &SpaceOptions) -> Option<ir::intrin::TensorIntrin> {
    if options.vector_bytes < 32 {
        return None;
    }
    row_fold(t, rows)
}

/// The rule-based CPU sketch: inlining, tiling of every reduction (a row fold's lane stage
/// tensorized as `RowFold` calls instead), vectorized element-wise stages, parallel outer
/// loops.
pub struct RulesPlan {
    inline: Vec<Tensor>,
    /// Row-fold stages and the decision of their rows per call.
    folds: Vec<(Tensor, usize)>,
    /// Producers computed at an outer tile of their only consumer (the `rules.at` variant).
    at: Vec<(Tensor, Tensor)>,
    tiles: Vec<TilePlan>,
    injective: Vec<Tensor>,
    threads: usize,
}

/// The auto-tensorized sketch of an int8 contraction.
pub struct TensorizePlan {
    contraction: Contraction,
    form: GemmForm,
    inline: Vec<Tensor>,
    mr: usize,
    nr: usize,
    cols_outer: usize,
    threads: usize,
    /// `B` is a constant placeholder: packed by a prepare function, not in the call.
    prepare_b: bool,
    /// The `.direct` sketch: `A` read in its direct form (`tensorize::Direct`).
    direct: Option<Direct>,
    /// The `.epi` sketch: the epilogue tensorized per output row, fused into the GEMM's tile
    /// calls by lowering (`super::epilogue`).
    epilogue_at_tile: bool,
}

/// How a sketch is applied.
pub enum Plan {
    Generic,
    Rules(RulesPlan),
    Tensorize(Box<TensorizePlan>),
}

/// The sketches (after the generic one, which the caller adds) and the rules' notes.
pub fn generate(
    outputs: &[Tensor],
    constants: &[Tensor],
    options: &SpaceOptions,
) -> (Vec<(Sketch, Plan)>, Vec<RuleNote>) {
    let mut notes = Vec::new();
    let infos = stages(outputs);
    let inline = inline_candidates(&infos, &mut notes);
    let mut out = Vec::new();
    out.push(rules_sketch(&infos, &inline, &[], false, options, &mut notes));
    // The variant running the lane stages of row folds as `RowFold` calls.
    let folds = infos.iter().filter(|st| matches!(st.kind, StageKind::Reduction { .. }));
    let folds: Vec<String> =
        folds.filter(|st| fold_rows(&st.tensor, 1, options).is_some()).map(|st| st.tensor.name().to_string()).collect();
    if folds.is_empty() {
        notes.push(RuleNote {
            rule: "row-fold",
            stage: "*".into(),
            outcome: Err(
                "no f32 sum or max of a row's lane chunks with a kernel form (or vectors under 32 bytes)".into()
            ),
        });
    } else {
        let (mut sketch, plan) = rules_sketch(&infos, &inline, &[], true, options, &mut notes);
        sketch.name = "rules.fold".into();
        out.push((sketch, plan));
    }
    // The variant computing single-consumer producers at their consumer's outer tile.
    let at: Vec<(Tensor, Tensor)> = inline
        .iter()
        .filter_map(|p| {
            let mut readers = infos.iter().filter(|c| c.tensor.inputs().iter().any(|t| t.id() == p.id()));
            match (readers.next(), readers.next()) {
                (Some(c), None) if !inline.iter().any(|t| t.id() == c.tensor.id()) => {
                    Some((p.clone(), c.tensor.clone()))
                }
                _ => None,
            }
        })
        .collect();
    if at.is_empty() {
        notes.push(RuleNote {
            rule: "compute-location",
            stage: "*".into(),
            outcome: Err("no inlined producer has a single consumer with loops".into()),
        });
    } else {
        let rest: Vec<Tensor> = inline.iter().filter(|t| !at.iter().any(|(p, _)| p.id() == t.id())).cloned().collect();
        for (p, c) in &at {
            notes.push(RuleNote {
                rule: "compute-location",
                stage: p.name().into(),
                outcome: Ok(format!("sketch rules.at: compute_at an outer tile of {}", c.name())),
            });
        }
        let mut scratch = Vec::new();
        let (mut sketch, plan) = rules_sketch(&infos, &rest, &at, false, options, &mut scratch);
        sketch.name = "rules.at".into();
        out.push((sketch, plan));
    }
    for st in infos.iter().filter(|s| matches!(s.kind, StageKind::Reduction { .. })) {
        match recognize(st, &infos) {
            Err(why) => {
                notes.push(RuleNote { rule: "auto-tensorize", stage: st.tensor.name().into(), outcome: Err(why) })
            }
            Ok(c) => {
                let (form, _) = form_for(&c, options.vnni);
                let rows = direct(&c, form);
                if let Some(sketch) = tensorize_sketch(st, c.clone(), &infos, constants, options, None, &mut notes) {
                    out.push(sketch);
                }
                match rows {
                    Ok(d) => {
                        let flat = flat_rows(&c, &d);
                        let (c2, d2) = (c.clone(), d.clone());
                        if let Some(sketch) = tensorize_sketch(st, c, &infos, constants, options, Some(d), &mut notes) {
                            out.push(sketch);
                        }
                        match flat {
                            Ok(f) => {
                                let d = Direct { flat: Some(f), ..d2 };
                                let s = tensorize_sketch(st, c2, &infos, constants, options, Some(d), &mut notes);
                                out.extend(s);
                            }
                            Err(why) => notes.push(RuleNote {
                                rule: "flat-rows",
                                stage: st.tensor.name().into(),
                                outcome: Err(why),
                            }),
                        }
                    }
                    Err(why) => notes.push(RuleNote {
                        rule: "direct-source",
                        stage: st.tensor.name().into(),
                        outcome: Err(why),
                    }),
                }
            }
        }
    }
    (out, notes)
}

/// The rules sketch; with `row_folds`, the lane stages of row folds as `RowFold` calls
/// (`fold_stage`) instead of tiled, and only their notes added.
fn rules_sketch(
    infos: &[StageInfo],
    inline: &[Tensor],
    at: &[(Tensor, Tensor)],
    row_folds: bool,
    options: &SpaceOptions,
    notes: &mut Vec<RuleNote>,
) -> (Sketch, Plan) {
    let mut own = Vec::new();
    let mut d = DecisionSet::default();
    let threads = d.add("threads".into(), thread_choices(options.max_threads));
    let (mut tiles, mut injective, mut folds) = (Vec::new(), Vec::new(), Vec::new());
    for st in infos {
        if inline.iter().chain(at.iter().map(|(p, _)| p)).any(|t| t.id() == st.tensor.id()) {
            continue;
        }
        let stage = st.tensor.name().to_string();
        let vector_tile = lanes(options.vector_bytes, st.tensor.dtype().bytes()) * 4;
        let fold = if row_folds { fold_rows(&st.tensor, 1, options) } else { None };
        match (&st.kind, fold) {
            (StageKind::Reduction { .. }, Some(decl)) => {
                let rows = d.add(format!("{stage}.fold_rows"), rows_choices(&st.tensor));
                let what = format!(
                    "RowFold calls of {{{}}} rows ({}): a vector kernel of the body, an accumulator per vector \
                     of lanes and row",
                    rows_choices(&st.tensor).iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
                    decl.name
                );
                own.push(RuleNote { rule: "row-fold", stage, outcome: Ok(format!("sketch rules.fold: {what}")) });
                folds.push((st.tensor.clone(), rows));
            }
            (StageKind::Reduction { ordered }, _) => {
                let ordered = *ordered;
                // The accumulator-tile variant moves the definition to a new stage, which
                // compute_at of a producer at this stage would not see: only without `at`.
                let plan = tile_plan(st, vector_tile, at.is_empty(), &mut d);
                let what = format!(
                    "S_outer R R_inner S_inner over {} spatial and {} reduction axes{}{}",
                    st.spatial.len(),
                    st.reduce.len(),
                    if ordered { "; the float fold keeps its order, only spatial loops vectorize" } else { "" },
                    if plan.cache.is_some() {
                        "; or S_outer S_inner over a .local tile computed R S_inner in registers"
                    } else {
                        ""
                    }
                );
                own.push(RuleNote { rule: "multi-level-tiling", stage: stage.clone(), outcome: Ok(what) });
                if st.spatial.iter().all(|a| a.extent() == 1) {
                    own.push(RuleNote {
                        rule: "parallel-vectorize",
                        stage,
                        outcome: Err("no spatial loop longer than 1".into()),
                    });
                }
                tiles.push(plan);
            }
            (StageKind::Injective, _) => {
                let outcome = match map_rows(&st.tensor, options) {
                    Some(decl) => format!("one Map call per row ({}): a vector kernel of the body", decl.name),
                    None => format!("innermost axis in vectors of up to {} lanes", vector_tile / 4),
                };
                own.push(RuleNote { rule: "parallel-vectorize", stage, outcome: Ok(outcome) });
                injective.push(st.tensor.clone());
            }
        }
    }
    // The other stages' notes are the plain rules sketch's.
    notes.extend(own.into_iter().filter(|n| !row_folds || n.rule == "row-fold"));
    let sketch = Sketch { name: "rules".into(), decisions: d.decisions };
    let plan = RulesPlan { inline: inline.to_vec(), folds, at: at.to_vec(), tiles, injective, threads };
    (sketch, Plan::Rules(plan))
}

fn tensorize_sketch(
    st: &StageInfo,
    c: Contraction,
    infos: &[StageInfo],
    constants: &[Tensor],
    options: &SpaceOptions,
    direct: Option<Direct>,
    notes: &mut Vec<RuleNote>,
) -> Option<(Sketch, Plan)> {
    let stage = st.tensor.name().to_string();
    let b = c.b.tensor.clone();
    let prepare_b = b.is_placeholder() && constants.iter().any(|t| t.id() == b.id());
    let (form, why) = form_for(&c, options.vnni);
    let mut d = DecisionSet::default();
    let mr_domain = match direct.as_ref().and_then(|d| d.flat.as_ref()) {
        Some(f) => flat_mr_choices(f),
        None => mr_choices(&c),
    };
    let mr = d.add("gemm.mr".into(), mr_domain);
    let nr = d.add("gemm.nr".into(), nr_choices(&c));
    let cols_outer = d.add("gemm.cols_outer".into(), vec![0, 1]);
    let threads = d.add("threads".into(), thread_choices(options.max_threads));
    let inline = infos.iter().filter(|s| matches!(s.kind, StageKind::Injective) && !s.is_output);
    let inline: Vec<Tensor> = inline.map(|s| s.tensor.clone()).collect();
    let variant = match &direct {
        None => "",
        Some(d) if d.flat.is_some() => ".flat",
        Some(_) => ".direct",
    };
    let name = format!("tensorize.{}{variant}", form.name());
    let flat = direct.as_ref().is_some_and(|d| d.flat.is_some());
    let why_not_at_tile = super::epilogue::unsupported(&c, flat);
    let has_epilogue = c.epilogue.is_some();
    let mut plan = TensorizePlan {
        contraction: c,
        form,
        inline,
        mr,
        nr,
        cols_outer,
        threads,
        prepare_b,
        direct,
        epilogue_at_tile: why_not_at_tile.is_none(),
    };
    let mut sketch = Sketch { name, decisions: d.decisions };
    let rule = match &plan.direct {
        None => "auto-tensorize",
        Some(d) if d.flat.is_some() => "flat-rows",
        Some(_) => "direct-source",
    };
    // Kept only if the proof succeeds at the sketch's first point; an epilogue the row Map or
    // its proof refuses runs as its own pass (the sketch without `.epi`).
    let first: Vec<i64> = sketch.decisions.iter().map(|d| d.choices[0]).collect();
    let mut applied = apply_tensorize(&plan, &Values(&first), options);
    if plan.epilogue_at_tile {
        let at_tile = format!("{}.epi", sketch.name);
        match &applied {
            Ok(_) => {
                notes.push(RuleNote {
                    rule: "epilogue-at-tile",
                    stage: stage.clone(),
                    outcome: Ok(format!(
                        "sketch {at_tile}: the epilogue tensorized as one Map per output row, which lowering fuses \
                         into each GEMM tile's call (GemmMap: the tile mapped in registers); no pass over the whole \
                         accumulator"
                    )),
                });
                sketch.name = at_tile;
            }
            Err(e) => {
                notes.push(RuleNote {
                    rule: "epilogue-at-tile",
                    stage: stage.clone(),
                    outcome: Err(format!("sketch {}: {}", sketch.name, describe(e))),
                });
                plan.epilogue_at_tile = false;
                applied = apply_tensorize(&plan, &Values(&first), options);
            }
        }
    } else if let (true, Some(why)) = (has_epilogue, why_not_at_tile) {
        notes.push(RuleNote {
            rule: "epilogue-at-tile",
            stage: stage.clone(),
            outcome: Err(format!("sketch {}: {why}; the epilogue runs as its own pass", sketch.name)),
        });
    }
    match applied {
        Ok(_) => {
            let packing = if plan.prepare_b {
                format!("{} is a constant: packed once by a prepare function", b.name())
            } else {
                format!("{} is a runtime input: packed on every call", b.name())
            };
            let pc = &plan.contraction;
            let what = match &plan.direct {
                None => format!(
                    "rows {}, columns {}, K {} as a GEMM; {why}; {packing}",
                    pc.axes[pc.rows].name(),
                    pc.axes[pc.cols].name(),
                    pc.reduce.iter().map(|r| r.name()).collect::<Vec<_>>().join("·"),
                ),
                Some(Direct { flat: Some(f), .. }) => format!(
                    "sketch {}: the GEMM's rows are {} virtual pixels over rows of {} (the output copies its own)",
                    sketch.name, f.v, f.ws,
                ),
                Some(d) => format!(
                    "sketch {}: A read in place of an im2col copy, {} segment(s){} of {} elements",
                    sketch.name,
                    d.segments(pc),
                    d.segment.map(|s| format!(" ({})", pc.reduce[s].name())).unwrap_or_default(),
                    d.seg_k,
                ),
            };
            notes.push(RuleNote { rule, stage, outcome: Ok(what) });
            Some((sketch, Plan::Tensorize(Box::new(plan))))
        }
        Err(e) => {
            notes.push(RuleNote { rule, stage, outcome: Err(describe(&e)) });
            None
        }
    }
}

fn describe(e: &TensorizeError) -> String {
    match e {
        TensorizeError::Rewrite(e) => format!("the rewrite failed: {e}"),
        TensorizeError::Schedule(e) => format!("the proof or a primitive failed: {e}"),
        TensorizeError::Epilogue(why) => format!("the epilogue's row map could not be declared: {why}"),
    }
}

fn apply_tensorize(p: &TensorizePlan, v: &Values, options: &SpaceOptions) -> Result<Tensorized, TensorizeError> {
    let point = GemmPoint {
        mr: v.get(p.mr),
        nr: v.get(p.nr),
        cols_outer: v.get(p.cols_outer) == 1,
        threads: v.get(p.threads) as usize,
    };
    super::tensorize::schedule(
        &p.contraction,
        p.form,
        point,
        options.vector_bytes,
        &p.inline,
        p.prepare_b,
        p.direct.as_ref(),
        p.epilogue_at_tile,
    )
}

/// The position of the constant `b` among `inputs` (the space keeps only constants that are
/// inputs, so it is one).
fn input_position(inputs: &[Tensor], b: &Tensor) -> usize {
    inputs.iter().position(|t| t.id() == b.id()).unwrap_or(0)
}

/// Makes the calls of `plan` at the point's `values` (already checked against the domains).
pub fn apply(
    plan: &Plan,
    sketch: &str,
    values: &[i64],
    inputs: &[Tensor],
    outputs: &[Tensor],
    options: &SpaceOptions,
) -> Result<Scheduled, AutoError> {
    let v = Values(values);
    let schedule_err = |e| AutoError::Schedule { sketch: sketch.to_string(), source: Box::new(e) };
    let refs: Vec<&Tensor> = outputs.iter().collect();
    let args = inputs.iter().chain(outputs).cloned().collect();
    match plan {
        Plan::Generic => Ok(Scheduled { schedule: create_schedule(&refs), args, threads: 1, prepare: vec![] }),
        Plan::Rules(p) => {
            let threads = v.get(p.threads) as usize;
            let mut s = create_schedule(&refs);
            let mut run = || -> Result<(), ir::ScheduleError> {
                apply_inline(&mut s, &p.inline)?;
                let mut tile_loops = Vec::new();
                for t in &p.tiles {
                    let tiled = super::tiling::apply(&mut s, t, &v)?;
                    let tile = parallelize(&mut s, &t.tensor, &tiled.outer, threads)?;
                    // Without an outer loop the accumulator stage stays at the root.
                    if let (Some(local), Some(l)) = (&tiled.local, &tile) {
                        s.compute_at(local, &t.tensor, l)?;
                    }
                    tile_loops.push((t.tensor.clone(), tile));
                }
                for (t, rows) in &p.folds {
                    // `rows` divides the stage's rows, so the declaration the sketch made at one
                    // row is made at `rows` too; without it the stage keeps its loops.
                    let outer = match fold_rows(t, v.get(*rows), options) {
                        Some(decl) => tensorize_fold_rows(&mut s, t, &decl)?,
                        None => vec![t.axis(0)],
                    };
                    tile_loops.push((t.clone(), parallelize(&mut s, t, &outer, threads)?));
                }
                for t in &p.injective {
                    let lanes = lanes(options.vector_bytes, t.dtype().bytes());
                    let outer = match map_rows(t, options) {
                        Some(decl) => tensorize_rows(&mut s, t, &decl)?,
                        None => vectorize_injective(&mut s, t, lanes)?,
                    };
                    tile_loops.push((t.clone(), parallelize(&mut s, t, &outer, threads)?));
                }
                for (producer, consumer) in &p.at {
                    let tile = tile_loops.iter().find(|(t, _)| t.id() == consumer.id()).and_then(|(_, l)| l.clone());
                    // Without an outer loop in the consumer, the producer stays at the root.
                    if let Some(l) = tile {
                        s.compute_at(producer, consumer, &l)?;
                    }
                }
                Ok(())
            };
            run().map_err(schedule_err)?;
            Ok(Scheduled { schedule: s, args, threads, prepare: vec![] })
        }
        Plan::Tensorize(p) => {
            let t = apply_tensorize(p, &v, options).map_err(|e| match e {
                TensorizeError::Rewrite(e) => AutoError::Rewrite { sketch: sketch.to_string(), source: Box::new(e) },
                TensorizeError::Schedule(e) => schedule_err(e),
                TensorizeError::Epilogue(why) => AutoError::Epilogue { sketch: sketch.to_string(), why },
            })?;
            let threads = v.get(p.threads) as usize;
            let mut args: Vec<Tensor> = inputs.iter().cloned().chain([t.output]).collect();
            let mut prepare = Vec::new();
            if let Some((schedule, packed, arg)) = t.prepare {
                let raw = &p.contraction.b.tensor;
                let input = input_position(inputs, raw);
                args[input] = arg;
                prepare.push(Prepare { input, schedule, args: vec![raw.clone(), packed], threads });
            }
            Ok(Scheduled { schedule: t.schedule, args, threads, prepare })
        }
    }
}

/// What the point's schedules are made on: the space's own definition for the generic and rules
/// sketches, a fresh rewrite at the point's decisions for auto-tensorize (what the point's
/// traces replay onto).
pub fn definition(
    plan: &Plan,
    sketch: &str,
    values: &[i64],
    inputs: &[Tensor],
    outputs: &[Tensor],
) -> Result<PointDefinition, AutoError> {
    match plan {
        Plan::Generic | Plan::Rules(_) => Ok(PointDefinition {
            args: inputs.iter().chain(outputs).cloned().collect(),
            outputs: outputs.to_vec(),
            prepare: vec![],
        }),
        Plan::Tensorize(p) => {
            let (mr, nr) = (Values(values).get(p.mr), Values(values).get(p.nr));
            let rw = super::tensorize::rewrite(&p.contraction, p.form, nr, p.prepare_b, p.direct.as_ref(), mr)
                .map_err(|e| AutoError::Rewrite { sketch: sketch.to_string(), source: Box::new(e) })?;
            let mut args: Vec<Tensor> = inputs.iter().cloned().chain([rw.output.clone()]).collect();
            let mut prepare = Vec::new();
            if let Some(arg) = rw.prepared_b {
                let raw = p.contraction.b.tensor.clone();
                let input = input_position(inputs, &raw);
                args[input] = arg;
                prepare.push((input, raw, rw.packed_b));
            }
            Ok(PointDefinition { args, outputs: vec![rw.output], prepare })
        }
    }
}
