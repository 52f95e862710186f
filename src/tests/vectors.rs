//! Vector memory access, lane-wise selects, reductions, ramps and broadcasts.

use ir::expr::{BinOp, CmpOp, VectorReduceOp};
use ir::{DType, Expr, ForKind, Func, ScalarType, Stmt, Var};

use super::*;

#[test]
fn contiguous_vector_accesses_are_128_bit_loads_and_stores() {
    let add = |x: &[Expr]| x[0].clone() + x[1].clone();
    let func = elementwise("add_i32x8", &[DType::I32, DType::I32], &[(DType::I32, &add)], 64, 8);
    let mut args = vec![array_of(ScalarType::I32, 64, &[1.0, -5.0, 1e9]), array_of(ScalarType::I32, 64, &[3.0, 2e9])];
    args.extend(zeros_like(&func, 2));
    let clif = check(&func, &args).clif_text().to_string();
    assert_eq!(clif.matches("load.i32x4").count(), 4, "{clif}");
    assert!(clif.contains("iadd v") && !clif.contains("extractlane") && !clif.contains("load.i32 "), "{clif}");
}

/// `out[perm(i)] = a[perm'(i)] * 2` with strided and reversed vector indices.
#[test]
fn gathers_and_scatters_run_per_lane_in_lane_order() {
    let n = 48;
    for (lanes, ty) in [(4u16, ScalarType::I32), (3, ScalarType::F32), (16, ScalarType::U8), (2, ScalarType::F64)] {
        let d = DType::scalar(ty);
        let a = Buffer::new("a", d, vec![n]);
        let out = Buffer::new("out", d, vec![n]);
        let i = Var::index("i");
        let groups = n / lanes as i64;
        // Read group i backwards, write it to group (groups-1-i) with stride `groups`.
        let read = Expr::ramp(Expr::var(&i) * lanes as i64 + (lanes as i64 - 1), Expr::index(-1), lanes);
        let write = Expr::ramp(Expr::index(groups - 1) - Expr::var(&i), Expr::index(groups), lanes);
        let value = Expr::load(&a, vec![read]);
        let value = Expr::binary(BinOp::Add, value.clone(), value);
        let body = Stmt::for_loop(i, groups, ForKind::Serial, Stmt::store(&out, vec![write], value));
        let func = Func { name: format!("gather_{ty}_x{lanes}"), params: vec![a, out], body };
        let args = vec![array_of(ty, n as usize, &[1.0, 2.0, 3.0, -4.5, 100.0, 7.0]), Array::zeros(d, &[n])];
        let clif = check(&func, &args).clif_text().to_string();
        let vector_load = ["load.i8x16", "load.i32x4", "load.f32x4", "load.f64x2"].iter().any(|l| clif.contains(l));
        assert!(!vector_load, "{clif}");
    }
}

/// Scatter with colliding indices: the last lane wins.
#[test]
fn scatter_with_equal_indices_keeps_the_last_lane() {
    let a = Buffer::new("a", DType::I32, vec![8]);
    let out = Buffer::new("out", DType::I32, vec![2]);
    let value = Expr::load(&a, vec![Expr::ramp(Expr::index(0), Expr::index(1), 8)]);
    let index = Expr::broadcast(Expr::index(1), 8);
    let func =
        Func { name: "collide".into(), params: vec![a, out.clone()], body: Stmt::store(&out, vec![index], value) };
    check(
        &func,
        &[
            array_of(ScalarType::I32, 8, &[10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]),
            Array::zeros(DType::I32, &[2]),
        ],
    );
}

