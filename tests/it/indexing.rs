//! Reads at random index expressions: affine indices with out-of-range offsets, clamped and
//! modulo indices, data-dependent gathers, each optionally guarded by a `select`.
//!
//! Every case ends in exactly one of: `compute` rejects the definition (`TeError::OutOfBounds`,
//! and then some point of the domain really does read outside when the index is affine and
//! unguarded); both the definition (`te_eval`) and the JIT (and the loop interpreter on the
//! lowered function) fail naming the gathered tensor; or all three give identical values.
//! `TENSORLIFT_FUZZ_CASES=N` runs more cases.

use ir::expr::{Expr, max, min, select};
use ir::interp::InterpError;
use ir::interp::array::Array;
use ir::schedule::create_schedule;
use ir::te::{Tensor, compute, placeholder};
use ir::{DType, IterVar, TeError};
use proptest::prelude::*;
use tensorlift::{CompileOptions, RuntimeError, Tensor as RtTensor, build};

/// How one index of the read is formed.
#[derive(Clone, Copy, Debug)]
enum IndexKind {
    /// `ci*i + cj*j + c`.
    Affine { ci: i64, cj: i64, c: i64 },
    /// `min(max(ci*i + cj*j + c, 0), extent - 1)`: always inside.
    Clamped { ci: i64, cj: i64, c: i64 },
    /// `(ci*i + cj*j + c) % extent`: floor modulo, always inside.
    Modulo { ci: i64, cj: i64, c: i64 },
    /// `Idx[i] + c`, `Idx` holding values mostly inside the extents of `A`, some just outside.
    Gather { c: i64 },
    /// `Idx[j] + c`: varies along the vectorized loop, so its check is a vector.
    GatherJ { c: i64 },
}

fn index_kind() -> impl Strategy<Value = IndexKind> {
    let coef = -1i64..=2;
    let offset = -3i64..=3;
    prop_oneof![
        (coef.clone(), coef.clone(), offset.clone()).prop_map(|(ci, cj, c)| IndexKind::Affine { ci, cj, c }),
        (coef.clone(), coef.clone(), offset.clone()).prop_map(|(ci, cj, c)| IndexKind::Clamped { ci, cj, c }),
        (coef.clone(), coef, offset).prop_map(|(ci, cj, c)| IndexKind::Modulo { ci, cj, c }),
        (-1i64..=1).prop_map(|c| IndexKind::Gather { c }),
        (-1i64..=1).prop_map(|c| IndexKind::GatherJ { c }),
    ]
}

fn affine(i: &Expr, j: &Expr, ci: i64, cj: i64, c: i64) -> Expr {
    i * ci + j * cj + c
}

fn index_expr(kind: IndexKind, i: &Expr, j: &Expr, idx: &Tensor, extent: i64) -> Expr {
    match kind {
        IndexKind::Affine { ci, cj, c } => affine(i, j, ci, cj, c),
        IndexKind::Clamped { ci, cj, c } => min(max(affine(i, j, ci, cj, c), 0), extent - 1),
        IndexKind::Modulo { ci, cj, c } => affine(i, j, ci, cj, c) % extent,
        IndexKind::Gather { c } => idx.at([i]).cast(DType::INDEX) + c,
        IndexKind::GatherJ { c } => idx.at([j]).cast(DType::INDEX) + c,
    }
}

/// True if the unguarded affine index leaves `0..extent` somewhere on the `m × n` domain.
fn affine_leaves(kind: IndexKind, m: i64, n: i64, extent: i64) -> Option<bool> {
    let IndexKind::Affine { ci, cj, c } = kind else { return None };
    Some((0..m).any(|i| (0..n).any(|j| !(0..extent).contains(&(ci * i + cj * j + c)))))
}

