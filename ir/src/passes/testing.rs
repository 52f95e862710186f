//! Test helpers shared by the pass tests: running functions on deterministic inputs.

use proptest::prelude::*;

use crate::expr::{BinOp, Expr, Var, select};
use crate::interp::{Array, InterpError, run_func};
use crate::stmt::Func;

/// A random `i64` expression over `vars` of the given depth, with every operator, floor
/// division and modulo by positive and arbitrary divisors, and selects. Constants are small so
/// nothing overflows for small variable ranges (the IR's rule for index arithmetic).
pub(crate) fn arb_index_expr(vars: Vec<Var>, depth: u32) -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![(-9i64..10).prop_map(Expr::index), (0..vars.len()).prop_map(move |i| vars[i].to_expr())];
    leaf.prop_recursive(depth, 24, 2, |inner| {
        let op = prop_oneof![
            Just(BinOp::Add),
            Just(BinOp::Sub),
            Just(BinOp::Mul),
            Just(BinOp::Div),
            Just(BinOp::Mod),
            Just(BinOp::Min),
            Just(BinOp::Max),
        ];
        prop_oneof![
            4 => (op, inner.clone(), inner.clone()).prop_map(|(op, a, b)| Expr::binary(op, a, b)),
            2 => (inner.clone(), 1i64..9).prop_map(|(a, c)| a / c),
            2 => (inner.clone(), 1i64..9).prop_map(|(a, c)| a % c),
            1 => (inner.clone(), inner.clone(), inner.clone(), inner).prop_map(|(a, b, t, f)| select(a.lt(b), t, f)),
        ]
    })
}

/// Deterministic pseudo-random contents in `[-50, 50]` (converted to each parameter's dtype).
pub(crate) fn inputs(func: &Func) -> Vec<Array> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    func.params
        .iter()
        .map(|p| {
            let values: Vec<i64> = (0..p.len())
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 33) % 101) as i64 - 50
                })
                .collect();
            Array::from_i64(p.dtype(), p.shape(), &values)
        })
        .collect()
}

/// The parameters after running `func` on `inputs(func)`.
pub(crate) fn run(func: &Func) -> Result<Vec<Array>, InterpError> {
    let mut args = inputs(func);
    run_func(func, &mut args)?;
    Ok(args)
}

/// Asserts that both functions run without error and leave bit-identical parameters.
pub(crate) fn assert_same_results(before: &Func, after: &Func) {
    let want = run(before).unwrap_or_else(|e| panic!("original fails: {e}\n{before}"));
    let got = run(after).unwrap_or_else(|e| panic!("transformed fails: {e}\n{after}"));
    for ((w, g), p) in want.iter().zip(&got).zip(&before.params) {
        if let Some((i, a, b)) = w.first_difference(g) {
            panic!("{}[{i}] differs: {a:?} before, {b:?} after\nbefore:\n{before}\nafter:\n{after}", p.name());
        }
    }
}
