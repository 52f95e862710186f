//! `RowFold` calls through the whole pipeline (schedule → `tensorize` → JIT): at every level
//! this CPU has, the kernel compiled from the declaration runs where one exists, and its result
//! equals the interpreter's and the slow twin's (the same stage untensorized, its folds in
//! Cranelift's vectors) bit for bit, on rows of NaN, ±∞, ±0 ties, subnormals and ordinary
//! values.

use ir::DType;
use ir::interp::Array;
use ir::intrin::{IntrinKind, decl_tensor_intrin};
use ir::schedule::create_schedule;
use ir::te::{Tensor as TeTensor, compute, max, placeholder, reduce_axis, sum};

use super::{check_with, float_samples, skip};
use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, Tensor};
use crate::target::Target;

const LANES: i64 = 16;

/// The fold a case computes per partial.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fold {
    /// `Σ x`.
    Sum,
    /// `max x`.
    Max,
    /// `Σ (x − mean[r])²`, `mean` a per-row input.
    Squares,
}

/// The stage `out[r, l] = fold_c f(x[r, c·16 + l], …)` over `rows × n` (`x` has 3 more
/// columns, so its rows are not dense), and the declaration of `m` of its rows.
fn stage(fold: Fold, rows: i64, n: i64, m: i64) -> (Vec<TeTensor>, TeTensor, ir::intrin::TensorIntrin) {
    let build = |x: &TeTensor, mean: &TeTensor, out_rows: i64, name: &str| {
        let c = reduce_axis(n / LANES, "c").unwrap();
        compute(
            [out_rows, LANES],
            |i| {
                let v = x.at([&i[0], &(c.to_expr() * LANES + &i[1])]);
                match fold {
                    Fold::Sum => sum(DType::F32, &[&c], v),
                    Fold::Max => max(DType::F32, &[&c], v),
                    Fold::Squares => {
                        let d = v - mean.at([&i[0]]);
                        sum(DType::F32, &[&c], &d * &d)
                    }
                }
            },
            name,
        )
        .unwrap()
    };
    let x = placeholder([rows, n + 3], DType::F32, "x").unwrap();
    let mean = placeholder([rows], DType::F32, "mean").unwrap();
    let out = build(&x, &mean, rows, "out");
    let (dx, dmean) = (placeholder([m, n], DType::F32, "dx").unwrap(), placeholder([m], DType::F32, "dm").unwrap());
    let decl = build(&dx, &dmean, m, "fold");
    let inputs = if fold == Fold::Squares { vec![&dx, &dmean] } else { vec![&dx] };
    let intrin = decl_tensor_intrin(
        &format!("fold_{fold:?}_{m}x{n}"),
        IntrinKind::RowFold { m, n, lanes: LANES },
        &decl,
        &inputs,
    )
    .unwrap();
    let params = if fold == Fold::Squares { vec![x, mean] } else { vec![x] };
    (params, out, intrin)
}

/// The lowered function of the stage, tensorized by `m` rows, or untensorized with its
/// partials' axis vectorized (the slow twin).
fn func(fold: Fold, rows: i64, n: i64, m: i64, tensorized: bool) -> ir::Func {
    let (params, out, intrin) = stage(fold, rows, n, m);
    let mut s = create_schedule(&[&out]);
    if tensorized {
        let (_, inner) = s.split(&out, &out.axis(0), m).unwrap();
        s.tensorize(&out, &inner, &intrin).unwrap();
    } else {
        let c = out.reduce_axes()[0].clone();
        s.reorder(&out, &[&out.axis(0), &c, &out.axis(1)]).unwrap();
        s.vectorize(&out, &out.axis(1)).unwrap();
    }
    let mut args: Vec<&TeTensor> = params.iter().collect();
    args.push(&out);
    ir::lower::lower(&s, &args, &format!("fold_{fold:?}")).unwrap()
}

/// Inputs whose rows hold the folds' edge cases: row 0 zeros of alternating sign chunk by
/// chunk (ties of `max`), row 1 a NaN in some lanes' first chunk, row 2 all −∞, row 3 +∞ and
/// −∞ in one lane (a NaN sum), the rest the float samples among ordinary values.
fn args(func: &ir::Func) -> Vec<Array> {
    let samples = float_samples();
    let mut extra = vec![1e-40, -1e-40, 2.5e-3, 16777216.0, 1.0 + f64::EPSILON];
    extra.extend(&samples);
    func.params
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let shape = p.shape();
            let cols = if shape.len() == 2 { shape[1] } else { 1 };
            let v: Vec<f64> = (0..shape.iter().product::<i64>())
                .map(|i| {
                    let (r, col) = (i / cols, i % cols);
                    if shape.len() == 1 || k > 0 {
                        // Per-row means (and the output's prior contents, which a resetting
                        // call ignores).
                        return [0.5, -0.0, f64::NAN, 3.0, 1e30][(i % 5) as usize];
                    }
                    let (chunk, lane) = (col / LANES, col % LANES);
                    match r {
                        0 => {
                            if chunk % 2 == 0 {
                                -0.0
                            } else {
                                0.0
                            }
                        }
                        1 if chunk == 0 && lane % 3 == 0 => f64::NAN,
                        2 => f64::NEG_INFINITY,
                        3 if lane == 5 && chunk < 2 => [f64::INFINITY, f64::NEG_INFINITY][chunk as usize],
                        _ if i % 3 == 0 => extra[(i as usize / 3) % extra.len()],
                        _ => ((i * 37 + r * 11) % 997) as f64 * 0.731 - 300.0,
                    }
                })
                .collect();
            Array::from_f64(p.dtype(), shape, &v)
        })
        .collect()
}

