//! The shipped prior of the learned search: measurements of the catalog's operator kinds at
//! other shapes than the suite's, stored in the repository (`tuning/prior.jsonl`, compiled into
//! the binary), that the cost model trains on before a search's first batch (`SearchOptions::prior`),
//! as Ansor, TenSet and MetaSchedule users start from a model pre-trained on other workloads.
//!
//! One JSON line per workload: the operator (`OpSpec`), its workload key, where it was measured
//! (ISA level, CPU, threads) and every search point measured, each with its features
//! (`ir::analysis::features`, rounded to 1/1000) and corrected seconds (`null`: it failed). The
//! model scores each workload's times relative to that workload alone (`cost_model`), so what
//! transfers is how points rank within a workload, not another shape's speed.
//!
//! Which measurements apply: those made at the search's ISA level on at most its threads, on any
//! CPU (a ranking of schedules at one ISA level is taken to carry over between CPUs of that
//! level; the records name their CPU), whose features have today's length. A feature change
//! makes the file stale: a test re-lowers its points and compares. `specs` lists the shapes,
//! `build` turns a table of records into the prior (`examples/build_prior.rs`).

use schedules::auto::AutoPoint;
use schedules::catalog::OpSpec;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::auto::{LoweredSpace, Sample, SearchSpace};
use super::op_bench::{OpBenchError, definition, op_workload, space_options};
use super::op_tune::op_table;
use crate::isa::IsaLevel;
use crate::record::{CpuRef, Record};

/// The shipped prior's text (`tuning/prior.jsonl`).
pub const SHIPPED: &str = include_str!("../../tuning/prior.jsonl");

/// One measured point of a prior workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriorPoint {
    pub point: AutoPoint,
    pub features: Vec<f32>,
    /// Corrected seconds per call; `None`: the measurement failed.
    pub seconds: Option<f64>,
}

/// The measurements of one workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriorWorkload {
    pub spec: OpSpec,
    /// `ir::workload::workload_key` of the spec's definition.
    pub key: String,
    /// The ISA level's name (`IsaLevel::name`).
    pub isa: String,
    pub cpu: CpuRef,
    /// Most threads a point could use.
    pub threads: usize,
    pub points: Vec<PriorPoint>,
}

#[derive(Debug, Error)]
pub enum PriorError {
    #[error("prior line {line}: expected a workload's JSON object: {source}")]
    Parse {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Bench(#[from] Box<OpBenchError>),
    #[error("{op}: expected search records of it in the table, found none")]
    Missing { op: String },
}

/// The workloads of a prior's text (one JSON object per line; blank lines skipped).
pub fn parse(text: &str) -> Result<Vec<PriorWorkload>, PriorError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|source| PriorError::Parse { line: i + 1, source }))
        .collect()
}

/// The shipped prior's workloads.
pub fn shipped() -> Result<Vec<PriorWorkload>, PriorError> {
    parse(SHIPPED)
}

