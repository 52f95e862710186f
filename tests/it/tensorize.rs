//! Tensorized schedules end to end through the reference interpreters only: `gemm_int8` and the
//! s8 × s8 path lower to intrinsic calls whose declared semantics (run by `loop_eval`) equal the
//! definitions (run by `te_eval`), with and without tiles that stick out of the matrix.

use ir::interp::{Array, InterpError, eval_te, run_func};
use ir::stmt::StmtKind;
use ir::te::{Tensor, placeholder, placeholder_in_range};
use ir::{DType, Func, MismatchPart, ScheduleError};
use schedules::nn::{matmul, matmul_packed, matmul_s8s8_via_u8, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, gemm_int8, schedule_gemm_int8};
use tensorlift::bench::uniform;

fn calls(f: &Func) -> usize {
    let mut n = 0;
    ir::mutator::for_each_stmt(&f.body, &mut |s| n += matches!(s.kind(), StmtKind::Call { .. }) as usize);
    n
}

/// Lowers `gemm_int8` for `A: [m, k]` (u8, or the declared range) times `B: [k, n]`, runs it and
/// compares with `matmul(A, B)` evaluated from the definition.
fn check_gemm(a: &Tensor, m: i64, n: i64, k: i64, knobs: GemmInt8Knobs, seed: u64) -> Func {
    let b = placeholder([k, n], DType::I8, "B").unwrap();
    let bp = pack_b_vnni(&b, knobs.nr, "Bp").unwrap();
    let c = matmul_packed(a, &bp, n, DType::I32, "C").unwrap();
    let f = ir::lower::lower(&gemm_int8(&c, knobs).unwrap(), &[a, &b, &c], "gemm").unwrap();
    let hi = a.value_range().map_or(255, |(_, hi)| hi);
    let a_arr = Array::from_i64(DType::U8, &[m, k], &uniform((m * k) as usize, seed, 0, hi));
    let b_arr = Array::from_i64(DType::I8, &[k, n], &uniform((k * n) as usize, seed + 1, -128, 127));
    let reference = matmul(a, &b, DType::I32, "R").unwrap();
    let want = eval_te(&[&reference], &[(a, &a_arr), (&b, &b_arr)]).unwrap().remove(0);
    let mut args = vec![a_arr, b_arr, Array::zeros(DType::I32, &[m, n])];
    run_func(&f, &mut args).unwrap();
    assert!(args[2].bits_eq(&want), "m={m} n={n} k={k} {knobs:?}: {:?}\n{f}", args[2].first_difference(&want));
    f
}

#[test]
fn gemm_int8_equals_the_matmul_definition_with_and_without_tails() {
    for (m, n, k, mr, nr) in
        [(16, 32, 16, 4, 16), (13, 32, 12, 4, 16), (9, 96, 8, 8, 48), (7, 64, 36, 3, 32), (1, 16, 4, 1, 16)]
    {
        let a = placeholder([m, k], DType::U8, "A").unwrap();
        let knobs = GemmInt8Knobs { mr, nr, parallel: true };
        let f = check_gemm(&a, m, n, k, knobs, (m * n + k) as u64);
        let tail = m % mr;
        let expected = if tail == 0 { 1 } else { 2 };
        assert_eq!(calls(&f), expected, "one call per (row tile, column tile), one for a partial one:\n{f}");
        let text = f.to_string();
        // The call covers the whole reduction: it resets its tile itself (no init nest).
        assert!(text.contains(&format!("call reset int8_gemm_{mr}x{nr}x{k}(")), "{text}");
        // A partial last row tile calls the kernel of its rows, under a condition on the row tile.
        assert_eq!(text.contains("} else {"), tail != 0, "{text}");
        assert_eq!(text.contains(&format!("call reset int8_gemm_{mr}x{nr}x{k}_i{tail}(")), tail != 0, "{text}");
    }
}

