//! Every user error is a typed `Err` with the right variant and a message that says what was
//! expected and what was found. None of these may panic.

use ir::expr::select;
use ir::schedule::create_schedule;
use ir::te::{compute, placeholder, reduce_axis, sum};
use ir::{DType, LowerError, ScheduleError, TeError, Tensor};

fn matmul(m: i64, n: i64, k: i64) -> (Tensor, Tensor, Tensor) {
    let a = placeholder([m, k], DType::U8, "A").unwrap();
    let b = placeholder([k, n], DType::I8, "B").unwrap();
    let c = schedules::nn::matmul(&a, &b, DType::I32, "C").unwrap();
    (a, b, c)
}

#[track_caller]
fn assert_message(err: &impl std::fmt::Display, needles: &[&str]) {
    let msg = err.to_string();
    for needle in needles {
        assert!(msg.contains(needle), "message `{msg}` lacks `{needle}`");
    }
}

#[test]
fn mixing_dtypes_without_cast_names_both_dtypes_and_the_expression() {
    let a = placeholder([8], DType::U8, "A").unwrap();
    let b = placeholder([8], DType::I8, "B").unwrap();
    let err = compute([8], |i| a.at([&i[0]]) * b.at([&i[0]]), "C").unwrap_err();
    assert!(matches!(err, TeError::DTypeMismatch { lhs: DType::U8, rhs: DType::I8, .. }), "{err:?}");
    assert_message(&err, &["u8", "i8", "A[i]*B[i]", "explicit cast"]);
}

#[test]
fn reduction_with_wrong_declared_dtype_is_rejected() {
    let a = placeholder([8], DType::U8, "A").unwrap();
    let k = reduce_axis(8, "k").unwrap();
    let err = compute([1], |_| sum(DType::I32, &[&k], a.at([&k])), "S").unwrap_err();
    assert!(matches!(err, TeError::ReduceDType { expected: DType::I32, found: DType::U8, .. }), "{err:?}");
    assert_message(&err, &["i32", "u8", "A[k]"]);
}

#[test]
fn indexing_with_wrong_rank_is_rejected() {
    let a = placeholder([8, 8], DType::F32, "A").unwrap();
    let err = compute([8], |i| a.at([&i[0]]), "C").unwrap_err();
    assert!(matches!(err, TeError::IndexCount { expected: 2, found: 1, .. }), "{err:?}");
    assert_message(&err, &["A", "2 dimensions", "1 indices"]);
}

#[test]
fn split_factor_must_be_positive() {
    for factor in [0, -3] {
        let (_, _, c) = matmul(8, 8, 8);
        let mut s = create_schedule(&[&c]);
        let err = s.split(&c, &c.axis(0), factor).unwrap_err();
        assert!(matches!(err, ScheduleError::BadSplitFactor { found, .. } if found == factor), "{err:?}");
        assert_message(&err, &["positive", &factor.to_string()]);
        let err = s.split_nparts(&c, &c.axis(1), factor).unwrap_err();
        assert!(matches!(err, ScheduleError::BadSplitFactor { .. }), "{err:?}");
    }
}

#[test]
fn reorder_rejects_duplicate_and_foreign_axes() {
    let (_, _, c) = matmul(8, 8, 8);
    let (_, _, other) = matmul(8, 8, 8);
    let mut s = create_schedule(&[&c]);
    let (i, j) = (c.axis(0), c.axis(1));
    let err = s.reorder(&c, &[&j, &i, &j]).unwrap_err();
    assert!(matches!(err, ScheduleError::DuplicateAxis { .. }), "{err:?}");
    assert_message(&err, &["j", "more than once"]);
    let foreign = other.axis(0);
    let err = s.reorder(&c, &[&j, &foreign]).unwrap_err();
    assert!(matches!(err, ScheduleError::UnknownAxis { .. }), "{err:?}");
    assert_message(&err, &["not a loop of stage C", "i, j, k"]);
}

