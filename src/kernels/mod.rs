//! Hand-assembled x86-64 micro-kernels (iced-x86), for what Cranelift cannot emit: ymm/zmm
//! registers, `vpdpbusd` on 256/512 bits, opmasks.
//!
//! `gemm` generates int8 GEMM kernels (`amx` those on AMX tiles) `fn(a: *const u8, b: *const i8, c: *mut i32)` (SysV)
//! for one `Int8Gemm` shape with compile-time strides; `gemm_f32` the exact f32 GEMM kernels
//! (`F32Gemm`, separate rounded multiplies and adds in the declaration's order); `map` compiles the body of an
//! element-wise `Map` declaration (a requantization) to zmm or ymm code; `gemm_map` chains the
//! two (a GEMM tile mapped in registers, `IntrinKind::GemmMap`); `peak` assembles the
//! instruction chains whose throughput they are judged against. The bytes are position
//! independent and carry no relocations, so `Module::define_function_bytes` puts the same kernel
//! into the JIT or an object file.
//!
//! Assemblers only: bytes out, from the ground floor's facts (`isa`, `error`) and the IR. What
//! loads and runs the bytes (`runtime::GemmKernel`, `runtime::peak`) sits above the runtime.

pub mod amx;
mod encode;
pub mod gemm;
pub mod gemm_f32;
pub mod gemm_map;
pub mod map;
pub mod peak;
mod vreg;

use crate::error::KernelError;

/// Byte offsets and counts become 32-bit displacements or immediates; a larger one is
/// `KernelError::OffsetTooLarge` naming `what`.
fn imm32(what: &'static str, offset: i64) -> Result<i32, KernelError> {
    i32::try_from(offset).map_err(|_| KernelError::OffsetTooLarge { what, offset })
}
