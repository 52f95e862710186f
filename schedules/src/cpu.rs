//! Target-neutral CPU schedules: tiling, vectorization and threading with typed knobs.

use ir::schedule::{create_schedule, Schedule};
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
