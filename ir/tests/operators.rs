//! Operator overloading: every combination of owned and borrowed `Expr`, `IterVar`, `Var` and an
//! `i64` literal builds the same node as `Expr::binary`, and the nodes compute what they print.

use tensorlift_ir::expr::{BinOp, Expr, ExprKind};
use tensorlift_ir::interp::{Array, eval_te};
use tensorlift_ir::te::{IterKind, compute, placeholder};
use tensorlift_ir::{DType, IterVar, Var};

/// `$lhs $op $rhs` for every operator, each checked against `Expr::binary` on `$l` and `$r`.
macro_rules! check_all_ops {
    ($lhs:expr, $rhs:expr, $l:expr, $r:expr) => {{
        let (l, r): (Expr, Expr) = ($l, $r);
        let cases: Vec<(BinOp, Expr)> = vec![
            (BinOp::Add, $lhs + $rhs),
            (BinOp::Sub, $lhs - $rhs),
            (BinOp::Mul, $lhs * $rhs),
            (BinOp::Div, $lhs / $rhs),
            (BinOp::Mod, $lhs % $rhs),
            (BinOp::And, $lhs & $rhs),
            (BinOp::Or, $lhs | $rhs),
            (BinOp::Xor, $lhs ^ $rhs),
            (BinOp::Shl, $lhs << $rhs),
            (BinOp::Shr, $lhs >> $rhs),
        ];
        for (op, built) in cases {
            let expected = Expr::binary(op, l.clone(), r.clone());
            assert!(
                built.structurally_eq(&expected),
                "{} {}: built `{built}`, expected `{expected}`",
                stringify!($lhs),
                op.symbol()
            );
        }
    }};
}

/// Every right operand kind for one left operand (given as a cloneable source and its expression).
macro_rules! check_rhs_kinds {
    ($lhs:expr, $l:expr, $e:ident, $it:ident, $v:ident) => {{
        check_all_ops!($lhs, $e.clone(), $l, $e.clone());
        check_all_ops!($lhs, &$e, $l, $e.clone());
        check_all_ops!($lhs, $it.clone(), $l, $it.to_expr());
        check_all_ops!($lhs, &$it, $l, $it.to_expr());
        check_all_ops!($lhs, $v.clone(), $l, $v.to_expr());
        check_all_ops!($lhs, &$v, $l, $v.to_expr());
        check_all_ops!($lhs, 7i64, $l, Expr::index(7));
    }};
}

#[test]
fn every_owned_and_borrowed_combination_builds_the_binary_node() {
    let it = IterVar::new("i", 8, IterKind::DataPar);
    let v = Var::index("v");
    let e = Expr::var(&Var::index("e")) * 3;
    check_rhs_kinds!(e.clone(), e.clone(), e, it, v);
    check_rhs_kinds!(&e, e.clone(), e, it, v);
    check_rhs_kinds!(it.clone(), it.to_expr(), e, it, v);
    check_rhs_kinds!(&it, it.to_expr(), e, it, v);
    check_rhs_kinds!(v.clone(), v.to_expr(), e, it, v);
    check_rhs_kinds!(&v, v.to_expr(), e, it, v);
    // A literal on the left, with each typed right operand.
    check_all_ops!(5i64, e.clone(), Expr::index(5), e.clone());
    check_all_ops!(5i64, &e, Expr::index(5), e.clone());
    check_all_ops!(5i64, it.clone(), Expr::index(5), it.to_expr());
    check_all_ops!(5i64, &it, Expr::index(5), it.to_expr());
    check_all_ops!(5i64, v.clone(), Expr::index(5), v.to_expr());
    check_all_ops!(5i64, &v, Expr::index(5), v.to_expr());
}

#[test]
fn negation_of_every_operand_kind_is_zero_minus_it() {
    let it = IterVar::new("i", 8, IterKind::DataPar);
    let v = Var::new("x", DType::I32);
    let e = v.to_expr() + 1;
    for (built, operand) in [
        (-e.clone(), e.clone()),
        (-&e, e.clone()),
        (-it.clone(), it.to_expr()),
        (-&it, it.to_expr()),
        (-v.clone(), v.to_expr()),
        (-&v, v.to_expr()),
    ] {
        let zero = Expr::zero(operand.dtype());
        assert!(built.structurally_eq(&Expr::binary(BinOp::Sub, zero, operand.clone())), "{built}");
        assert_eq!(built.dtype(), operand.dtype());
    }
}

#[test]
fn a_literal_takes_the_dtype_of_the_other_side() {
    let x = Var::new("x", DType::I32);
    for built in [2 - &x, &x - 2, 2 * x.clone(), x.clone() % 2, 2 / x.to_expr(), -&x] {
        assert_eq!(built.dtype(), DType::I32, "{built}");
        let ExprKind::Binary(_, a, b) = built.kind() else { panic!("{built}") };
        assert_eq!((a.dtype(), b.dtype()), (DType::I32, DType::I32), "{built}");
    }
    let f = Var::new("f", DType::F32);
    let half = 1 - &f;
    assert_eq!(half.to_string(), "1.0f32 - f");
}

#[test]
fn mixed_operands_print_and_evaluate_as_written() {
    let a = placeholder([6], DType::I64, "A").unwrap();
    let out = compute(
        [6],
        |i| {
            let it = &i[0];
            // Each operand kind once: literal - &Expr, Expr * i64, &Expr % literal, -Expr.
            (10 - it) * 2 + a.at([it]) % 3 + -(a.at([it]) / 2)
        },
        "out",
    )
    .unwrap();
    assert_eq!(out.body().unwrap().to_string(), "(10 - i)*2 + A[i]%3 + (0 - A[i]/2)");
    let input = Array::from_i64(DType::I64, &[6], &[0, 5, -7, 9, 4, -1]);
    let got = eval_te(&[&out], &[(&a, &input)]).unwrap()[0].to_i64_vec();
    let expected: Vec<i64> = [0i64, 5, -7, 9, 4, -1]
        .iter()
        .enumerate()
        .map(|(i, &x)| (10 - i as i64) * 2 + x.rem_euclid(3) - x.div_euclid(2))
        .collect();
    assert_eq!(got, expected);
}
