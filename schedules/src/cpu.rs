//! Target-neutral CPU schedules: tiling, vectorization and threading with typed knobs.

use ir::schedule::{Schedule, create_schedule};
use ir::{ScheduleError, Tensor};

/// The decisions of the tiled matmul schedule. A tuner varies these and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulKnobs {
    /// Rows of the output tile (unrolled in the inner loop).
    pub tile_rows: i64,
    /// Columns of the output tile (vectorized).
    pub tile_cols: i64,
    /// Run the outermost row-tile loop on the thread pool.
    pub parallel: bool,
}

impl Default for MatmulKnobs {
    fn default() -> MatmulKnobs {
        MatmulKnobs { tile_rows: 4, tile_cols: 16, parallel: true }
    }
}

/// `C = matmul(..)` as `parallel i.outer, j.outer, k, unrolled i.inner, vectorized j.inner`:
/// the reduction moves outside the tile so each `k` step updates a register-sized tile of `C`
/// from one vector of `B` and `tile_rows` scalars of `A`.
pub fn matmul_tiled(c: &Tensor, knobs: MatmulKnobs) -> Result<Schedule, ScheduleError> {
    let mut s = create_schedule(&[c]);
    let k = c.reduce_axes()[0].clone();
    let (io, jo, ii, ji) = s.tile(c, &c.axis(0), &c.axis(1), knobs.tile_rows, knobs.tile_cols)?;
    s.reorder(c, &[&io, &jo, &k, &ii, &ji])?;
    s.unroll(c, &ii)?;
    s.vectorize(c, &ji)?;
    if knobs.parallel {
        s.parallel(c, &io)?;
    }
    Ok(s)
}

/// Splits the last axis of each of `stages` by `lanes` and vectorizes the inner loop.
fn vectorize_last_axis(s: &mut Schedule, stages: &[&Tensor], lanes: i64) -> Result<(), ScheduleError> {
    for t in stages {
        let last = t.axis(t.shape().len() - 1);
        let (_, inner) = s.split(t, &last, lanes)?;
        s.vectorize(t, &inner)?;
    }
    Ok(())
}

/// Vectorizes a row fold's lane stage (`nn::FOLD_LANES` partials of a row, `[rows..., l]` with
/// the reduction `m` over the row's chunks): the loops become `rows..., m, l.outer, l.inner`
/// with `l.inner` in vectors of `lanes` and `l.outer` unrolled, so each chunk of the row is one
/// or more contiguous loads and every lane still folds its elements in increasing `m`.
fn vectorize_lane_fold(s: &mut Schedule, stage: &Tensor, lanes: i64) -> Result<(), ScheduleError> {
    lane_fold_loops(s, stage, lanes, true)
}

/// `vectorize_lane_fold`, `l.outer` unrolled where `unroll` (not inside a `compute_at`, where
/// its extent is not a constant).
fn lane_fold_loops(s: &mut Schedule, stage: &Tensor, lanes: i64, unroll: bool) -> Result<(), ScheduleError> {
    let rank = stage.shape().len();
    let last = stage.axis(rank - 1);
    let m = stage.reduce_axes()[0].clone();
    let (outer, inner) = s.split(stage, &last, lanes.min(crate::nn::FOLD_LANES))?;
    let rows: Vec<_> = (0..rank - 1).map(|i| stage.axis(i)).collect();
    let mut order: Vec<&ir::IterVar> = rows.iter().collect();
    order.extend([&m, &outer, &inner]);
    s.reorder(stage, &order)?;
    if unroll {
        s.unroll(stage, &outer)?;
    }
    s.vectorize(stage, &inner)
}

/// `nn::softmax` with its two elementwise stages (`exp`, which is most of the work, and the
/// division) vectorized by `lanes` along the last axis, and the max and sum folds vectorized
/// across their lanes (`vectorize_lane_fold`). Each lane keeps the definition's order, so this
/// schedule gives the interpreter's result exactly.
pub fn softmax_vectorized(sm: &crate::nn::Softmax, lanes: i64) -> Result<Schedule, ScheduleError> {
    let mut s = create_schedule(&[&sm.output]);
    vectorize_last_axis(&mut s, &[&sm.exp, &sm.output], lanes)?;
    vectorize_lane_fold(&mut s, &sm.max_lanes, lanes)?;
    vectorize_lane_fold(&mut s, &sm.sum_lanes, lanes)?;
    Ok(s)
}

/// `nn::softmax` computed row by row in two passes: per row of `exp`, the row's max (its lanes
/// at its row, `vectorize_lane_fold`) then `exp(x - max)`; per row of the output, the row's sum
/// then the quotients. `exp` and the quotient are one `Map` call per row where their bodies
/// declare one (`auto::map_stage`: zmm or ymm kernels), else vectorized by `lanes`. A row of
/// `x` is read again from cache by `exp`, a row of `exp` by the quotient. The definition's
/// order is kept: the interpreter's result exactly.
pub fn softmax_rows(sm: &crate::nn::Softmax, lanes: i64) -> Result<Schedule, ScheduleError> {
    let mut s = create_schedule(&[&sm.output]);
    let exp_row = row_loop(&mut s, &sm.exp, lanes)?;
    let out_row = row_loop(&mut s, &sm.output, lanes)?;
    lane_fold_loops(&mut s, &sm.max_lanes, lanes, false)?;
    lane_fold_loops(&mut s, &sm.sum_lanes, lanes, false)?;
    s.compute_at(&sm.max_lanes, &sm.max, &sm.max.axis(0))?;
    s.compute_at(&sm.max, &sm.exp, &exp_row)?;
    s.compute_at(&sm.sum_lanes, &sm.sum, &sm.sum.axis(0))?;
    s.compute_at(&sm.sum, &sm.output, &out_row)?;
    Ok(s)
}

/// The row loop of a two-dimensional element-wise stage: one `Map` call per row
/// (`auto::map_stage`) where its body declares one, else its last axis vectorized by `lanes`.
fn row_loop(s: &mut Schedule, t: &Tensor, lanes: i64) -> Result<ir::IterVar, ScheduleError> {
    if let Some(decl) = crate::auto::map_stage::row_map(t, lanes) {
        return Ok(crate::auto::map_stage::tensorize_rows(s, t, &decl)?.remove(0));
    }
    vectorize_last_axis(s, &[t], lanes)?;
    Ok(t.axis(0))
}

/// `nn::layernorm` with the normalization stage vectorized by `lanes` along the last axis and
/// the two sums vectorized across their lanes (as in `softmax_vectorized`).
pub fn layernorm_vectorized(ln: &crate::nn::LayerNorm, lanes: i64) -> Result<Schedule, ScheduleError> {
    let mut s = create_schedule(&[&ln.output]);
    vectorize_last_axis(&mut s, &[&ln.output], lanes)?;
    vectorize_lane_fold(&mut s, &ln.sum_lanes, lanes)?;
    vectorize_lane_fold(&mut s, &ln.sq_lanes, lanes)?;
    Ok(s)
}

/// `nn::gelu` vectorized by `lanes` along the last axis.
pub fn gelu_vectorized(y: &Tensor, lanes: i64) -> Result<Schedule, ScheduleError> {
    let mut s = create_schedule(&[y]);
    vectorize_last_axis(&mut s, &[y], lanes)?;
    Ok(s)
}
