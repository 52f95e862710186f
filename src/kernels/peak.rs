//! Throughput probes: the hardware limit each GEMM kernel family is judged against, measured the
//! way `shared/anchors/peak.c` and `peak_avx2.c` do: independent accumulator chains in a loop,
//! enough to cover the instructions' latency at their full rate.
//!
//! One probe per dot-product method (`ProbeKind`): `vpdpbusd` (VNNI), the saturating
//! `vpmaddubsw` triple, the sign-transfer chain and `vpmaddwd` + `vpaddd` (widened operands).
//! A kernel's % of peak is against the probe of its own method (`ProbeKind::for_variant`), so
//! every ISA level has one.

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use iced_x86::Register;
use iced_x86::code_asm::registers::{ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::*;
use schedules::x86_conv::CoreRate;
use thiserror::Error;

use super::{DotMethod, KernelError, KernelVariant, VectorWidth};
use crate::codegen::jit::{self, JitCode};
use crate::error::{CompileError, RuntimeError};
use crate::runtime::{CompiledFunc, IsaLevel, OptLevel, Target, build_isa};

/// Independent accumulators in the `vpdpbusd` probe loop.
pub const ACCUMULATORS: usize = 12;

/// The instruction chain a probe repeats.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ProbeKind {
    /// `vpdpbusd acc, a, b`.
    Vnni(VectorWidth),
    /// `vpmaddubsw t, a, b`; `vpmaddwd t, t, ones`; `vpaddd acc, acc, t`.
    Triple(VectorWidth),
    /// `vpsignb t, b, a`; `vpmaddubsw t, |a|, t`; `vpmaddwd t, t, ones`; `vpaddd acc, acc, t`
    /// (ymm).
    SignTransfer,
    /// `vpmaddwd t, a, b`; `vpaddd acc, acc, t` on i16 operands (ymm).
    Madd16,
}

impl ProbeKind {
    /// The probe of the method a kernel runs.
    pub fn for_variant(variant: KernelVariant) -> ProbeKind {
        match variant.method {
            DotMethod::Vnni => ProbeKind::Vnni(variant.width),
            DotMethod::MaddUbs => ProbeKind::Triple(variant.width),
            DotMethod::SignTransfer => ProbeKind::SignTransfer,
            DotMethod::Widen | DotMethod::Madd16 => ProbeKind::Madd16,
        }
    }

    pub fn width(self) -> VectorWidth {
        match self {
            ProbeKind::Vnni(w) | ProbeKind::Triple(w) => w,
            ProbeKind::SignTransfer | ProbeKind::Madd16 => VectorWidth::Ymm,
        }
    }

    /// Independent accumulator chains per loop iteration (as many as the registers allow).
    pub fn chains(self) -> usize {
        match self {
            // 10 accumulators + 2 temporaries + b, a, |a|, ones = 16 ymm.
            ProbeKind::SignTransfer => 10,
            _ => ACCUMULATORS,
        }
    }

    /// int8 operations (2 per multiply-add) of one chain step.
    pub fn ops_per_step(self) -> f64 {
        let lanes = self.width().lanes() as f64;
        match self {
            // 4 u8·i8 products per i32 lane.
            ProbeKind::Vnni(_) | ProbeKind::Triple(_) | ProbeKind::SignTransfer => lanes * 8.0,
            // 2 i16 products per i32 lane.
            ProbeKind::Madd16 => lanes * 4.0,
        }
    }

    /// The lowest level that runs the probe, and whether its ymm `vpdpbusd` is VEX encoded.
    fn level(self) -> Option<(IsaLevel, bool)> {
        let supported = |l: IsaLevel| l.is_supported().then_some(l);
        match self {
            ProbeKind::Vnni(VectorWidth::Zmm) | ProbeKind::Triple(VectorWidth::Zmm) => {
                supported(IsaLevel::Avx512Vnni).map(|l| (l, false))
            }
            ProbeKind::Vnni(VectorWidth::Ymm) => supported(IsaLevel::AvxVnni)
                .map(|l| (l, true))
                .or_else(|| supported(IsaLevel::Avx512Vnni).map(|l| (l, false))),
            ProbeKind::Triple(VectorWidth::Ymm) | ProbeKind::SignTransfer | ProbeKind::Madd16 => {
                supported(IsaLevel::Avx2).map(|l| (l, true))
            }
        }
    }

    fn needed(self) -> &'static str {
        match self {
            ProbeKind::Vnni(VectorWidth::Zmm) | ProbeKind::Triple(VectorWidth::Zmm) => "AVX512-VNNI",
            ProbeKind::Vnni(VectorWidth::Ymm) => "AVX-VNNI or AVX512-VNNI",
            _ => "AVX2",
        }
    }

    /// Every probe, VNNI first.
    pub const ALL: [ProbeKind; 6] = [
        ProbeKind::Vnni(VectorWidth::Zmm),
        ProbeKind::Vnni(VectorWidth::Ymm),
        ProbeKind::Triple(VectorWidth::Zmm),
        ProbeKind::Triple(VectorWidth::Ymm),
        ProbeKind::SignTransfer,
        ProbeKind::Madd16,
    ];
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = |w: VectorWidth| if w == VectorWidth::Zmm { "zmm" } else { "ymm" };
        match self {
            ProbeKind::Vnni(width) => write!(f, "vpdpbusd {}", w(*width)),
            ProbeKind::Triple(width) => write!(f, "vpmaddubsw+vpmaddwd+vpaddd {}", w(*width)),
            ProbeKind::SignTransfer => f.write_str("vpsignb+vpmaddubsw+vpmaddwd+vpaddd ymm"),
            ProbeKind::Madd16 => f.write_str("vpmaddwd+vpaddd ymm"),
        }
    }
}

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

