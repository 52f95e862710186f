//! The auto-scheduler's search over a space of rules (`schedules::auto::Space`): features of
//! each point's lowered function (`ir::analysis::features`), a cost model learned online from
//! the measurements (`cost_model`), proposals by evolution guided by the model (`evolve`) or at
//! random (`random`), and the loop that measures batches through a caller's function
//! (`search`). `space` says what the search needs of a space, and implements it for the
//! rules' space.

pub mod autoschedule;
pub mod cost_model;
pub mod evolve;
pub mod random;
pub mod replay;
pub mod search;
pub mod space;

pub use autoschedule::{AutoOptions, AutoScheduled, AutoscheduleError, autoschedule};
pub use cost_model::{CostModel, ModelError, ModelOptions, Sample, Target, spearman};
pub use evolve::EvolveOptions;
pub use replay::{Race, Row, TableSpace, race, replay};
pub use search::{FirstBatch, SearchError, SearchLog, SearchOptions, Strategy, Trial, propose, resume, search};
pub use space::{LoweredSpace, SearchSpace, SketchDomain};
