//! Measuring one point of a layer's space: compile, verify bit for bit against the reference,
//! then time (median of repeats after a warm-up, interleaved with the peak probe of the kernel's
//! method, as `tensorlift resnet18` does).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use ir::DType;
use ir::interp::array::Array;
use ir::trace::Trace;
use schedules::generic::default_schedule;
use schedules::ops::GemmOperands;
use schedules::resnet18::{Layer, LayerQuant, WeightBits, quantization, uniform};
use schedules::x86_conv::{Conv2dInt8Knobs, table_layer};
use thiserror::Error;

use super::space::Space;
use crate::bench::time_against_peak_after;
use crate::isa::IsaLevel;
use crate::kernels::peak::ProbeKind;
use crate::record::{Status, WorkloadRef};
use crate::runtime::BoundArgs;
use crate::runtime::peak::Probe;
use crate::target::Target;
use crate::{BuildError, CompileOptions, CompiledFunc, RuntimeError, Tensor, build};

/// Errors setting up a layer for measurement (a point's own failures are `Measurement`s).
#[derive(Debug, Error)]
pub enum SetupError {
    #[error(transparent)]
    Quant(#[from] schedules::quant::QuantError),
    #[error(transparent)]
    Conv(#[from] schedules::x86_conv::Conv2dInt8Error),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Run(#[from] RuntimeError),
    #[error(transparent)]
    Compile(#[from] crate::CompileError),
}

/// What measuring a point gave.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub status: Status,
    pub median_ns: Option<f64>,
    pub gops: Option<f64>,
    /// The probe's GOPS measured beside it, and which probe.
    pub peak_gops: Option<f64>,
    pub probe: Option<ProbeKind>,
    pub compile_ms: Option<f64>,
    pub verified: bool,
    pub error: Option<String>,
    /// The schedule's trace, when it was built.
    pub trace: Option<Trace>,
}

impl Measurement {
    fn failed(status: Status, error: String, compile_ms: Option<f64>) -> Measurement {
        Measurement {
            status,
            median_ns: None,
            gops: None,
            peak_gops: None,
            probe: None,
            compile_ms,
            verified: false,
            error: Some(error),
            trace: None,
        }
    }
}

/// A layer of the resnet-18 table set up for tuning at one ISA level: its data (seeded by table
/// position, as `tensorlift resnet18` seeds it), the prepared inputs and the reference output.
pub struct LayerBench {
    pub layer: Layer,
    pub level: IsaLevel,
    pub weights: WeightBits,
    pub space: Space,
    pub workload: WorkloadRef,
    quant: LayerQuant,
    /// The source in the schedule's layout (NHWC; `[1, 1, 1, IC]` for the dense layer).
    src: Array,
    wei: Array,
    bias: Array,
    range: (i8, i8),
    /// The output of the layer's definition under the generic schedule.
    reference: Array,
    /// Packed weights and compensation per panel width and operands: the weight preparation
    /// (slow for R11's 2.4 MB under its generic schedule) depends on nothing else, and
    /// candidates share it.
    prepared: RefCell<HashMap<PreparationKey, [Tensor; 2]>>,
}

/// What a weight preparation depends on: the panel width and the operands (source dtype,
/// declared weight range).
type PreparationKey = (i64, DType, (i8, i8));

/// A layer compiled with its weights prepared: call it with `args` (the output last).
struct Compiled {
    func: CompiledFunc,
    /// Bound once: the prepared weights a kernel relies on are checked here, not per call.
    args: BoundArgs,
    compile_ms: f64,
    trace: Trace,
}

impl LayerBench {
    /// Sets up `layer` (at `position` in the table) for tuning at `level` on `max_threads`.
    pub fn new(
        layer: Layer,
        position: usize,
        level: IsaLevel,
        weights: WeightBits,
        max_threads: usize,
        workload: WorkloadRef,
    ) -> Result<LayerBench, SetupError> {
        let seed = 1000 * (position as u64 + 1);
        let quant = quantization(layer, seed)?;
        let (lo, hi) = weights.range();
        let src_dims = match layer {
            Layer::Conv(c) => vec![1, c.h, c.w, c.ic],
            Layer::Dense(d) => vec![1, 1, 1, d.in_features],
        };
        let n = |dims: &[i64]| dims.iter().product::<i64>() as usize;
        let src = Array::from_i64(DType::U8, &src_dims, &uniform(n(&src_dims), seed, 0, 255));
        let wei =
            Array::from_i64(DType::I8, &quant.wei_dims, &uniform(n(&quant.wei_dims), seed + 1, lo.into(), hi.into()));
        let bias = Array::from_f64(
            DType::F32,
            &[quant.wei_dims[0]],
            &quant.bias.iter().map(|&b| f64::from(b)).collect::<Vec<_>>(),
        );
        let range = schedules::x86_conv::weight_range(wei.to_i64_vec().into_iter().map(|w| w as i8));
        let space = Space::for_target(layer, max_threads, level, range);
        let mut bench = LayerBench {
            layer,
            level,
            weights,
            space,
            workload,
            quant,
            src,
            wei,
            bias,
            range,
            reference: Array::zeros(DType::U8, &[0]),
            prepared: RefCell::default(),
        };
        bench.reference = bench.generic_reference()?;
        Ok(bench)
    }

    /// The definition under the generic schedule (no tensorization), on one thread: what every
    /// point's output must equal.
    fn generic_reference(&self) -> Result<Array, SetupError> {
        let knobs = self.space.default_knobs();
        let operands = knobs.operands(false, self.range);
        let options =
            CompileOptions { target: Target::Level(IsaLevel::Scalar), threads: Some(1), ..Default::default() };
        let mut compiled = self.compile(knobs, operands, &options, true)?;
        compiled.args.call(&compiled.func)?;
        Ok(compiled.args.last().map(Tensor::to_array).expect("the output is the last argument"))
    }

    /// Prepares the weights and compiles the layer with `knobs` on `operands` (or, with
    /// `generic`, the generic schedule of the same definition).
    fn compile(
        &self,
        knobs: Conv2dInt8Knobs,
        operands: GemmOperands,
        options: &CompileOptions,
        generic: bool,
    ) -> Result<Compiled, SetupError> {
        let start = Instant::now();
        let (prep, layer) = table_layer(self.layer, &self.quant, knobs, operands, self.layer.name())?;
        let schedule = if generic { default_schedule(&[&layer.layer.output]) } else { layer.schedule.clone() };
        let trace = schedule.trace();
        let func = build(&schedule, &layer.args.iter().collect::<Vec<_>>(), self.layer.name(), options)?;
        let compile_ms = start.elapsed().as_secs_f64() * 1e3;
        let key = (knobs.nr, operands.source, operands.weights);
        let cached = self.prepared.borrow().get(&key).cloned();
        let [packed, compensation] = match cached {
            Some(prepared) => prepared,
            None => {
                let prep_func = build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", options)?;
                let wei_shape = prep.args[0].shape().to_vec();
                let mut prep_args = [
                    Tensor::from_array(&Array::from_i64(DType::I8, &wei_shape, &self.wei.to_i64_vec())),
                    Tensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape())?,
                    Tensor::zeros(DType::I32, prep.compensation.compensation.shape())?,
                ];
                prep_func.compiled.call(&mut prep_args.iter_mut().collect::<Vec<_>>())?;
                let [_, packed, compensation] = prep_args;
                self.prepared.borrow_mut().insert(key, [packed.clone(), compensation.clone()]);
                [packed, compensation]
            }
        };
        let src_shape = layer.args[0].shape().to_vec();
        let mut args = vec![
            Tensor::from_array(&Array::from_i64(DType::U8, &src_shape, &self.src.to_i64_vec())),
            packed,
            compensation,
            Tensor::from_array(&self.bias),
        ];
        args.extend(layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
        args.push(Tensor::zeros(DType::U8, layer.layer.output.shape())?);
        let args = func.compiled.bind(args)?;
        Ok(Compiled { func: func.compiled, args, compile_ms, trace })
    }

    /// Operations of one call (`2·OC·OH·OW·IC·KH·KW`).
    pub fn ops(&self) -> u64 {
        self.layer.ops()
    }

    /// Compiles, verifies and times `point` (`repeat` timed calls, or with a `budget`, as many as
    /// fit in it as the verification call's time says, at least 1: the validation times the
    /// fastest again with `repeat` calls). Never panics on a bad point:
    /// a point the space rejects is `BuildError` with the reason.
    pub fn measure(&self, point: &Conv2dInt8Knobs, repeat: usize, budget: Option<Duration>) -> Measurement {
        if let Err(reason) = self.space.check(point) {
            return Measurement::failed(Status::BuildError, reason.to_string(), None);
        }
        if !self.level.is_supported() {
            return Measurement::failed(Status::UnsupportedIsa, format!("this CPU lacks {}", self.level), None);
        }
        let operands = point.operands(self.level.has_vnni(), self.range);
        let options =
            CompileOptions { target: Target::Level(self.level), threads: Some(point.threads), ..Default::default() };
        let mut compiled = match self.compile(*point, operands, &options, false) {
            Ok(c) => c,
            Err(e) => return Measurement::failed(Status::BuildError, e.to_string(), None),
        };
        let compile_ms = Some(compiled.compile_ms);
        let trace = Some(compiled.trace.clone());
        let func = &compiled.func;
        let args = &mut compiled.args;
        let start = Instant::now();
        if let Err(e) = args.call(func) {
            return Measurement { trace, ..Measurement::failed(Status::RunError, e.to_string(), compile_ms) };
        }
        let warm_up = start.elapsed();
        let output = args.last().map(Tensor::to_array).expect("the output is the last argument");
        if !output.bits_eq(&self.reference) {
            let error = "output differs from the generic schedule's".to_string();
            return Measurement { trace, ..Measurement::failed(Status::Mismatch, error, compile_ms) };
        }
        let call = warm_up.as_secs_f64();
        let repeat = match budget {
            Some(b) if call > 0.0 => repeat.min(((b.as_secs_f64() / call) as usize).max(1)),
            _ => repeat,
        };
        let probe = Probe::for_function(func);
        let threads = func.threads().unwrap_or(1);
        // The verification call warmed the function up.
        match time_against_peak_after(probe.as_ref(), threads, repeat, warm_up, || args.call(func)) {
            Ok(timing) => Measurement {
                status: Status::Ok,
                median_ns: Some(timing.median_s * 1e9),
                gops: Some(self.ops() as f64 / timing.median_s / 1e9),
                peak_gops: timing.peak_gops,
                probe: probe.map(|p| p.kind),
                compile_ms,
                verified: true,
                error: None,
                trace,
            },
            Err(e) => Measurement { trace, ..Measurement::failed(Status::RunError, e.to_string(), compile_ms) },
        }
    }
}