#[derive(Debug, Error, Clone, PartialEq)]
pub enum PeakError {
    #[error("{kind} probe: this CPU lacks {needed}")]
    Unsupported { kind: ProbeKind, needed: &'static str },
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// The `vpdpbusd` probe `fn(iterations: i64)`: each iteration runs `ACCUMULATORS` independent
/// `vpdpbusd`s. Ymm uses the VEX form (AVX-VNNI) when `vex` is set, else EVEX (AVX512-VL).
pub fn assemble_probe(width: VectorWidth, vex: bool) -> Result<Vec<u8>, KernelError> {
    assemble(ProbeKind::Vnni(width), vex)
}

/// The probe `fn(iterations: i64)` of `kind`: each iteration runs `kind.chains()` independent
/// chain steps into as many accumulators.
pub fn assemble(kind: ProbeKind, vex: bool) -> Result<Vec<u8>, KernelError> {
    let mut a = CodeAssembler::new(64)?;
    let chains = kind.chains();
    // Registers after the accumulators: two rotating temporaries, then the operands.
    let (t0, src, ones, abs) = (chains, chains + 2, chains + 3, chains + 4);
    let z = |i: usize| get_zmm(Register::ZMM0 + i as u32).expect("zmm0..zmm15");
    let y = |i: usize| get_ymm(Register::YMM0 + i as u32).expect("ymm0..ymm15");
    let zmm = kind.width() == VectorWidth::Zmm;
    // Bytes of 1 and words of 1: the values only keep the arithmetic realistic.
    a.vpcmpeqd(y(src), y(src), y(src))?;
    a.vpabsb(y(src), y(src))?;
    a.vpcmpeqw(y(ones), y(ones), y(ones))?;
    a.vpsrlw(y(ones), y(ones), 15)?;
    if kind == ProbeKind::SignTransfer {
        a.vpabsb(y(abs), y(src))?;
    }
    for i in 0..chains {
        a.vpxor(y(i), y(i), y(i))?;
    }
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    for i in 0..chains {
        let t = t0 + i % 2;
        match kind {
            ProbeKind::Vnni(VectorWidth::Zmm) => a.vpdpbusd(z(i), z(src), z(src))?,
            ProbeKind::Vnni(VectorWidth::Ymm) if vex => a.vex().vpdpbusd(y(i), y(src), y(src))?,
            ProbeKind::Vnni(VectorWidth::Ymm) => a.evex().vpdpbusd(y(i), y(src), y(src))?,
            ProbeKind::Triple(_) if zmm => {
                a.vpmaddubsw(z(t), z(src), z(src))?;
                a.vpmaddwd(z(t), z(t), z(ones))?;
                a.vpaddd(z(i), z(i), z(t))?;
            }
            ProbeKind::Triple(_) => {
                a.vpmaddubsw(y(t), y(src), y(src))?;
                a.vpmaddwd(y(t), y(t), y(ones))?;
                a.vpaddd(y(i), y(i), y(t))?;
            }
            ProbeKind::SignTransfer => {
                a.vpsignb(y(t), y(src), y(src))?;
                a.vpmaddubsw(y(t), y(abs), y(t))?;
                a.vpmaddwd(y(t), y(t), y(ones))?;
                a.vpaddd(y(i), y(i), y(t))?;
            }
            ProbeKind::Madd16 => {
                a.vpmaddwd(y(t), y(src), y(ones))?;
                a.vpaddd(y(i), y(i), y(t))?;
            }
        }
    }
    a.dec(rdi)?;
    a.jnz(top)?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(a.assemble(0)?)
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

/// The `CoreRate` of this CPU's cores for code at `level`, which the default schedules' threads
/// follow: full where the level is `avx512-vnni` and the cores run zmm `vpdpbusd` at their full
/// width (`full_width_zmm`), else slower. The probes run once per process (11 ms on the Zen 4).
pub fn core_rate(level: IsaLevel) -> CoreRate {
    static FULL_WIDTH: OnceLock<bool> = OnceLock::new();
    if level != IsaLevel::Avx512Vnni {
        return CoreRate::Slower;
    }
    let full = *FULL_WIDTH.get_or_init(|| {
        // The best of three short medians: a run slowed by another tenant reads low.
        let rate = |width| {
            let probe = Probe::of(ProbeKind::Vnni(width))?;
            Ok::<f64, PeakError>((0..3).map(|_| probe.measure(Duration::from_micros(500), 3).gops).fold(0.0, f64::max))
        };
        matches!((rate(VectorWidth::Zmm), rate(VectorWidth::Ymm)), (Ok(zmm), Ok(ymm)) if full_width_zmm(zmm, ymm))
    });
    if full { CoreRate::FullZmmVnni } else { CoreRate::Slower }
}

/// Whether zmm `vpdpbusd` at `zmm` GOPS against ymm at `ymm` GOPS on the same core means
/// 512-bit units: the Intel Xeon measured 1.8× (942 against 517), the Zen 4, which runs a zmm
/// instruction as two 256-bit halves, 1.0× (465 against 464).
pub fn full_width_zmm(zmm: f64, ymm: f64) -> bool {
    zmm >= 1.4 * ymm
}
