//! Comparing records' times on a shared machine: corrected for its slow phases by the probe
//! measured beside each record (`Phases`), with one representative record per schedule and
//! target (`representatives`).

use super::format::Record;

/// A time of `r` (seconds, or any unit shared by the records compared): `None` sorts last.
pub type TimeOf<'t> = &'t dyn Fn(&Record) -> Option<f64>;

/// Times corrected for the phases of a shared machine. Each record's probe ran beside the
/// candidate on its threads, so when the machine slows down (another tenant, the hypervisor)
/// both slow down together: the corrected time is the median time × the record's probe ÷ the
/// fastest run of the same probe on as many threads of the same CPU model among the records,
/// the time the candidate would have taken with the machine to itself. On a small shared guest
/// the two-thread probe and every two-thread candidate can run at one thread's speed for
/// seconds at a time: most of a layer's records, at times, so that the median probe is the slow
/// state, or a whole validation phase, whose records would then lose to a slower schedule
/// measured in a fast phase. Tuning, the query and `best_per_workload` all compare records by
/// it.
#[derive(Clone, Debug, Default)]
pub struct Phases {
    /// (the CPU, the probe and its threads, its highest GOPS).
    fastest: Vec<(ProbeKey, f64)>,
}

/// A probe (which method) on a number of threads of one CPU model.
type ProbeKey = ((String, u32, u32), Option<String>, usize);

fn probe_key(r: &Record) -> ProbeKey {
    let cpu = &r.target.cpu;
    ((cpu.vendor.clone(), cpu.family, cpu.model), r.peak_probe.clone(), r.target.threads)
}

impl Phases {
    pub fn of<'a>(records: impl IntoIterator<Item = &'a Record>) -> Phases {
        let mut fastest: Vec<(ProbeKey, f64)> = Vec::new();
        for r in records {
            let Some(probe) = r.peak_gops.filter(|p| *p > 0.0) else { continue };
            let key = probe_key(r);
            match fastest.iter_mut().find(|(k, _)| *k == key) {
                Some((_, fastest)) => *fastest = fastest.max(probe),
                None => fastest.push((key, probe)),
            }
        }
        Phases { fastest }
    }

    /// Whether `r` was measured with the machine near its fastest: its probe ran at `QUIET` of
    /// the fastest run of the same probe or more (a record without a probe counts). Its measured
    /// time needs little correction, so it compares as measured with records of other targets:
    /// a database keeps measured times, and the query weighs one-thread records against
    /// two-thread ones by them.
    pub fn quiet(&self, r: &Record) -> bool {
        match (r.peak_gops, self.fastest(r)) {
            (Some(probe), Some(fastest)) => probe >= QUIET * fastest,
            _ => true,
        }
    }

    /// The fastest run of `r`'s probe among the records.
    fn fastest(&self, r: &Record) -> Option<f64> {
        let key = probe_key(r);
        self.fastest.iter().find(|(k, _)| *k == key).map(|(_, p)| *p)
    }

    /// `representatives` of the `quiet` records, by corrected time.
    pub fn quiet_representatives<'a>(&self, records: impl Iterator<Item = &'a Record>) -> Vec<&'a Record> {
        self.representatives(records.filter(|r| self.quiet(r)))
    }

    /// `r`'s median time in seconds, corrected; uncorrected when it has no probe.
    pub fn seconds(&self, r: &Record) -> Option<f64> {
        Some(r.median_ns? * 1e-9 * self.factor(r))
    }

    /// The correction of `r`'s time: its probe ÷ the fastest run of that probe, bounded. The
    /// correction assumes the candidate and the probe beside it ran in the same phase; a
    /// candidate that outran its own probe (more GOPS than the peak of the method it runs) did
    /// not, so its time stands as measured; and no phase is slower than `SLOWEST_PHASE`, so a
    /// probe that read lower than that is not trusted further.
    fn factor(&self, r: &Record) -> f64 {
        match (r.peak_gops, self.fastest(r)) {
            (Some(probe), Some(fastest)) if probe > 0.0 => {
                if r.gops.is_some_and(|gops| gops > probe) {
                    1.0
                } else {
                    (probe / fastest).clamp(SLOWEST_PHASE, 1.0)
                }
            }
            _ => 1.0,
        }
    }

    /// Records by corrected time, fastest first; records without a time last.
    pub fn by_time(&self, a: &&Record, b: &&Record) -> std::cmp::Ordering {
        by(&|r| self.seconds(r), a, b)
    }

    /// `representatives` by corrected time.
    pub fn representatives<'a>(&self, records: impl Iterator<Item = &'a Record>) -> Vec<&'a Record> {
        representatives(records, &|r| self.seconds(r))
    }

    /// `r`'s GOPS, corrected likewise.
    pub fn gops(&self, r: &Record) -> Option<f64> {
        let gops = r.gops?;
        Some(gops * r.median_ns? * 1e-9 / self.seconds(r)?)
    }
}

