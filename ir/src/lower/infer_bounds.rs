//! Lowering step: the region of each stage that must be computed.

use rustc_hash::FxHashMap as HashMap;

use crate::expr::{BinOp, Expr, ExprKind, Var};
use crate::schedule::{Attach, Schedule, Stage, StageData};
use crate::te::{IterVar, Tensor};

/// The box of a stage's index space that is computed: per data-parallel root axis, the first
/// index (an expression of enclosing loop variables) and a constant extent.
#[derive(Clone, Debug)]
pub struct Region {
    pub dims: Vec<(Expr, i64)>,
}

impl Region {
    fn full(shape: &[i64]) -> Region {
        Region { dims: shape.iter().map(|&e| (Expr::index(0), e)).collect() }
    }

    /// The shape of the buffer holding the region (of a stage computed at a loop).
    pub fn extents(&self) -> Vec<i64> {
        self.dims.iter().map(|(_, e)| *e).collect()
    }
}

/// The region of every non-inlined compute stage.
///
/// Root stages cover their whole shape. A stage computed at loop `a` of consumer `C` covers the
/// union of what one iteration of `a` reads: loops of `C` outside and at `a` are fixed, loops
/// inside `a` range over their extents. Index expressions affine in the inner loops give a
/// tight box whose extent is a constant; anything else (or reads whose fixed parts differ by more
/// than a constant) falls back to the whole dimension, which is always correct. Does not clamp
/// the box to the stage's shape: `build_loop_nests` guards indices outside it.
pub fn infer_bounds(schedule: &Schedule, bodies: &HashMap<Stage, Expr>) -> HashMap<Stage, Region> {
    let mut regions: HashMap<Stage, Region> = HashMap::default();
    // Consumers come after producers in `order`, so walk it backwards.
    for &stage in schedule.order().iter().rev() {
        if !bodies.contains_key(&stage) {
            continue;
        }
        let data = schedule.stage_data(stage);
        let region = match &data.attach {
            Attach::At { stage: consumer, axis } => {
                let consumer_data = schedule.stage_data(*consumer);
                let consumer_region = &regions[consumer];
                region_read_at(data.tensor.clone(), consumer_data, consumer_region, &bodies[consumer], axis)
            }
            Attach::Root | Attach::Inline => Region::full(data.tensor.shape()),
        };
        regions.insert(stage, region);
    }
    regions
}

/// The root extents of a stage computing `region` (data-parallel axes from the region,
/// reduction axes from their declaration).
pub(crate) fn root_extents(data: &StageData, region: &Region) -> HashMap<IterVar, i64> {
    let mut extents: HashMap<IterVar, i64> =
        data.axes.iter().zip(&region.dims).map(|(a, (_, e))| (a.clone(), *e)).collect();
    for r in &data.reduce_axes {
        extents.insert(r.clone(), r.extent());
    }
    extents
}

/// The value of every root axis of `data` (the global index for data-parallel axes) in terms of
/// its leaf loop variables, when it computes `region`.
pub(crate) fn root_values(
    data: &StageData,
    region: &Region,
    extents: &HashMap<IterVar, i64>,
) -> HashMap<IterVar, Expr> {
    let values = data.pass_up_values(extents);
    let mut res = HashMap::default();
    for (axis, (min, _)) in data.axes.iter().zip(&region.dims) {
        let value = if min.as_int() == Some(0) { values[axis].clone() } else { min.clone() + values[axis].clone() };
        res.insert(axis.clone(), value);
    }
    for r in &data.reduce_axes {
        res.insert(r.clone(), values[r].clone());
    }
    res
}

fn region_read_at(
    producer: Tensor,
    consumer: &StageData,
    consumer_region: &Region,
    body: &Expr,
    at: &IterVar,
) -> Region {
    let extents = consumer.pass_down_extents(&root_extents(consumer, consumer_region));
    let roots = root_values(consumer, consumer_region, &extents);
    let root_map: HashMap<Var, Expr> = roots.iter().map(|(a, v)| (a.var().clone(), v.clone())).collect();
    let pos = consumer.leaves.iter().position(|l| l == at).expect("attach axis is a leaf");
    let inner: HashMap<Var, i64> = consumer.leaves[pos + 1..].iter().map(|l| (l.var().clone(), extents[l])).collect();

    let mut reads: Vec<Vec<Expr>> = Vec::new();
    body.for_each(&mut |e| {
        if let ExprKind::TensorRead(t, idx) = e.kind()
            && *t == producer
        {
            reads.push(idx.iter().map(|i| crate::mutator::substitute_map(i, &root_map)).collect());
        }
    });
    let shape = producer.shape();
    let dims = (0..shape.len())
        .map(|d| {
            let box_d = reads.iter().map(|idx| affine_box(&idx[d], &inner)).collect::<Option<Vec<_>>>();
            union(box_d.unwrap_or_default())
                .filter(|(_, extent)| *extent < shape[d])
                .unwrap_or((Expr::index(0), shape[d]))
        })
        .collect();
    Region { dims }
}