#[test]
fn odd_lane_counts_and_mixed_widths() {
    let i32x3 = |x: &[Expr]| (x[0].clone() * x[0].clone()).saturating_cast(DType::I16).cast(DType::I32);
    let func = elementwise("i32x3", &[DType::I32], &[(DType::I32, &i32x3)], 48, 3);
    let mut args = vec![array_of(ScalarType::I32, 48, &[3.0, -200.0, 1000.0, -7.0, 70000.0])];
    args.extend(zeros_like(&func, 1));
    check(&func, &args);

    // u8x4 (32 bits: per-lane) widened to i32x4 (one piece) and added.
    let widen = |x: &[Expr]| x[0].cast(DType::I32) + x[1].clone();
    let func = elementwise("u8x4_to_i32x4", &[DType::U8, DType::I32], &[(DType::I32, &widen)], 64, 4);
    let mut args = vec![
        array_of(ScalarType::U8, 64, &[0.0, 255.0, 128.0, 7.0, 9.0]),
        array_of(ScalarType::I32, 64, &[1.0, -300.0]),
    ];
    args.extend(zeros_like(&func, 2));
    check(&func, &args);

    // f16x8 is one piece of raw bits; arithmetic goes through f64 per lane.
    let fma = |x: &[Expr]| x[0].clone() * x[1].clone() + x[0].clone();
    let func = elementwise("f16x8", &[DType::F16, DType::F16], &[(DType::F16, &fma)], 64, 8);
    let mut args = vec![
        array_of(ScalarType::F16, 64, &float_samples()),
        array_of(ScalarType::F16, 64, &[0.1, -3.0, 1e4, 0.5, 7.0]),
    ];
    args.extend(zeros_like(&func, 2));
    check(&func, &args);
}

#[test]
fn vector_reduce_matches_interp() {
    let cases = [
        (ScalarType::I32, 16u16, 4u16, VectorReduceOp::Add),
        (ScalarType::I32, 8, 1, VectorReduceOp::Add),
        (ScalarType::I16, 16, 8, VectorReduceOp::Add),
        (ScalarType::U8, 32, 16, VectorReduceOp::Add),
        (ScalarType::I8, 16, 1, VectorReduceOp::Add),
        (ScalarType::U16, 8, 2, VectorReduceOp::Max),
        (ScalarType::I64, 4, 2, VectorReduceOp::Min),
        (ScalarType::F32, 8, 2, VectorReduceOp::Add),
        (ScalarType::F32, 12, 3, VectorReduceOp::Max),
        (ScalarType::F64, 4, 1, VectorReduceOp::Min),
        (ScalarType::F16, 8, 2, VectorReduceOp::Add),
        (ScalarType::BF16, 4, 1, VectorReduceOp::Add),
        (ScalarType::I32, 6, 2, VectorReduceOp::Add),
    ];
    for (ty, in_lanes, out_lanes, op) in cases {
        let d = DType::scalar(ty);
        let n = 96i64;
        let a = Buffer::new("a", d, vec![n]);
        let out = Buffer::new("out", d, vec![n / (in_lanes / out_lanes) as i64]);
        let i = Var::index("i");
        let value = Expr::load(&a, vec![lane_index(&i, in_lanes)]);
        let value = Expr::vector_reduce(op, value, out_lanes);
        let body = Stmt::store(&out, vec![lane_index(&i, out_lanes)], value);
        let body = Stmt::for_loop(i, n / in_lanes as i64, ForKind::Serial, body);
        let func = Func { name: format!("reduce_{ty}_{in_lanes}_{out_lanes}"), params: vec![a, out.clone()], body };
        let values = if ty.is_float() { float_samples() } else { int_samples(ty).iter().map(|&v| v as f64).collect() };
        let input = if ty.is_float() {
            array_of(ty, n as usize, &values)
        } else {
            let v: Vec<i64> = (0..n as usize).map(|k| int_samples(ty)[k % 16].wrapping_add(k as i64)).collect();
            Array::from_i64(d, &[n], &v)
        };
        let clif = check(&func, &[input, Array::zeros(d, out.shape())]).clif_text().to_string();
        if (ty, in_lanes, out_lanes) == (ScalarType::I32, 16, 4) {
            assert!(clif.contains("iadd_pairwise") && !clif.contains("extractlane"), "{clif}");
        }
    }
}

