//! What the search needs of a space (`SearchSpace`), and its implementation for the rules'
//! space (`schedules::auto::Space`): a point's features are those of its lowered function.

use std::cell::RefCell;
use std::collections::HashMap;

use ir::analysis::features::features;
use schedules::auto::{AutoPoint, Space};

/// The domain of one sketch: its name and the choices of each of its decisions, in order.
pub type SketchDomain = (String, Vec<Vec<i64>>);

/// A space the search walks. A point is valid when its sketch is one of `sketches` and each
/// value one of its decision's choices; `features` may still reject a valid point.
pub trait SearchSpace {
    /// Every sketch with the choices of its decisions.
    fn sketches(&self) -> Vec<SketchDomain>;
    /// The point's features, all of one length; `None`: the point cannot be built (a schedule
    /// primitive rejects it), so it is never proposed.
    fn features(&self, point: &AutoPoint) -> Option<Vec<f32>>;
    /// Every point the space accepts, when it is a finite list (a table of measured points,
    /// `replay::TableSpace`) rather than every combination of `sketches`: random proposals then
    /// draw from the list. `None` (the default): draw from `sketches`.
    fn listed(&self) -> Option<Vec<AutoPoint>> {
        None
    }
}

/// `Space` as a `SearchSpace`: `Space::apply`, then `ir::lower::lower`, then
/// `ir::analysis::features`, each point's result remembered.
pub struct LoweredSpace<'a> {
    space: &'a Space,
    cache: RefCell<HashMap<AutoPoint, Option<Vec<f32>>>>,
}

impl<'a> LoweredSpace<'a> {
    pub fn new(space: &'a Space) -> LoweredSpace<'a> {
        LoweredSpace { space, cache: RefCell::new(HashMap::new()) }
    }

    pub fn space(&self) -> &Space {
        self.space
    }
}

impl SearchSpace for LoweredSpace<'_> {
    fn sketches(&self) -> Vec<SketchDomain> {
        let domain = |s: &schedules::auto::Sketch| s.decisions.iter().map(|d| d.choices.clone()).collect();
        self.space.sketches().iter().map(|s| (s.name.clone(), domain(s))).collect()
    }

    fn features(&self, point: &AutoPoint) -> Option<Vec<f32>> {
        if let Some(known) = self.cache.borrow().get(point) {
            return known.clone();
        }
        let computed = self.space.apply(point).ok().and_then(|scheduled| {
            let args: Vec<&ir::Tensor> = scheduled.args.iter().collect();
            ir::lower::lower(&scheduled.schedule, &args, "auto").ok().map(|func| features(&func).values)
        });
        self.cache.borrow_mut().insert(point.clone(), computed.clone());
        computed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::auto::search::{SearchOptions, Strategy, search};
    use ir::analysis::features::Features;
    use schedules::auto::{GENERIC, SpaceOptions};
    use schedules::catalog::{MatmulDtype, OpSpec};
    use std::collections::HashSet;

    #[test]
    fn the_generic_point_of_a_catalog_op_has_features_and_unknown_points_none() {
        let def = OpSpec::Matmul { m: 16, n: 24, k: 8, dtype: MatmulDtype::F32 }.build().unwrap();
        let space = Space::new(&def.inputs, &def.outputs, SpaceOptions::default());
        let lowered = LoweredSpace::new(&space);
        assert!(lowered.sketches().iter().any(|(name, _)| name == GENERIC));
        let f = lowered.features(&space.default_point()).expect("the generic point lowers");
        assert_eq!(f.len(), Features::len());
        let get = |name: &str| f[Features::names().iter().position(|n| n == name).unwrap()];
        // The generic matmul: 16·24 outputs, 8 multiply-adds each, in f32.
        let close = |a: f32, b: f32| (a - b).abs() < 1e-4;
        assert!(close(get("float_ops_log2"), (1.0 + 2.0 * 16.0 * 24.0 * 8.0f32).log2()));
        assert!(close(get("hot.dynamic_log2"), (1.0 + 16.0 * 24.0 * 8.0f32).log2()));
        // Remembered: the second call gives the same answer.
        assert_eq!(lowered.features(&space.default_point()), Some(f));
        let unknown = AutoPoint { sketch: "no such sketch".into(), values: vec![] };
        assert_eq!(lowered.features(&unknown), None);
    }

    #[test]
    fn a_search_of_the_rules_space_starts_at_the_default_and_measures_each_point_once() {
        let def = OpSpec::Matmul { m: 8, n: 8, k: 8, dtype: MatmulDtype::U8 }.build().unwrap();
        let space = Space::new(&def.inputs, &def.outputs, SpaceOptions::default());
        let lowered = LoweredSpace::new(&space);
        let mut measure = |points: &[AutoPoint]| vec![Some(1e-6); points.len()];
        let options =
            SearchOptions { starts: vec![space.default_point()], ..SearchOptions::new(8, Strategy::Evolutionary) };
        let log = search(&lowered, &mut measure, &options).unwrap();
        assert_eq!(log.trials.first().map(|t| &t.point), Some(&space.default_point()));
        assert!(log.trials.len() <= 8);
        let points: HashSet<&AutoPoint> = log.trials.iter().map(|t| &t.point).collect();
        assert_eq!(points.len(), log.trials.len(), "a point was measured twice");
        assert!(log.trials.iter().all(|t| lowered.features(&t.point).is_some()));
    }
}
