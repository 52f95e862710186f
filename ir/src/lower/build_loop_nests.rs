//! Lowering step: turn each stage into its loop nest and assemble the function.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::rc::Rc;

use crate::expr::{Expr, ExprKind, Var};
use crate::intrin::{TensorIntrin, reset_value};
use crate::lower::infer_bounds::{Region, root_extents, root_values};
use crate::mutator::{Mutator, substitute_map, walk_expr};
use crate::schedule::{Attach, Schedule, Stage};
use crate::stmt::{Buffer, ForKind, Func, Operand, Stmt, StmtKind};
use crate::te::{IterVar, Tensor, TensorId};
use crate::tensorize::{PlannedOperand, same_plan};

/// Builds the function computing the schedule's outputs from `args` (inputs and outputs, in
/// call order).
///
/// Each stage becomes one zero-based loop per leaf axis, in leaf order, with its kind from the
/// schedule. Root axes are rebuilt from the leaves as `let`s placed right inside the innermost
/// loop they depend on. Non-dividing splits get an `if` guard on the rebuilt axis. A reduction
/// becomes an init nest (`out = identity`, over the data-parallel loops inside the first
/// reduction loop) followed by the update nest (`out = out ⊕ value`). Root stages run in
/// producer order at the top level (intermediate ones in function-level `allocate`s); a
/// `compute_at` stage is allocated and computed for its region inside its consumer's loop, and
/// guarded to its own shape. Does not simplify: the guards it emits are often provably true.
///
/// A tensorized stage (`Schedule::tensorize` at leaf `a`) gets, in place of the loops from `a`
/// inward, `call intrin(operands)` whose fallback is exactly those loops; when the region holds
/// tail guards (or guards to the tensor's domain, for a stage computed at a loop), `if <every
/// guard holds with each loop of the region at its last (and first) iteration> { call } else {
/// fallback }` (leaf values are sums of loops with positive coefficients, so the last iteration
/// is the largest). Where the guards fail, a split's partial last tile (a guard stepping by 1
/// along one loop of the region, which then runs the split's remainder) calls the declaration
/// over that many points (`intrin_tail::shrink_axis`), proven by `tensorize` on the shortened
/// loop, under the guards holding up to its last point and failing right after it; tiles
/// neither condition decides run the fallback. For a reduction, the init nest covers the
/// data-parallel loops of the region too and is placed before the call, which only updates —
/// unless the region starts where the init nest does, or inside loops of extent 1 from there:
/// then the call resets its output itself (`reset`, the init nest moving into its fallback), so
/// that a kernel need not read it.
pub fn build_loop_nests(
    schedule: &Schedule,
    bodies: &HashMap<Stage, Expr>,
    regions: &HashMap<Stage, Region>,
    args: &[&Tensor],
    name: &str,
) -> Func {
    let params: Vec<Buffer> =
        args.iter().map(|t| Buffer::new_in_range(t.name(), t.dtype(), t.shape().to_vec(), t.value_range())).collect();
    let mut buffers: HashMap<TensorId, Buffer> = args.iter().zip(&params).map(|(t, b)| (t.id(), b.clone())).collect();
    let mut attached: HashMap<Stage, Vec<(IterVar, Stage)>> = HashMap::default();
    let mut root_temporaries = Vec::new();
    for &stage in schedule.order() {
        if !bodies.contains_key(&stage) {
            continue;
        }
        let data = schedule.stage_data(stage);
        let tensor = &data.tensor;
        match &data.attach {
            Attach::At { stage: consumer, axis } => {
                attached.entry(*consumer).or_default().push((axis.clone(), stage));
                let shape = regions[&stage].extents();
                buffers.insert(tensor.id(), Buffer::new(tensor.name(), tensor.dtype(), shape));
            }
            Attach::Root | Attach::Inline => {
                buffers.entry(tensor.id()).or_insert_with(|| {
                    let buffer = Buffer::new(tensor.name(), tensor.dtype(), tensor.shape().to_vec());
                    root_temporaries.push(buffer.clone());
                    buffer
                });
            }
        }
    }
    // A root axis that is also a leaf names both the loop (local index) and the global index
    // the body reads; where its region does not start at 0, the loop gets a fresh variable.
    // Region minima (`infer_bounds`) name a consumer's loops by their leaf variables, so they
    // are renamed too: in the loop nest, the axis's own name is the global index.
    let mut local_loops: HashMap<Var, Expr> = HashMap::default();
    for &stage in schedule.order().iter().filter(|s| bodies.contains_key(s)) {
        let data = schedule.stage_data(stage);
        for (axis, (min, _)) in data.axes.iter().zip(&regions[&stage].dims) {
            if data.leaves.contains(axis) && min.as_int() != Some(0) {
                local_loops.insert(axis.var().clone(), Var::index(format!("{}.local", axis.name())).to_expr());
            }
        }
    }
    let mut renamed = HashSet::default();
    let regions: HashMap<Stage, Region> = regions
        .iter()
        .map(|(&stage, region)| {
            let dims: Vec<(Expr, i64)> =
                region.dims.iter().map(|(min, extent)| (substitute_map(min, &local_loops), *extent)).collect();
            if dims.iter().zip(&region.dims).any(|((new, _), (old, _))| !new.same_node(old)) {
                renamed.insert(stage);
            }
            (stage, Region { dims })
        })
        .collect();
    let ctx = Ctx { schedule, bodies, regions: &regions, buffers, attached, local_loops, renamed };
    let nests: Vec<Stmt> = schedule
        .order()
        .iter()
        .filter(|s| bodies.contains_key(s) && schedule.stage_data(**s).attach == Attach::Root)
        .map(|&s| ctx.realize(s))
        .collect();
    let body = root_temporaries.into_iter().rev().fold(Stmt::seq(nests), |body, buffer| Stmt::allocate(buffer, body));
    Func { name: name.to_string(), params, body }
}

