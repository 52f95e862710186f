//! Offline evaluation of search strategies: a table of points measured once (a random sample of
//! an operator's space, with each point's features and time) stands in for the measurements,
//! so a search can be replayed over many seeds in seconds instead of re-measuring.
//!
//! `TableSpace` is the table as a `SearchSpace`: it accepts only the points of the table (a
//! mutation that leaves the table is rejected, as a point the space cannot build would be)
//! and lists them, so random proposals draw uniformly from the table. `race` replays what
//! `tune op` does — the baseline measured first, then the search in batches — once with the
//! learned search and once with the random search on the same seed, and counts the trials each
//! needed to reach the random search's best, as `scripts/autoschedule_suite.py` does with real
//! measurements: the baseline is not a trial of either.

use std::collections::HashMap;

use schedules::auto::AutoPoint;

use super::search::{SearchError, SearchLog, SearchOptions, Strategy, Trial, resume};
use super::space::{SearchSpace, SketchDomain};

/// One measured point of a table: its features and its seconds per call (`None`: it failed).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub point: AutoPoint,
    pub features: Vec<f32>,
    pub seconds: Option<f64>,
}

/// The points of a table, each with its features and time.
pub struct TableSpace {
    domains: Vec<SketchDomain>,
    order: Vec<AutoPoint>,
    rows: HashMap<AutoPoint, Row>,
}

impl TableSpace {
    /// The table of `rows` in a space of `domains` (the sketches mutations move within). A
    /// point listed twice keeps its first row.
    pub fn new(domains: Vec<SketchDomain>, rows: Vec<Row>) -> TableSpace {
        let mut order = Vec::new();
        let mut by_point = HashMap::new();
        for row in rows {
            if !by_point.contains_key(&row.point) {
                order.push(row.point.clone());
                by_point.insert(row.point.clone(), row);
            }
        }
        TableSpace { domains, order, rows: by_point }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The measured seconds of `point` (`None`: not in the table, or it failed).
    pub fn seconds(&self, point: &AutoPoint) -> Option<f64> {
        self.rows.get(point).and_then(|r| r.seconds)
    }

    /// The table's times of `points`, in order: the measuring function of a replay.
    pub fn measure(&self, points: &[AutoPoint]) -> Vec<Option<f64>> {
        points.iter().map(|p| self.seconds(p)).collect()
    }
}

impl SearchSpace for TableSpace {
    fn sketches(&self) -> Vec<SketchDomain> {
        self.domains.clone()
    }

    fn features(&self, point: &AutoPoint) -> Option<Vec<f32>> {
        self.rows.get(point).map(|r| r.features.clone())
    }

    fn listed(&self) -> Option<Vec<AutoPoint>> {
        Some(self.order.clone())
    }
}

/// What one replayed race found: the trials (after the baseline) each search needed to reach
/// the random search's best within the tolerance (`None`: never).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Race {
    pub learned: Option<usize>,
    pub random: Option<usize>,
}

impl Race {
    /// Whether the learned search reached the random search's best in at most half the random
    /// search's trials (the suite's target).
    pub fn learned_wins(&self) -> bool {
        matches!((self.learned, self.random), (Some(l), Some(r)) if 2 * l <= r)
    }
}

/// Replays one search on `table`: the baseline `first` measured (those in the table, the log's
/// `resumed` trials), then `options.trials` more, in batches, as `tune op` runs it.
pub fn replay(table: &TableSpace, first: &[AutoPoint], options: &SearchOptions) -> Result<SearchLog, SearchError> {
    let history: Vec<Trial> = first
        .iter()
        .filter(|p| table.rows.contains_key(*p))
        .map(|p| Trial { point: p.clone(), seconds: table.seconds(p), predicted: None })
        .collect();
    resume(table, &history, &mut |points| table.measure(points), options)
}

/// `log` without its baseline (the `resumed` trials): the search's own trials.
fn searched(log: SearchLog) -> SearchLog {
    SearchLog { trials: log.trials[log.resumed..].to_vec(), resumed: 0, held_out_spearman: log.held_out_spearman }
}

