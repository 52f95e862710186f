//! Generic schedules: the definition's own loop order, no transformation. The reference every
//! target schedule is tested against.

use ir::Tensor;
use ir::schedule::{Schedule, create_schedule};

/// The default schedule of any operator: one root loop nest per stage, in definition order.
pub fn default_schedule(outputs: &[&Tensor]) -> Schedule {
    create_schedule(outputs)
}
