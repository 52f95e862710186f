//! Scalar and lane-wise arithmetic, comparisons and casts against the interpreter.

use ir::expr::{BinOp, CmpOp};
use ir::{DType, Expr, ScalarType};

use super::*;

/// Lane counts to try for `ty`: scalar, an odd count (per-lane code), one and two pieces.
fn lane_counts(ty: ScalarType) -> [u16; 4] {
    let piece = (128 / ty.bits()) as u16;
    [1, 3, piece, 2 * piece]
}

fn binop_func(ty: ScalarType, ops: &[BinOp], lanes: u16, n: i64) -> Func {
    let d = DType::scalar(ty);
    let builders: Vec<BoxedBuild> = ops
        .iter()
        .map(|&op| Box::new(move |x: &[Expr]| Expr::binary(op, x[0].clone(), x[1].clone())) as BoxedBuild)
        .collect();
    let outputs: Vec<(DType, Build<'_>)> = builders.iter().map(|b| (d, b.as_ref())).collect();
    elementwise(&format!("binops_{ty}_x{lanes}"), &[d, d], &outputs, n, lanes)
}

fn check_binops(ty: ScalarType, ops: &[BinOp]) {
    let (a, b) = sample_pairs(ty);
    for lanes in lane_counts(ty) {
        let n = a.len() / lanes as usize * lanes as usize;
        let func = binop_func(ty, ops, lanes, n as i64);
        let mut args = vec![truncate(&a, n), truncate(&b, n)];
        args.extend(zeros_like(&func, 2));
        check(&func, &args);
    }
}

#[test]
fn int_binary_ops_match_interp_on_every_int_type() {
    for ty in INT_TYPES {
        check_binops(ty, &ALL_BINOPS);
    }
}

#[test]
fn float_binary_ops_match_interp_including_f16_and_bf16() {
    let ops = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Mod, BinOp::Min, BinOp::Max];
    for ty in [ScalarType::F16, ScalarType::BF16, ScalarType::F32, ScalarType::F64] {
        check_binops(ty, &ops);
    }
}

