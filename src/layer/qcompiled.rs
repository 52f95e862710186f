//! `CompiledQuantized`: a quantized convolution or dense layer compiled (`compile_qconv`,
//! `compile_qdense`) with its weights prepared once, run on caller-owned NHWC bytes without a
//! copy per call. Its function may be shared with other layers (`KernelCache`).

use std::sync::Arc;
use std::time::Duration;

use ir::DType;
use ir::trace::Trace;
use schedules::ops::GemmOperands;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::{LayerError, SpecError};
use crate::isa::{IsaLevel, KernelVariant};
use crate::runtime::{Arg, CheckedTensor, CompiledFunc, Tensor};

/// The prepared weights of a layer: what every call reads besides source and output.
pub(super) struct Prepared {
    /// Packed weights (bind to the per-call function's argument 1).
    pub(super) packed: Tensor,
    /// The compensation with the i32 bias folded in (argument 2).
    pub(super) compensation: Tensor,
    /// Per-channel parameters (the scales `S[c]` where the weight scales are per channel).
    pub(super) params: Vec<Tensor>,
    /// Building and running the preparation.
    pub(super) time: Duration,
}

/// The packed weights, checked once against the range the kernels rely on where they declare
/// one.
enum Packed {
    Plain(Tensor),
    Checked(CheckedTensor),
}

/// A compiled quantized layer, ready to run again and again (`run` takes `&self`).
pub struct CompiledQuantized {
    name: String,
    kernel: Arc<CompiledFunc>,
    /// Whether `kernel` came from a `KernelCache` (compiled for an earlier layer).
    cached: bool,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
    packed: Packed,
    compensation: Tensor,
    params: Vec<Tensor>,
    src: (DType, Vec<i64>),
    dst: (DType, Vec<i64>),
    /// Whether the function reads a sum input (a fused residual add, `QConvSpec::sum`).
    sum: bool,
    ops: u64,
    compile: Duration,
    prepare: Duration,
    /// The per-call function's schedule as replayable data.
    trace: Trace,
}

impl CompiledQuantized {
    pub(super) fn new(
        name: String,
        (kernel, cached): (Arc<CompiledFunc>, bool),
        knobs: Conv2dInt8Knobs,
        operands: GemmOperands,
        prepared: Prepared,
        (src, dst): ((DType, Vec<i64>), (DType, Vec<i64>)),
        (ops, compile, trace): (u64, Duration, Trace),
    ) -> Result<CompiledQuantized, LayerError> {
        let Prepared { packed, compensation, params, time } = prepared;
        let packed = match kernel.scanned_range(1) {
            Some(range) => Packed::Checked(CheckedTensor::new(packed, range)?),
            None => Packed::Plain(packed),
        };
        Ok(CompiledQuantized {
            name,
            kernel,
            cached,
            knobs,
            operands,
            packed,
            compensation,
            params,
            src,
            dst,
            sum: false,
            ops,
            compile,
            prepare: time,
            trace,
        })
    }

    /// The layer, marked as reading a sum input (`run_with_sum`) when `sum`.
    pub(super) fn with_sum(mut self, sum: bool) -> CompiledQuantized {
        self.sum = sum;
        self
    }

    /// Whether the layer has a fused residual add (`run_with_sum`).
    pub fn has_sum(&self) -> bool {
        self.sum
    }

    /// Runs the layer on `src` (the source's bytes, NHWC `[1, H, W, IC]`; a dense layer's
    /// `[M, K]`) into `dst` (NHWC `[1, OH, OW, OC]`; `[M, N]`), u8 or i8 data as bytes. Errors
    /// if a buffer's length is not its tensor's.
    pub fn run(&self, src: &[u8], dst: &mut [u8]) -> Result<(), LayerError> {
        self.run_with_sum(src, None, dst)
    }