/// Lane-wise selects whose condition comes from a compare of another width, or per lane.
#[test]
fn select_with_vector_conditions_of_every_shape() {
    // (compare type, arm type, lanes)
    let cases = [
        (ScalarType::I32, ScalarType::F32, 4u16),
        (ScalarType::U8, ScalarType::I32, 16),
        (ScalarType::F64, ScalarType::I16, 8),
        (ScalarType::I16, ScalarType::U8, 16),
        (ScalarType::I32, ScalarType::I32, 3),
        (ScalarType::F32, ScalarType::F16, 8),
        (ScalarType::I64, ScalarType::Bool, 16),
        (ScalarType::U16, ScalarType::F64, 4),
    ];
    for (cmp_ty, arm_ty, lanes) in cases {
        let (c, a) = (DType::scalar(cmp_ty), DType::scalar(arm_ty));
        let sel =
            |x: &[Expr]| Expr::select(Expr::cmp(CmpOp::Lt, x[0].clone(), x[1].clone()), x[2].clone(), x[3].clone());
        let func = elementwise(&format!("select_{cmp_ty}_{arm_ty}_x{lanes}"), &[c, c, a, a], &[(a, &sel)], 48, lanes);
        let (p, q) = sample_pairs(cmp_ty);
        let arms = |k: f64| array_of(arm_ty, 48, &[k, -1.0, 0.0, 3.5 * k, 1.0]);
        let mut args = vec![truncate(&p, 48), truncate(&q, 48), arms(2.0), arms(-5.0)];
        args.extend(zeros_like(&func, 4));
        let clif = check(&func, &args).clif_text().to_string();
        if (cmp_ty, arm_ty) == (ScalarType::I32, ScalarType::F32) {
            assert!(clif.contains("bitselect") && !clif.contains("extractlane"), "{clif}");
        }
    }
    // A broadcast condition selects whole pieces.
    let (a, b, c, out) = (
        Buffer::new("a", DType::I32, vec![48]),
        Buffer::new("b", DType::F32, vec![48]),
        Buffer::new("c", DType::F32, vec![48]),
        Buffer::new("out", DType::F32, vec![48]),
    );
    let i = Var::index("i");
    let idx = lane_index(&i, 4);
    let cond = Expr::cmp(CmpOp::Gt, Expr::load(&a, vec![Expr::var(&i) * 4]), Expr::int(DType::I32, 0));
    let value =
        Expr::select(Expr::broadcast(cond, 4), Expr::load(&b, vec![idx.clone()]), Expr::load(&c, vec![idx.clone()]));
    let body = Stmt::for_loop(i, 12, ForKind::Serial, Stmt::store(&out, vec![idx], value));
    let func = Func { name: "select_broadcast".into(), params: vec![a, b, c, out], body };
    let args = [
        array_of(ScalarType::I32, 48, &[1.0, -1.0, 0.0, 5.0, 7.0]),
        array_of(ScalarType::F32, 48, &[1.5, 2.5]),
        array_of(ScalarType::F32, 48, &[-1.0, f64::NAN]),
        Array::zeros(DType::F32, &[48]),
    ];
    let clif = check(&func, &args).clif_text().to_string();
    assert!(clif.contains("select v") && !clif.contains("bitselect"), "{clif}");
}

#[test]
fn ramps_and_broadcasts_of_every_kind() {
    let n = 48i64;
    for (ty, lanes, stride) in [
        (ScalarType::I32, 4u16, Expr::int(DType::I32, 3)),
        (ScalarType::U8, 16, Expr::int(DType::U8, 17)),
        (ScalarType::I64, 3, Expr::int(DType::I64, -2)),
        (ScalarType::F32, 4, Expr::float(DType::F32, 0.1)),
        (ScalarType::F16, 8, Expr::float(DType::F16, 0.3)),
    ] {
        let d = DType::scalar(ty);
        let (a, out) = (Buffer::new("a", d, vec![n]), Buffer::new("out", d, vec![n]));
        let i = Var::index("i");
        let base = Expr::load(&a, vec![Expr::var(&i) * lanes as i64]);
        let value =
            Expr::ramp(base.clone(), stride, lanes) + Expr::broadcast(Expr::load(&a, vec![Expr::var(&i)]), lanes);
        let body = Stmt::for_loop(
            i.clone(),
            n / lanes as i64,
            ForKind::Serial,
            Stmt::store(&out, vec![lane_index(&i, lanes)], value),
        );
        let func = Func { name: format!("ramp_{ty}_x{lanes}"), params: vec![a, out], body };
        check(&func, &[array_of(ty, n as usize, &[1.0, 250.0, -3.0, 0.5, 7.0]), Array::zeros(d, &[n])]);
    }
}

