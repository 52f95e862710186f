//! `ProvenPlans`: the operand plans that `Schedule::tensorize`'s proof found, kept with the
//! schedule so that lowering emits each call from its proof instead of proving it again
//! (`tensorize::plan` is a pure function of the schedule, the stage and its request).
//!
//! A plan holds for the schedule as it was when proven. The schedule forgets them all when a
//! stage or the list of stages changes (`Schedule::data_mut`, `Schedule::push_stage`), and a
//! stage's own when its request is replaced (no other plan reads another stage's request).
//! Lowering takes a kept plan only where the regions it read are named as the proof saw them
//! (`lower::build_loop_nests` renames some); debug builds plan again there and compare.

use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use crate::schedule::Stage;
use crate::tensorize::PlannedOperand;

/// Proven plans by stage (interior mutability: the proof runs on a shared schedule).
#[derive(Clone, Default)]
pub(crate) struct ProvenPlans(RefCell<HashMap<Stage, Rc<[PlannedOperand]>>>);

impl ProvenPlans {
    /// The plan proven for `stage` on the schedule as it is, if kept.
    pub(crate) fn get(&self, stage: Stage) -> Option<Rc<[PlannedOperand]>> {
        self.0.borrow().get(&stage).cloned()
    }

    /// Keeps `plan`, just proven for `stage` on the schedule as it is.
    pub(crate) fn keep(&self, stage: Stage, plan: Vec<PlannedOperand>) {
        self.0.borrow_mut().insert(stage, plan.into());
    }

    /// Forgets the plan of `stage` (its request changes).
    pub(crate) fn forget(&mut self, stage: Stage) {
        self.0.get_mut().remove(&stage);
    }

    /// Forgets every plan (a stage or the list of stages changes).
    pub(crate) fn forget_all(&mut self) {
        let plans = self.0.get_mut();
        if !plans.is_empty() {
            plans.clear();
        }
    }
}

impl fmt::Debug for ProvenPlans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProvenPlans({} stages)", self.0.borrow().len())
    }
}
