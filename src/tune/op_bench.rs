//! Measuring one point of the auto-scheduler's space (`schedules::auto::Space`) for an operator
//! of the catalog (`schedules::catalog::OpSpec`): the point applied to the definition, compiled
//! at an ISA level, run on deterministic inputs, its outputs checked bit for bit (floats
//! bitwise) against the reference interpreter's (`eval_te` of the definition, computed once per
//! operator: `OpReference`), then timed as a table layer is (`measure::time_verified`). A
//! point's prepare functions (a constant `B` packed once: `schedules::auto::Prepare`) run once
//! on the raw inputs before the call is checked and timed; only the call is timed, and its
//! outputs are checked against the definition's on the raw inputs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ir::interp::{Array, InterpError, eval_te};
use ir::{DType, TeError};
use schedules::auto::{AutoPoint, Space, SpaceOptions};
use schedules::catalog::{Definition, OpSpec};
use thiserror::Error;

use super::auto::CompiledPoint;
use super::measure::{Measurement, difference, time_verified};
use crate::bench::{pattern, pattern_value};
use crate::isa::IsaLevel;
use crate::record::{Status, WorkloadRef};
use crate::runtime::peak::Probe;
use crate::target::Target;
use crate::{CompileOptions, Tensor};

/// Why an operator could not be set up for measurement.
#[derive(Debug, Error)]
pub enum OpBenchError {
    #[error("{op}: the definition: {source}")]
    Definition {
        op: String,
        #[source]
        source: Box<TeError>,
    },
    #[error("{op}: the reference interpreter: {source}")]
    Reference {
        op: String,
        #[source]
        source: Box<InterpError>,
    },
}

/// What the space may use at `level` on at most `max_threads` threads: the level's widest
/// vector and whether it has VNNI.
pub fn space_options(level: IsaLevel, max_threads: usize) -> SpaceOptions {
    let vector_bytes = match level {
        IsaLevel::Scalar => 16,
        IsaLevel::Avx2 | IsaLevel::AvxVnni => 32,
        IsaLevel::Avx512Vnni | IsaLevel::Amx => 64,
    };
    SpaceOptions { max_threads: max_threads.max(1), vector_bytes, vnni: level.has_vnni() }
}

/// The workload of `spec`'s definition `def`: the key of its outputs
/// (`ir::workload::workload_key`), the kind as `op`, the label and the key's summary.
pub fn op_workload(spec: &OpSpec, def: &Definition) -> WorkloadRef {
    let key = ir::workload::workload_key(&def.output_refs());
    WorkloadRef { key: key.key, op: spec.kind().to_string(), summary: format!("{}: {}", spec.label(), key.summary) }
}

/// `spec`'s definition, or the typed error of a shape it rejects (naming the operator).
pub fn definition(spec: &OpSpec) -> Result<Definition, OpBenchError> {
    spec.build().map_err(|source| OpBenchError::Definition { op: spec.label(), source: Box::new(source) })
}

/// The workload of `spec` (a typed error for a shape its definition rejects).
pub fn spec_workload(spec: &OpSpec) -> Result<WorkloadRef, OpBenchError> {
    let def = definition(spec)?;
    Ok(op_workload(spec, &def))
}

/// A float array of `shape` with deterministic values in [-3.90625, 3.90625] (multiples of
/// 1/256, exact in any float type): the pattern with `seed` folded into 2001 steps. Moderate, so
/// that exponentials and variances of normalization stay finite and far from rounding cliffs.
pub fn float_pattern(dtype: DType, shape: &[i64], seed: i64) -> Array {
    let len: i64 = shape.iter().product();
    let values: Vec<f64> =
        (0..len.max(0)).map(|i| (pattern_value(i, seed).rem_euclid(2001) - 1000) as f64 / 256.0).collect();
    Array::from_f64(dtype, shape, &values)
}

/// The inputs every point of `def` runs on: a parameter's own values (`Definition::params`),
/// else for input `i` the pattern with seed `i + 1` (`bench::pattern` for integers,
/// `float_pattern` for floats).
pub fn op_inputs(def: &Definition) -> Vec<Array> {
    let seeded = def.inputs.iter().enumerate().map(|(i, t)| (t, i as i64 + 1));
    seeded
        .map(|(t, seed)| match def.params.iter().find(|p| p.tensor.id() == t.id()) {
            Some(p) => p.values.clone(),
            None if t.dtype().is_float() => float_pattern(t.dtype(), t.shape(), seed),
            None => pattern(t.dtype(), t.shape(), seed),
        })
        .collect()
}

/// The inputs of an operator (`op_inputs`) and the reference interpreter's outputs for them:
/// what every point's outputs must equal, bit for bit. Independent of the level and threads, so
/// computed once per operator.
pub struct OpReference {
    pub inputs: Vec<Array>,
    pub outputs: Vec<Array>,
}

impl OpReference {
    /// Builds `spec`'s definition and evaluates it on its inputs (slow for big shapes in a debug
    /// build: the interpreter visits every element of every stage).
    pub fn new(spec: &OpSpec) -> Result<OpReference, OpBenchError> {
        OpReference::of(&spec.label(), &definition(spec)?)
    }

    /// The same for any definition (`label` names it in errors).
    pub fn of(label: &str, def: &Definition) -> Result<OpReference, OpBenchError> {
        let inputs = op_inputs(def);
        let bound: Vec<_> = def.inputs.iter().zip(&inputs).collect();
        let outputs = eval_te(&def.output_refs(), &bound)
            .map_err(|source| OpBenchError::Reference { op: label.to_string(), source: Box::new(source) })?;
        Ok(OpReference { inputs, outputs })
    }
}

