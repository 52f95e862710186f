//! Loop partitioning: a serial loop whose body compares its variable against constants (the
//! select of a padding stage, a read clamped into a tensor) is split into a prologue, a steady
//! state and an epilogue, so that `simplify` decides the comparisons in the steady state and the
//! vectorizer sees its reads as dense ramps (Halide's `PartitionLoops`, without `likely`).

use rustc_hash::FxHashMap as HashMap;

use rustc_hash::FxHashMap;

use crate::analysis::linear::Linear;
use crate::dtype::DType;
use crate::expr::{BinOp, CmpOp, Expr, ExprKind, Var};
use crate::mutator::{Mutator, for_each_stmt, substitute_map, substitute_stmt, walk_stmt};
use crate::stmt::{ForKind, Func, Stmt, StmtKind};

/// Splits every `Serial` loop `for v in 0..E` whose body holds comparisons that change value
/// inside `0..E` into up to three loops over consecutive ranges, each a copy of the body with
/// `v` replaced by `v + start`. The middle loop is the longest range over which every such
/// comparison is decided.
///
/// A comparison counts when it is an `i64` `<`, `<=`, `>`, `>=`, `min` or `max` in an expression
/// (not an `If` condition: tail guards stay, so tensorized bodies are not copied) whose operands
/// differ by `c·v + Σ cᵢ·uᵢ + k`, with the `uᵢ` variables of loops inside the body (their range is
/// known) or lets inside it that expand to such forms. Inner loops are partitioned first.
///
/// Does not simplify the copies (`simplify` decides the comparisons afterwards), rename the
/// variables bound inside the body (the copies bind them in sibling scopes, which the IR allows),
/// or partition parallel loops (their iterations are already independent work items).
pub fn partition_loops(func: &Func) -> Func {
    let body = PartitionLoops.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct PartitionLoops;

impl Mutator for PartitionLoops {
    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        let walked = walk_stmt(self, stmt);
        let StmtKind::For { var, extent, kind: ForKind::Serial, body } = walked.kind() else {
            return walked;
        };
        let Some((lo, hi)) = steady_range(var, *extent, body) else { return walked };
        let part = |start: i64, end: i64| {
            let shifted = match start {
                0 => body.clone(),
                _ => substitute_stmt(body, &HashMap::from_iter([(var.clone(), var.to_expr() + Expr::index(start))])),
            };
            Stmt::for_loop(var.clone(), end - start, ForKind::Serial, shifted)
        };
        let ranges = [(0, lo), (lo, hi), (hi, *extent)];
        Stmt::seq(ranges.into_iter().filter(|(s, e)| e > s).map(|(s, e)| part(s, e)).collect())
    }
}

/// The longest range `[lo, hi)` of `0..extent` without a point where a comparison of `body`
/// may change value, if it is not the whole loop.
fn steady_range(var: &Var, extent: i64, body: &Stmt) -> Option<(i64, i64)> {
    let mut inner = Inner::default();
    inner.collect(body);
    let mut points = vec![0, extent];
    inner.comparisons(body, &mut |difference, strict| {
        let expanded = inner.expand(difference);
        if let Some((c, min, max)) = inner.linear_in(var, &expanded) {
            // `d > 0` is `d - 1 ≥ 0`.
            let shift = i128::from(strict);
            points.extend(breakpoints(c, min - shift, max - shift));
        }
    });
    points.retain(|p| (0..=extent).contains(p));
    points.sort_unstable();
    points.dedup();
    let (lo, hi) = points.windows(2).map(|w| (w[0], w[1])).max_by_key(|(a, b)| (b - a, -a))?;
    (hi - lo < extent).then_some((lo, hi))
}