/// What of `workloads` a search of workload `exclude` at `level` on at most `max_threads`
/// threads trains on: per workload measured at that level on at most those threads, with
/// features of today's length, other than `exclude`, its points' samples.
pub fn samples(workloads: &[PriorWorkload], level: IsaLevel, max_threads: usize, exclude: &str) -> Vec<Vec<Sample>> {
    let width = ir::analysis::features::Features::len();
    workloads
        .iter()
        .filter(|w| w.isa == level.name() && w.threads <= max_threads && w.key != exclude)
        .map(|w| {
            w.points
                .iter()
                .filter(|p| p.features.len() == width)
                .map(|p| Sample { features: p.features.clone(), seconds: p.seconds })
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// The operators the shipped prior measures: the suite's kinds (`OpSpec::suite`) at other
/// shapes. `scripts/search_table.py --set prior` measures the same list.
pub fn specs() -> Vec<OpSpec> {
    let conv = |ic, oc, hw, k, groups| OpSpec::Conv2d {
        ic,
        oc,
        h: hw,
        w: hw,
        kh: k,
        kw: k,
        stride: 1,
        pad: (k - 1) / 2,
        groups,
    };
    let f32mm = |m, n, k| OpSpec::Matmul { m, n, k, dtype: schedules::catalog::MatmulDtype::F32 };
    vec![
        conv(64, 64, 56, 3, 64),
        OpSpec::BatchMatmul { b: 8, m: 96, n: 128, k: 64 },
        conv(128, 256, 28, 1, 1),
        conv(64, 64, 28, 3, 1),
        f32mm(256, 256, 256),
        OpSpec::Softmax { rows: 2048, cols: 256 },
        OpSpec::Layernorm { rows: 256, cols: 1024 },
        OpSpec::Pool { c: 64, h: 56, w: 56, k: 3, stride: 2 },
        conv(128, 128, 28, 3, 128),
        OpSpec::BatchMatmul { b: 4, m: 256, n: 64, k: 96 },
        f32mm(384, 512, 256),
        OpSpec::Softmax { rows: 512, cols: 2048 },
        OpSpec::Layernorm { rows: 1024, cols: 512 },
        OpSpec::Pool { c: 32, h: 112, w: 112, k: 3, stride: 2 },
        conv(256, 256, 14, 3, 1),
        conv(256, 1024, 14, 1, 1),
    ]
}

/// The prior of `specs` from the search records of a table (`records`, measured at `level` on
/// at most `threads` threads on the CPU `cpu`): each spec's points with their features, lowered
/// now, and corrected times. A spec without records is an error.
pub fn build(
    specs: &[OpSpec],
    records: &[Record],
    level: IsaLevel,
    threads: usize,
    cpu: &CpuRef,
) -> Result<Vec<PriorWorkload>, PriorError> {
    let mut out = Vec::new();
    for spec in specs {
        let def = definition(spec).map_err(Box::new)?;
        let key = op_workload(spec, &def).key;
        let (space, measured) = op_table(spec, level, threads, records).map_err(Box::new)?;
        if measured.is_empty() {
            return Err(PriorError::Missing { op: spec.label() });
        }
        let lowered = LoweredSpace::new(&space);
        let points = measured
            .into_iter()
            .filter_map(|(point, seconds)| {
                let features = lowered.features(&point)?.into_iter().map(round).collect();
                Some(PriorPoint { point, features, seconds })
            })
            .collect();
        out.push(PriorWorkload {
            spec: spec.clone(),
            key,
            isa: level.name().to_string(),
            cpu: cpu.clone(),
            threads,
            points,
        });
    }
    Ok(out)
}

/// The workload key of `spec` (what a prior line's `key` is).
pub fn key_of(spec: &OpSpec) -> Result<String, PriorError> {
    let def = definition(spec).map_err(Box::new)?;
    Ok(op_workload(spec, &def).key)
}

/// `x` to 1/1000: the stored precision of features (the file stays small; the trees' split
/// thresholds do not need more).
pub fn round(x: f32) -> f32 {
    (x * 1000.0).round() / 1000.0
}

/// The features of `spec`'s `point` at `level` on at most `threads` threads, as the search
/// computes them now (`None`: the space rejects the point).
pub fn features_now(spec: &OpSpec, point: &AutoPoint, level: IsaLevel, threads: usize) -> Option<Vec<f32>> {
    let def = definition(spec).ok()?;
    let space = schedules::auto::Space::of(&def, space_options(level, threads));
    LoweredSpace::new(&space).features(point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::auto::{Row, SearchOptions, Strategy, TableSpace, race};

    fn level_named(name: &str) -> IsaLevel {
        IsaLevel::ALL.into_iter().find(|l| l.name() == name).expect("a known ISA level")
    }

    #[test]
    fn the_shipped_prior_is_its_specs_and_never_a_suite_workload() {
        let shipped = shipped().unwrap();
        let keys: Vec<String> = specs().iter().map(|s| op_workload(s, &definition(s).unwrap()).key).collect();
        // One prior per ISA level and thread count, each of every spec in order.
        let mut levels: Vec<(&str, usize)> = shipped.iter().map(|w| (w.isa.as_str(), w.threads)).collect();
        levels.dedup();
        assert!(!levels.is_empty());
        for (isa, threads) in levels {
            let of_level = shipped.iter().filter(|w| w.isa == isa && w.threads == threads);
            let found: Vec<String> = of_level.map(|w| w.key.clone()).collect();
            assert_eq!(found, keys, "{isa} on {threads} thread(s): regenerate tuning/prior.jsonl");
        }
        for w in &shipped {
            assert_eq!(w.key, op_workload(&w.spec, &definition(&w.spec).unwrap()).key, "{:?}", w.spec);
            assert!(w.points.iter().filter(|p| p.seconds.is_some()).count() >= 2, "{:?}", w.spec);
        }
        // A prior of the suite's own shapes would be a lookup, not a prior.
        for spec in OpSpec::suite() {
            let key = op_workload(&spec, &definition(&spec).unwrap()).key;
            assert!(!keys.contains(&key), "{} is in the prior", spec.label());
        }
    }

    #[test]
    fn every_suite_operator_at_every_shipped_level_starts_from_a_prior_of_its_kind() {
        // The suite runs at the host's default level: `avx2` on an AVX2 host, `avx512-vnni` on
        // an AVX-512 VNNI one, `amx` on an AMX one. Without a prior of that level the learned
        // search's first batch would be the random search's.
        let shipped = shipped().unwrap();
        for isa in ["avx2", "avx512-vnni", "amx"] {
            let level = level_named(isa);
            for spec in OpSpec::suite() {
                let key = op_workload(&spec, &definition(&spec).unwrap()).key;
                let of_kind = shipped.iter().filter(|w| w.isa == isa && w.threads == 1 && w.spec.kind() == spec.kind());
                assert!(of_kind.count() >= 2, "{isa} {}: fewer than two workloads of its kind", spec.label());
                let prior = samples(&shipped, level, 1, &key);
                assert_eq!(prior.len(), specs().len(), "{isa} {}", spec.label());
                assert!(
                    prior.iter().all(|w| w.iter().filter(|s| s.seconds.is_some()).count() >= 2),
                    "{isa} {}: a prior workload with fewer than two timed points",
                    spec.label()
                );
            }
        }
    }

    #[test]
    fn the_shipped_features_are_what_the_search_computes_now() {
        // A change to the features or the spaces makes the file stale: re-lower a few points
        // of every workload and compare (to the stored precision).
        for w in shipped().unwrap() {
            let level = level_named(&w.isa);
            for p in w.points.iter().step_by(40) {
                let now = features_now(&w.spec, &p.point, level, w.threads).expect("the space accepts the point");
                let now: Vec<f32> = now.into_iter().map(round).collect();
                assert_eq!(now, p.features, "{} {:?}: regenerate tuning/prior.jsonl", w.spec.label(), p.point);
            }
        }
    }

    fn workload(key: &str, isa: &str, threads: usize, width: usize) -> PriorWorkload {
        let point = |v| PriorPoint {
            point: AutoPoint { sketch: "rules".into(), values: vec![v] },
            features: vec![v as f32; width],
            seconds: Some(1.0 + v as f64),
        };
        PriorWorkload {
            spec: OpSpec::Softmax { rows: 4, cols: 4 },
            key: key.into(),
            isa: isa.into(),
            cpu: CpuRef { vendor: "v".into(), family: 1, model: 2, name: "n".into() },
            threads,
            points: (0..3).map(point).collect(),
        }
    }

    #[test]
    fn samples_keep_this_level_these_threads_todays_width_and_other_workloads() {
        let width = ir::analysis::features::Features::len();
        let all = [
            workload("a", "avx2", 1, width),
            workload("b", "scalar", 1, width),
            workload("c", "avx2", 4, width),
            workload("d", "avx2", 2, width - 1),
            workload("e", "avx2", 2, width),
        ];
        let kept = samples(&all, IsaLevel::Avx2, 2, "e");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].iter().map(|s| s.seconds).collect::<Vec<_>>(), vec![Some(1.0), Some(2.0), Some(3.0)]);
        assert_eq!(samples(&all, IsaLevel::Avx2, 4, "x").len(), 3);
        let text: String = all.iter().map(|w| serde_json::to_string(w).unwrap() + "\n").collect();
        assert_eq!(parse(&text).unwrap(), all.to_vec());
        assert!(matches!(parse("{}\n"), Err(PriorError::Parse { line: 1, .. })));
    }

    #[test]
    fn a_replay_with_the_shipped_prior_is_deterministic() {
        // One shipped workload as the table, the others as the prior (as the replay's
        // `shipped-prior` configuration runs a suite operator).
        let shipped = shipped().unwrap();
        let w = &shipped[4];
        let level = level_named(&w.isa);
        let space = schedules::auto::Space::of(&definition(&w.spec).unwrap(), space_options(level, w.threads));
        let rows: Vec<Row> = w
            .points
            .iter()
            .map(|p| Row { point: p.point.clone(), features: p.features.clone(), seconds: p.seconds })
            .collect();
        let table = TableSpace::new(LoweredSpace::new(&space).sketches(), rows);
        let prior = samples(&shipped, level, w.threads, &w.key);
        let of_level = shipped.iter().filter(|o| o.isa == w.isa && o.threads <= w.threads).count();
        assert_eq!(prior.len(), of_level - 1);
        let first = [space.default_point()];
        let learned = SearchOptions { seed: 3, batch: 8, prior, ..SearchOptions::new(32, Strategy::Evolutionary) };
        let random = SearchOptions { seed: 3, batch: 8, ..SearchOptions::new(32, Strategy::Random) };
        let once = race(&table, &first, (&learned, &random), 0.03).unwrap();
        assert!(once.random.is_some(), "{once:?}");
        assert_eq!(race(&table, &first, (&learned, &random), 0.03).unwrap(), once);
    }
}