#[test]
fn fuse_requires_adjacent_loops_in_order() {
    let (_, _, c) = matmul(8, 8, 8);
    let mut s = create_schedule(&[&c]);
    let k = c.reduce_axes()[0].clone();
    let err = s.fuse(&c, &c.axis(0), &k).unwrap_err();
    assert!(matches!(err, ScheduleError::FuseNotAdjacent { outer_pos: 0, inner_pos: 2, .. }), "{err:?}");
    assert_message(&err, &["adjacent", "positions 0 and 2"]);
    let err = s.fuse(&c, &c.axis(1), &c.axis(0)).unwrap_err();
    assert!(matches!(err, ScheduleError::FuseNotAdjacent { .. }), "{err:?}");
    let err = s.fuse(&c, &c.axis(1), &k).unwrap_err();
    assert!(matches!(err, ScheduleError::FuseMixedKinds { .. }), "{err:?}");
}

#[test]
fn vectorize_needs_a_constant_extent() {
    let x = placeholder([64], DType::F32, "X").unwrap();
    let p = compute([64], |i| x.at([&i[0]]) * 2, "P").unwrap();
    let q = compute([64], |i| p.at([&i[0]]) + 1, "Q").unwrap();
    let mut s = create_schedule(&[&q]);
    let (qo, _) = s.split(&q, &q.axis(0), 8).unwrap();
    s.compute_at(&p, &q, &qo).unwrap();
    // P's extent is now inferred from Q's loop at lowering, not known while scheduling.
    let err = s.vectorize(&p, &p.axis(0)).unwrap_err();
    assert!(matches!(err, ScheduleError::NonConstantExtent { primitive: "vectorize", .. }), "{err:?}");
    assert_message(&err, &["P.i", "compile-time constant", "split it by a constant factor"]);
    // Splitting by a constant gives an inner loop that can be vectorized.
    let (_, pi) = s.split(&p, &p.axis(0), 8).unwrap();
    s.vectorize(&p, &pi).unwrap();
}

#[test]
fn vectorize_limits_lanes_and_parallel_rejects_reductions() {
    let (_, _, c) = matmul(8, 1024, 8);
    let mut s = create_schedule(&[&c]);
    let err = s.vectorize(&c, &c.axis(1)).unwrap_err();
    assert!(matches!(err, ScheduleError::TooManyLanes { found: 1024, .. }), "{err:?}");
    let k = c.reduce_axes()[0].clone();
    let err = s.parallel(&c, &k).unwrap_err();
    assert!(matches!(err, ScheduleError::ParallelReduction { .. }), "{err:?}");
    assert_message(&err, &["C.k", "race"]);
}

#[test]
fn compute_at_requires_a_consumer() {
    let x = placeholder([16], DType::I32, "X").unwrap();
    let p = compute([16], |i| x.at([&i[0]]) + 1, "P").unwrap();
    let q = compute([16], |i| p.at([&i[0]]) * 2, "Q").unwrap();
    let r = compute([16], |i| x.at([&i[0]]) - 3, "R").unwrap();
    let out = compute([16], |i| q.at([&i[0]]) + r.at([&i[0]]), "Out").unwrap();
    let mut s = create_schedule(&[&out]);
    let err = s.compute_at(&p, &r, &r.axis(0)).unwrap_err();
    assert!(matches!(err, ScheduleError::NotAConsumer { .. }), "{err:?}");
    assert_message(&err, &["R does not consume P", "consumers are: Q"]);
    let err = s.compute_at(&out, &q, &q.axis(0)).unwrap_err();
    assert!(matches!(err, ScheduleError::NotAConsumer { .. }), "{err:?}");
    let err = s.compute_at(&x, &q, &q.axis(0)).unwrap_err();
    assert!(matches!(err, ScheduleError::NotACompute { .. }), "{err:?}");
}

