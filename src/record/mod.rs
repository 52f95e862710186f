//! Tuning records: the public JSON-lines format of one measured schedule (`Record`, whose
//! `RecordSchedule` holds the `x86_conv` knobs or an auto-scheduler point), database files of them (load, locked append,
//! merge), the comparison of their times on a machine with slow phases (`Phases`), the query
//! that picks the record to apply on a host (`select`), and the repository's pre-tuned database
//! (`pretuned`).
//!
//! The tuner (`tune`) writes records; `tensorlift resnet18` and the export apply them, taking
//! the record's knobs (`RecordSchedule::knobs`); `tensorlift tune op` writes and applies
//! auto-scheduler points (`RecordSchedule::auto`).

mod file;
mod format;
mod phases;
mod pretuned;
mod query;

pub use file::{Database, DbError, append, lines, merge, write};
pub use format::{
    CpuRef, Phase, RECORD_VERSION, Record, RecordSchedule, Status, TargetRef, WorkloadRef, now_rfc3339, without_traces,
};
pub use phases::{Phases, QUIET, SLOWEST_PHASE, TimeOf, by, representatives};
pub use pretuned::{PRETUNED, pretuned, pretuned_to_apply};
pub use query::{Host, best_per_workload, select};

/// Records and hosts the tests of this module's files share.
#[cfg(test)]
mod fixtures {
    use schedules::resnet18::{CONV_LAYERS, WeightBits};
    use schedules::x86_conv::{Conv2dInt8Knobs, CoreRate, default_conv_knobs};

    use super::*;
    use crate::isa::IsaLevel;

    /// R5's default knobs with `mr`.
    pub fn knobs(mr: i64) -> Conv2dInt8Knobs {
        Conv2dInt8Knobs { mr, ..default_conv_knobs(&CONV_LAYERS[4], CoreRate::FullZmmVnni, 1) }
    }

    /// A search record of workload `key` at `isa` on model `model` of AMD family 25.
    pub fn record(key: &str, isa: IsaLevel, model: u32, median_ns: f64) -> Record {
        Record {
            version: RECORD_VERSION,
            workload: WorkloadRef { key: key.into(), op: "conv2d_int8".into(), summary: "test".into() },
            target: TargetRef {
                isa: isa.name().into(),
                cpu: CpuRef { vendor: "AuthenticAMD".into(), family: 25, model, name: "test".into() },
                features: isa.features().into_iter().map(String::from).collect(),
                threads: 1,
            },
            schedule: RecordSchedule {
                knobs: Some(knobs(4)),
                auto: None,
                weights: WeightBits::Eight,
                phase: Phase::Search,
                trace: None,
            },
            status: Status::Ok,
            median_ns: Some(median_ns),
            gops: Some(1.0),
            compile_ms: Some(1.0),
            verified: true,
            measured_at: now_rfc3339(),
            error: None,
            peak_gops: None,
            peak_probe: None,
            point_features: None,
        }
    }

    /// An AVX2-only host: AMD family 25 model 1.
    pub fn avx2_host() -> Host {
        let has = |f: &str| IsaLevel::Avx2.features().contains(&f);
        Host {
            cpu: Some(CpuRef { vendor: "AuthenticAMD".into(), family: 25, model: 1, name: "avx2 host".into() }),
            level: IsaLevel::Avx2,
            has_feature: has,
        }
    }
}
