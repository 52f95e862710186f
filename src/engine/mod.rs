//! The engine: a partitioned graph compiled for this CPU and run (`tensorlift run`).
//!
//! * `native`: the engine's own loops for the partitions that move little data.

pub mod native;
