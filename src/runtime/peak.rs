//! Running the throughput probes (`kernels::peak` assembles them): load one, time it on one
//! thread or on every thread of a pool, and the one fact about the cores the default schedules
//! follow, whether they run zmm `vpdpbusd` at its full width (`zmm_vnni_runs_full_width`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::CompiledFunc;
use crate::codegen::build_isa;
use crate::codegen::jit::{self, JitCode};
use crate::error::{CompileError, KernelError, RuntimeError};
use crate::isa::{KernelVariant, VectorWidth};
use crate::kernels::peak::{ProbeKind, assemble};
use crate::target::{OptLevel, Target};

/// One throughput measurement. The machine is shared: compare a kernel only with a peak
/// measured in the same run, ideally interleaved with it (see `examples/kernel_sweep.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peak {
    pub kind: ProbeKind,
    /// Median over the runs, in int8 GOPS.
    pub gops: f64,
    /// Median reciprocal throughput: wall nanoseconds per chain step.
    pub ns_per_step: f64,
    /// Loop iterations per run, and runs.
    pub iterations: u64,
    pub runs: usize,
}

/// Why a probe could not be loaded.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PeakError {
    #[error("{kind} probe: this CPU lacks {needed}")]
    Unsupported { kind: ProbeKind, needed: &'static str },
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// A loaded probe, or why this CPU cannot run it.
pub struct Probe {
    code: JitCode,
    pub kind: ProbeKind,
    /// Whether the ymm `vpdpbusd` probe is VEX encoded (AVX-VNNI).
    pub vex: bool,
}

impl Probe {
    pub fn of(kind: ProbeKind) -> Result<Probe, PeakError> {
        let (level, vex) = kind.level().ok_or(PeakError::Unsupported { kind, needed: kind.needed() })?;
        let bytes = assemble(kind, vex)?;
        let (isa, _) = build_isa(Target::Level(level), OptLevel::None)?;
        let code = jit::load_bytes(isa, "peak_probe", &bytes, 1)?;
        Ok(Probe { code, kind, vex })
    }

    /// The probe of the method `variant` runs.
    pub fn for_variant(variant: KernelVariant) -> Result<Probe, PeakError> {
        Probe::of(ProbeKind::for_variant(variant))
    }

    /// The probe a compiled function is compared with: that of the method of its (first)
    /// hand-assembled kernel; `None` when it calls none (the scalar level).
    pub fn for_function(compiled: &CompiledFunc) -> Option<Probe> {
        compiled.kernel_variants().first().and_then(|&v| Probe::for_variant(v).ok())
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
        let pool = super::host::pool(threads)?;
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
        (iterations * self.kind.chains() as u64) as f64 * self.kind.ops_per_step() / seconds / 1e9
    }

    /// Median of `runs` runs of about `run_time` each (after one calibration run).
    pub fn measure(&self, run_time: Duration, runs: usize) -> Peak {
        let iterations = self.calibrate(run_time);
        let mut times: Vec<f64> = (0..runs.max(1)).map(|_| self.run(iterations).as_secs_f64()).collect();
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        Peak {
            kind: self.kind,
            gops: self.gops(iterations, median),
            ns_per_step: median * 1e9 / (iterations * self.kind.chains() as u64) as f64,
            iterations,
            runs: times.len(),
        }
    }
}

/// Whether this CPU's cores run zmm `vpdpbusd` at its full width (512-bit units), by the zmm
/// and ymm probes on the same core (`full_width_zmm`); false where either cannot run (no
/// AVX512-VNNI). The probes run once per process, on the first call.
pub fn zmm_vnni_runs_full_width() -> bool {
    static FULL_WIDTH: OnceLock<bool> = OnceLock::new();
    *FULL_WIDTH.get_or_init(|| {
        // The best of three short medians: a run slowed by another tenant reads low.
        let rate = |width| {
            let probe = Probe::of(ProbeKind::Vnni(width))?;
            Ok::<f64, PeakError>((0..3).map(|_| probe.measure(Duration::from_micros(500), 3).gops).fold(0.0, f64::max))
        };
        matches!((rate(VectorWidth::Zmm), rate(VectorWidth::Ymm)), (Ok(zmm), Ok(ymm)) if full_width_zmm(zmm, ymm))
    })
}

/// Whether zmm `vpdpbusd` at `zmm` GOPS against ymm at `ymm` GOPS on the same core means
/// 512-bit units: those run zmm at about twice the ymm rate, while cores that split a zmm
/// instruction into two 256-bit halves run both at the same rate; the threshold lies between.
pub fn full_width_zmm(zmm: f64, ymm: f64) -> bool {
    zmm >= 1.4 * ymm
}
