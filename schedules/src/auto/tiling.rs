//! Multi-level tiling of a reduction stage's spatial (S) and reduction (R) loops, as
//! `S_outer… R… R_inner S_inner…` (Ansor's and MetaSchedule's "SSRSRS" with one level each):
//! every spatial axis split by a tile factor (a decision), the last reduction axis split too,
//! the reduction loops between the outer and the inner spatial tiles, so that an inner tile of
//! outputs is updated from each reduction step (a register tile when the innermost spatial tile
//! is vectorized and the others unrolled).
//!
//! Order of a reduction is kept: the reduction axes stay in declaration order and only the last
//! one is split (outer before inner), so each output still folds its values in the definition's
//! order — the interpreter's order, which float sums must keep to be bit-exact. Only spatial
//! loops are vectorized or unrolled.

use ir::schedule::{MAX_LANES, Schedule};
use ir::te::IterVar;
use ir::{ScheduleError, Tensor};

use super::analysis::StageInfo;
use super::sketch::{DecisionSet, Values};

/// The tiling of one reduction stage: decision indices, `None` where an axis has nothing to
/// decide (extent 1).
#[derive(Clone, Debug)]
pub struct TilePlan {
    pub tensor: Tensor,
    pub spatial: Vec<(IterVar, Option<usize>)>,
    pub reduce_last: Option<(IterVar, usize)>,
    pub unroll: Option<usize>,
    /// Whether the stage computes each tile into a small accumulator buffer (`cache_write`).
    pub cache: Option<usize>,
}

/// Powers of two from `from` up to `limit`, and `extent` itself if it is at most `limit`,
/// keeping those that divide `extent` (tails would put guards in the innermost loops).
pub fn dividing_tiles(extent: i64, from: i64, limit: i64) -> Vec<i64> {
    let mut out: Vec<i64> = std::iter::successors(Some(from.max(1)), |p| Some(p * 2))
        .take_while(|p| *p <= limit.min(extent))
        .filter(|p| extent % p == 0)
        .collect();
    if extent <= limit && !out.contains(&extent) {
        out.push(extent);
    }
    if out.is_empty() {
        out.push(1);
    }
    out
}

/// Declares the decisions of tiling `st`: an inner tile per spatial axis (the innermost one up
/// to `vector_tile` lanes, the others up to 8), the inner split of the last reduction axis, and
/// whether the inner non-vector tiles are unrolled, and, when `cache`, whether each tile is
/// computed in a register-blocked accumulator buffer.
pub fn plan(st: &StageInfo, vector_tile: i64, cache: bool, d: &mut DecisionSet) -> TilePlan {
    let stage = st.tensor.name();
    let last = st.spatial.len().saturating_sub(1);
    let spatial = st
        .spatial
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if a.extent() == 1 {
                return (a.clone(), None);
            }
            let limit = if i == last { vector_tile.min(MAX_LANES) } else { 8 };
            let mut choices = vec![1];
            choices.extend(dividing_tiles(a.extent(), 2, limit).into_iter().filter(|c| *c > 1));
            (a.clone(), Some(d.add(format!("{stage}.{}.tile", a.name()), choices)))
        })
        .collect();
    let reduce_last = st.reduce.last().filter(|r| r.extent() > 4).map(|r| {
        let choices = dividing_tiles(r.extent(), 4, 256);
        (r.clone(), d.add(format!("{stage}.{}.tile", r.name()), choices))
    });
    let unroll = (st.spatial.len() > 1).then(|| d.add(format!("{stage}.unroll"), vec![0, 1]));
    let cache = cache.then(|| d.add(format!("{stage}.cache"), vec![0, 1]));
    TilePlan { tensor: st.tensor.clone(), spatial, reduce_last, unroll, cache }
}

/// The outer spatial loops of a tiled stage, outermost first, for `annotate::parallelize`.
pub type OuterLoops = Vec<IterVar>;

/// A tiled stage: its outer spatial loops, and with the accumulator-tile variant the stage
/// `<name>.local` that computes one tile, to be computed at the loop `annotate::parallelize`
/// returns.
pub struct Tiled {
    pub outer: OuterLoops,
    pub local: Option<Tensor>,
}