fn check_case(
    (m, n): (i64, i64),
    shape: [i64; 2],
    kinds: [IndexKind; 2],
    guarded: bool,
    idx_dtype: DType,
    seed: u64,
    split: Option<i64>,
) -> Result<(), TestCaseError> {
    let a = placeholder(shape, DType::I32, "A").unwrap();
    let idx_len = m.max(n);
    let idx = placeholder([idx_len], idx_dtype, "Idx").unwrap();
    let defined = compute(
        [m, n],
        |ax| {
            let (i, j) = (&ax[0], &ax[1]);
            let indices: Vec<Expr> = (0..2).map(|d| index_expr(kinds[d], i, j, &idx, shape[d])).collect();
            let read = a.at([&indices[0], &indices[1]]);
            if guarded {
                let inside = |d: usize| indices[d].ge(0) & indices[d].lt(shape[d]);
                select(inside(0) & inside(1), read, Expr::int(DType::I32, -7))
            } else {
                read
            }
        },
        "C",
    );
    let gathers = kinds.iter().any(|k| matches!(k, IndexKind::Gather { .. } | IndexKind::GatherJ { .. }));
    let c = match defined {
        Err(err) => {
            prop_assert!(matches!(&err, TeError::OutOfBounds(r) if r.input == "A"), "{err}");
            // Clamped, modulo and guarded reads are always accepted; an unguarded affine
            // rejection is exact (the two loop variables are independent).
            prop_assert!(!guarded, "a guarded read was rejected: {err}");
            let leaves = (0..2).filter_map(|d| affine_leaves(kinds[d], m, n, shape[d])).any(|l| l);
            prop_assert!(leaves, "rejected but every affine index stays inside: {err}");
            return Ok(());
        }
        Ok(c) => c,
    };
    if !guarded {
        for d in 0..2 {
            prop_assert!(
                affine_leaves(kinds[d], m, n, shape[d]) != Some(true),
                "accepted a read that leaves A: {kinds:?}"
            );
        }
    }

    // Inputs: A's values are distinct; Idx mostly inside A's extents, sometimes just outside.
    let mut state = seed | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let a_values: Vec<i64> = (0..shape[0] * shape[1]).map(|v| v * 3 + 1).collect();
    let a_arr = Array::from_i64(DType::I32, &shape, &a_values);
    let widest = shape[0].max(shape[1]);
    let idx_values: Vec<i64> = (0..idx_len)
        .map(|_| {
            let v = (next() % (widest as u64 + 4)) as i64 - 2;
            if idx_dtype == DType::U8 { v.rem_euclid(256) } else { v }
        })
        .collect();
    let idx_arr = Array::from_i64(idx_dtype, &[idx_len], &idx_values);

    let expected = ir::interp::te_eval::eval_te(&[&c], &[(&a, &a_arr), (&idx, &idx_arr)]);

    let mut s = create_schedule(&[&c]);
    if let Some(factor) = split {
        let inner: IterVar = c.axis(1);
        let (_, ji) = s.split(&c, &inner, factor).unwrap();
        s.vectorize(&c, &ji).unwrap();
        s.parallel(&c, &c.axis(0)).unwrap();
    }
    let kernel = build(&s, &[&a, &idx, &c], "f", &CompileOptions::default()).expect("accepted definitions build");
    let context = || format!("kinds {kinds:?} guarded {guarded} idx {idx_values:?}\n{}", kernel.lowered);
    // Only gathers are checked at run time; every other read was proven when it was defined.
    let mut checks = 0;
    ir::mutator::for_each_stmt(&kernel.lowered.body, &mut |s| {
        checks += matches!(s.kind(), ir::StmtKind::BoundsCheck { .. }) as usize
    });
    prop_assert!(gathers || checks == 0, "a read without a gather is checked at run time\n{}", context());

    let mut interp_args = vec![a_arr.clone(), idx_arr.clone(), Array::zeros(DType::I32, &[m, n])];
    let interpreted =
        ir::interp::loop_eval::run_func(&kernel.lowered, &mut interp_args).map(|_| interp_args.pop().unwrap());

    let mut tensors = vec![
        RtTensor::from_array(&a_arr),
        RtTensor::from_array(&idx_arr),
        RtTensor::zeros(DType::I32, &[m, n]).unwrap(),
    ];
    let mut refs: Vec<&mut RtTensor> = tensors.iter_mut().collect();
    let jitted = kernel.compiled.call(&mut refs).map(|_| tensors.pop().unwrap().to_array());

    match expected {
        Ok(values) => {
            let values = &values[0];
            let interpreted =
                interpreted.map_err(|e| TestCaseError::fail(format!("loop interpreter failed: {e}\n{}", context())))?;
            let jitted = jitted.map_err(|e| TestCaseError::fail(format!("JIT failed: {e}\n{}", context())))?;
            prop_assert!(interpreted.bits_eq(values), "loop interpreter differs\n{}", context());
            prop_assert!(jitted.bits_eq(values), "JIT differs at {:?}\n{}", jitted.first_difference(values), context());
        }
        Err(err) => {
            prop_assert!(gathers, "the definition failed without a gather: {err}\n{}", context());
            prop_assert!(matches!(&err, InterpError::OutOfBounds { name, .. } if name == "A"), "{err}");
            match interpreted {
                Err(InterpError::IndexCheck { name }) => prop_assert_eq!(name, "A"),
                other => prop_assert!(
                    false,
                    "loop interpreter: expected the gather check to fail, found {other:?}\n{}",
                    context()
                ),
            }
            match jitted {
                Err(RuntimeError::IndexOutOfBounds { tensor }) => prop_assert_eq!(tensor, "A"),
                Err(other) => prop_assert!(false, "JIT: expected IndexOutOfBounds, found {other}\n{}", context()),
                Ok(_) => prop_assert!(false, "JIT: expected IndexOutOfBounds, found values\n{}", context()),
            }
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("TENSORLIFT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn reads_are_rejected_or_agree_or_fail_in_every_executor(
        m in 1i64..6,
        n in 1i64..6,
        ea in 1i64..7,
        eb in 1i64..7,
        kinds in [index_kind(), index_kind()],
        guarded in any::<bool>(),
        idx_dtype in prop_oneof![Just(DType::I64), Just(DType::I8), Just(DType::U8)],
        seed in any::<u64>(),
        split in proptest::option::of(2i64..5),
    ) {
        check_case((m, n), [ea, eb], kinds, guarded, idx_dtype, seed, split)?;
    }
}

/// The gather cases the property covers only by chance, spelled out.
#[test]
fn gathers_inside_pass_and_outside_fail_everywhere() {
    let rows = [IndexKind::Gather { c: 0 }, IndexKind::Affine { ci: 0, cj: 1, c: 0 }];
    let columns = [IndexKind::Affine { ci: 1, cj: 0, c: 0 }, IndexKind::GatherJ { c: 0 }];
    for gather in [rows, columns] {
        for seed in 0..24 {
            for guarded in [false, true] {
                for split in [None, Some(2), Some(4)] {
                    check_case((5, 4), [5, 4], gather, guarded, DType::I64, seed, split).unwrap();
                }
            }
        }
    }
}
