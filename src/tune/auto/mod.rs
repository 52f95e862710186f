//! The auto-scheduler's search over a space of rules (`schedules::auto::Space`): features of
//! each point's lowered function (`ir::analysis::features`), a cost model learned online from
//! the measurements (`cost_model`), proposals by evolution guided by the model (`evolve`) or at
//! random (`random`), the loop that measures batches through a caller's function (`search`),
//! and its offline twin over a table of measured points (`replay`). `space` says what the
//! search needs of a space, and implements it for the rules' space. `compiled_point` compiles
//! an applied point with the functions that prepare its constants once.

pub mod autoschedule;
pub mod compiled_point;
pub mod cost_model;
pub mod evolve;
pub mod random;
pub mod replay;
pub mod search;
pub mod space;

pub use autoschedule::{AutoOptions, AutoScheduled, AutoscheduleError, autoschedule};
pub use compiled_point::{CompiledPoint, PrepareError, PrepareKernel};
pub use cost_model::{CostModel, ModelError, ModelOptions, Sample, Target, spearman};
pub use evolve::EvolveOptions;
pub use replay::{Race, Row, TableSpace, race, replay};
pub use search::{FirstBatch, SearchError, SearchLog, SearchOptions, Strategy, Trial, propose, resume, search};
pub use space::{LoweredSpace, SearchSpace, SketchDomain};