/// Splits each of `axes` by its factor: the outer loops (an untiled axis stays whole there)
/// and the inner tiles (an axis whose tile is its extent stays whole there unless `always`:
/// the loops of a stage computed at a consumer's tile only have constant extents once split).
fn split_spatial(
    s: &mut Schedule,
    t: &Tensor,
    axes: &[IterVar],
    factors: &[Option<i64>],
    always: bool,
) -> Result<(Vec<IterVar>, Vec<Option<IterVar>>), ScheduleError> {
    let (mut outer, mut inner) = (Vec::new(), Vec::new());
    for (axis, f) in axes.iter().zip(factors) {
        match *f {
            Some(f) if f > 1 && (always || f < axis.extent()) => {
                let (o, i) = s.split(t, axis, f)?;
                outer.push(o);
                inner.push(Some(i));
            }
            Some(f) if f > 1 => inner.push(Some(axis.clone())),
            _ => {
                outer.push(axis.clone());
                inner.push(None);
            }
        }
    }
    Ok((outer, inner))
}

/// Vectorizes the innermost spatial tile (when the innermost axis has one) and unrolls the
/// other inner tiles when `unroll`. Spatial loops only: their iterations are distinct outputs,
/// so every fold keeps its order.
fn annotate_inner(s: &mut Schedule, t: &Tensor, inner: &[Option<IterVar>], unroll: bool) -> Result<(), ScheduleError> {
    let vector = matches!(inner.last(), Some(Some(_)));
    let inner: Vec<IterVar> = inner.iter().flatten().cloned().collect();
    if let Some((last, rest)) = inner.split_last() {
        let rest = if vector {
            s.vectorize(t, last)?;
            rest
        } else {
            &inner[..]
        };
        if unroll {
            for l in rest {
                s.unroll(t, l)?;
            }
        }
    }
    Ok(())
}

/// Splits, reorders, vectorizes and unrolls per `plan` and `v`.
///
/// Without the cache decision the stage's loops are `S_outer R R_inner S_inner`, the output
/// updated in memory at each reduction step. With it (register blocking) the stage becomes a
/// copy of a `<name>.local` stage, tiled `S_outer S_inner` itself; the local stage computes one
/// tile as `R R_inner S_inner` with the inner tiles unrolled and vectorized, so every access to
/// its small buffer has a constant index and the code generator keeps the accumulators in
/// registers while the reduction runs.
pub fn apply(s: &mut Schedule, plan: &TilePlan, v: &Values) -> Result<Tiled, ScheduleError> {
    let t = &plan.tensor;
    let cache = plan.cache.is_some_and(|i| v.get(i) == 1);
    let local = if cache { Some(s.cache_write(t)?) } else { None };
    let axes: Vec<IterVar> = plan.spatial.iter().map(|(a, _)| a.clone()).collect();
    let factors: Vec<Option<i64>> = plan.spatial.iter().map(|(_, d)| d.map(|i| v.get(i))).collect();
    let unroll = cache || plan.unroll.is_some_and(|i| v.get(i) == 1);
    let (outer, inner) = split_spatial(s, t, &axes, &factors, false)?;
    // The stage whose loops run the reduction, and its axes.
    let (r_stage, r_outer, r_inner) = match &local {
        None => (t.clone(), outer.clone(), inner.clone()),
        Some(l) => {
            let order: Vec<&IterVar> = outer.iter().chain(inner.iter().flatten()).collect();
            s.reorder(t, &order)?;
            annotate_inner(s, t, &inner, true)?;
            let (o, i) = split_spatial(s, l, l.axes(), &factors, true)?;
            (l.clone(), o, i)
        }
    };
    let reduce: Vec<IterVar> = r_stage.reduce_axes();
    let mut reduce_order = reduce.clone();
    if let (Some((_, i)), Some(r)) = (&plan.reduce_last, reduce.last()) {
        let f = v.get(*i);
        if f > 1 && f < r.extent() {
            let (ro, ri) = s.split(&r_stage, r, f)?;
            reduce_order.pop();
            reduce_order.extend([ro, ri]);
        }
    }
    let order: Vec<&IterVar> = r_outer.iter().chain(&reduce_order).chain(r_inner.iter().flatten()).collect();
    s.reorder(&r_stage, &order)?;
    annotate_inner(s, &r_stage, &r_inner, unroll)?;
    Ok(Tiled { outer, local })
}
