//! Linear forms of `i64` index expressions: `Σ coeff * term + constant`.

use crate::dtype::DType;
use crate::expr::{BinOp, Expr, ExprKind, Var};

/// `Σ coeff * term + constant`. Coefficients wrap like `i64` arithmetic does, so a form is exact
/// in the ring of `i64` whatever the values; terms are distinct up to structural equality and
/// kept in order of first appearance.
#[derive(Clone, Debug, Default)]
pub struct Linear {
    pub terms: Vec<(Expr, i64)>,
    pub constant: i64,
}

impl Linear {
    /// The linear form of a scalar `i64` expression: `+`, `-`, multiplication by a constant and
    /// constants are decomposed; every other node (including a product of two non-constants) is
    /// a term.
    pub fn of(e: &Expr) -> Linear {
        let mut lin = Linear::default();
        lin.add(e, 1);
        lin
    }

    /// Adds `scale * e`, decomposed as in `of`.
    pub fn add(&mut self, e: &Expr, scale: i64) {
        match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::INDEX => {
                self.constant = self.constant.wrapping_add(scale.wrapping_mul(*v))
            }
            ExprKind::Binary(BinOp::Add, a, b) if e.dtype() == DType::INDEX => {
                self.add(a, scale);
                self.add(b, scale);
            }
            ExprKind::Binary(BinOp::Sub, a, b) if e.dtype() == DType::INDEX => {
                self.add(a, scale);
                self.add(b, scale.wrapping_neg());
            }
            ExprKind::Binary(BinOp::Mul, a, b) if e.dtype() == DType::INDEX && b.as_int().is_some() => {
                self.add(a, scale.wrapping_mul(b.as_int().unwrap()))
            }
            ExprKind::Binary(BinOp::Mul, a, b) if e.dtype() == DType::INDEX && a.as_int().is_some() => {
                self.add(b, scale.wrapping_mul(a.as_int().unwrap()))
            }
            _ => self.add_term(e.clone(), scale),
        }
    }

    /// Adds `coeff * term` for a term that is not decomposed further.
    pub fn add_term(&mut self, term: Expr, coeff: i64) {
        match self.terms.iter_mut().find(|(t, _)| t.structurally_eq(&term)) {
            Some((_, c)) => *c = c.wrapping_add(coeff),
            None => self.terms.push((term, coeff)),
        }
    }

    /// Folds `k·c·(a / c) + k·(a % c)` into `k·a` for `i64` floor division and modulo by a
    /// positive constant `c` (`a = c·(a / c) + a % c` exactly).
    pub fn recombine_div_mod(&mut self) {
        let mut i = 0;
        while i < self.terms.len() {
            let (term, coeff) = self.terms[i].clone();
            let ExprKind::Binary(BinOp::Div, a, c) = term.kind() else {
                i += 1;
                continue;
            };
            let Some(c) = c.as_int().filter(|c| *c > 0) else {
                i += 1;
                continue;
            };
            let is_mod = |t: &Expr| matches!(t.kind(), ExprKind::Binary(BinOp::Mod, b, d) if d.as_int() == Some(c) && b.structurally_eq(a));
            let matching = self.terms.iter().position(|(t, k)| is_mod(t) && k.checked_mul(c) == Some(coeff) && *k != 0);
            let Some(j) = matching else {
                i += 1;
                continue;
            };
            let (scale, a) = (self.terms[j].1, a.clone());
            self.terms[i].1 = 0;
            self.terms[j].1 = 0;
            self.add(&a, scale);
            i += 1;
        }
        self.terms.retain(|(_, c)| *c != 0);
    }

    /// True if both have the same non-zero terms with the same coefficients and the same
    /// constant, in any order.
    pub fn same_as(&self, other: &Linear) -> bool {
        let nonzero = |l: &Linear| l.terms.iter().filter(|(_, c)| *c != 0).count();
        self.constant == other.constant
            && nonzero(self) == nonzero(other)
            && self
                .terms
                .iter()
                .filter(|(_, c)| *c != 0)
                .all(|(t, c)| other.terms.iter().any(|(u, d)| c == d && t.structurally_eq(u)))
    }

    /// True if the form is exactly `Σ k·v` over `want` (distinct variables, non-zero
    /// coefficients): no constant and no other non-zero term.
    pub fn is_sum_of(&self, want: &[(&Var, i64)]) -> bool {
        let mut nonzero = self.terms.iter().filter(|(_, k)| *k != 0);
        self.constant == 0
            && nonzero.clone().count() == want.len()
            && nonzero.all(|(t, k)| want.iter().any(|(v, w)| w == k && t.as_var() == Some(*v)))
    }

    /// The canonical expression: positive terms in order, then negative ones subtracted, then
    /// the constant (`b*8 + c - a - 3`); `k - x` when no term is positive.
    pub fn to_expr(&self) -> Expr {
        let scaled = |t: &Expr, c: i64| if c == 1 { t.clone() } else { t.clone() * Expr::index(c) };
        let mut positives = self.terms.iter().filter(|(_, c)| *c > 0);
        let negatives = self.terms.iter().filter(|(_, c)| *c < 0);
        let mut acc = match positives.next() {
            Some((t, c)) => scaled(t, *c),
            None => Expr::index(self.constant),
        };
        for (t, c) in positives {
            acc = acc + scaled(t, *c);
        }
        // `c.wrapping_neg()` is exact except for i64::MIN, where `acc - t*MIN == acc + t*MIN`.
        for (t, c) in negatives {
            acc = acc - scaled(t, c.wrapping_neg());
        }
        let has_positive = self.terms.iter().any(|(_, c)| *c > 0);
        match self.constant {
            _ if !has_positive => acc,
            0 => acc,
            k if k < 0 && k != i64::MIN => acc - Expr::index(-k),
            k => acc + Expr::index(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_terms_and_constants_collect() {
        let (a, b, c) = (Var::index("a"), Var::index("b"), Var::index("c"));
        let e = (a.to_expr() * 4 + b.to_expr()) * 8 + c.to_expr() - a.to_expr() * 32 + 3 - 5;
        let lin = Linear::of(&e);
        assert_eq!(lin.constant, -2);
        assert_eq!(lin.to_expr().to_string(), "b*8 + c - 2");
        let only_negative = Expr::index(1) - a.to_expr() * 3 - b.to_expr();
        assert_eq!(Linear::of(&only_negative).to_expr().to_string(), "1 - a*3 - b");
        let product = a.to_expr() * b.to_expr() * 2 - b.to_expr() * a.to_expr();
        assert_eq!(Linear::of(&product).to_expr().to_string(), "a*b*2 - b*a");
        assert_eq!(Linear::of(&(a.to_expr() - a.to_expr())).to_expr().to_string(), "0");
    }

    #[test]
    fn quotient_and_remainder_recombine() {
        let (a, b) = (Var::index("a"), Var::index("b"));
        let x = a.to_expr() * 2 - 9;
        let e = (x.clone() / 3) * 6 + (x.clone() % 3) * 2 + b.to_expr();
        let mut lin = Linear::of(&e);
        lin.recombine_div_mod();
        assert_eq!(lin.to_expr().to_string(), "b + a*4 - 18");
        // Coefficients that do not match, or a different divisor, stay.
        let mut other = Linear::of(&((x.clone() / 3) * 3 + x.clone() % 4));
        other.recombine_div_mod();
        assert_eq!(other.terms.len(), 2);
    }

    #[test]
    fn forms_compare_regardless_of_order() {
        let (a, b) = (Var::index("a"), Var::index("b"));
        let x = Linear::of(&(a.to_expr() * 2 + b.to_expr() + 1));
        let y = Linear::of(&(b.to_expr() + 1 + a.to_expr() * 2 + a.to_expr() - a.to_expr()));
        assert!(x.same_as(&y));
        assert!(!x.same_as(&Linear::of(&(a.to_expr() * 2 + b.to_expr()))));
    }

    #[test]
    fn sums_of_variables_are_recognised_exactly() {
        let (a, b, c) = (Var::index("a"), Var::index("b"), Var::index("c"));
        let e = a.to_expr() * 4 + b.to_expr();
        assert!(Linear::of(&e).is_sum_of(&[(&b, 1), (&a, 4)]));
        assert!(!Linear::of(&e).is_sum_of(&[(&a, 4)]), "a term left over");
        assert!(!Linear::of(&e).is_sum_of(&[(&a, 4), (&b, 1), (&c, 1)]), "a variable missing");
        assert!(!Linear::of(&e).is_sum_of(&[(&a, 2), (&b, 1)]), "another coefficient");
        assert!(!Linear::of(&(e.clone() + 1)).is_sum_of(&[(&a, 4), (&b, 1)]), "a constant");
        assert!(Linear::of(&(e.clone() + c.to_expr() - c.to_expr())).is_sum_of(&[(&a, 4), (&b, 1)]));
        assert!(!Linear::of(&(a.to_expr() * b.to_expr())).is_sum_of(&[(&a, 1), (&b, 1)]), "a product");
    }
}
