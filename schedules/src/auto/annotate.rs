//! ParallelizeVectorizeUnroll for the stages tiling leaves alone (element-wise stages at the
//! root), and the parallel outer loop of every stage: the outer spatial loops fused into one
//! loop on the thread pool when the point asks for more than one thread.

use ir::schedule::Schedule;
use ir::te::IterVar;
use ir::{ScheduleError, Tensor};

use super::tiling::dividing_tiles;

/// The lanes of a vector of `vector_bytes` of `dtype_bytes` elements (at least 1).
pub fn lanes(vector_bytes: i64, dtype_bytes: usize) -> i64 {
    (vector_bytes / dtype_bytes.max(1) as i64).max(1)
}

/// Vectorizes the innermost axis of an injective stage by the widest tile of at most `lanes`
/// that divides it (none when only 1 does); returns the loops outside it.
pub fn vectorize_injective(s: &mut Schedule, t: &Tensor, lanes: i64) -> Result<Vec<IterVar>, ScheduleError> {
    let axes = t.axes().to_vec();
    let Some((last, rest)) = axes.split_last() else { return Ok(Vec::new()) };
    let f = dividing_tiles(last.extent(), 2, lanes).into_iter().max().unwrap_or(1);
    let mut outer: Vec<IterVar> = rest.to_vec();
    if f <= 1 {
        outer.push(last.clone());
        return Ok(outer);
    }
    if f < last.extent() {
        let (o, i) = s.split(t, last, f)?;
        s.vectorize(t, &i)?;
        outer.push(o);
    } else {
        s.vectorize(t, last)?;
    }
    Ok(outer)
}

/// With more than one thread, fuses `outer` (adjacent outermost loops of `t`, outermost first)
/// into one loop and runs it on the thread pool. Returns the loop one iteration of which is one
/// outer tile (the fused loop, or the innermost of `outer`): where a producer may be computed.
pub fn parallelize(
    s: &mut Schedule,
    t: &Tensor,
    outer: &[IterVar],
    threads: usize,
) -> Result<Option<IterVar>, ScheduleError> {
    if threads <= 1 {
        return Ok(outer.last().cloned());
    }
    let Some((first, rest)) = outer.split_first() else { return Ok(None) };
    let mut fused = first.clone();
    for l in rest {
        fused = s.fuse(t, &fused, l)?;
    }
    s.parallel(t, &fused)?;
    Ok(Some(fused))
}

/// The thread counts a point may choose: powers of two up to `max_threads`, and `max_threads`.
pub fn thread_choices(max_threads: usize) -> Vec<i64> {
    let max = max_threads.max(1) as i64;
    let mut out: Vec<i64> = std::iter::successors(Some(1i64), |p| Some(p * 2)).take_while(|p| *p <= max).collect();
    if !out.contains(&max) {
        out.push(max);
    }
    out
}