#[test]
fn inlining_a_reduction_or_an_output_is_rejected() {
    let (_, _, c) = matmul(4, 4, 4);
    let d = compute([4, 4], |i| c.at([&i[0], &i[1]]) + 1, "D").unwrap();
    let mut s = create_schedule(&[&d]);
    let err = s.compute_inline(&c).unwrap_err();
    assert!(matches!(err, ScheduleError::BadAttachment { .. }), "{err:?}");
    assert_message(&err, &["reduction cannot be inlined"]);
    let err = s.compute_inline(&d).unwrap_err();
    assert_message(&err, &["output"]);
}

#[test]
fn lower_checks_its_arguments() {
    let (a, b, c) = matmul(4, 4, 4);
    let s = create_schedule(&[&c]);
    let err = ir::lower::lower(&s, &[&a, &c], "f").unwrap_err();
    assert!(matches!(err, LowerError::MissingArgument { .. }), "{err:?}");
    assert_message(&err, &["B", "A, C"]);
    let err = ir::lower::lower(&s, &[&a, &b], "f").unwrap_err();
    assert!(matches!(err, LowerError::MissingOutput { .. }), "{err:?}");
    let err = ir::lower::lower(&s, &[&a, &b, &c, &a], "f").unwrap_err();
    assert!(matches!(err, LowerError::DuplicateArgument { .. }), "{err:?}");
}

#[test]
fn zero_and_negative_dimensions_are_rejected_where_written() {
    use ir::te::{compute_vec, placeholder_in_range, placeholder_vec};
    for (shape, dim, found) in [([0, 4], 0, 0), ([4, -1], 1, -1), ([i64::MIN, 2], 0, i64::MIN), ([3, 0], 1, 0)] {
        let err = placeholder(shape, DType::I32, "A").unwrap_err();
        assert_eq!(
            err,
            TeError::BadShape { what: "placeholder", tensor: "A".into(), shape: shape.to_vec(), dim, found }
        );
        assert_message(&err, &["placeholder A", "positive", &format!("found {found} in dimension {dim}")]);
        assert_eq!(placeholder_vec(shape.to_vec(), DType::U8, "A").unwrap_err(), err);
        assert!(matches!(placeholder_in_range(shape, DType::U8, 0..=127, "A"), Err(TeError::BadShape { .. })));
        let err = compute(shape, |_| ir::Expr::int(DType::I32, 0), "C").unwrap_err();
        assert!(
            matches!(&err, TeError::BadShape { what: "compute", dim: d, found: f, .. } if *d == dim && *f == found),
            "{err}"
        );
        assert_message(&err, &["compute C"]);
        let err = compute_vec(shape.to_vec(), |_| ir::Expr::int(DType::I32, 0), "C").unwrap_err();
        assert!(matches!(err, TeError::BadShape { what: "compute", .. }), "{err}");
    }
}

#[test]
fn element_counts_and_byte_sizes_beyond_i64_are_rejected() {
    // Element count above i64::MAX (including products beyond i128 for many large dimensions).
    for shape in [vec![i64::MAX, 2], vec![1 << 32, 1 << 32], vec![3_037_000_500, 3_037_000_500], vec![i64::MAX; 3]] {
        let err = ir::te::placeholder_vec(shape.clone(), DType::U8, "A").unwrap_err();
        assert!(matches!(&err, TeError::ShapeTooLarge { quantity: "elements", .. }), "{err}");
        assert_message(&err, &["placeholder A", &format!("{shape:?}"), "elements", "i64::MAX"]);
        let err = ir::te::compute_vec(shape, |_| ir::Expr::int(DType::I8, 0), "C").unwrap_err();
        assert!(matches!(&err, TeError::ShapeTooLarge { quantity: "elements", .. }), "{err}");
    }
    // Fewer than i64::MAX elements, but more than i64::MAX bytes of a 4-byte dtype.
    for shape in [vec![1 << 62], vec![1 << 31, 1 << 31], vec![i64::MAX / 3]] {
        let err = ir::te::placeholder_vec(shape.clone(), DType::F32, "A").unwrap_err();
        assert!(matches!(&err, TeError::ShapeTooLarge { quantity: "bytes", dtype: DType::F32, .. }), "{err}");
        assert_message(&err, &["placeholder A", "f32", "bytes"]);
        let err = ir::te::compute_vec(shape.clone(), |_| ir::Expr::int(DType::I32, 0), "C").unwrap_err();
        assert!(matches!(&err, TeError::ShapeTooLarge { quantity: "bytes", dtype: DType::I32, .. }), "{err}");
        // The same element count of a 1-byte dtype fits.
        ir::te::placeholder_vec(shape, DType::U8, "A").unwrap();
    }
    let err = placeholder([1 << 62], DType::I32, "A").unwrap_err();
    assert_message(&err, &["has 18446744073709551616 bytes"]);
}