/// The race of a contender (`learned`: the learned search, or for a control another random
/// search, run with its own strategy) against the random search (`random`, run as
/// `Strategy::Random`), both after the baseline `first`: the trials each needed to reach
/// within `tolerance` of the random search's best speed, neither counting the baseline.
pub fn race(
    table: &TableSpace,
    first: &[AutoPoint],
    (learned, random): (&SearchOptions, &SearchOptions),
    tolerance: f64,
) -> Result<Race, SearchError> {
    let learned_log = searched(replay(table, first, learned)?);
    let random_log = searched(replay(table, first, &SearchOptions { strategy: Strategy::Random, ..random.clone() })?);
    let Some(best) = random_log.best().and_then(|t| t.seconds) else {
        return Ok(Race { learned: None, random: None });
    };
    // Within `tolerance` of the best speed: GOPS at least (1 - tolerance) of the best's.
    let target = best / (1.0 - tolerance);
    Ok(Race { learned: learned_log.trials_to_reach(target), random: random_log.trials_to_reach(target) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A table of 150 points of a 20×20 sketch `grid` (time a bowl around (13, 6), the
    /// features the two values) and 10 points of a slower sketch `flat`; one grid point failed.
    fn table() -> TableSpace {
        let mut rows = Vec::new();
        for i in 0..150i64 {
            let (x, y) = ((i * 7) % 20, (i * 11 + i / 20) % 20);
            let point = AutoPoint { sketch: "grid".into(), values: vec![x, y] };
            let seconds = (i != 3).then(|| 1e-3 * (1.0 + ((x - 13).pow(2) + (y - 6).pow(2)) as f64));
            rows.push(Row { point, features: vec![1.0, x as f32, y as f32], seconds });
        }
        for v in 0..10 {
            let point = AutoPoint { sketch: "flat".into(), values: vec![v] };
            rows.push(Row { point, features: vec![0.0, v as f32, -1.0], seconds: Some(0.5) });
        }
        let domains = vec![("grid".into(), vec![(0..20).collect(); 2]), ("flat".into(), vec![(0..10).collect()])];
        TableSpace::new(domains, rows)
    }

    #[test]
    fn a_replay_measures_only_table_points_once_and_is_deterministic() {
        let table = table();
        let distinct: HashSet<(i64, i64)> =
            table.order.iter().filter(|p| p.sketch == "grid").map(|p| (p.values[0], p.values[1])).collect();
        assert_eq!(table.len(), 10 + distinct.len());
        let first = [AutoPoint { sketch: "flat".into(), values: vec![0] }];
        for strategy in [Strategy::Evolutionary, Strategy::Random] {
            let options = SearchOptions { seed: 4, batch: 8, ..SearchOptions::new(40, strategy) };
            let log = replay(&table, &first, &options).unwrap();
            // The baseline, then 40 trials.
            assert_eq!((log.resumed, log.trials.len()), (1, 41));
            assert_eq!(log.trials[0].point, first[0]);
            assert!(log.trials.iter().all(|t| table.features(&t.point).is_some()), "a point outside the table");
            assert_eq!(log.trials.iter().map(|t| &t.point).collect::<HashSet<_>>().len(), 41);
            assert!(log.trials.iter().all(|t| t.seconds == table.seconds(&t.point)));
            assert_eq!(replay(&table, &first, &options).unwrap(), log, "same seed, same replay");
            let other = SearchOptions { seed: 5, ..options };
            assert_ne!(replay(&table, &first, &other).unwrap(), log);
        }
    }

    #[test]
    fn a_race_counts_the_trials_to_the_random_searchs_best() {
        let table = table();
        let first = [AutoPoint { sketch: "flat".into(), values: vec![0] }];
        let learned = SearchOptions { seed: 1, batch: 8, ..SearchOptions::new(64, Strategy::Evolutionary) };
        let random = SearchOptions { seed: 1, batch: 8, ..SearchOptions::new(64, Strategy::Random) };
        let outcome = race(&table, &first, (&learned, &random), 0.0).unwrap();
        let random_log = replay(&table, &first, &random).unwrap();
        // The baseline (the slow `flat` point) is not a trial: the count starts after it.
        let own = &random_log.trials[1..];
        let best = own.iter().filter_map(|t| t.seconds).min_by(f64::total_cmp).unwrap();
        let reached = own.iter().position(|t| t.seconds == Some(best)).map(|i| i + 1);
        assert_eq!(outcome.random, reached);
        assert_eq!(outcome, race(&table, &first, (&learned, &random), 0.0).unwrap());
        assert!(Race { learned: Some(5), random: Some(10) }.learned_wins());
        assert!(!Race { learned: Some(6), random: Some(10) }.learned_wins());
        assert!(!Race { learned: None, random: Some(10) }.learned_wins());
    }
}