#[test]
fn declared_activation_ranges_reach_the_lowered_parameters_and_are_enforced() {
    let (m, n, k) = (8, 32, 16);
    let a = placeholder_in_range([m, k], DType::U8, 0..=127, "A").unwrap();
    let f = check_gemm(&a, m, n, k, GemmInt8Knobs { mr: 4, nr: 16, parallel: false }, 3);
    assert_eq!(f.params[0].value_range(), Some((0, 127)));
    assert_eq!(f.params[1].value_range(), None);
    let mut args = vec![
        Array::from_i64(DType::U8, &[m, k], &[200; 128]),
        Array::zeros(DType::I8, &[k, n]),
        Array::zeros(DType::I32, &[m, n]),
    ];
    let err = run_func(&f, &mut args).unwrap_err();
    assert_eq!(err, InterpError::ValueRange { name: "A".into(), lo: 0, hi: 127, index: 0, found: 200 });
}

#[test]
fn s8_times_s8_with_the_tensorized_u8_kernel_equals_the_s8_matmul() {
    for (m, n, k) in [(6, 32, 8), (5, 16, 20)] {
        let a = placeholder([m, k], DType::I8, "A").unwrap();
        let b = placeholder([k, n], DType::I8, "B").unwrap();
        let mm = matmul_s8s8_via_u8(&a, &b, 16, "C").unwrap();
        let mut s = ir::schedule::create_schedule(&[&mm.output]);
        schedule_gemm_int8(&mut s, &mm.product, GemmInt8Knobs { mr: 4, nr: 16, parallel: true }).unwrap();
        let f = ir::lower::lower(&s, &[&a, &b, &mm.output], "s8s8").unwrap();
        // Tiles of 4 rows, and the last 2 or 1 in a call of their own.
        assert_eq!(calls(&f), 2, "{f}");
        let mut a_vals = uniform((m * k) as usize, 11, -128, 127);
        a_vals[..4].copy_from_slice(&[127, 127, 0, 0]);
        let a_arr = Array::from_i64(DType::I8, &[m, k], &a_vals);
        let mut b_vals = uniform((k * n) as usize, 12, -128, 127);
        for (row, v) in [127, 127, 0, 0].into_iter().enumerate() {
            b_vals[row * n as usize] = v;
        }
        let b_arr = Array::from_i64(DType::I8, &[k, n], &b_vals);
        let reference = matmul(&a, &b, DType::I32, "R").unwrap();
        let want = eval_te(&[&reference], &[(&a, &a_arr), (&b, &b_arr)]).unwrap().remove(0);
        let mut args = vec![a_arr, b_arr, Array::zeros(DType::I32, &[m, n])];
        run_func(&f, &mut args).unwrap();
        assert!(args[2].bits_eq(&want), "{:?}\n{f}", args[2].first_difference(&want));
    }
}

#[test]
fn a_mismatch_names_the_part_with_expected_and_found_in_ir_syntax() {
    let a = placeholder([8, 16], DType::U8, "A").unwrap();
    let b = placeholder([16, 64], DType::I8, "B").unwrap();
    let bp = pack_b_vnni(&b, 16, "Bp").unwrap();
    let c = matmul_packed(&a, &bp, 64, DType::I32, "C").unwrap();
    let err = gemm_int8(&c, GemmInt8Knobs { mr: 4, nr: 32, parallel: true }).unwrap_err();
    assert!(matches!(&err, ScheduleError::TensorizeMismatch(m) if m.part == MismatchPart::NonAffine));
    assert_eq!(
        err.to_string(),
        "tensorize of C at ko with int8_gemm_4x32x16: non-affine access (operand Bp): expected an index affine in the loops \
         under ko, found `i.outer.j.outer.fused%2*2 + j.inner/16` \
         in `Bp[i.outer.j.outer.fused%2*2 + j.inner/16, ko, j.inner%16, ki]`"
    );
}
