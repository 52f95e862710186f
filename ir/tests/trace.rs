//! Schedule traces: random schedules replay to the same lowered IR, survive JSON, and report a
//! definition they do not fit as a typed error naming the step.

use proptest::prelude::*;
use tensorlift_ir::expr::select;
use tensorlift_ir::intrin::{IntrinKind, decl_tensor_intrin};
use tensorlift_ir::schedule::{Schedule, create_schedule};
use tensorlift_ir::te::{IterVar, Tensor, compute, placeholder, reduce_axis, sum};
use tensorlift_ir::trace::{IntrinRef, LoopRef, StageRef, Step, Trace, TraceError, TraceErrorKind, resolve_among};
use tensorlift_ir::{DType, Expr, ScheduleError, TensorIntrin};

/// A definition: the function's arguments (inputs, then outputs) and its outputs.
struct Def {
    args: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

impl Def {
    fn outputs(&self) -> Vec<&Tensor> {
        self.outputs.iter().collect()
    }

    fn lower(&self, s: &Schedule) -> String {
        let args: Vec<&Tensor> = self.args.iter().collect();
        tensorlift_ir::lower::lower(s, &args, "f").expect("an accepted schedule lowers").to_string()
    }
}

/// `C[i, j] = Σ_k i32(A[i, k]) · i32(B[k, j])`; `p` prefixes every name.
fn matmul(p: &str, m: i64, n: i64, k: i64) -> Def {
    let a = placeholder([m, k], DType::U8, &format!("{p}A")).unwrap();
    let b = placeholder([k, n], DType::I8, &format!("{p}B")).unwrap();
    let r = reduce_axis(k, &format!("{p}k")).unwrap();
    let c = compute(
        [m, n],
        |i| sum(DType::I32, &[&r], a.at([&i[0], &r]).cast(DType::I32) * b.at([&r, &i[1]]).cast(DType::I32)),
        &format!("{p}C"),
    )
    .unwrap();
    Def { args: vec![a, b, c.clone()], outputs: vec![c] }
}

/// A 3×3 convolution of `X: u8[1, 3, 6, 6]` padded by one with `W: i8[4, 3, 3, 3]`, plus one.
fn padded_conv(p: &str) -> Def {
    let x = placeholder([1, 3, 6, 6], DType::U8, &format!("{p}X")).unwrap();
    let w = placeholder([4, 3, 3, 3], DType::I8, &format!("{p}W")).unwrap();
    let pad = compute(
        [1, 3, 8, 8],
        |i| {
            let (y, x_) = (&i[2] - 1, &i[3] - 1);
            let inside = y.ge(0) & y.lt(6) & x_.ge(0) & x_.lt(6);
            select(inside, x.at([&i[0], &i[1], &y, &x_]), Expr::int(DType::U8, 0))
        },
        &format!("{p}P"),
    )
    .unwrap();
    let (rc, ry, rx) = (
        reduce_axis(3, &format!("{p}rc")).unwrap(),
        reduce_axis(3, &format!("{p}ry")).unwrap(),
        reduce_axis(3, &format!("{p}rx")).unwrap(),
    );
    let conv = compute(
        [1, 4, 6, 6],
        |i| {
            let src = pad.at([&i[0], &rc, &(&i[2] + &*ry), &(&i[3] + &*rx)]).cast(DType::I32);
            sum(DType::I32, &[&rc, &ry, &rx], src * w.at([&i[1], &rc, &ry, &rx]).cast(DType::I32))
        },
        &format!("{p}Conv"),
    )
    .unwrap();
    let out =
        compute([1, 4, 6, 6], |i| conv.at([&i[0], &i[1], &i[2], &i[3]]) + Expr::int(DType::I32, 1), &format!("{p}Out"))
            .unwrap();
    Def { args: vec![x, w, out.clone()], outputs: vec![out] }
}

/// `B = A + 1`, `C = B · 3`, `D = C - A` on `i32[8, 12]`.
fn chain(p: &str) -> Def {
    let a = placeholder([8, 12], DType::I32, &format!("{p}A")).unwrap();
    let b = compute([8, 12], |i| a.at([&i[0], &i[1]]) + Expr::int(DType::I32, 1), &format!("{p}B")).unwrap();
    let c = compute([8, 12], |i| b.at([&i[0], &i[1]]) * Expr::int(DType::I32, 3), &format!("{p}C")).unwrap();
    let d = compute([8, 12], |i| c.at([&i[0], &i[1]]) - a.at([&i[0], &i[1]]), &format!("{p}D")).unwrap();
    Def { args: vec![a, d.clone()], outputs: vec![d] }
}

/// `Z[i] = X[i] + 1` on `n` i32: matches `chain`'s `B` at a loop of extent `n` over its rows.
fn add1(n: i64) -> TensorIntrin {
    let x = placeholder([n], DType::I32, "X").unwrap();
    let z = compute([n], |i| x.at([&i[0]]) + Expr::int(DType::I32, 1), "Z").unwrap();
    decl_tensor_intrin(&format!("add1x{n}"), IntrinKind::Generic, &z, &[&x]).unwrap()
}

fn add1_intrin() -> TensorIntrin {
    add1(4)
}

/// The intrinsics random schedules tensorize with: `add1x12` fits `chain`'s `B` unsplit.
fn intrins() -> Vec<TensorIntrin> {
    vec![add1(4), add1(12)]
}

const FACTORS: [i64; 10] = [-1, 0, 1, 2, 3, 4, 5, 8, 16, 64];

/// One random primitive call (13 and up: tensorize); its numbers pick stages, loops and factors from the schedule as
/// it is when the call is made, so that most calls are plausible and some are invalid.
#[derive(Clone, Debug)]
struct Call {
    primitive: u8,
    picks: [usize; 4],
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    prop::collection::vec(
        (0u8..16, prop::array::uniform4(0usize..64)).prop_map(|(primitive, picks)| Call { primitive, picks }),
        0..14,
    )
}

/// The tensor of the `pick`-th stage in lowering order (placeholders and caches included).
fn stage(s: &Schedule, pick: usize) -> Tensor {
    let order = s.order();
    s.stage_data(order[pick % order.len()]).tensor.clone()
}

/// A loop of `t`'s stage, or now and then one of any stage (usually not a loop of `t`).
fn leaf(s: &Schedule, t: &Tensor, pick: usize) -> Option<IterVar> {
    let own = s.stage_data(s.stage_of(t).unwrap()).leaves.clone();
    let pool = if pick % 7 == 6 || own.is_empty() {
        s.order().iter().flat_map(|st| s.stage_data(*st).leaves.clone()).collect()
    } else {
        own
    };
    (!pool.is_empty()).then(|| pool[pick % pool.len()].clone())
}

/// Makes `call` on `s` and says whether the schedule accepted it; `None` if there was nothing to
/// call it on (a stage without loops).
fn apply(s: &mut Schedule, call: &Call, intrins: &[TensorIntrin]) -> Option<Result<(), ScheduleError>> {
    let [a, b, c, d] = call.picks;
    let t = stage(s, a);
    let factor = FACTORS[c % FACTORS.len()];
    let axis = leaf(s, &t, b)?;
    Some(match call.primitive {
        0 => s.split(&t, &axis, factor).map(drop),
        1 => s.split_nparts(&t, &axis, factor).map(drop),
        2 => {
            let y = leaf(s, &t, d).unwrap_or(axis.clone());
            s.tile(&t, &axis, &y, factor, FACTORS[d % FACTORS.len()]).map(drop)
        }
        3 => {
            let leaves = &s.stage_data(s.stage_of(&t).unwrap()).leaves;
            let next = leaves.iter().position(|l| *l == axis).and_then(|p| leaves.get(p + 1)).cloned();
            let inner = if d % 5 == 4 { leaf(s, &t, d) } else { next };
            s.fuse(&t, &axis, &inner?).map(drop)
        }
        4 => {
            // A rotation of a window of the stage's loops, sometimes with a duplicate.
            let leaves = s.stage_data(s.stage_of(&t).unwrap()).leaves.clone();
            if leaves.is_empty() {
                return None;
            }
            let start = b % leaves.len();
            let len = 1 + c % (leaves.len() - start);
            let mut window: Vec<&IterVar> = leaves[start..start + len].iter().collect();
            window.rotate_left(d % len);
            if d % 9 == 8 {
                window.push(window[0]);
            }
            s.reorder(&t, &window)
        }
        5 => s.vectorize(&t, &axis),
        6 => s.unroll(&t, &axis),
        7 => s.parallel(&t, &axis),
        8 => {
            // Mostly the producer's first consumer, the one stage it can be computed at.
            let consumers = s.consumers(s.stage_of(&t).unwrap());
            let consumer = match consumers.first() {
                Some(c) if d % 3 != 0 => s.stage_data(*c).tensor.clone(),
                _ => stage(s, d),
            };
            s.compute_at(&t, &consumer, &leaf(s, &consumer, b)?)
        }
        9 => s.compute_inline(&t),
        10 => s.compute_root(&t),
        11 => {
            let consumers = s.consumers(s.stage_of(&t).unwrap());
            let readers: Vec<Tensor> = if d % 4 == 3 {
                vec![stage(s, d)]
            } else {
                consumers.iter().map(|c| s.stage_data(*c).tensor.clone()).collect()
            };
            s.cache_read(&t, &readers.iter().collect::<Vec<_>>()).map(drop)
        }
        12 => s.cache_write(&t).map(drop),
        _ => {
            // Mostly at the innermost loop, where an element-wise intrinsic can fit.
            let leaves = &s.stage_data(s.stage_of(&t).unwrap()).leaves;
            let axis = if b % 2 == 0 { leaves.last().cloned().unwrap_or(axis) } else { axis };
            s.tensorize(&t, &axis, &intrins[d % intrins.len()])
        }
    })
}

/// A random schedule of `def`: the calls the schedule rejects are skipped.
fn random_schedule(def: &Def, calls: &[Call], intrins: &[TensorIntrin]) -> (Schedule, usize) {
    let mut s = create_schedule(&def.outputs());
    let accepted = calls.iter().filter(|c| matches!(apply(&mut s, c, intrins), Some(Ok(())))).count();
    (s, accepted)
}

/// The schedule's trace replays onto a fresh definition with the same names to the same lowered
/// IR, survives a JSON round trip, and replays onto a renamed definition.
fn check_replay(build: &dyn Fn(&str) -> Def, calls: &[Call]) -> Result<(), TestCaseError> {
    let def = build("");
    let (s, accepted) = random_schedule(&def, calls, &intrins());
    let trace = s.trace();
    prop_assert_eq!(trace.steps.len(), accepted, "one step per accepted call");

    let json = serde_json::to_string(&trace).unwrap();
    let parsed: Trace = serde_json::from_str(&json).unwrap();
    prop_assert_eq!(&parsed, &trace);

    // Replay resolves the intrinsics from fresh declarations: same structure, new identity.
    let fresh = intrins();
    let resolver = resolve_among(&fresh);
    let again = build("");
    let replayed = parsed.replay(&again.outputs(), &resolver).unwrap();
    prop_assert_eq!(again.lower(&replayed), def.lower(&s));
    prop_assert_eq!(replayed.trace(), trace.clone());

    let renamed = build("other_");
    let replayed = trace.replay(&renamed.outputs(), &resolver).unwrap();
    prop_assert_eq!(replayed.trace(), trace);
    renamed.lower(&replayed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_matmul_schedules_replay(calls in calls()) {
        check_replay(&|p| matmul(p, 10, 12, 8), &calls)?;
    }

    #[test]
    fn random_padded_conv_schedules_replay(calls in calls()) {
        check_replay(&padded_conv, &calls)?;
    }

    #[test]
    fn random_chain_schedules_replay(calls in calls()) {
        check_replay(&chain, &calls)?;
    }
}

/// `chain` with `C` at `D`'s row loop, `B` inlined, `D` split by 4 and tensorized, and `A` read
/// through a cache placed at the same row loop.
fn chain_schedule(def: &Def, intrin: &TensorIntrin) -> Schedule {
    let d = &def.outputs[0];
    let c = d.inputs()[0].clone();
    let b = c.inputs()[0].clone();
    let a = b.inputs()[0].clone();
    let mut s = create_schedule(&[d]);
    let (_, bi) = s.split(&b, &b.axis(1), 4).unwrap();
    s.tensorize(&b, &bi, intrin).unwrap();
    let (rows, _) = s.split(d, &d.axis(0), 2).unwrap();
    s.compute_at(&c, d, &rows).unwrap();
    let cache = s.cache_read(&a, &[d]).unwrap();
    s.compute_at(&cache, d, &rows).unwrap();
    let (_, ci) = s.split(&c, &c.axis(1), 6).unwrap();
    s.unroll(&c, &ci).unwrap();
    s
}

#[test]
fn a_trace_reads_as_positional_json_and_replays_with_its_intrinsic() {
    let intrin = add1_intrin();
    let def = chain("");
    let s = chain_schedule(&def, &intrin);
    let trace = s.trace();
    let json = serde_json::to_value(&trace).unwrap();
    assert_eq!(
        json["steps"][0],
        serde_json::json!({"primitive": "split", "stage": {"definition": 1}, "axis": {"root": 1}, "factor": 4})
    );
    assert_eq!(json["steps"][1]["axis"], serde_json::json!({"output": {"step": 0, "index": 1}}));
    assert_eq!(json["steps"][1]["intrin"]["name"], "add1x4");
    assert_eq!(json["steps"][1]["intrin"]["kind"], "Generic");
    assert_eq!(
        json["steps"][4],
        serde_json::json!({"primitive": "cache_read", "stage": {"definition": 0}, "readers": [{"definition": 3}]})
    );
    assert_eq!(json["steps"][5]["stage"], serde_json::json!({"created_by": 4}));
    let text = def.lower(&s);
    assert!(text.contains("call add1x4("), "{text}");

    // Other names, fresh ids, a fresh declaration of the intrinsic.
    let again = chain("other_");
    let fresh = [add1_intrin()];
    let replayed = trace.replay(&again.outputs(), &resolve_among(&fresh)).unwrap();
    assert_eq!(replayed.trace(), trace);
    assert_eq!(
        again.lower(&replayed),
        text.replace('A', "other_A").replace('B', "other_B").replace('C', "other_C").replace('D', "other_D")
    );
}

#[test]
fn an_intrinsic_the_resolver_lacks_or_declares_differently_is_a_typed_error() {
    let intrin = add1_intrin();
    let def = chain("");
    let trace = chain_schedule(&def, &intrin).trace();
    let none = |_: &IntrinRef| None;
    let err = trace.replay(&chain("").outputs(), &none).unwrap_err();
    assert_eq!(err.to_string(), "trace step 1 (tensorize): the resolver knows no tensor intrinsic add1x4");

    // Same name and kind, different semantics (+ 2): rejected before tensorize is tried.
    let x = placeholder([4], DType::I32, "X").unwrap();
    let z = compute([4], |i| x.at([&i[0]]) + Expr::int(DType::I32, 2), "Z").unwrap();
    let impostor = decl_tensor_intrin("add1x4", IntrinKind::Generic, &z, &[&x]).unwrap();
    let always = move |_: &IntrinRef| Some(impostor.clone());
    let err = trace.replay(&chain("").outputs(), &always).unwrap_err();
    assert!(
        matches!(
            &err,
            TraceError { step: 1, primitive: "tensorize", reason: TraceErrorKind::IntrinsicMismatch { .. } }
        ),
        "{err}"
    );
}

#[test]
fn a_trace_that_does_not_fit_the_workload_names_the_step() {
    let mut s = create_schedule(&matmul("", 10, 12, 8).outputs());
    let c = s.outputs()[0].clone();
    let k = c.reduce_axes()[0].clone();
    let (ko, _) = s.split(&c, &k, 8).unwrap();
    s.tile(&c, &c.axis(0), &c.axis(1), 5, 4).unwrap();
    s.vectorize(&c, &ko).unwrap();
    let trace = s.trace();

    // With k = 4000, k.outer has 500 iterations: too many lanes to vectorize.
    let big = matmul("", 10, 12, 4000);
    let err = trace.replay(&big.outputs(), &|_| None).unwrap_err();
    assert_eq!(err.step, 2);
    assert_eq!(err.primitive, "vectorize");
    assert!(
        matches!(&err.reason, TraceErrorKind::Primitive(e) if matches!(**e, ScheduleError::TooManyLanes { found: 500, .. })),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "trace step 2 (vectorize): vectorize of C.k.outer: extent 500 exceeds the maximum of 256 lanes"
    );

    // An element-wise definition has no reduction axis: stage 2 (C) has no root axis 2.
    let err = trace.replay(&chain("").outputs(), &|_| None).unwrap_err();
    assert_eq!(err.to_string(), "trace step 0 (split): stage C has no root axis 2 (root axis count: 2)");

    // Fewer stages than the trace refers to.
    let a = placeholder([4], DType::I32, "A").unwrap();
    let err = trace.replay(&[&a], &|_| None).unwrap_err();
    assert_eq!(err.to_string(), "trace step 0 (split): the definition has no stage 2 (stage count: 1)");

    // References to later steps or to steps that create nothing.
    let forward = Trace {
        steps: vec![Step::Vectorize { stage: StageRef::Definition(2), axis: LoopRef::Output { step: 0, index: 0 } }],
    };
    let err = forward.replay(&matmul("", 10, 12, 8).outputs(), &|_| None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "trace step 0 (vectorize): output 0 of step 0 does not exist (a step may only refer to an earlier step)"
    );
    let no_stage = Trace { steps: vec![trace.steps[0].clone(), Step::CacheWrite { stage: StageRef::CreatedBy(0) }] };
    let err = no_stage.replay(&matmul("", 10, 12, 8).outputs(), &|_| None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "trace step 1 (cache_write): the stage created by step 0 does not exist (that step is a split, which creates none)"
    );
}

#[test]
fn tile_is_one_step_and_a_rejected_tile_changes_nothing() {
    let def = matmul("", 10, 12, 8);
    let mut s = create_schedule(&def.outputs());
    let c = def.outputs[0].clone();
    let before = def.lower(&s);
    // The first split would succeed; the second factor is rejected.
    let err = s.tile(&c, &c.axis(0), &c.axis(1), 4, 0).unwrap_err();
    assert!(matches!(err, ScheduleError::BadSplitFactor { found: 0, .. }));
    assert_eq!(def.lower(&s), before);
    assert!(s.trace().steps.is_empty());
    let (xo, _, _, _) = s.tile(&c, &c.axis(0), &c.axis(1), 4, 3).unwrap();
    s.parallel(&c, &xo).unwrap();
    assert_eq!(
        s.trace().steps,
        vec![
            Step::Tile {
                stage: StageRef::Definition(2),
                x: LoopRef::Root(0),
                y: LoopRef::Root(1),
                x_factor: 4,
                y_factor: 3
            },
            Step::Parallel { stage: StageRef::Definition(2), axis: LoopRef::Output { step: 0, index: 0 } },
        ]
    );
}

/// Found by the property tests: both schedules used to be accepted and then failed to lower.
#[test]
fn caches_of_or_around_compute_at_stages_are_rejected() {
    let def = chain("");
    let d = &def.outputs[0];
    let c = d.inputs()[0].clone();
    let b = c.inputs()[0].clone();
    let mut s = create_schedule(&[d]);
    s.compute_at(&c, d, &d.axis(0)).unwrap();
    let err = s.cache_read(&c, &[d]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cache_read of C: it is computed inside the loops of D (compute_at); cache it before compute_at or compute_root it"
    );
    s.compute_root(&c).unwrap();
    s.compute_at(&b, &c, &c.axis(1)).unwrap();
    let err = s.cache_write(&c).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cache_write of C: B is computed inside its loops (compute_at); cache_write before compute_at"
    );
    assert_eq!(s.trace().steps.len(), 3);
    def.lower(&s);
}