/// The values of `v` from which `c·v + r ≥ 0` may hold for some `r` in `[min, max]`, and from
/// which it holds for all (or the reverse for `c < 0`): the two points where the test can change
/// value.
fn breakpoints(c: i64, min: i128, max: i128) -> [i64; 2] {
    let c = c as i128;
    let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    if c > 0 {
        // `c·v + r ≥ 0` ⟺ `v ≥ -r/c`.
        [clamp(ceil_div(-max, c)), clamp(ceil_div(-min, c))]
    } else {
        // `|c|·v ≤ r` ⟺ `v ≤ floor(r/|c|)`: changes after `floor(min/|c|)` and `floor(max/|c|)`.
        [clamp(min.div_euclid(-c) + 1), clamp(max.div_euclid(-c) + 1)]
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    -((-a).div_euclid(b))
}

/// What the body binds: the ranges of its loops and the values of its lets.
#[derive(Default)]
struct Inner {
    ranges: FxHashMap<Var, i64>,
    lets: HashMap<Var, Expr>,
}

impl Inner {
    fn collect(&mut self, body: &Stmt) {
        for_each_stmt(body, &mut |s| match s.kind() {
            StmtKind::For { var, extent, .. } => {
                self.ranges.insert(var.clone(), *extent);
            }
            StmtKind::Let { var, value, .. } if value.dtype() == DType::INDEX => {
                self.lets.insert(var.clone(), value.clone());
            }
            _ => {}
        });
    }

    /// Calls `f(a - b, strict)` for every counted comparison of `a` and `b` in the expressions
    /// of `stmt` (lets and stores; not `If` conditions): its value is that of `a - b > 0` if
    /// `strict`, else of `a - b ≥ 0` (`min` and `max` are decided wherever that is, as both
    /// operands are equal at 0).
    fn comparisons(&self, stmt: &Stmt, f: &mut dyn FnMut(&Expr, bool)) {
        let mut visit = |e: &Expr| {
            e.for_each(&mut |n| match n.kind() {
                ExprKind::Cmp(op @ (CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge), a, b)
                    if a.dtype() == DType::INDEX =>
                {
                    f(&(a.clone() - b.clone()), matches!(op, CmpOp::Le | CmpOp::Gt))
                }
                ExprKind::Binary(BinOp::Min | BinOp::Max, a, b) if a.dtype() == DType::INDEX => {
                    f(&(a.clone() - b.clone()), false)
                }
                _ => {}
            })
        };
        for_each_stmt(stmt, &mut |s| match s.kind() {
            StmtKind::Let { value, .. } => visit(value),
            StmtKind::Store { indices, value, .. } => {
                indices.iter().for_each(&mut visit);
                visit(value);
            }
            _ => {}
        });
    }

    /// `e` with the body's lets substituted (lets may refer to earlier lets).
    fn expand(&self, e: &Expr) -> Expr {
        let mut e = e.clone();
        for _ in 0..4 {
            let next = substitute_map(&e, &self.lets);
            if next.structurally_eq(&e) {
                break;
            }
            e = next;
        }
        e
    }

    /// `(c, min, max)` when `e` is `c·var + r` with `c ≠ 0` and `r` in `[min, max]` over the
    /// body's loops.
    fn linear_in(&self, var: &Var, e: &Expr) -> Option<(i64, i128, i128)> {
        let form = Linear::of(e);
        let (mut c, mut min, mut max) = (0, form.constant as i128, form.constant as i128);
        for (term, coeff) in &form.terms {
            let v = term.as_var()?;
            if v == var {
                c += coeff;
                continue;
            }
            let top = (*self.ranges.get(v)? - 1) as i128 * *coeff as i128;
            min += top.min(0);
            max += top.max(0);
        }
        (c != 0).then_some((c, min, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::select;
    use crate::passes::simplify::simplify;
    use crate::passes::testing::assert_same_results;
    use crate::stmt::Buffer;

    /// `out[j] = 0 <= j - 3 < 10 ? a[clamp(j - 3, 0, 9)] : 7` over 16 lanes per iteration: a
    /// padding stage.
    fn padding(vectorized: bool) -> Func {
        let a = Buffer::new("a", DType::I32, vec![10]);
        let out = Buffer::new("out", DType::I32, vec![16]);
        let (jo, ji, j) = (Var::index("jo"), Var::index("ji"), Var::index("j"));
        let x = j.to_expr() - 3;
        let clamped = Expr::binary(BinOp::Min, Expr::binary(BinOp::Max, x.clone(), Expr::index(0)), Expr::index(9));
        let inside = x.clone().ge(0) & x.lt(10);
        let value = select(inside, Expr::load(&a, vec![clamped]), Expr::int(DType::I32, 7));
        let kind = if vectorized { ForKind::Vectorized } else { ForKind::Serial };
        let lanes = Stmt::for_loop(
            ji.clone(),
            4,
            kind,
            Stmt::let_stmt(j.clone(), jo.to_expr() * 4 + ji.to_expr(), Stmt::store(&out, vec![j.to_expr()], value)),
        );
        Func { name: "pad".into(), params: vec![a, out], body: Stmt::for_loop(jo, 4, ForKind::Serial, lanes) }
    }

    #[test]
    fn padding_loops_split_around_the_interior() {
        let f = padding(true);
        let p = simplify(&partition_loops(&f));
        // Iterations 1 and 2 (j in 4..12) read inside `a`; 0 and 3 need the select.
        assert_eq!(
            format!("{p}"),
            "func pad(a: i32[10], out: i32[16]) {
  vectorized ji in 0..4 {
    out[ji] = select(ji - 3 >= 0, a[0], 7i32)
  }
  for jo in 0..2 {
    vectorized ji in 0..4 {
      let j = jo*4 + ji + 4
      out[j] = a[j - 3]
    }
  }
  vectorized ji in 0..4 {
    let j = ji + 12
    out[j] = select(j - 3 < 10, a[9], 7i32)
  }
}
"
        );
        assert_same_results(&f, &p);
    }

    #[test]
    fn serial_lane_loops_split_the_same_way_and_decided_loops_stay() {
        let f = padding(false);
        let p = partition_loops(&f);
        assert!(matches!(p.body.kind(), StmtKind::Seq(parts) if parts.len() == 3), "{p}");
        assert_same_results(&f, &p);
        // Nothing to split: the comparisons of this copy never change value.
        let a = Buffer::new("a", DType::I32, vec![8]);
        let i = Var::index("i");
        let store = Stmt::store(
            &a,
            vec![i.to_expr()],
            select(i.to_expr().ge(0), Expr::int(DType::I32, 1), Expr::int(DType::I32, 2)),
        );
        let g = Func { name: "g".into(), params: vec![a], body: Stmt::for_loop(i, 8, ForKind::Serial, store) };
        assert_eq!(format!("{}", partition_loops(&g)), format!("{g}"));
    }

    #[test]
    fn negative_coefficients_split_too() {
        // `out[i] = a[min(9 - i, 5)]`: the min is 5 up to i = 4 and `9 - i` from i = 5 on.
        let a = Buffer::new("a", DType::I32, vec![10]);
        let out = Buffer::new("out", DType::I32, vec![10]);
        let i = Var::index("i");
        let idx = Expr::binary(BinOp::Min, Expr::index(9) - i.to_expr(), Expr::index(5));
        let store = Stmt::store(&out, vec![i.to_expr()], Expr::load(&a, vec![idx]));
        let f = Func { name: "rev".into(), params: vec![a, out], body: Stmt::for_loop(i, 10, ForKind::Serial, store) };
        let p = simplify(&partition_loops(&f));
        assert!(
            format!("{p}")
                .contains("for i in 0..5 {\n    out[i] = a[5]\n  }\n  for i in 0..5 {\n    out[i + 5] = a[4 - i]"),
            "{p}"
        );
        assert_same_results(&f, &p);
    }
}