/// Runs `func` compiled at `level` on copies of `args`; returns the outputs and whether a
/// row-fold kernel ran.
fn run_at(func: &ir::Func, args: &[Array], level: IsaLevel) -> (Vec<Array>, bool) {
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    let compiled = check_with(func, args, &options);
    let mut tensors: Vec<Tensor> = args.iter().map(Tensor::from_array).collect();
    let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
    compiled.call(&mut refs).unwrap();
    let ran = compiled.machine_code().iter().any(|c| c.origin.contains("row-fold kernel"));
    (tensors.iter().map(|t| t.to_array()).collect(), ran)
}

#[test]
fn row_fold_kernels_equal_the_interpreter_and_the_loop_nest_at_every_level() {
    for fold in [Fold::Sum, Fold::Max, Fold::Squares] {
        for level in skip::levels_here(IsaLevel::ALL) {
            // One, two and four rows per call; one chunk, a few, and a long row.
            for (rows, n, m) in [(8, 64, 1), (8, 64, 2), (8, 16, 4), (4, 1024, 4), (6, 48, 2)] {
                let kernel = func(fold, rows, n, m, true);
                let twin = func(fold, rows, n, m, false);
                let inputs = args(&kernel);
                // `check_with` (in `run_at`) compares each with the interpreter; and the two
                // with each other.
                let (got, ran) = run_at(&kernel, &inputs, level);
                let (want, twin_ran) = run_at(&twin, &inputs, level);
                let what = format!("{fold:?} {rows}x{n} by {m} at {level}");
                assert!(!twin_ran, "{what}: the twin has no call");
                assert_eq!(ran, level >= IsaLevel::Avx2, "{what}");
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.first_difference(w), None, "{what}");
                }
            }
        }
    }
}

#[test]
fn max_kernels_keep_the_first_of_tied_zeros_and_skip_nans() {
    // Row 0 alternates −0 and +0 chunk by chunk: `max(acc, v)` keeps the first, −0; row 1's
    // NaNs are skipped; row 2 stays −∞.
    for level in skip::levels_here([IsaLevel::Avx512Vnni, IsaLevel::Avx2]) {
        let f = func(Fold::Max, 4, 64, 4, true);
        let inputs = args(&f);
        let (out, ran) = run_at(&f, &inputs, level);
        assert!(ran, "{level}");
        let out = out.last().unwrap().to_f64_vec();
        assert!(out[..16].iter().all(|v| *v == 0.0 && v.is_sign_negative()), "{level}: {:?}", &out[..16]);
        assert!(out[16..32].iter().all(|v| !v.is_nan()), "{level}: {:?}", &out[16..32]);
        assert!(out[32..48].iter().all(|v| *v == f64::NEG_INFINITY), "{level}: {:?}", &out[32..48]);
    }
}

#[test]
fn continued_folds_run_the_loop_nest() {
    // The call covers half of each row's chunks: it folds into the output's values, which
    // only the loop nest does.
    let x = placeholder([2, 64], DType::F32, "x").unwrap();
    let c = reduce_axis(4, "c").unwrap();
    let out =
        compute([2, LANES], |i| sum(DType::F32, &[&c], x.at([&i[0], &(c.to_expr() * LANES + &i[1])])), "out").unwrap();
    let dx = placeholder([1, 32], DType::F32, "dx").unwrap();
    let c2 = reduce_axis(2, "c").unwrap();
    let decl =
        compute([1, LANES], |i| sum(DType::F32, &[&c2], dx.at([&i[0], &(c2.to_expr() * LANES + &i[1])])), "d").unwrap();
    let intrin = decl_tensor_intrin("half", IntrinKind::RowFold { m: 1, n: 32, lanes: LANES }, &decl, &[&dx]).unwrap();
    let mut s = create_schedule(&[&out]);
    let (ro, ri) = s.split(&out, &out.axis(0), 1).unwrap();
    let (co, ci) = s.split(&out, &c, 2).unwrap();
    s.reorder(&out, &[&ro, &co, &ri, &out.axis(1), &ci]).unwrap();
    s.tensorize(&out, &ri, &intrin).unwrap();
    let f = ir::lower::lower(&s, &[&x, &out], "half").unwrap();
    assert!(f.to_string().contains("call half("), "{f}");
    let inputs = args(&f);
    for level in skip::levels_here(IsaLevel::ALL) {
        let (_, ran) = run_at(&f, &inputs, level);
        assert!(!ran, "{level}");
    }
}
