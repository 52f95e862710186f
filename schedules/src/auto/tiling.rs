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
/// whether the inner non-vector tiles are unrolled.
pub fn plan(st: &StageInfo, vector_tile: i64, d: &mut DecisionSet) -> TilePlan {
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
    TilePlan { tensor: st.tensor.clone(), spatial, reduce_last, unroll }
}

/// The outer spatial loops of a tiled stage, outermost first, for `annotate::parallelize`.
pub type OuterLoops = Vec<IterVar>;

/// Splits, reorders, vectorizes and unrolls per `plan` and `v`; returns the outer spatial loops.
pub fn apply(s: &mut Schedule, plan: &TilePlan, v: &Values) -> Result<OuterLoops, ScheduleError> {
    let t = &plan.tensor;
    let (mut outer, mut inner) = (Vec::new(), Vec::new());
    for (axis, decision) in &plan.spatial {
        match decision.map(|i| v.get(i)) {
            Some(f) if f > 1 && f < axis.extent() => {
                let (o, i) = s.split(t, axis, f)?;
                outer.push(o);
                inner.push(Some(i));
            }
            Some(f) if f > 1 => {
                // The whole axis is the inner tile.
                inner.push(Some(axis.clone()));
            }
            _ => {
                outer.push(axis.clone());
                inner.push(None);
            }
        }
    }
    let reduce: Vec<IterVar> = t.reduce_axes();
    let mut reduce_order = reduce.clone();
    if let Some((r, i)) = &plan.reduce_last {
        let f = v.get(*i);
        if f > 1 && f < r.extent() {
            let (ro, ri) = s.split(t, r, f)?;
            reduce_order.pop();
            reduce_order.extend([ro, ri]);
        }
    }
    // The innermost spatial axis has an inner tile: it is the vector tile.
    let vector = matches!(inner.last(), Some(Some(_)));
    let inner: Vec<IterVar> = inner.into_iter().flatten().collect();
    let order: Vec<&IterVar> = outer.iter().chain(&reduce_order).chain(&inner).collect();
    s.reorder(t, &order)?;
    if let Some((last, rest)) = inner.split_last() {
        // A spatial loop: its lanes are distinct outputs, so vectorizing keeps every fold's order.
        let rest = if vector {
            s.vectorize(t, last)?;
            rest
        } else {
            &inner[..]
        };
        if plan.unroll.is_some_and(|i| v.get(i) == 1) {
            for l in rest {
                s.unroll(t, l)?;
            }
        }
    }
    Ok(outer)
}
