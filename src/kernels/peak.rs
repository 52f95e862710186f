//! The `vpdpbusd` throughput probe: the hardware limit GEMM kernels are judged against,
//! measured the way `shared/anchors/peak.c` does: 12 independent accumulator chains in a loop,
//! enough to cover the ~4-cycle latency at up to 2 instructions per cycle.

use std::time::{Duration, Instant};

use iced_x86::Register;
use iced_x86::code_asm::registers::{ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::*;
use thiserror::Error;

use super::{KernelError, VectorWidth};
use crate::codegen::jit::{self, JitCode};
use crate::error::{CompileError, RuntimeError};
use crate::runtime::{IsaLevel, OptLevel, Target, build_isa};

/// Independent accumulators in the probe loop.
pub const ACCUMULATORS: usize = 12;

/// int8 operations per `vpdpbusd`: 4 multiply-adds (2 ops each) per i32 lane.
pub fn ops_per_instruction(width: VectorWidth) -> f64 {
    (width.lanes() * 4 * 2) as f64
}

/// One throughput measurement. The machine is shared: compare a kernel only with a peak
/// measured in the same run, ideally interleaved with it (see `examples/kernel_sweep.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peak {
    pub width: VectorWidth,
    /// Median over the runs, in int8 GOPS.
    pub gops: f64,
    /// Median reciprocal throughput: wall nanoseconds per `vpdpbusd`.
    pub ns_per_instruction: f64,
    /// Loop iterations per run, and runs.
    pub iterations: u64,
    pub runs: usize,
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum PeakError {
    #[error("vpdpbusd {width:?} probe: this CPU lacks {needed}")]
    Unsupported { width: VectorWidth, needed: &'static str },
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// The probe `fn(iterations: i64)`: each iteration runs `ACCUMULATORS` independent
/// `vpdpbusd`s. Ymm uses the VEX form (AVX-VNNI) when `vex` is set, else EVEX (AVX512-VL).
pub fn assemble_probe(width: VectorWidth, vex: bool) -> Result<Vec<u8>, KernelError> {
    let mut a = CodeAssembler::new(64)?;
    let src = ACCUMULATORS;
    let z = |i: usize| get_zmm(Register::ZMM0 + i as u32).expect("zmm0..zmm12");
    let y = |i: usize| get_ymm(Register::YMM0 + i as u32).expect("ymm0..ymm12");
    // Bytes of 1: the values only keep the arithmetic realistic.
    a.vpcmpeqd(y(src), y(src), y(src))?;
    a.vpabsb(y(src), y(src))?;
    for i in 0..ACCUMULATORS {
        a.vpxor(y(i), y(i), y(i))?;
    }
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    for i in 0..ACCUMULATORS {
        match width {
            VectorWidth::Zmm => a.vpdpbusd(z(i), z(src), z(src))?,
            VectorWidth::Ymm if vex => a.vex().vpdpbusd(y(i), y(src), y(src))?,
            VectorWidth::Ymm => a.evex().vpdpbusd(y(i), y(src), y(src))?,
        }
    }
    a.dec(rdi)?;
    a.jnz(top)?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(a.assemble(0)?)
}

/// A loaded probe for `width`, or why this CPU cannot run it.
pub struct Probe {
    code: JitCode,
    pub width: VectorWidth,
    /// Whether the ymm probe is VEX encoded (AVX-VNNI).
    pub vex: bool,
}

impl Probe {
    pub fn new(width: VectorWidth) -> Result<Probe, PeakError> {
        let (vex, level) = match width {
            VectorWidth::Zmm if IsaLevel::Avx512Vnni.is_supported() => (false, IsaLevel::Avx512Vnni),
            VectorWidth::Zmm => return Err(PeakError::Unsupported { width, needed: "AVX512-VNNI" }),
            VectorWidth::Ymm if IsaLevel::AvxVnni.is_supported() => (true, IsaLevel::AvxVnni),
            VectorWidth::Ymm if IsaLevel::Avx512Vnni.is_supported() => (false, IsaLevel::Avx512Vnni),
            VectorWidth::Ymm => return Err(PeakError::Unsupported { width, needed: "AVX-VNNI or AVX512-VNNI" }),
        };
        let bytes = assemble_probe(width, vex)?;
        let (isa, _) = build_isa(Target::Level(level), OptLevel::None)?;
        let code = jit::load_bytes(isa, "vpdpbusd_probe", &bytes, 1)?;
        Ok(Probe { code, width, vex })
    }

    /// Runs `iterations` loop iterations and returns the wall time.
    pub fn run(&self, iterations: u64) -> Duration {
        // SAFETY: the probe has this signature, touches no memory and only caller-saved
        // registers, and `self` keeps the code alive.
        let f: extern "C" fn(i64) = unsafe { std::mem::transmute(self.code.entry()) };
        let start = Instant::now();
        f(iterations.clamp(1, i64::MAX as u64) as i64);
        start.elapsed()
    }

    /// Runs `iterations` loop iterations on every thread of the pool that functions compiled for
    /// `threads` threads use, all at once; returns the summed int8 GOPS. Running the probe there
    /// also keeps those threads awake, as calls back to back would.
    pub fn gops_on_pool(&self, iterations: u64, threads: usize) -> Result<f64, RuntimeError> {
        let pool = crate::runtime::host::pool(threads)?;
        let times = pool.broadcast(|_| self.run(iterations));
        Ok(times.iter().map(|t| self.gops(iterations, t.as_secs_f64())).sum())
    }

    /// Iterations that take about `run_time` (from one calibration run).
    pub fn calibrate(&self, run_time: Duration) -> u64 {
        let calibration = 100_000;
        let t = self.run(calibration).as_secs_f64().max(1e-9);
        ((calibration as f64 * run_time.as_secs_f64() / t) as u64).max(1000)
    }

    /// int8 GOPS of a run of `iterations` that took `seconds`.
    pub fn gops(&self, iterations: u64, seconds: f64) -> f64 {
        (iterations * ACCUMULATORS as u64) as f64 * ops_per_instruction(self.width) / seconds / 1e9
    }

    /// Median of `runs` runs of about `run_time` each (after one calibration run).
    pub fn measure(&self, run_time: Duration, runs: usize) -> Peak {
        let iterations = self.calibrate(run_time);
        let mut times: Vec<f64> = (0..runs.max(1)).map(|_| self.run(iterations).as_secs_f64()).collect();
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        Peak {
            width: self.width,
            gops: self.gops(iterations, median),
            ns_per_instruction: median * 1e9 / (iterations * ACCUMULATORS as u64) as f64,
            iterations,
            runs: times.len(),
        }
    }
}
