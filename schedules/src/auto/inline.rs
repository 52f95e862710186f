//! AutoInline: which element-wise or injective producers (padding, casts, shifts) are
//! substituted into their consumers (`compute_inline`).
//!
//! A producer is inlined when it is cheap and inlining repeats no work beyond what its
//! consumers already do: it is not an output, has no reduction, every consumer's spatial loop
//! nest is no larger than the producer's (a row statistic read by every element of its row is
//! not recomputed per element), and it has one consumer or a small body.

use ir::schedule::Schedule;
use ir::{ScheduleError, Tensor};

use super::RuleNote;
use super::analysis::{StageInfo, StageKind};

/// Bodies of at most this many expression nodes are cheap enough to duplicate into several
/// consumers.
const SMALL_BODY: usize = 16;
/// Bodies above this many nodes (a polynomial `exp`) are never inlined.
const LARGE_BODY: usize = 64;

/// The stages of `stages` to inline, with a note for every injective stage saying what was
/// decided and why.
pub fn inline_candidates(stages: &[StageInfo], notes: &mut Vec<RuleNote>) -> Vec<Tensor> {
    let mut inlined = Vec::new();
    for st in stages {
        if !matches!(st.kind, StageKind::Injective) {
            continue;
        }
        let stage = st.tensor.name().to_string();
        let spatial: i64 = st.spatial.iter().map(|a| a.extent()).product();
        let widest_consumer = stages
            .iter()
            .filter(|c| c.tensor.inputs().iter().any(|t| t.id() == st.tensor.id()))
            .map(|c| c.spatial.iter().map(|a| a.extent()).product::<i64>())
            .max()
            .unwrap_or(0);
        let why_not = if st.is_output {
            Some("an output is computed at the root".to_string())
        } else if st.body_size > LARGE_BODY {
            Some(format!("its body has {} nodes (more than {LARGE_BODY}): computed once at the root", st.body_size))
        } else if st.consumers > 1 && st.body_size > SMALL_BODY {
            Some(format!("{} consumers would each recompute its {} nodes", st.consumers, st.body_size))
        } else if widest_consumer > spatial {
            Some(format!("a consumer's {widest_consumer} points would recompute its {spatial} values"))
        } else {
            None
        };
        match why_not {
            Some(why) => notes.push(RuleNote { rule: "auto-inline", stage, outcome: Err(why) }),
            None => {
                notes.push(RuleNote { rule: "auto-inline", stage, outcome: Ok("compute_inline".to_string()) });
                inlined.push(st.tensor.clone());
            }
        }
    }
    inlined
}

/// Inlines `tensors` into their consumers.
pub fn apply_inline(s: &mut Schedule, tensors: &[Tensor]) -> Result<(), ScheduleError> {
    tensors.iter().try_for_each(|t| s.compute_inline(t))
}
