//! `tune::auto::autoschedule` on a user's own definition (one the catalog does not have): the
//! search measures only verified points, never one twice, and the schedule it returns computes
//! the reference interpreter's bits (its constant weights prepared once).

use std::collections::HashSet;

use schedules::catalog::Definition;
use tensorlift::IsaLevel;
use tensorlift::ir::interp::eval_te;
use tensorlift::prelude::*;
use tensorlift::tune::auto::{AutoOptions, Strategy, autoschedule};
use tensorlift::tune::op_bench::op_inputs;

/// `C[i, j] = Σ_k i32(A[i, k]) · i32(W[j, k])`: u8 activations times i8 weights stored one row
/// per output column (the transposed layout of a dense layer).
fn dense_nt(m: i64, n: i64, k: i64) -> Definition {
    let a = placeholder([m, k], DType::U8, "A").unwrap();
    let w = placeholder([n, k], DType::I8, "W").unwrap();
    let r = reduce_axis(k, "k").unwrap();
    let c = compute(
        [m, n],
        |i| sum(DType::I32, &[&r], a.at([&i[0], &r]).cast(DType::I32) * w.at([&i[1], &r]).cast(DType::I32)),
        "C",
    )
    .unwrap();
    Definition {
        inputs: vec![a, w.clone()],
        outputs: vec![c],
        constants: vec![w],
        ops: (2 * m * n * k) as f64,
        params: vec![],
    }
}

#[test]
fn a_users_definition_is_auto_scheduled_and_the_result_is_exact() {
    let level = IsaLevel::detect().unwrap();
    let mut options = AutoOptions::new(level, 10);
    options.max_threads = 2;
    options.repeat = 2;
    options.rounds = 1;
    options.strategy = Strategy::Evolutionary;
    let def = dense_nt(12, 40, 36);
    let result = autoschedule("dense_nt", def.clone(), &options).unwrap();
    // The generic point first, as the baseline (not a trial), then at most 10 trials.
    assert_eq!(result.log.resumed, 1);
    assert_eq!(result.log.trials[0].point.sketch, "generic");
    assert!(result.log.trials.len() <= 11 && result.log.trials.len() > 1);
    let points: HashSet<_> = result.log.trials.iter().map(|t| &t.point).collect();
    assert_eq!(points.len(), result.log.trials.len(), "a point was measured twice");
    assert!(result.listing.contains("sketch generic"), "{}", result.listing);
    assert!(result.default_seconds > 0.0 && result.best_seconds > 0.0);

    // The returned point builds and, its constants prepared, computes the interpreter's bits.
    let compiled = result.compile().unwrap();
    assert_eq!(compiled.prepare.len(), result.scheduled.prepare.len());
    let inputs = op_inputs(&def);
    let mut tensors = compiled.prepare(inputs.iter().map(Tensor::from_array).collect()).unwrap();
    tensors.push(Tensor::zeros(DType::I32, &[12, 40]).unwrap());
    let kernel = &compiled.main;
    let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
    kernel.compiled.call(&mut refs).unwrap();
    let bound: Vec<_> = def.inputs.iter().zip(&inputs).collect();
    let expected = eval_te(&def.output_refs(), &bound).unwrap().remove(0);
    assert!(tensors[2].to_array().bits_eq(&expected), "the auto-scheduled dense_nt differs from the reference");
}
