//! Which record to apply: the query for one workload on a host (`select`), and the best record
//! per workload and target that a pre-tuned database keeps (`best_per_workload`).

use super::format::{CpuRef, Record};
use super::phases::Phases;
use crate::isa::IsaLevel;

/// What the query compares records against: this machine.
#[derive(Clone, Debug)]
pub struct Host {
    pub cpu: Option<CpuRef>,
    pub level: IsaLevel,
    /// Whether the host has a CPU feature (by `is_x86_feature_detected!` name).
    pub has_feature: fn(&str) -> bool,
}

impl Host {
    /// This machine, at the level it would compile for.
    pub fn this(level: IsaLevel) -> Host {
        Host { cpu: crate::isa::cpu_id().as_ref().map(CpuRef::from), level, has_feature: crate::isa::has_feature }
    }
}

/// The record to apply for `workload` on `host`: same workload key, status ok, verified, every
/// feature it needs present on the host, a level the host compiles for; per schedule, the
/// median of its quiet (validation) records by corrected time (`Phases::quiet_representatives`:
/// a record measured in a slow phase keeps its slow time); among those, prefer the same CPU
/// model (vendor, family, model), then the same ISA level, then the same vendor and family (a
/// CPU of another model of the same family takes that family's records rather than another
/// vendor's, whose layers may have chosen other thread counts), then the fastest by corrected
/// time. `None`: use the default schedule.
pub fn select<'a>(records: impl IntoIterator<Item = &'a Record>, workload: &str, host: &Host) -> Option<&'a Record> {
    let same_family = |r: &Record| {
        host.cpu.as_ref().is_some_and(|c| r.target.cpu.vendor == c.vendor && r.target.cpu.family == c.family)
    };
    let same_cpu = |r: &Record| same_family(r) && host.cpu.as_ref().is_some_and(|c| r.target.cpu.model == c.model);
    let usable = records
        .into_iter()
        .filter(|r| r.workload.key == workload && r.ok())
        .filter(|r| r.target.features.iter().all(|f| (host.has_feature)(f)))
        .filter(|r| IsaLevel::from_name(&r.target.isa).is_ok_and(|l| l <= host.level));
    let usable: Vec<&Record> = usable.collect();
    let phases = Phases::of(usable.iter().copied());
    phases.quiet_representatives(usable.into_iter()).into_iter().min_by(|a, b| {
        let rank = |r: &Record| (!same_cpu(r), r.target.isa != host.level.name(), !same_family(r));
        rank(a).cmp(&rank(b)).then(phases.by_time(a, b))
    })
}

