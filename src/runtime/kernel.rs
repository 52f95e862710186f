//! One hand-assembled GEMM kernel (`kernels::gemm`) loaded on its own, outside any compiled
//! function, and called with checked operands: what the kernel tests and the kernel sweep run.

use ir::DType;

use crate::codegen::build_isa;
use crate::codegen::jit::{self, JitCode};
use crate::error::{CompileError, KernelError, RuntimeError};
use crate::isa::{IsaLevel, KernelVariant};
use crate::kernels::amx::AmxSpec;
use crate::kernels::gemm::{Blocking, GemmShape, assemble_amx_gemm, assemble_gemm};
use crate::target::{OptLevel, Target};

/// One GEMM kernel loaded on its own (outside any compiled function), with checked calls:
/// what tests and the kernel sweep run.
pub struct GemmKernel {
    code: JitCode,
    pub variant: KernelVariant,
    pub shape: GemmShape,
    pub blocking: Blocking,
}

impl GemmKernel {
    /// Assembles and loads the kernel; the CPU must support `variant`.
    pub fn new(variant: KernelVariant, shape: GemmShape, blocking: Blocking) -> Result<GemmKernel, CompileError> {
        let level = variant.min_level().ok_or(CompileError::Kernel(KernelError::NoSuchVariant { variant }))?;
        let bytes = assemble_gemm(variant, &shape, blocking)?;
        GemmKernel::load(variant, level, bytes, shape, blocking)
    }

    /// The AMX kernel with `spec` instead of its default (`kernels::amx::AmxSpec`).
    pub fn amx(shape: GemmShape, spec: AmxSpec) -> Result<GemmKernel, CompileError> {
        let variant = KernelVariant::AMX_INT8;
        let bytes = assemble_amx_gemm(&shape, &spec)?;
        GemmKernel::load(variant, IsaLevel::Amx, bytes, shape, Blocking::default_for(variant))
    }

    /// Loads the assembled `bytes` of `variant` for `level`.
    fn load(
        variant: KernelVariant,
        level: IsaLevel,
        bytes: Vec<u8>,
        shape: GemmShape,
        blocking: Blocking,
    ) -> Result<GemmKernel, CompileError> {
        let (isa, _) = build_isa(Target::Level(level), OptLevel::None)?;
        let code = jit::load_bytes(isa, variant.name(), &bytes, 3)?;
        Ok(GemmKernel { code, variant, shape, blocking })
    }

    /// `c += a · b` by a kernel with byte operands (every method but `Madd16`; A's bytes are
    /// read as the shape's u8 or i8); every slice must cover what the shape reaches.
    pub fn run(&self, a: &[u8], b: &[i8], c: &mut [i32]) -> Result<(), RuntimeError> {
        let a_dtype = if self.shape.a_dtype == DType::I8 { DType::I8 } else { DType::U8 };
        self.run_raw((a.as_ptr(), a.len(), a_dtype), (b.as_ptr().cast(), b.len(), DType::I8), c)
    }

    /// `c += a · b` by a `Madd16` kernel (i16 operands).
    pub fn run_i16(&self, a: &[i16], b: &[i16], c: &mut [i32]) -> Result<(), RuntimeError> {
        self.run_raw((a.as_ptr().cast(), a.len(), DType::I16), (b.as_ptr().cast(), b.len(), DType::I16), c)
    }

    fn run_raw(
        &self,
        (a, a_len, a_dtype): (*const u8, usize, DType),
        (b, b_len, b_dtype): (*const u8, usize, DType),
        c: &mut [i32],
    ) -> Result<(), RuntimeError> {
        for (index, name, expected, found) in
            [(0, "A", self.shape.a_dtype, a_dtype), (1, "B", self.variant.method.b_dtype(), b_dtype)]
        {
            if found != expected {
                return Err(RuntimeError::ArgumentDType { index, name: name.into(), expected, found });
            }
        }
        let (need_a, need_b, need_c) = self.shape.footprint(self.variant.method);
        for (index, name, expected, found) in
            [(0, "A", need_a, a_len), (1, "B", need_b, b_len), (2, "C", need_c, c.len())]
        {
            if found < expected {
                return Err(RuntimeError::BufferTooSmall { index, name: name.into(), expected, found });
            }
        }
        // SAFETY: the kernel has the SysV signature `fn(*const A, *const B, *mut i32)` with A
        // and B of the element types checked above, accesses only the footprint checked above,
        // uses only caller-saved registers, and `self` keeps its code alive.
        let f: extern "C" fn(*const u8, *const u8, *mut i32) = unsafe { std::mem::transmute(self.code.entry()) };
        f(a, b, c.as_mut_ptr());
        Ok(())
    }
}