/// The share of the fastest probe from which a record is `Phases::quiet`: a slow phase of a
/// shared guest can bring the two-thread probe down to one thread's speed, far below the
/// variation of a quiet phase, and the threshold lies between.
pub const QUIET: f64 = 0.9;

/// The slowest phase the correction believes, as a share of the fastest probe: a shared guest's
/// two-thread probe falls to one thread's speed (half) in its slow phases; a probe reading well
/// below that ran in worse conditions than its candidate.
pub const SLOWEST_PHASE: f64 = 0.4;

/// Records by `time`, fastest first; records without one last.
pub fn by(time: TimeOf, a: &Record, b: &Record) -> std::cmp::Ordering {
    time(a).unwrap_or(f64::MAX).total_cmp(&time(b).unwrap_or(f64::MAX))
}

/// One record per schedule (knobs or auto point, weights) and target (ISA level, CPU model, threads): the
/// one with the median `time`. A single measurement of a short multi-threaded layer varies
/// widely on a shared machine, so the fastest record of many would mostly be the luckiest; when
/// any record of a target is a validation record (finalists measured again, in rounds), only
/// those count for that target (another target's validation says nothing about this one's).
pub fn representatives<'a>(records: impl Iterator<Item = &'a Record>, time: TimeOf) -> Vec<&'a Record> {
    let records: Vec<&Record> = records.collect();
    let target = |r: &Record| {
        (
            r.schedule.weights,
            r.target.isa.clone(),
            (r.target.cpu.vendor.clone(), r.target.cpu.family, r.target.cpu.model),
            r.target.threads,
        )
    };
    let validated: Vec<_> = records.iter().filter(|r| r.is_validation()).map(|r| target(r)).collect();
    let key = |r: &Record| (r.schedule.knobs, r.schedule.auto.clone(), target(r));
    let mut groups: Vec<Vec<&Record>> = Vec::new();
    for r in records.into_iter().filter(|r| r.is_validation() || !validated.contains(&target(r))) {
        match groups.iter_mut().find(|g| key(g[0]) == key(r)) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            g.sort_by(|a, b| by(time, a, b));
            g[(g.len() - 1) / 2]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-thread record of `micros` at `gops`, beside a probe of `probe` GOPS.
    fn record(micros: f64, gops: f64, probe: f64) -> Record {
        serde_json::from_value(serde_json::json!({
            "version": crate::record::RECORD_VERSION,
            "workload": {"key": "k", "op": "conv2d_int8", "summary": "conv"},
            "target": {"isa": "avx2", "cpu": {"vendor": "AuthenticAMD", "family": 23, "model": 1, "name": "zen"},
                       "features": [], "threads": 1},
            "schedule": {"weights": "full", "phase": "validation"},
            "status": "ok", "median_ns": micros * 1e3, "gops": gops, "compile_ms": 1.0,
            "verified": true, "measured_at": "2026-11-26T00:00:00Z", "peak_gops": probe,
            "peak_probe": "vpmaddwd+vpaddd ymm",
        }))
        .expect("a valid record")
    }

    #[test]
    fn the_correction_is_bounded_by_the_slowest_phase_and_by_the_probe_itself() {
        let fastest = record(100.0, 38.0, 40.0);
        // Beside a probe at 80% of its fastest: corrected by 0.8.
        let slow = record(125.0, 30.4, 32.0);
        // The probe read at 30% of its fastest while the candidate beside it ran at 25 GOPS,
        // more than the probe's 12: they ran in different phases, so it stands as measured.
        let outran = record(152.0, 25.0, 12.0);
        // The probe read at 30% and the candidate below it: corrected by the slowest phase only.
        let slowest = record(400.0, 9.5, 12.0);
        let records = [fastest.clone(), slow.clone(), outran.clone(), slowest.clone()];
        let phases = Phases::of(&records);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(phases.seconds(&fastest).unwrap(), 100e-6));
        assert!(close(phases.seconds(&slow).unwrap(), 100e-6));
        assert!(close(phases.seconds(&outran).unwrap(), 152e-6));
        assert!(close(phases.seconds(&slowest).unwrap(), 160e-6));
        // GOPS follow the corrected times and never exceed what was measured beside a probe
        // that misread.
        assert!((phases.gops(&outran).unwrap() - 25.0).abs() < 1e-9);
        assert!((phases.gops(&slowest).unwrap() - 23.75).abs() < 1e-9);
    }
}