/// The position of the innermost loop whose variable `e` uses (-1 if it uses none).
fn innermost_loop(e: &Expr, position: &HashMap<Var, isize>) -> isize {
    let mut depth = -1;
    e.for_each(&mut |n| {
        if let ExprKind::Var(v) = n.kind() {
            depth = depth.max(position.get(v).copied().unwrap_or(-1));
        }
    });
    depth
}

struct Ctx<'a> {
    schedule: &'a Schedule,
    bodies: &'a HashMap<Stage, Expr>,
    regions: &'a HashMap<Stage, Region>,
    buffers: HashMap<TensorId, Buffer>,
    /// For each consumer, the stages computed inside its loops and the loop they are at.
    attached: HashMap<Stage, Vec<(IterVar, Stage)>>,
    /// The fresh loop variable of each root axis that is a leaf whose region does not start at 0.
    local_loops: HashMap<Var, Expr>,
    /// The stages whose regions name a renamed loop (`local_loops`): not as `infer_bounds` does.
    renamed: HashSet<Stage>,
}

/// Something placed inside a loop nest, right inside loop number `depth` (-1: outside all).
enum Item {
    Let(Var, Expr),
    Guard(Expr),
    Attach(Stage),
}

struct Placed {
    depth: isize,
    item: Item,
    /// Whether the item belongs to the reduction (update nest only).
    reduce: bool,
    /// The expression of leaf variables whose innermost loop the item goes inside.
    anchor: Expr,
}

struct Loop {
    var: Var,
    extent: i64,
    kind: ForKind,
}

/// The call replacing the loops from `depth` inward (relative to the loops it is wrapped in).
struct RegionCall {
    depth: usize,
    intrin: TensorIntrin,
    operands: Vec<Operand>,
    /// The tail guards of the region at its last point, if there are any.
    condition: Option<Expr>,
    /// Where `condition` fails: the calls of the partial tiles, each under its own condition
    /// (none holds where another does), tried in turn before the fallback.
    tails: Vec<TailCall>,
    /// The init nest of a reduction when it covers exactly the call's output region: the call
    /// resets (`StmtKind::Call::reset`) and its fallback runs this nest first.
    reset: Option<Stmt>,
}