/// `i32(u8) * i32(i8)` 16 lanes at a time runs as 16-bit products widened to i32 (the
/// translator's byte multiply: two multiplies per 16 lanes); 8 lanes at a time, its slow twin,
/// as the 32-bit multiply. Both equal the interpreter on every pair of bytes.
#[test]
fn byte_products_from_16_bit_multiplies_are_exact_for_every_pair() {
    let n = 256 * 256;
    let u: Vec<f64> = (0..n).map(|i| (i / 256) as f64).collect();
    let s: Vec<f64> = (0..n).map(|i| (i % 256) as f64 - 128.0).collect();
    let mul = |x: &[Expr]| x[0].cast(DType::I32) * x[1].cast(DType::I32);
    for lanes in [16u16, 8] {
        let func = elementwise(&format!("byte_mul_x{lanes}"), &[DType::U8, DType::I8], &[(DType::I32, &mul)], n, lanes);
        let mut args = vec![array_of(ScalarType::U8, n as usize, &u), array_of(ScalarType::I8, n as usize, &s)];
        args.extend(zeros_like(&func, 2));
        let clif = check(&func, &args).clif_text().to_string();
        // Multiplies of two values (the index's multiply by a constant aside).
        let multiplies = clif.lines().filter(|l| l.contains("= imul v") && !l.contains("; v")).count();
        assert_eq!(multiplies, 2, "x{lanes}: two multiplies per loop body\n{clif}");
        assert_eq!(clif.contains("swiden_low"), lanes == 16, "x{lanes}: products widened from i16\n{clif}");
    }
}

/// A batched matmul's runtime `B`, packed in the call by the auto-tensorized point (`ji` and
/// `ki` vectorized together): each group of 4 rows is loaded as whole 16-byte rows and shuffled
/// into the kernel's layout, not loaded lane by lane; bit-exact against the interpreter at every
/// level (the interpreter runs the packing lane by lane).
#[test]
fn a_runtime_b_is_packed_from_whole_rows_by_shuffles() {
    use schedules::auto::{AutoPoint, Space, SpaceOptions};
    use schedules::catalog::OpSpec;
    let def = OpSpec::BatchMatmul { b: 2, m: 8, n: 32, k: 16 }.build().unwrap();
    let space = Space::of(&def, SpaceOptions { vnni: true, ..SpaceOptions::default() });
    let sketch = space.sketches().iter().find(|s| s.name == "tensorize.u8").expect("a tensorized sketch");
    for nr in [16, 32] {
        let values = sketch.decisions.iter().map(|d| if d.name == "gemm.nr" { nr } else { d.choices[0] }).collect();
        let scheduled = space.apply(&AutoPoint { sketch: sketch.name.clone(), values }).unwrap();
        let args: Vec<&ir::te::Tensor> = scheduled.args.iter().collect();
        let f = ir::lower::lower(&scheduled.schedule, &args, "bmm").unwrap();
        let arrays: Vec<Array> = f
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let n = p.shape().iter().product::<i64>();
                let lo = if p.dtype().scalar == ScalarType::U8 { 0 } else { -128 };
                let v: Vec<f64> = (0..n).map(|j| (lo + (j * 37 + i as i64 * 11) % 256) as f64).collect();
                Array::from_f64(p.dtype(), p.shape(), &v)
            })
            .collect();
        let clif = check(&f, &arrays).clif_text().to_string();
        // 2 batches × 32/nr panels × 4 groups of 4 rows: 16-byte rows, 4 loads per group.
        assert_eq!(clif.matches("load.i8x16").count(), 4 * nr as usize / 16, "nr {nr}:\n{clif}");
        assert!(clif.contains("shuffle") && !clif.contains("load.i8 "), "nr {nr}:\n{clif}");
    }
}