#[test]
fn reduce_extents_must_be_positive_and_the_domain_countable() {
    for extent in [0, -1, -64, i64::MIN] {
        let err = reduce_axis(extent, "k").unwrap_err();
        assert_eq!(err, TeError::BadReduceExtent { axis: "k".into(), found: extent });
        assert_message(&err, &["reduce_axis k", "positive", &format!("found {extent}")]);
    }
    // A huge axis is fine on its own; the output shape times the reduce extents must count in i64.
    let a = placeholder([4], DType::I32, "A").unwrap();
    for (shape, extents) in
        [(vec![2], vec![i64::MAX]), (vec![1], vec![1 << 32, 1 << 32]), (vec![1 << 40], vec![1 << 30])]
    {
        let axes: Vec<_> =
            extents.iter().enumerate().map(|(d, &e)| reduce_axis(e, &format!("k{d}")).unwrap()).collect();
        let refs: Vec<_> = axes.iter().collect();
        let err =
            ir::te::compute_vec(shape.clone(), |_| sum(DType::I32, &refs, a.at([&(&axes[0] % 4)])), "S").unwrap_err();
        assert!(matches!(&err, TeError::DomainTooLarge { .. }), "{err}");
        assert_message(&err, &["compute S", &format!("{shape:?}"), &format!("{extents:?}"), "i64::MAX"]);
    }
    let k = reduce_axis(1 << 40, "k").unwrap();
    compute([4], |_| sum(DType::I32, &[&k], a.at([&(&k % 4)])), "S").unwrap();
    // An axis built directly, bypassing `reduce_axis`, is checked by `compute`.
    let raw = ir::IterVar::new("r", -2, ir::te::IterKind::Reduce);
    let err = compute([4], |_| sum(DType::I32, &[&raw], a.at([&(&raw % 4)])), "S").unwrap_err();
    assert_eq!(err, TeError::BadReduceExtent { axis: "r".into(), found: -2 });
}

