//! Lowering step: substitute `compute_inline` stages into their consumers.

use rustc_hash::FxHashMap as HashMap;

use crate::expr::{Expr, ExprKind};
use crate::mutator::{Mutator, substitute_map, walk_expr};
use crate::schedule::{Attach, Schedule, Stage};
use crate::te::TensorId;

/// The body of every stage that is not inlined, with every read of an inlined tensor replaced
/// by that tensor's own (already inlined) definition at the read indices.
///
/// Placeholders and inlined stages have no entry. Does not simplify the result.
pub fn inline_stages(schedule: &Schedule) -> HashMap<Stage, Expr> {
    let mut inlined: HashMap<TensorId, (Vec<crate::expr::Var>, Expr)> = HashMap::default();
    let mut bodies = HashMap::default();
    // Producers come first in `order`, so an inlined body is final before anyone reads it.
    for &stage in schedule.order() {
        let data = schedule.stage_data(stage);
        let Some(body) = &data.body else { continue };
        let body = Inliner { inlined: &inlined }.mutate_expr(body);
        if data.attach == Attach::Inline {
            let vars = data.axes.iter().map(|a| a.var().clone()).collect();
            inlined.insert(data.tensor.id(), (vars, body));
        } else {
            bodies.insert(stage, body);
        }
    }
    bodies
}

struct Inliner<'a> {
    inlined: &'a HashMap<TensorId, (Vec<crate::expr::Var>, Expr)>,
}

impl Mutator for Inliner<'_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let expr = walk_expr(self, expr);
        if let ExprKind::TensorRead(tensor, indices) = expr.kind()
            && let Some((vars, body)) = self.inlined.get(&tensor.id())
        {
            let map = vars.iter().cloned().zip(indices.iter().cloned()).collect();
            return substitute_map(body, &map);
        }
        expr
    }
}
