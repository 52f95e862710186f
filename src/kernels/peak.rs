//! Throughput probes' code: the hardware limit each GEMM kernel family is judged against,
//! measured as independent accumulator chains in a loop, enough to cover the instructions'
//! latency at their full rate.
//!
//! One probe per dot-product method (`ProbeKind`): `vpdpbusd` (VNNI), `tdpbusd` (AMX), the
//! saturating `vpmaddubsw` triple, the sign-transfer chain and `vpmaddwd` + `vpaddd` (widened
//! operands).
//! A kernel's % of peak is against the probe of its own method (`ProbeKind::for_variant`), so
//! every ISA level has one. This module assembles them; `runtime::peak` loads, runs and times
//! them.

use std::fmt;

use iced_x86::Register;
use iced_x86::code_asm::registers::{ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::*;

use crate::error::KernelError;
use crate::isa::{DotMethod, IsaLevel, KernelVariant, VectorWidth};
use crate::kernels::amx::store_config;

/// Independent accumulators in the `vpdpbusd` probe loop.
pub const ACCUMULATORS: usize = 12;

/// Independent C tiles in the `tdpbusd` probe loop.
pub const AMX_ACCUMULATORS: usize = 4;

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
    /// `tdpbusd c, a, b` on 16 × 64-byte tiles, A and B tiles loaded once (`amx`).
    Amx,
}

impl ProbeKind {
    /// The probe of the method a kernel runs.
    pub fn for_variant(variant: KernelVariant) -> ProbeKind {
        match variant.method {
            DotMethod::Vnni => ProbeKind::Vnni(variant.width),
            DotMethod::MaddUbs => ProbeKind::Triple(variant.width),
            DotMethod::SignTransfer => ProbeKind::SignTransfer,
            DotMethod::Widen | DotMethod::Madd16 => ProbeKind::Madd16,
            DotMethod::Amx => ProbeKind::Amx,
        }
    }

    pub fn width(self) -> VectorWidth {
        match self {
            ProbeKind::Vnni(w) | ProbeKind::Triple(w) => w,
            // Bookkeeping, as for the kernel family.
            ProbeKind::Amx => VectorWidth::Zmm,
            ProbeKind::SignTransfer | ProbeKind::Madd16 => VectorWidth::Ymm,
        }
    }

    /// Independent accumulator chains per loop iteration (as many as the registers allow).
    pub fn chains(self) -> usize {
        match self {
            // 10 accumulators + 2 temporaries + b, a, |a|, ones = 16 ymm.
            ProbeKind::SignTransfer => 10,
            // tmm0–tmm3 accumulate; tmm4–tmm7 hold A and B.
            ProbeKind::Amx => AMX_ACCUMULATORS,
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
            // 16 × 16 i32 results, each a sum of 64 u8·i8 products.
            ProbeKind::Amx => 2.0 * 16.0 * 16.0 * 64.0,
        }
    }

    /// The lowest level this CPU supports that runs the probe, and whether its ymm `vpdpbusd`
    /// is VEX encoded; `None` when the CPU runs no level that has it.
    pub fn level(self) -> Option<(IsaLevel, bool)> {
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
            ProbeKind::Amx => supported(IsaLevel::Amx).map(|l| (l, false)),
        }
    }

    /// The extension a CPU needs to run the probe, for messages.
    pub fn needed(self) -> &'static str {
        match self {
            ProbeKind::Vnni(VectorWidth::Zmm) | ProbeKind::Triple(VectorWidth::Zmm) => "AVX512-VNNI",
            ProbeKind::Vnni(VectorWidth::Ymm) => "AVX-VNNI or AVX512-VNNI",
            ProbeKind::Amx => "AMX-INT8 (and the OS's permission for tile data)",
            _ => "AVX2",
        }
    }

    /// Every probe, VNNI first, AMX last.
    pub const ALL: [ProbeKind; 7] = [
        ProbeKind::Vnni(VectorWidth::Zmm),
        ProbeKind::Vnni(VectorWidth::Ymm),
        ProbeKind::Triple(VectorWidth::Zmm),
        ProbeKind::Triple(VectorWidth::Ymm),
        ProbeKind::SignTransfer,
        ProbeKind::Madd16,
        ProbeKind::Amx,
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
            ProbeKind::Amx => f.write_str("tdpbusd tmm"),
        }
    }
}

/// The `vpdpbusd` probe `fn(iterations: i64)`: each iteration runs `ACCUMULATORS` independent
/// `vpdpbusd`s. Ymm uses the VEX form (AVX-VNNI) when `vex` is set, else EVEX (AVX512-VL).
pub fn assemble_probe(width: VectorWidth, vex: bool) -> Result<Vec<u8>, KernelError> {
    assemble(ProbeKind::Vnni(width), vex)
}

/// The probe `fn(iterations: i64)` of `kind`: each iteration runs `kind.chains()` independent
/// chain steps into as many accumulators.
pub fn assemble(kind: ProbeKind, vex: bool) -> Result<Vec<u8>, KernelError> {
    if kind == ProbeKind::Amx {
        return assemble_amx();
    }
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
            ProbeKind::Amx => return Err(KernelError::Assembler { message: "the AMX probe has its own code".into() }),
        }
    }
    a.dec(rdi)?;
    a.jnz(top)?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(crate::kernels::encode::encode(&mut a)?)
}

/// The `tdpbusd` probe `fn(iterations: i64)`: every tile 16 rows × 64 bytes; tmm4–tmm7 are
/// loaded once (the configuration's own bytes in the red zone, stride 0, so the values are not
/// all zero), and
/// each iteration runs `AMX_ACCUMULATORS` independent `tdpbusd`s into tmm0–tmm3.
fn assemble_amx() -> Result<Vec<u8>, KernelError> {
    let mut a = CodeAssembler::new(64)?;
    let tmm = |i: usize| registers::tmm::get_tmm(Register::TMM0 + i as u32).expect("tmm0..tmm7");
    let mut cfg = [0u8; 64];
    cfg[0] = 1;
    for t in 0..8 {
        cfg[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
        cfg[48 + t] = 16;
    }
    store_config(&mut a, &cfg, rax, -64)?;
    a.ldtilecfg(ptr(rsp - 64))?;
    a.xor(ecx, ecx)?;
    for t in 4..8 {
        a.tileloadd(tmm(t), ptr(rsp + rcx * 1 - 64))?;
    }
    for t in 0..AMX_ACCUMULATORS {
        a.tilezero(tmm(t))?;
    }
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    for t in 0..AMX_ACCUMULATORS {
        a.tdpbusd(tmm(t), tmm(4 + t % 2), tmm(6 + t / 2))?;
    }
    a.dec(rdi)?;
    a.jnz(top)?;
    a.tilerelease()?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(crate::kernels::encode::encode(&mut a)?)
}