/// An index as `fixed + lo ..= fixed + hi`, where `fixed` does not involve the inner loops.
struct AffineBox {
    fixed: Linear,
    lo: i64,
    hi: i64,
}

fn affine_box(index: &Expr, inner: &HashMap<Var, i64>) -> Option<AffineBox> {
    let lin = Linear::of(index);
    let mut fixed = Linear { terms: Vec::new(), constant: 0 };
    let (mut lo, mut hi) = (lin.constant, lin.constant);
    for (term, coeff) in lin.terms {
        match &term {
            Term::Var(v) if inner.contains_key(v) => {
                let span = coeff * (inner[v] - 1);
                if span < 0 { lo += span } else { hi += span }
            }
            Term::Opaque(e) if inner.keys().any(|v| e.uses_var(v)) => return None,
            _ => fixed.terms.push((term, coeff)),
        }
    }
    Some(AffineBox { fixed, lo, hi })
}

/// The smallest box holding all boxes, if they share their fixed part.
fn union(boxes: Vec<AffineBox>) -> Option<(Expr, i64)> {
    let first = boxes.first()?;
    if boxes.iter().any(|b| !b.fixed.same_terms(&first.fixed)) {
        return None;
    }
    let lo = boxes.iter().map(|b| b.lo).min()?;
    let hi = boxes.iter().map(|b| b.hi).max()?;
    let min = match (first.fixed.to_expr(), lo) {
        (None, lo) => Expr::index(lo),
        (Some(fixed), 0) => fixed,
        (Some(fixed), lo) => fixed + lo,
    };
    Some((min, hi - lo + 1))
}

enum Term {
    Var(Var),
    /// A subexpression that is not a sum of scaled variables.
    Opaque(Expr),
}

impl Term {
    fn same(&self, other: &Term) -> bool {
        match (self, other) {
            (Term::Var(a), Term::Var(b)) => a == b,
            (Term::Opaque(a), Term::Opaque(b)) => a.structurally_eq(b),
            _ => false,
        }
    }
}

/// An `i64` expression as `Σ coeff·term + constant`, with like terms merged.
struct Linear {
    terms: Vec<(Term, i64)>,
    constant: i64,
}

impl Linear {
    fn of(e: &Expr) -> Linear {
        match e.kind() {
            ExprKind::Int(c) => Linear { terms: Vec::new(), constant: *c },
            ExprKind::Var(v) => Linear { terms: vec![(Term::Var(v.clone()), 1)], constant: 0 },
            ExprKind::Binary(BinOp::Add, a, b) => Linear::of(a).add(Linear::of(b), 1),
            ExprKind::Binary(BinOp::Sub, a, b) => Linear::of(a).add(Linear::of(b), -1),
            ExprKind::Binary(BinOp::Mul, a, b) if b.as_int().is_some() => Linear::of(a).scale(b.as_int().unwrap()),
            ExprKind::Binary(BinOp::Mul, a, b) if a.as_int().is_some() => Linear::of(b).scale(a.as_int().unwrap()),
            _ => Linear { terms: vec![(Term::Opaque(e.clone()), 1)], constant: 0 },
        }
    }

    fn scale(mut self, k: i64) -> Linear {
        self.terms.iter_mut().for_each(|(_, c)| *c *= k);
        self.constant *= k;
        self.terms.retain(|(_, c)| *c != 0);
        self
    }

    fn add(mut self, other: Linear, sign: i64) -> Linear {
        for (term, coeff) in other.terms {
            match self.terms.iter_mut().find(|(t, _)| t.same(&term)) {
                Some((_, c)) => *c += sign * coeff,
                None => self.terms.push((term, sign * coeff)),
            }
        }
        self.constant += sign * other.constant;
        self.terms.retain(|(_, c)| *c != 0);
        self
    }

    fn same_terms(&self, other: &Linear) -> bool {
        self.terms.len() == other.terms.len()
            && self.terms.iter().all(|(t, c)| other.terms.iter().any(|(u, d)| t.same(u) && c == d))
    }

    /// The terms as an expression (the constant is left out); `None` if there are none.
    fn to_expr(&self) -> Option<Expr> {
        self.terms.iter().fold(None, |acc, (term, coeff)| {
            let e = match term {
                Term::Var(v) => v.to_expr(),
                Term::Opaque(e) => e.clone(),
            };
            let e = if *coeff == 1 { e } else { e * *coeff };
            Some(match acc {
                None => e,
                Some(acc) => acc + e,
            })
        })
    }
}
