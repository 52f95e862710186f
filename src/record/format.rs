//! The record of one measurement, a public format (`Record`, JSON lines): what was measured
//! (`WorkloadRef`), where (`TargetRef`), which schedule (`RecordSchedule`: the `x86_conv` knobs
//! or the auto-scheduler's point, the weights' range, the phase of the tuning run, the
//! replayable trace) and how it went.

use ir::trace::Trace;
use schedules::auto::AutoPoint;
use schedules::resnet18::WeightBits;
use schedules::x86_conv::Conv2dInt8Knobs;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};

use crate::isa::CpuId;

/// Version of the record format.
pub const RECORD_VERSION: u32 = 1;

/// What was measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadRef {
    /// Stable hash of the canonical definition.
    pub key: String,
    /// The operator family (`conv2d_int8`, `dense_int8`).
    pub op: String,
    /// Readable shapes and dtypes.
    pub summary: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuRef {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub name: String,
}

impl From<&CpuId> for CpuRef {
    fn from(c: &CpuId) -> CpuRef {
        CpuRef { vendor: c.vendor.clone(), family: c.family, model: c.model, name: c.name.clone() }
    }
}

/// Where it was measured, and what the code needs to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetRef {
    /// The ISA level the code was compiled for (`IsaLevel::name`).
    pub isa: String,
    pub cpu: CpuRef,
    /// CPU features the code needs (`std::arch::is_x86_feature_detected!` names).
    pub features: Vec<String>,
    pub threads: usize,
}

/// How a measurement ended. Only `Ok` records carry a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// The point was rejected before compiling, or compiling failed.
    BuildError,
    /// The call failed or the worker crashed.
    RunError,
    /// The output differs from the reference.
    Mismatch,
    Timeout,
    /// The host lacks the level the candidate asks for.
    UnsupportedIsa,
}

/// The part of a tuning run a measurement belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The search: one measurement per proposed point. Records written before the phase was
    /// recorded are search records.
    #[default]
    Search,
    /// The finalists measured again after the search, in rounds (`tune::tune_layer`).
    Validation,
}

/// The schedule a record measured: `{"knobs": {...}, "weights": "full" | "7bit", "phase":
/// "search" | "validation", "trace": {...} | null}` for the `x86_conv` template, or `{"auto":
/// {"sketch": ..., "values": [...]}, "weights": "full", ...}` for a point of the
/// auto-scheduler's space (`tensorlift tune op`). A record carries one of the two (records
/// written before `auto` existed all carry knobs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSchedule {
    /// The `x86_conv` knobs: what applying the record applies (the GEMM operands follow from
    /// them, the level and the weights where it is applied: `Conv2dInt8Knobs::operands`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs: Option<Conv2dInt8Knobs>,
    /// The point of the auto-scheduler's space (`schedules::auto::Space`) of the workload's
    /// definition at the record's level and threads: what applying an operator's record
    /// applies (`tune::op_tune::best_point`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoPoint>,
    /// The range of the weights it was measured on (`full` for an operator of the catalog,
    /// whose inputs are deterministic patterns over each type's whole range).
    pub weights: WeightBits,
    #[serde(default)]
    pub phase: Phase,
    /// The schedule as replayable data, when it was built (`None`: the point was rejected or
    /// failed to build, or the record was read without its trace, `without_traces`).
    #[serde(default, deserialize_with = "trace_unless_skipped")]
    pub trace: Option<Trace>,
}

std::thread_local! {
    /// Whether records read on this thread leave their traces unparsed (`without_traces`).
    static SKIP_TRACES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A record's trace, or `None` with its text only scanned where `without_traces` reads: a
/// trace is most of a record's text and the costliest part to parse, and applying a record
/// reads its knobs or point, never its trace.
fn trace_unless_skipped<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Trace>, D::Error> {
    if SKIP_TRACES.get() {
        IgnoredAny::deserialize(d)?;
        return Ok(None);
    }
    Option::<Trace>::deserialize(d)
}

/// Runs `read` with the records it deserializes on this thread read without their traces
/// (`RecordSchedule::trace` is `None`; the JSON must still be well formed).
pub fn without_traces<T>(read: impl FnOnce() -> T) -> T {
    /// Restores the flag however `read` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SKIP_TRACES.set(self.0);
        }
    }
    let _restore = Restore(SKIP_TRACES.replace(true));
    read()
}

impl RecordSchedule {
    /// Whether the two measured the same point: the same knobs and the same auto point (the
    /// weights, phase and trace aside).
    pub fn same_point(&self, other: &RecordSchedule) -> bool {
        self.knobs == other.knobs && self.auto == other.auto
    }
}

/// One measurement: the public JSON-lines format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub workload: WorkloadRef,
    pub target: TargetRef,
    pub schedule: RecordSchedule,
    pub status: Status,
    pub median_ns: Option<f64>,
    pub gops: Option<f64>,
    pub compile_ms: Option<f64>,
    pub verified: bool,
    /// RFC 3339, UTC.
    pub measured_at: String,
    /// Why a failed measurement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The peak probe's GOPS measured beside the candidate (all its threads), and which probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_probe: Option<String>,
    /// The auto-scheduler's features of the measured point (`ir::analysis::features` of its
    /// lowered function), where the search computed them: what a search of another workload on
    /// this CPU trains its cost model on before its first batch (`SearchOptions::prior`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_features: Option<Vec<f32>>,
}

impl Record {
    /// GOPS as a percentage of the probe measured beside it.
    pub fn pct_peak(&self) -> Option<f64> {
        Some(100.0 * self.gops? / self.peak_gops?)
    }

    /// Whether the measurement counts: it ran, matched the reference and has a time.
    pub fn ok(&self) -> bool {
        self.status == Status::Ok && self.verified && self.median_ns.is_some()
    }

    /// Whether it re-measured a finalist after the search (`Phase::Validation`).
    pub fn is_validation(&self) -> bool {
        self.schedule.phase == Phase::Validation
    }
}

/// The RFC 3339 time now, UTC, to the second.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