/// The call of a partial tile: the declaration over the points its loops keep.
struct TailCall {
    intrin: TensorIntrin,
    operands: Vec<Operand>,
    condition: Expr,
}

/// A partial tile proven: which region loops run fewer iterations (the loop, the guarded axis
/// whose split made it, how many), the declaration over those and the operands' plan.
struct PlannedTail {
    shorter: Vec<(IterVar, IterVar, i64)>,
    intrin: TensorIntrin,
    planned: Vec<PlannedOperand>,
}

/// Guarded axes whose partial tiles get calls of their own at most; more make too many
/// combinations.
const MAX_TAIL_AXES: usize = 2;

impl Ctx<'_> {
    /// The loop nest computing `stage`'s region into its buffer.
    fn realize(&self, stage: Stage) -> Stmt {
        let data = self.schedule.stage_data(stage);
        let region = &self.regions[&stage];
        let extents = data.pass_down_extents(&root_extents(data, region));
        let loop_vars = &self.local_loops;
        let rename = |values: HashMap<IterVar, Expr>| -> HashMap<IterVar, Expr> {
            values.into_iter().map(|(a, v)| (a, substitute_map(&v, loop_vars))).collect()
        };
        let roots = rename(root_values(data, region, &extents));
        let leaf_values = rename(data.pass_up_values(&extents));
        let loop_var = |leaf: &IterVar| match loop_vars.get(leaf.var()) {
            Some(e) => e.as_var().expect("loop variables are variables").clone(),
            None => leaf.var().clone(),
        };
        let buffer = &self.buffers[&data.tensor.id()];
        // Where an axis's region starts at 0, its (let-bound) variable is also the local index;
        // naming it rather than its leaf expression lets guards refine its range.
        let starts_at_zero = |axis: &IterVar| match data.axes.iter().position(|a| a == axis) {
            Some(d) => region.dims[d].0.as_int() == Some(0),
            None => axis.is_reduce() && data.reduce_axes.contains(axis),
        };
        let local_index: Vec<Expr> =
            data.axes.iter().map(|a| if starts_at_zero(a) { a.to_expr() } else { leaf_values[a].clone() }).collect();
        let position: HashMap<Var, isize> =
            data.leaves.iter().enumerate().map(|(i, l)| (loop_var(l), i as isize)).collect();
        let depth_of = |e: &Expr| innermost_loop(e, &position);

        let mut items = Vec::new();
        for axis in data.axes.iter().chain(&data.reduce_axes) {
            let value = roots[axis].clone();
            if value.as_var() == Some(axis.var()) {
                continue;
            }
            let anchor = value.clone();
            items.push(Placed {
                depth: depth_of(&anchor),
                item: Item::Let(axis.var().clone(), value),
                reduce: axis.is_reduce(),
                anchor,
            });
        }
        for parent in data.guarded_axes(&extents) {
            let value = if starts_at_zero(&parent) { parent.to_expr() } else { leaf_values[&parent].clone() };
            let cond = value.lt(Expr::index(extents[&parent]));
            let anchor = leaf_values[&parent].clone();
            items.push(Placed {
                depth: depth_of(&anchor),
                item: Item::Guard(cond),
                reduce: parent.is_reduce(),
                anchor,
            });
        }
        if matches!(data.attach, Attach::At { .. }) {
            // The region may stick out of the tensor (a consumer's tail, or reads past an edge
            // that a select never uses); never compute outside the definition's domain.
            for (axis, (min, extent)) in data.axes.iter().zip(&region.dims) {
                let inside = min.as_int().is_some_and(|m| m >= 0 && m + extent <= axis.extent());
                if !inside {
                    let v = axis.to_expr();
                    let cond = v.ge(Expr::index(0)) & v.lt(Expr::index(axis.extent()));
                    let anchor = roots[axis].clone();
                    items.push(Placed { depth: depth_of(&anchor), item: Item::Guard(cond), reduce: false, anchor });
                }
            }
        }
        for (axis, producer) in self.attached.get(&stage).into_iter().flatten() {
            let depth = position[&loop_var(axis)];
            let reduce = axis.is_reduce() || self.first_reduce(stage) <= depth;
            items.push(Placed { depth, item: Item::Attach(*producer), reduce, anchor: axis.to_expr() });
        }
        // Lets first, then guards (which may read the lets), then attached stages.
        items.sort_by_key(|p| match p.item {
            Item::Let(..) => 0,
            Item::Guard(_) => 1,
            Item::Attach(_) => 2,
        });

        let loops: Vec<Loop> =
            data.leaves.iter().map(|l| Loop { var: loop_var(l), extent: extents[l], kind: data.for_kind(l) }).collect();
        let mut region_call = data.tensorize.as_ref().map(|(axis, intrin)| {
            let plan = || {
                crate::tensorize::plan(self.schedule, self.regions, stage, axis, intrin, &self.bodies[&stage])
                    .unwrap_or_else(|m| {
                        let (stage, part, what) = (data.name(), m.part, &m.what);
                        panic!(
                            "build_loop_nests: tensorize of {stage} was proven by the schedule, now {part} ({what}) differs"
                        )
                    })
            };
            // The schedule's proof planned the call on this very schedule (`ProvenPlans`), with
            // the regions as `infer_bounds` names them: kept where the regions it read (the
            // stage's own and its operands') are those, none renamed here (`local_loops`).
            // Debug builds plan again and compare.
            let reads_renamed = |p: &[PlannedOperand]| {
                self.renamed.contains(&stage)
                    || p.iter().any(|o| self.schedule.stage_of(&o.tensor).is_ok_and(|s| self.renamed.contains(&s)))
            };
            let kept = self.schedule.proven_plan(stage).filter(|p| !reads_renamed(p));
            let planned: Rc<[PlannedOperand]> = match kept {
                Some(proven) => {
                    if cfg!(debug_assertions) {
                        let again = plan();
                        assert!(
                            same_plan(&proven, &again),
                            "build_loop_nests: the kept plan of {}'s tensorize differs from planning again",
                            data.name()
                        );
                    }
                    proven
                }
                None => plan().into(),
            };
            let operands = planned.iter().map(|p| self.operand(p)).collect();
            let depth = data.leaves.iter().position(|l| l == axis).expect("tensorize axis is a leaf");
            let last: HashMap<Var, Expr> =
                data.leaves[depth..].iter().map(|l| (loop_var(l), Expr::index(extents[l] - 1))).collect();
            let in_region = |e: &Expr| last.keys().any(|v| e.uses_var(v));
            let guarded: Vec<IterVar> =
                data.guarded_axes(&extents).into_iter().filter(|parent| in_region(&leaf_values[parent])).collect();
            // Every guard holds at the region's point `at` (each loop of the region at its last
            // iteration, or where `at` says): as leaf values grow with every loop, then at all
            // of its points up to there. A stage computed at a loop whose region may stick out of
            // the tensor (guarded above) adds the region's first and that point inside the
            // tensor's domain.
            let first: HashMap<Var, Expr> = last.keys().map(|v| (v.clone(), Expr::index(0))).collect();
            let holds_up_to = |at: &HashMap<Var, Expr>| {
                let tails =
                    guarded.iter().map(|parent| below(&substitute_map(&leaf_values[parent], at), extents[parent]));
                let domain = data
                    .axes
                    .iter()
                    .zip(&region.dims)
                    .filter(|(axis, (min, extent))| {
                        matches!(data.attach, Attach::At { .. })
                            && !min.as_int().is_some_and(|m| m >= 0 && m + extent <= axis.extent())
                            && in_region(&roots[*axis])
                    })
                    .flat_map(|(axis, _)| {
                        let lowest = substitute_map(&roots[axis], &first).ge(Expr::index(0));
                        [lowest, below(&substitute_map(&roots[axis], at), axis.extent())]
                    });
                tails.chain(domain).reduce(|a, b| a & b)
            };
            let condition = holds_up_to(&last);
            let tails = match &condition {
                Some(_) => self.tail_calls(stage, axis, intrin, depth, &extents, &guarded, &leaf_values, &|l| {
                    loop_var(l)
                })
                .into_iter()
                .map(|tail| {
                    // The guards hold up to the tail's last points and fail right after them
                    // (`at_least`): the tile's points inside the guards are exactly the call's.
                    let mut at = last.clone();
                    let mut beyond = Vec::new();
                    for (leaf, parent, points) in &tail.shorter {
                        at.insert(loop_var(leaf), Expr::index(points - 1));
                        let past = HashMap::from_iter([(loop_var(leaf), Expr::index(*points))]);
                        beyond.push(at_least(&substitute_map(&leaf_values[parent], &past), extents[parent]));
                    }
                    let held = holds_up_to(&at).expect("a tail has guards");
                    let condition = beyond.into_iter().fold(held, |a, b| a & b);
                    let operands = tail.planned.iter().map(|p| self.operand(p)).collect();
                    TailCall { intrin: tail.intrin, operands, condition }
                })
                .collect(),
                None => Vec::new(),
            };
            RegionCall { depth, intrin: intrin.clone(), operands, condition, tails, reset: None }
        });
        let root_vars: HashMap<Var, Expr> = roots.iter().map(|(a, v)| (a.var().clone(), v.clone())).collect();
        let value = self.to_loads(&self.bodies[&stage], &root_vars);
        let p = self.first_reduce(stage);
        let ExprKind::Reduce(reduce) = value.kind() else {
            let store = Stmt::store(buffer, local_index, value.clone());
            return self.wrap_region(&loops, items, store, region_call.as_ref());
        };
        // A call covering data-parallel loops outside the first reduction loop only updates, so
        // the init nest starts where the call does.
        let p = match &region_call {
            Some(call) => p.min(call.depth as isize),
            None => p,
        };
        if let Some(call) = &mut region_call {
            call.depth -= p as usize;
        }
        let acc = Expr::load(buffer, local_index.clone());
        let update_store = Stmt::store(buffer, local_index.clone(), reduce.reducer.combine(acc, reduce.source.clone()));

        // The init nest repeats the data-parallel loops inside the first reduction loop, with
        // fresh variables so no variable is bound by two loops.
        let mut fresh: HashMap<Var, Expr> = HashMap::default();
        let mut init_loops = Vec::new();
        let mut init_position: HashMap<Var, isize> = HashMap::default();
        for l in &loops[p as usize..] {
            if data.leaves[position[&l.var] as usize].is_reduce() {
                continue;
            }
            let v = Var::index(l.var.name());
            fresh.insert(l.var.clone(), v.to_expr());
            init_position.insert(v.clone(), init_loops.len() as isize);
            init_loops.push(Loop { var: v, extent: l.extent, kind: l.kind });
        }
        let init_depth = |e: &Expr| innermost_loop(e, &init_position);
        let mut common = Vec::new();
        let mut init_items = Vec::new();
        let mut update_items = Vec::new();
        for placed in items {
            if placed.depth < p {
                common.push(placed);
                continue;
            }
            if !placed.reduce {
                let copy = match &placed.item {
                    Item::Let(v, e) => Some(Item::Let(v.clone(), substitute_map(e, &fresh))),
                    Item::Guard(e) => Some(Item::Guard(substitute_map(e, &fresh))),
                    Item::Attach(_) => None,
                };
                if let Some(item) = copy {
                    let anchor = substitute_map(&placed.anchor, &fresh);
                    init_items.push(Placed { depth: init_depth(&anchor), item, reduce: false, anchor });
                }
            }
            update_items.push(Placed { depth: placed.depth - p, ..placed });
        }
        let init_index: Vec<Expr> = local_index.iter().map(|i| substitute_map(i, &fresh)).collect();
        let init_store = Stmt::store(buffer, init_index, reduce.reducer.identity(value.dtype()));
        let init = self.wrap(&init_loops, init_items, init_store);
        // A call whose region starts where the init nest does (or inside loops that run once)
        // resets its output itself.
        let once = |depth: usize| loops[p as usize..p as usize + depth].iter().all(|l| l.extent == 1);
        if let Some(call) = region_call.as_mut().filter(|c| once(c.depth) && reset_value(&c.intrin).is_some()) {
            call.reset = Some(init);
            let update = self.wrap_region(&loops[p as usize..], update_items, update_store, Some(call));
            return self.wrap(&loops[..p as usize], common, update);
        }
        let update = self.wrap_region(&loops[p as usize..], update_items, update_store, region_call.as_ref());
        self.wrap(&loops[..p as usize], common, Stmt::seq(vec![init, update]))
    }

    /// `p` as a call's operand, in the loop variables of the nest.
    fn operand(&self, p: &PlannedOperand) -> Operand {
        Operand {
            buffer: self.buffers[&p.tensor.id()].clone(),
            origin: p.origin.iter().map(|o| substitute_map(o, &self.local_loops)).collect(),
            strides: p.strides.clone(),
        }
    }

    /// The partial tiles of the tensorized region from leaf `axis` (at `depth`) of `stage`
    /// whose declarations `intrin_tail::shrink_axis` makes and `tensorize` proves: for each
    /// non-empty set of the `guarded` axes (a non-dividing split's parent, `leaf_values` in the
    /// loop variables `loop_var` names) whose value steps by 1 along exactly one region loop,
    /// that loop over the split's remainder (its parent's extent modulo the loop's), the others
    /// whole. A set whose declaration or proof fails has no call (its tiles run the fallback).
    #[allow(clippy::too_many_arguments)]
    fn tail_calls(
        &self,
        stage: Stage,
        axis: &IterVar,
        intrin: &TensorIntrin,
        depth: usize,
        extents: &HashMap<IterVar, i64>,
        guarded: &[IterVar],
        leaf_values: &HashMap<IterVar, Expr>,
        loop_var: &dyn Fn(&IterVar) -> Var,
    ) -> Vec<PlannedTail> {
        let data = self.schedule.stage_data(stage);
        let region = &data.leaves[depth..];
        // (loop, parent, remainder) per guarded axis with a tile loop of its own.
        let partial: Vec<(IterVar, IterVar, i64)> = guarded
            .iter()
            .filter_map(|parent| {
                let value = &leaf_values[parent];
                let mut inside = region.iter().filter(|l| value.uses_var(&loop_var(l)));
                let (leaf, None) = (inside.next()?, inside.next()) else { return None };
                let steps = crate::analysis::linear::Linear::of(value)
                    .terms
                    .iter()
                    .any(|(term, c)| *c == 1 && term.as_var() == Some(&loop_var(leaf)));
                let remainder = extents[parent] % extents[leaf];
                (steps && remainder > 0).then(|| (leaf.clone(), parent.clone(), remainder))
            })
            .collect();
        if partial.is_empty() || partial.len() > MAX_TAIL_AXES {
            return Vec::new();
        }
        let output_axes = intrin.output.axes();
        let mut tails = Vec::new();
        for set in 1..1usize << partial.len() {
            let shorter: Vec<(IterVar, IterVar, i64)> =
                (0..partial.len()).filter(|i| set >> i & 1 == 1).map(|i| partial[i].clone()).collect();
            // Two guards stepping along one loop (a split of a split) each have their own tail.
            let leaves: HashSet<&IterVar> = shorter.iter().map(|(l, _, _)| l).collect();
            if leaves.len() != shorter.len() {
                continue;
            }
            let points: HashMap<IterVar, i64> = shorter.iter().map(|(l, _, t)| (l.clone(), *t)).collect();
            // The declaration axis each loop maps to is the proof's: try the axes of its extent.
            let mut choices: Vec<Vec<usize>> = vec![Vec::new()];
            for (leaf, _, _) in &shorter {
                let fits: Vec<usize> =
                    (0..output_axes.len()).filter(|&a| output_axes[a].extent() == extents[leaf]).collect();
                let mut longer = Vec::new();
                for chosen in &choices {
                    for &a in fits.iter().filter(|a| !chosen.contains(a)) {
                        longer.push([chosen.as_slice(), &[a]].concat());
                    }
                }
                choices = longer;
            }
            let proven = choices.into_iter().find_map(|axes| {
                let shrunk = axes
                    .iter()
                    .zip(&shorter)
                    .try_fold(intrin.clone(), |d, (&a, (_, _, t))| crate::intrin_tail::shrink_axis(&d, a, *t).ok())?;
                let body = &self.bodies[&stage];
                let planned = crate::tensorize::plan_with_extents(
                    self.schedule,
                    self.regions,
                    stage,
                    axis,
                    &shrunk,
                    body,
                    &points,
                )
                .ok()?;
                Some((shrunk, planned))
            });
            if let Some((intrin, planned)) = proven {
                tails.push(PlannedTail { shorter, intrin, planned });
            }
        }
        tails
    }

    /// Position of the first leaf derived from a reduction axis (the leaf count if none).
    fn first_reduce(&self, stage: Stage) -> isize {
        let leaves = &self.schedule.stage_data(stage).leaves;
        leaves.iter().position(|l| l.is_reduce()).unwrap_or(leaves.len()) as isize
    }

    /// `wrap`, with the loops from `call.depth` inward (and the items inside them) replaced by the
    /// call, whose fallback they become.
    fn wrap_region(&self, loops: &[Loop], items: Vec<Placed>, innermost: Stmt, call: Option<&RegionCall>) -> Stmt {
        let Some(call) = call else { return self.wrap(loops, items, innermost) };
        let depth = call.depth as isize;
        let (inner, outer): (Vec<Placed>, Vec<Placed>) = items.into_iter().partition(|p| p.depth >= depth);
        let inner = inner.into_iter().map(|p| Placed { depth: p.depth - depth, ..p }).collect();
        let loops_inside = self.wrap(&loops[call.depth..], inner, innermost);
        let fallback = match &call.reset {
            Some(init) => Stmt::seq(vec![init.clone(), loops_inside]),
            None => loops_inside,
        };
        let reset = call.reset.is_some();
        let stmt = Stmt::call(call.intrin.clone(), call.operands.clone(), reset, fallback.clone());
        let stmt = match &call.condition {
            Some(cond) => {
                let otherwise = call.tails.iter().rev().fold(fallback.clone(), |otherwise, tail| {
                    let stmt = Stmt::call(tail.intrin.clone(), tail.operands.clone(), reset, fallback.clone());
                    Stmt::new(StmtKind::If {
                        cond: tail.condition.clone(),
                        then_case: stmt,
                        else_case: Some(otherwise),
                    })
                });
                Stmt::new(StmtKind::If { cond: cond.clone(), then_case: stmt, else_case: Some(otherwise) })
            }
            None => stmt,
        };
        self.wrap(&loops[..call.depth], outer, stmt)
    }

    /// `innermost` inside `loops`, with each item placed inside the loop at its depth.
    fn wrap(&self, loops: &[Loop], items: Vec<Placed>, innermost: Stmt) -> Stmt {
        let mut by_depth: HashMap<isize, Vec<Item>> = HashMap::default();
        for placed in items {
            by_depth.entry(placed.depth).or_default().push(placed.item);
        }
        let mut stmt = innermost;
        for depth in (-1..loops.len() as isize).rev() {
            for item in by_depth.remove(&depth).into_iter().flatten().rev() {
                stmt = match item {
                    Item::Let(var, value) => Stmt::let_stmt(var, value, stmt),
                    Item::Guard(cond) => Stmt::if_then(cond, stmt),
                    Item::Attach(producer) => {
                        let buffer = self.buffers[&self.schedule.stage_data(producer).tensor.id()].clone();
                        Stmt::allocate(buffer, Stmt::seq(vec![self.realize(producer), stmt]))
                    }
                };
            }
            if depth >= 0 {
                let l = &loops[depth as usize];
                stmt = Stmt::for_loop(l.var.clone(), l.extent, l.kind, stmt);
            }
        }
        assert!(by_depth.is_empty(), "build_loop_nests: item placed below the innermost loop");
        stmt
    }

    /// `expr` with tensor reads turned into buffer loads, relative to computed regions.
    /// `roots` gives the reading stage's root variables in terms of its loop variables.
    fn to_loads(&self, expr: &Expr, roots: &HashMap<Var, Expr>) -> Expr {
        ToLoads { ctx: self, roots }.mutate_expr(expr)
    }
}