#[test]
fn reads_that_can_leave_their_tensor_are_rejected_with_the_index_and_its_range() {
    let a = placeholder([8], DType::F32, "A").unwrap();
    let err = compute([8], |i| a.at([&(&i[0] + 1)]), "B").unwrap_err();
    assert_eq!(
        err.to_string(),
        "compute B: A is accessed at i + 1 in dimension 0, which ranges over 1..=8 but A has extent 8 there (valid indices 0..=7)"
    );
    let err = compute([8], |i| a.at([&(&i[0] - 2)]), "B").unwrap_err();
    assert!(
        matches!(&err, TeError::OutOfBounds(r) if (r.min, r.max, r.extent, r.dim) == (Some(-2), Some(5), 8, 0)),
        "{err:?}"
    );

    let m = placeholder([4, 6], DType::I32, "M").unwrap();
    let k = reduce_axis(7, "k").unwrap();
    let err = compute([4], |i| sum(DType::I32, &[&k], m.at([&i[0], &k])), "S").unwrap_err();
    assert!(
        matches!(&err, TeError::OutOfBounds(r) if (r.dim, r.min, r.max, r.extent) == (1, Some(0), Some(6), 6)),
        "{err:?}"
    );
    assert_message(&err, &["compute S", "M is accessed at k in dimension 1", "0..=6", "extent 6"]);

    // A condition that guards the read narrows its range: padding is accepted ...
    let padded =
        compute([10], |i| select(i[0].ge(1) & i[0].lt(9), a.at([&(&i[0] - 1)]), ir::Expr::float(DType::F32, 0.0)), "P");
    assert!(padded.is_ok(), "{:?}", padded.err());
    let other_arm =
        compute([10], |i| select(i[0].lt(1) | i[0].ge(9), ir::Expr::float(DType::F32, 0.0), a.at([&(&i[0] - 1)])), "P");
    assert!(other_arm.is_ok(), "{:?}", other_arm.err());
    // ... but a condition too weak for the read is not, and the message says it was assumed.
    let err =
        compute([10], |i| select(i[0].ge(1), a.at([&(&i[0] - 1)]), ir::Expr::float(DType::F32, 0.0)), "P").unwrap_err();
    assert!(
        matches!(&err, TeError::OutOfBounds(r) if (r.min, r.max, r.guarded) == (Some(0), Some(8), true)),
        "{err:?}"
    );
    assert_message(&err, &["under the enclosing conditions"]);
}

#[test]
fn huge_split_factors_lower_and_run() {
    for factor in [i64::MAX, i64::MAX - 1, 1 << 40] {
        let a = placeholder([7], DType::I32, "A").unwrap();
        let c = compute([7], |i| a.at([&i[0]]) * 3, "C").unwrap();
        let mut s = create_schedule(&[&c]);
        s.split(&c, &c.axis(0), factor).unwrap();
        let kernel = tensorlift::build(&s, &[&a, &c], "f", &tensorlift::CompileOptions::default()).unwrap();
        let mut ta =
            tensorlift::Tensor::from_array(&ir::interp::Array::from_i64(DType::I32, &[7], &[1, 2, 3, 4, 5, 6, 7]));
        let mut tc = tensorlift::Tensor::zeros(DType::I32, &[7]).unwrap();
        kernel.compiled.call(&mut [&mut ta, &mut tc]).unwrap();
        assert_eq!(tc.to_array().to_i64_vec(), vec![3, 6, 9, 12, 15, 18, 21], "factor {factor}");
    }
}

#[test]
fn a_stage_with_a_run_time_checked_gather_stays_at_the_root() {
    use ir::expr::{max, min};
    let a = placeholder([4], DType::I32, "A").unwrap();
    let idx = placeholder([6], DType::I64, "Idx").unwrap();
    let gather = compute([6], |i| a.at([&idx.at([&i[0]])]), "P").unwrap();
    let clamped = compute([6], |i| a.at([&min(max(idx.at([&i[0]]), 0), 3)]), "Q").unwrap();
    let promised = ir::te::placeholder_in_range([6], DType::I64, 0..=3, "Idx2").unwrap();
    let in_range = compute([6], |i| a.at([&promised.at([&i[0]])]), "R").unwrap();
    for (producer, allowed) in [(&gather, false), (&clamped, true), (&in_range, true)] {
        let c = compute([6], |i| producer.at([&i[0]]) + 1, "C").unwrap();
        let mut s = create_schedule(&[&c]);
        let inline = s.compute_inline(producer);
        let mut s = create_schedule(&[&c]);
        let at = s.compute_at(producer, &c, &c.axis(0));
        if allowed {
            assert!(inline.is_ok() && at.is_ok(), "{inline:?} {at:?}");
        } else {
            for err in [inline.unwrap_err(), at.unwrap_err()] {
                assert!(matches!(&err, ScheduleError::BadAttachment { stage, .. } if stage == "P"), "{err:?}");
                assert_message(&err, &["reads A at `Idx[i]`", "computed from data", "stays at the root"]);
            }
        }
    }
}