    /// `run` with the sum input of a fused residual add (`QConvSpec::sum`: NHWC bytes of the
    /// destination's shape and type); errors if it is given exactly when the layer has none.
    pub fn run_with_sum(&self, src: &[u8], sum: Option<&[u8]>, dst: &mut [u8]) -> Result<(), LayerError> {
        if sum.is_some() != self.sum {
            let (expected, found) = if self.sum { ("a sum input", "none") } else { ("none", "a sum input") };
            let op = self.name.clone();
            return Err(
                SpecError { op, what: "the sum input".into(), expected: expected.into(), found: found.into() }.into()
            );
        }
        self.check_len("the source", &self.src.1, src.len())?;
        self.check_len("the destination", &self.dst.1, dst.len())?;
        let (Some(src), Some(dst)) = (Arg::from_bytes(self.src.0, src), Arg::from_mut_bytes(self.dst.0, dst)) else {
            // The specs' checks admit only u8 and i8 activations.
            let found = format!("{} and {}", self.src.0, self.dst.0);
            let op = self.name.clone();
            return Err(
                SpecError { op, what: "the activation dtypes".into(), expected: "u8 or i8".into(), found }.into()
            );
        };
        let mut args = vec![
            src,
            match &self.packed {
                Packed::Plain(t) => Arg::tensor_ref(t),
                Packed::Checked(c) => Arg::checked(c),
            },
            Arg::tensor_ref(&self.compensation),
        ];
        if let Some(sum) = sum {
            self.check_len("the sum input", &self.dst.1, sum.len())?;
            args.push(Arg::from_bytes(self.dst.0, sum).expect("the destination's dtype is u8 or i8"));
        }
        args.extend(self.params.iter().map(Arg::tensor_ref));
        args.push(dst);
        Ok(self.kernel.call_args(&mut args)?)
    }

    fn check_len(&self, what: &str, shape: &[i64], found: usize) -> Result<(), SpecError> {
        let expected = shape.iter().product::<i64>() as usize;
        if found == expected {
            return Ok(());
        }
        Err(SpecError {
            op: self.name.clone(),
            what: format!("the length of {what}"),
            expected: format!("{expected} bytes ({shape:?})"),
            found: format!("{found} bytes"),
        })
    }

    /// The knobs the schedule was built with.
    pub fn knobs(&self) -> Conv2dInt8Knobs {
        self.knobs
    }

    /// The GEMM operands the knobs gave for the level and the weights.
    pub fn operands(&self) -> GemmOperands {
        self.operands
    }

    /// Operations per run (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Source and destination dtypes and shapes (NHWC, batch 1).
    pub fn src_shape(&self) -> (DType, &[i64]) {
        (self.src.0, &self.src.1)
    }

    pub fn dst_shape(&self) -> (DType, &[i64]) {
        (self.dst.0, &self.dst.1)
    }

    /// The compiled per-call function.
    pub fn func(&self) -> &CompiledFunc {
        &self.kernel
    }

    /// The ISA level the function was compiled for.
    pub fn isa_level(&self) -> IsaLevel {
        self.kernel.isa_level()
    }

    /// The hand-assembled GEMM kernel families the function calls.
    pub fn kernel_variants(&self) -> Vec<KernelVariant> {
        self.kernel.kernel_variants()
    }

    /// Whether the requantization runs as a hand-assembled map kernel (not its loop fallback).
    pub fn uses_map_kernel(&self) -> bool {
        self.kernel.machine_code().iter().any(|c| c.origin.contains("map kernel"))
    }

    /// One line: the level, the GEMM kernels, and whether the requantization is the GEMM
    /// kernel's epilogue (`GemmMap`), a map kernel, or loops.
    pub fn kernel_description(&self) -> String {
        let kernels: Vec<String> = self.kernel_variants().iter().map(|v| v.to_string()).collect();
        let epilogue = self.kernel.machine_code().iter().any(|c| c.origin.contains("as its epilogue"));
        let map = match (epilogue, self.uses_map_kernel()) {
            (true, _) => "GEMM epilogue",
            (false, true) => "map kernel",
            (false, false) => "loops",
        };
        let sum = if self.sum { " with the residual add" } else { "" };
        format!("{}: {}; requantization{sum}: {map}", self.isa_level().name(), kernels.join(", "))
    }

    /// Whether the per-call function was compiled for an earlier layer (`KernelCache`).
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// Defining the schedule, lowering and code generation of the per-call function (only
    /// defining it and finding it, where `cached`).
    pub fn compile_time(&self) -> Duration {
        self.compile
    }

    /// Building and running the weight preparation.
    pub fn prepare_time(&self) -> Duration {
        self.prepare
    }

    /// The per-call function's schedule as replayable data (what a tuning record carries).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }
}