#[test]
fn bool_logic_matches_interp() {
    let d = DType::BOOL;
    let a = Array::from_i64(d, &[48], &(0..48).map(|i| i % 2).collect::<Vec<_>>());
    let b = Array::from_i64(d, &[48], &(0..48).map(|i| (i / 2) % 2).collect::<Vec<_>>());
    let ops: [Build<'_>; 6] = [
        &|x| Expr::binary(BinOp::And, x[0].clone(), x[1].clone()),
        &|x| Expr::binary(BinOp::Or, x[0].clone(), x[1].clone()),
        &|x| Expr::binary(BinOp::Xor, x[0].clone(), x[1].clone()),
        &|x| !x[0].clone(),
        &|x| Expr::binary(BinOp::Min, x[0].clone(), x[1].clone()),
        &|x| Expr::cmp(CmpOp::Lt, x[0].clone(), x[1].clone()),
    ];
    for lanes in [1, 3, 16] {
        let outputs: Vec<(DType, Build<'_>)> = ops.iter().map(|f| (d, *f)).collect();
        let func = elementwise(&format!("bools_x{lanes}"), &[d, d], &outputs, 48, lanes);
        let mut args = vec![a.clone(), b.clone()];
        args.extend(zeros_like(&func, 2));
        check(&func, &args);
    }
}

#[test]
fn comparisons_match_interp_on_every_type() {
    let ops = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
    for ty in ScalarType::ALL.into_iter().filter(|t| !t.is_bool()) {
        let (a, b) = sample_pairs(ty);
        let d = DType::scalar(ty);
        let builders: Vec<BoxedBuild> = ops
            .iter()
            .map(|&op| Box::new(move |x: &[Expr]| Expr::cmp(op, x[0].clone(), x[1].clone())) as BoxedBuild)
            .collect();
        let outputs: Vec<(DType, Build<'_>)> = builders.iter().map(|b| (DType::BOOL, b.as_ref())).collect();
        for lanes in lane_counts(ty) {
            let n = a.len() / lanes as usize * lanes as usize;
            let func = elementwise(&format!("cmp_{ty}_x{lanes}"), &[d, d], &outputs, n as i64, lanes);
            let mut args = vec![truncate(&a, n), truncate(&b, n)];
            args.extend(zeros_like(&func, 2));
            check(&func, &args);
        }
    }
}

#[test]
fn division_by_constants_including_powers_of_two_zero_and_minus_one() {
    for ty in [ScalarType::I32, ScalarType::U8, ScalarType::I64, ScalarType::I16, ScalarType::U64] {
        let d = DType::scalar(ty);
        let (a, _) = sample_pairs(ty);
        for lanes in [1, (128 / ty.bits()) as u16] {
            let builders: Vec<BoxedBuild> = [4i64, 1, 3, 0, -1, -4, 64]
                .into_iter()
                .flat_map(|c| {
                    [BinOp::Div, BinOp::Mod].map(move |op| {
                        Box::new(move |x: &[Expr]| {
                            let c = Expr::int(d, c);
                            let c = if lanes == 1 { c } else { Expr::broadcast(c, lanes) };
                            Expr::binary(op, x[0].clone(), c)
                        }) as BoxedBuild
                    })
                })
                .collect();
            let outputs: Vec<(DType, Build<'_>)> = builders.iter().map(|b| (d, b.as_ref())).collect();
            let func = elementwise(&format!("divc_{ty}_x{lanes}"), &[d], &outputs, a.len() as i64, lanes);
            let mut args = vec![a.clone()];
            args.extend(zeros_like(&func, 1));
            check(&func, &args);
        }
    }
    // Power-of-two divisors are shifts and masks on whole vectors.
    let pow2: [(DType, Build<'_>); 2] = [
        (DType::I32, &|x| x[0].clone() / Expr::broadcast(Expr::int(DType::I32, 8), 4)),
        (DType::I32, &|x| x[0].clone() % Expr::broadcast(Expr::int(DType::I32, 8), 4)),
    ];
    let func = elementwise("div_pow2", &[DType::I32], &pow2, 16, 4);
    let mut args = vec![array_of(ScalarType::I32, 16, &[-9.0, 9.0, -16.0, 0.0, 7.0])];
    args.extend(zeros_like(&func, 1));
    let clif = check(&func, &args).clif_text().to_string();
    assert!(
        clif.contains("sshr") && clif.contains("band") && !clif.contains("sdiv") && !clif.contains("extractlane"),
        "{clif}"
    );
}

#[test]
fn vector_shifts_by_a_uniform_amount() {
    for ty in INT_TYPES {
        let d = DType::scalar(ty);
        let lanes = (128 / ty.bits()) as u16;
        let (a, b) = sample_pairs(ty);
        let shl = |x: &[Expr]| Expr::binary(BinOp::Shl, x[0].clone(), Expr::broadcast(Expr::int(d, 3), lanes));
        let shr = |x: &[Expr]| Expr::binary(BinOp::Shr, x[0].clone(), Expr::broadcast(Expr::int(d, -1), lanes));
        let outputs: [(DType, Build<'_>); 2] = [(d, &shl), (d, &shr)];
        let func = elementwise(&format!("shifts_{ty}"), &[d, d], &outputs, a.len() as i64, lanes);
        let mut args = vec![a, b];
        args.extend(zeros_like(&func, 2));
        let compiled = check(&func, &args);
        assert!(!compiled.clif_text().contains("extractlane"), "{}", compiled.clif_text());
    }
}

/// Values that exercise every cast: the int samples, and floats around every integer range.
fn cast_samples(ty: ScalarType) -> Array {
    let mut values: Vec<f64> = float_samples();
    values.extend([300.7, -1e9, 255.5, -128.5, 127.9, 2147483648.0, -2147483649.0, 4294967296.0]);
    values.extend([9.3e18, 1.9e19, -0.5, 65535.9, 1e20, 32767.5, -32768.9, 0.1]);
    values.extend([1.0e-40, -65519.0, 3.4e38, 16777217.0, 0.3, 2.5, 1e300, -1e-300]);
    if ty.is_float() {
        return array_of(ty, values.len(), &values);
    }
    let ints: Vec<i64> = int_samples(ty)
        .into_iter()
        .chain([5, 1 << 20, -(1 << 40), i64::MAX, i64::MIN, 0x1234_5678, -255, 255])
        .collect();
    let mut all: Vec<i64> = ints.clone();
    all.extend(ints.iter().map(|v| v.wrapping_mul(0x9e37_79b9_7f4a_7c15u64 as i64)));
    all.truncate(values.len());
    Array::from_i64(DType::scalar(ty), &[all.len() as i64], &all)
}

#[test]
fn casts_between_every_pair_of_types_scalar_and_vector() {
    for from in ScalarType::ALL {
        let input = cast_samples(from);
        let d = DType::scalar(from);
        let builders: Vec<(DType, BoxedBuild)> = ScalarType::ALL
            .into_iter()
            .flat_map(|to| {
                let to_d = DType::scalar(to);
                [
                    (to_d, Box::new(move |x: &[Expr]| x[0].cast(to_d)) as BoxedBuild),
                    (to_d, Box::new(move |x: &[Expr]| x[0].saturating_cast(to_d)) as BoxedBuild),
                ]
            })
            .collect();
        let outputs: Vec<(DType, Build<'_>)> = builders.iter().map(|(d, b)| (*d, b.as_ref())).collect();
        for lanes in [1, 3, 4, 8, 16] {
            let n = input.len() / lanes as usize * lanes as usize;
            let func = elementwise(&format!("cast_{from}_x{lanes}"), &[d], &outputs, n as i64, lanes);
            let mut args = vec![truncate(&input, n)];
            args.extend(zeros_like(&func, 1));
            check(&func, &args);
        }
    }
}

#[test]
fn vector_casts_use_widening_and_narrowing_instructions() {
    let widen = |x: &[Expr]| x[0].cast(DType::I32);
    let func = elementwise("u8_to_i32", &[DType::U8], &[(DType::I32, &widen)], 64, 16);
    let mut args = vec![array_of(ScalarType::U8, 64, &[0.0, 255.0, 7.0, 128.0])];
    args.extend(zeros_like(&func, 1));
    let clif = check(&func, &args).clif_text().to_string();
    assert!(clif.contains("uwiden_low") && clif.contains("uwiden_high") && !clif.contains("extractlane"), "{clif}");

    let narrow = |x: &[Expr]| x[0].saturating_cast(DType::U8);
    let func = elementwise("i32_to_u8_sat", &[DType::I32], &[(DType::U8, &narrow)], 64, 16);
    let mut args = vec![array_of(ScalarType::I32, 64, &[-5.0, 300.0, 7.0, 128.0, 70000.0])];
    args.extend(zeros_like(&func, 1));
    let clif = check(&func, &args).clif_text().to_string();
    assert!(clif.contains("snarrow") && clif.contains("unarrow") && !clif.contains("extractlane"), "{clif}");
}

#[test]
fn round_is_ties_to_even_like_the_interpreter_scalar_and_vector() {
    let ties = [0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -3.5, 0.49999997, 2.75, -7.25, 1e7 + 0.5, 16777215.0];
    let mut values: Vec<f64> = ties.to_vec();
    values.extend(float_samples());
    for ty in [ScalarType::F16, ScalarType::BF16, ScalarType::F32, ScalarType::F64] {
        let d = DType::scalar(ty);
        let input = array_of(ty, values.len(), &values);
        let round = |x: &[Expr]| x[0].round();
        // Requantization: round, then saturate to i8 (float → int casts saturate).
        let requant = |x: &[Expr]| x[0].round().saturating_cast(DType::I8);
        for lanes in lane_counts(ty) {
            let n = input.len() / lanes as usize * lanes as usize;
            let i8s = DType::I8;
            let outputs: [(DType, Build<'_>); 2] = [(d, &round), (i8s, &requant)];
            let func = elementwise(&format!("round_{ty}_x{lanes}"), &[d], &outputs, n as i64, lanes);
            let mut args = vec![truncate(&input, n)];
            args.extend(zeros_like(&func, 1));
            let compiled = check(&func, &args);
            if matches!(ty, ScalarType::F32 | ScalarType::F64) {
                assert!(compiled.clif_text().contains("nearest"), "{}", compiled.clif_text());
            }
        }
    }
    // The interpreter's values on the ties, so the comparison above is against the definition.
    let func = elementwise("round_ties", &[DType::F32], &[(DType::F32, &|x: &[Expr]| x[0].round())], 5, 1);
    let mut args = vec![array_of(ScalarType::F32, 5, &ties[..5]), Array::zeros(DType::F32, &[5])];
    run_func(&func, &mut args).unwrap();
    let got: Vec<f64> = (0..5).map(|i| args[1].get(i).as_float()).collect();
    assert_eq!(got, [0.0, 2.0, 2.0, -0.0, -2.0]);
    assert!(got[3].is_sign_negative());
}