/// Per workload and target (ISA level, CPU vendor, family and model, weights range of the
/// schedule, threads), the fastest schedule's representative record by corrected time
/// (`Phases::quiet_representatives` of that target's records: a schedule measured mostly in a
/// slow phase is judged by its quiet records, and its representative is one of them, whose
/// time the query compares with other targets'), in first-seen order: what a pre-tuned
/// database keeps.
pub fn best_per_workload(records: &[Record]) -> Vec<Record> {
    let target = |r: &Record| {
        (
            r.workload.key.clone(),
            r.target.isa.clone(),
            r.target.cpu.vendor.clone(),
            r.target.cpu.family,
            r.target.cpu.model,
            r.schedule.weights,
            r.target.threads,
        )
    };
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let mut best: Vec<Record> = Vec::new();
    let mut seen = Vec::new();
    for r in &ok {
        if seen.contains(&target(r)) {
            continue;
        }
        seen.push(target(r));
        let same: Vec<&Record> = ok.iter().copied().filter(|o| target(o) == target(r)).collect();
        let phases = Phases::of(same.iter().copied());
        let quiet = phases.quiet_representatives(same.into_iter());
        if let Some(b) = quiet.into_iter().min_by(|a, b| phases.by_time(a, b)) {
            best.push(b.clone());
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{avx2_host, knobs, record};
    use super::super::format::{Phase, Status};
    use super::*;

    #[test]
    fn the_query_needs_the_features_then_prefers_the_cpu_model_then_the_level() {
        let host = avx2_host();
        // A faster record from a CPU with AVX-512 VNNI is never applied here.
        let vnni = record("w", IsaLevel::Avx512Vnni, 17, 10.0);
        assert_eq!(select(std::slice::from_ref(&vnni), "w", &host), None);
        // Same model beats a faster record from another model; same level beats a lower one.
        let other_model = record("w", IsaLevel::Avx2, 33, 20.0);
        let same_model = record("w", IsaLevel::Avx2, 1, 30.0);
        let same_model_scalar = record("w", IsaLevel::Scalar, 1, 25.0);
        let all = [vnni, other_model.clone(), same_model_scalar.clone(), same_model.clone()];
        assert_eq!(select(&all, "w", &host), Some(&same_model));
        assert_eq!(select(&all[..3], "w", &host), Some(&same_model_scalar));
        assert_eq!(select(&all[..2], "w", &host), Some(&other_model));
        // Among other models at the level, the same vendor and family beats a faster record.
        let mut intel = record("w", IsaLevel::Avx2, 167, 15.0);
        (intel.target.cpu.vendor, intel.target.cpu.family) = ("GenuineIntel".into(), 6);
        assert_eq!(select([&intel, &other_model], "w", &host), Some(&other_model));
        assert_eq!(select([&intel, &all[2]], "w", &host), Some(&all[2]));
        let zen4_scalar = record("w", IsaLevel::Scalar, 17, 20.0);
        assert_eq!(select([&zen4_scalar, &intel], "w", &host), Some(&intel));
        // Other workloads, failed or unverified measurements never serve.
        assert_eq!(select(&all, "other", &host), None);
        let failed = Record { status: Status::Timeout, median_ns: None, ..same_model.clone() };
        let unverified = Record { verified: false, ..same_model.clone() };
        assert_eq!(select(&[failed, unverified], "w", &host), None);
        // A host forced down to scalar does not take avx2 records.
        let scalar_host = Host { level: IsaLevel::Scalar, ..avx2_host() };
        assert_eq!(select(&all, "w", &scalar_host), Some(&same_model_scalar));
    }

    #[test]
    fn a_targets_search_record_serves_where_only_another_target_was_validated() {
        // A pre-tuned database keeps one record per target: here a search record of this
        // level (its finalists' validation was not quiet) beside a validated record of a lower
        // level. The validation of one target says nothing of another's records.
        let host = avx2_host();
        let this_level = record("w", IsaLevel::Avx2, 1, 30.0);
        let mut lower = record("w", IsaLevel::Scalar, 1, 90.0);
        lower.schedule.phase = Phase::Validation;
        assert_eq!(select([&lower, &this_level], "w", &host), Some(&this_level));
        // Within one target a validated record still outranks search records.
        let mut validated = record("w", IsaLevel::Avx2, 1, 40.0);
        validated.schedule.phase = Phase::Validation;
        assert_eq!(select([&lower, &this_level, &validated], "w", &host), Some(&validated));
    }

    #[test]
    fn the_query_and_the_pretuned_best_judge_schedules_by_their_quiet_records() {
        let host = avx2_host();
        let measured = |mr: i64, threads: usize, median_ns: f64, probe: f64| {
            let mut r = Record {
                peak_gops: Some(probe),
                peak_probe: Some("vpmaddwd+vpaddd ymm".into()),
                ..record("w", IsaLevel::Avx2, 1, median_ns)
            };
            (r.schedule.knobs, r.schedule.phase) = (Some(knobs(mr)), Phase::Validation);
            r.target.threads = threads;
            r
        };
        // Two threads: mr 4 was measured twice in a slow phase (its probe at half speed) and
        // once in a quiet one; mr 8 three times in quiet ones. By measured medians mr 8 would
        // win (685 against 450 ns); by corrected ones alone mr 4 would, but its representative
        // would be a slow record, which the query would weigh against the one-thread record
        // (500 ns) as 690 ns.
        let records: Vec<Record> = [
            (4, 2, 690.0, 190.0),
            (8, 2, 448.0, 375.0),
            (4, 2, 685.0, 191.0),
            (8, 2, 450.0, 380.0),
            (4, 2, 350.0, 381.0),
            (8, 2, 455.0, 379.0),
            (2, 1, 500.0, 190.0),
        ]
        .into_iter()
        .map(|(mr, threads, ns, probe)| measured(mr, threads, ns, probe))
        .collect();
        let chosen = |r: &Record| (r.schedule.knobs.map(|k| k.mr), r.median_ns);
        assert_eq!(select(&records, "w", &host).map(chosen), Some((Some(4), Some(350.0))));
        let best = best_per_workload(&records);
        assert_eq!(best.iter().map(chosen).collect::<Vec<_>>(), [(Some(4), Some(350.0)), (Some(2), Some(500.0))]);
        // Slow records are corrected by the fastest run of their probe on as many threads of
        // the same CPU: another CPU's faster run does not count.
        let mut xeon = measured(2, 2, 100.0, 760.0);
        (xeon.target.cpu.vendor, xeon.target.cpu.family, xeon.target.cpu.model) = ("GenuineIntel".into(), 6, 167);
        let phases = Phases::of(records.iter().chain([&xeon]));
        let seconds = |r: &Record| phases.seconds(r).expect("a time");
        for (r, expected) in [(&records[0], 690e-9 * 190.0 / 381.0), (&records[4], 350e-9), (&xeon, 100e-9)] {
            assert!((seconds(r) - expected).abs() < 1e-15, "{} against {expected}", seconds(r));
        }
        assert!(!phases.quiet(&records[0]) && phases.quiet(&records[1]) && phases.quiet(&xeon));
    }
}