/// An operator set up for measurement at one level on at most `max_threads` threads: its
/// definition, space, workload and (shared) reference.
pub struct OpBench {
    pub level: IsaLevel,
    pub definition: Definition,
    pub space: Space,
    pub workload: WorkloadRef,
    reference: Arc<OpReference>,
}

impl OpBench {
    /// Sets `spec` up at `level` on at most `max_threads` threads, with its `reference`.
    pub fn new(
        spec: &OpSpec,
        level: IsaLevel,
        max_threads: usize,
        reference: Arc<OpReference>,
    ) -> Result<OpBench, OpBenchError> {
        let definition = definition(spec)?;
        let workload = op_workload(spec, &definition);
        Ok(OpBench::of(definition, workload, level, max_threads, reference))
    }

    /// Any definition set up the same way, under `workload`.
    pub fn of(
        definition: Definition,
        workload: WorkloadRef,
        level: IsaLevel,
        max_threads: usize,
        reference: Arc<OpReference>,
    ) -> OpBench {
        let space = Space::of(&definition, space_options(level, max_threads));
        OpBench { level, definition, space, workload, reference }
    }

    /// Applies `point`, compiles it, runs it on the operator's inputs, checks every output
    /// against the reference bit for bit and, if equal, times it (`measure::time_verified`:
    /// `repeat` calls, fewer within a `budget`). A point the space rejects is `BuildError`
    /// without compiling; an output that differs is `Mismatch`, untimed. Never panics on a bad
    /// point.
    pub fn measure(&self, point: &AutoPoint, repeat: usize, budget: Option<Duration>) -> Measurement {
        let scheduled = match self.space.apply(point) {
            Ok(s) => s,
            Err(e) => return Measurement::failed(Status::BuildError, e.to_string(), None),
        };
        if !self.level.is_supported() {
            return Measurement::failed(Status::UnsupportedIsa, format!("this CPU lacks {}", self.level), None);
        }
        let threads = Some(scheduled.threads);
        let trace = Some(scheduled.schedule.trace());
        let failed = |status, error: String, compile_ms| Measurement {
            trace: trace.clone(),
            threads,
            ..Measurement::failed(status, error, compile_ms)
        };
        let n_inputs = self.reference.inputs.len();
        if scheduled.args.len() != n_inputs + self.reference.outputs.len() {
            let error = format!(
                "the applied point has {} arguments, expected {} inputs and {} outputs",
                scheduled.args.len(),
                n_inputs,
                self.reference.outputs.len()
            );
            return failed(Status::BuildError, error, None);
        }
        let options = CompileOptions {
            target: Target::Level(self.level),
            threads: Some(scheduled.threads),
            ..Default::default()
        };
        let point = match CompiledPoint::build(&scheduled, "op", &options) {
            Ok(k) => k,
            Err(e) => return failed(Status::BuildError, e.to_string(), None),
        };
        let compile_ms = Some(point.compile_time().as_secs_f64() * 1e3);
        let raw: Vec<Tensor> = self.reference.inputs.iter().map(Tensor::from_array).collect();
        // Once, untimed: the constants the call takes prepared.
        let mut tensors = match point.prepare(raw) {
            Ok(t) => t,
            Err(e) => return failed(Status::RunError, e.to_string(), compile_ms),
        };
        let kernel = &point.main;
        for out in &scheduled.args[n_inputs..] {
            match Tensor::zeros(out.dtype(), out.shape()) {
                Ok(t) => tensors.push(t),
                Err(e) => return failed(Status::RunError, e.to_string(), compile_ms),
            }
        }
        let mut bound = match kernel.compiled.bind(tensors) {
            Ok(b) => b,
            Err(e) => return failed(Status::RunError, e.to_string(), compile_ms),
        };
        let start = Instant::now();
        if let Err(e) = bound.call(&kernel.compiled) {
            return failed(Status::RunError, e.to_string(), compile_ms);
        }
        let warm_up = start.elapsed();
        for (j, expected) in self.reference.outputs.iter().enumerate() {
            let Some(output) = bound.get(n_inputs + j) else {
                return failed(Status::RunError, format!("output {j} is missing"), compile_ms);
            };
            if let Some(difference) = difference(&output.to_array(), expected) {
                let error = format!("output {j} differs from the reference interpreter's: {difference}");
                return failed(Status::Mismatch, error, compile_ms);
            }
        }
        let probe = Probe::for_function(&kernel.compiled);
        let threads = kernel.compiled.threads().unwrap_or(1);
        let ops = self.definition.ops.round() as u64;
        time_verified((probe, threads), ops, (repeat, budget), warm_up, (compile_ms, trace), || {
            bound.call(&kernel.compiled)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_inputs_are_moderate_deterministic_and_seeded() {
        let a = float_pattern(DType::F32, &[4, 300], 1);
        let values = a.to_f64_vec();
        assert!(values.iter().all(|v| v.abs() <= 3.906_25), "{values:?}");
        assert!(values.iter().any(|&v| v < -1.0) && values.iter().any(|&v| v > 1.0));
        assert!(a.bits_eq(&float_pattern(DType::F32, &[4, 300], 1)));
        assert!(!a.bits_eq(&float_pattern(DType::F32, &[4, 300], 2)));
    }

    #[test]
    fn the_options_follow_the_level() {
        assert_eq!(space_options(IsaLevel::Avx2, 2), SpaceOptions { max_threads: 2, vector_bytes: 32, vnni: false });
        let zmm = space_options(IsaLevel::Avx512Vnni, 0);
        assert_eq!((zmm.max_threads, zmm.vector_bytes, zmm.vnni), (1, 64, true));
    }
}