/// `value < bound`, solved for the variable when `value` is `a*v + b` with `a > 0` (as
/// `v < ceil((bound - b) / a)`), which interval analysis then uses to narrow `v`.
fn below(value: &Expr, bound: i64) -> Expr {
    let form = crate::analysis::linear::Linear::of(value);
    match form.terms.as_slice() {
        [(term, a)] if *a > 0 && term.as_var().is_some() => {
            let limit = -(form.constant - bound).div_euclid(*a);
            term.lt(Expr::index(limit))
        }
        _ => value.lt(Expr::index(bound)),
    }
}

/// `value >= bound`, solved for the variable as `below` does.
fn at_least(value: &Expr, bound: i64) -> Expr {
    let form = crate::analysis::linear::Linear::of(value);
    match form.terms.as_slice() {
        [(term, a)] if *a > 0 && term.as_var().is_some() => {
            let limit = -(form.constant - bound).div_euclid(*a);
            term.ge(Expr::index(limit))
        }
        _ => value.ge(Expr::index(bound)),
    }
}

struct ToLoads<'a, 'b> {
    ctx: &'a Ctx<'b>,
    roots: &'a HashMap<Var, Expr>,
}

impl Mutator for ToLoads<'_, '_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let expr = walk_expr(self, expr);
        let ExprKind::TensorRead(tensor, indices) = expr.kind() else { return expr };
        let buffer = &self.ctx.buffers[&tensor.id()];
        let stage = self.ctx.schedule.stage_of(tensor).expect("read tensor is in the schedule");
        let indices = match (&self.ctx.schedule.stage_data(stage).attach, self.ctx.regions.get(&stage)) {
            (Attach::At { .. }, Some(region)) => {
                // In loop variables, `index - min` cancels to the inner loops' part, which
                // `simplify` sees and `guard_accesses` then proves in bounds.
                let relative = |(i, (min, _)): (&Expr, &(Expr, i64))| match min.as_int() {
                    Some(0) => i.clone(),
                    _ => substitute_map(i, self.roots) - min.clone(),
                };
                indices.iter().zip(&region.dims).map(relative).collect()
            }
            _ => indices.clone(),
        };
        Expr::load(buffer, indices)
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::expr::Expr;
    use crate::interp::{Array, eval_te, run_func};
    use crate::lower::lower;
    use crate::schedule::create_schedule;
    use crate::te::{compute, placeholder};

    #[test]
    fn a_chain_of_stages_computed_at_root_axis_loops_reads_each_region_from_its_start() {
        // C computes B a row at a time, B computes A a row at a time: B's row loop is its root
        // axis, whose region starts at C's row, so it runs over a local index while A's region
        // starts at B's global row.
        let x = placeholder([6, 5], DType::I32, "X").unwrap();
        let a = compute([6, 5], |i| x.at([&i[0], &i[1]]) * Expr::int(DType::I32, 2), "A").unwrap();
        let b = compute([6, 5], |i| a.at([&i[0], &i[1]]) + Expr::int(DType::I32, 1), "B").unwrap();
        let c = compute([6, 5], |i| b.at([&i[0], &i[1]]) * Expr::int(DType::I32, 3), "C").unwrap();
        let mut s = create_schedule(&[&c]);
        s.compute_at(&b, &c, &c.axis(0)).unwrap();
        s.compute_at(&a, &b, &b.axis(0)).unwrap();
        let f = lower(&s, &[&x, &c], "chain").unwrap();
        assert!(f.to_string().contains("A[j] = X[i*5 + j]*2i32"), "{f}");
        let xs = Array::from_i64(DType::I32, &[6, 5], &(0..30).map(|v| v * 7 - 40).collect::<Vec<_>>());
        let want = eval_te(&[&c], &[(&x, &xs)]).unwrap().remove(0);
        let mut args = vec![xs, Array::zeros(DType::I32, &[6, 5])];
        run_func(&f, &mut args).unwrap();
        assert!(args[1].bits_eq(&want), "{:?}\n{f}", args[1].first_difference(&want));
    }
}
