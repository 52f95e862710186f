//! The whole model's latency under several knob sources (the defaults, the pre-tuned records,
//! the tuned ones: knobs and auto-scheduled points), each compiled once
//! (`engine::compile_tuned`) and run on the same seeded
//! input, interleaved round by round so that a slow phase of a shared machine hits them alike.
//! The outputs must be equal bit for bit: a schedule changes the time, never the result.
//! `task_times` is the same model with the defaults, profiled per task: what the search budget
//! is spread by.

use std::time::Instant;

use thiserror::Error;

use super::tasks::ModelTasks;
use crate::bench::median;
use crate::engine::{AutoSource, CompiledGraph, EngineError, KnobSource, compile_tuned, random_input};
use crate::runtime::CompileOptions;

/// Why the model could not be timed.
#[derive(Debug, Error)]
pub enum LatencyError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the model's output with the {found} knobs differs from its output with the {expected} knobs")]
    Differs { expected: String, found: String },
}

/// The median latency, in milliseconds, of `model` compiled with each of `sources` (named, with
/// the knobs and the auto-scheduled points they choose), over `rounds` rounds after a warm-up,
/// in the order of `sources`.
pub fn model_latency(
    model: &ModelTasks,
    options: &CompileOptions,
    sources: &[(&str, KnobSource<'_>, AutoSource<'_>)],
    rounds: usize,
) -> Result<Vec<f64>, LatencyError> {
    let mut compiled: Vec<CompiledGraph> = sources
        .iter()
        .map(|(_, knobs, auto)| compile_tuned(model.graph.clone(), model.partitions.clone(), options, *knobs, *auto))
        .collect::<Result<_, _>>()?;
    let Some(first) = compiled.first() else { return Ok(Vec::new()) };
    let inputs = first
        .input_specs()
        .iter()
        .enumerate()
        .map(|(i, (dtype, dims))| random_input(*dtype, dims, i as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let mut expected = None;
    for (c, (name, ..)) in compiled.iter_mut().zip(sources) {
        let (outputs, _) = c.execute(&inputs)?;
        match &expected {
            None => expected = Some((name, outputs)),
            Some((first, e)) => {
                if e.len() != outputs.len() || e.iter().zip(&outputs).any(|(a, b)| !a.bits_eq(b)) {
                    return Err(LatencyError::Differs { expected: first.to_string(), found: name.to_string() });
                }
            }
        }
    }
    let mut times = vec![Vec::with_capacity(rounds); compiled.len()];
    for _ in 0..rounds.max(1) {
        for (c, t) in compiled.iter_mut().zip(&mut times) {
            let start = Instant::now();
            c.execute(&inputs)?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(times.into_iter().map(median).collect())
}

/// Per task of `model` (`ModelTasks::all`'s order), the time its partitions take in one run of
/// the model compiled with the defaults (`options`), in milliseconds: the median of `rounds`
/// runs after a warm-up, per partition, summed over the task's partitions.
pub fn task_times(model: &ModelTasks, options: &CompileOptions, rounds: usize) -> Result<Vec<f64>, LatencyError> {
    let mut compiled = compile_tuned(model.graph.clone(), model.partitions.clone(), options, &|_| None, &|_| None)?;
    let inputs = compiled
        .input_specs()
        .iter()
        .enumerate()
        .map(|(i, (dtype, dims))| random_input(*dtype, dims, i as u64))
        .collect::<Result<Vec<_>, _>>()?;
    compiled.execute(&inputs)?;
    let mut per_step: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); compiled.steps().len()];
    for _ in 0..rounds.max(1) {
        let (_, times) = compiled.execute(&inputs)?;
        for (t, d) in per_step.iter_mut().zip(times) {
            t.push(d.as_secs_f64() * 1e3);
        }
    }
    let ids: Vec<_> = compiled.steps().iter().map(|s| s.partition.id).collect();
    let task_of = model.task_of_partitions();
    let mut times = vec![0.0; model.all().len()];
    for (id, t) in ids.iter().zip(per_step) {
        if let Some(&task) = task_of.get(id) {
            times[task] += median(t);
        }
    }
    Ok(times)
}
