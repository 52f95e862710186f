//! Translation of the final loop IR to Cranelift IR.
//!
//! One translator, generic over `cranelift_module::Module`, serves the JIT (`jit`) and any
//! other module backend such as object export; `backend` makes the Cranelift ISA of a `Target`.
//! A function `f` becomes:
//! * the entry `fn f(args: *const *mut u8) -> i32` of the ABI (`abi`: argument pointers in,
//!   a status out);
//! * one local function `f__parN(closure: *const u8, index: i64) -> i32` per parallel loop,
//!   run through the imported `tensorlift_parallel_for` (see `abi::HostFn` for every runtime
//!   import; an entry function's contiguous fills and copies call libc's `memset` and
//!   `memmove`, `idiom`);
//! * one local hand-assembled kernel per distinct tensor-intrinsic shape that has one at the
//!   target's `IsaLevel` (`intrin`).
//!
//! Generated code trusts its input: every access is in bounds (`guard_accesses` clamped it),
//! and a parameter the function writes overlaps no other parameter; loads from parameters it
//! never writes are treated as pure (merged and hoisted out of loops).
//!
//! Values: scalars are Cranelift scalars; a vector is a list of 128-bit pieces when its size
//! is a multiple of 128 bits, else a list of per-lane scalars (`types::Val`). Small scratch
//! buffers whose every access has a constant index are promoted to SSA variables, which is how
//! register-blocked accumulator tiles end up in registers.

mod analysis;
pub(crate) mod backend;
mod cast;
mod clif;
mod cse;
mod expr;
mod func;
mod host;
mod idiom;
mod interleaved;
pub(crate) mod intrin;
pub mod jit;
mod memory;
mod regalloc;
mod types;
mod vector;

use cranelift_module::{FuncId, Linkage, Module};

pub use backend::cranelift_flags;
pub(crate) use backend::{build_isa, build_object_isa};
pub use clif::Clif;

use crate::error::CompileError;
use crate::isa::{IsaLevel, KernelVariant};

/// Alignment of hand-assembled kernels: a cache line, so loop heads never straddle two.
pub const KERNEL_ALIGN: u64 = 64;

/// One function `translate` defined, for listing its machine code after finalization.
#[derive(Clone, Debug)]
pub struct DefinedFunction {
    pub name: String,
    pub id: FuncId,
    /// "cranelift", or what a hand-assembled kernel computes and how.
    pub origin: String,
    /// The kernel family of a hand-assembled kernel.
    pub kernel: Option<KernelVariant>,
    /// Bytes of machine code (Cranelift's code buffer, constants included).
    pub size: usize,
}

/// The result of translating one `ir::Func` into a module.
#[derive(Clone, Debug)]
pub struct Translation {
    /// The entry function, declared with the linkage given to `translate`.
    pub entry: FuncId,
    /// CLIF of every generated function, as generated.
    pub clif: Clif,
    /// For each parameter, whether the function stores to it.
    pub stored_params: Vec<bool>,
    /// Whether the function calls `tensorlift_parallel_for`.
    pub has_parallel: bool,
    /// Every function defined, entry first.
    pub functions: Vec<DefinedFunction>,
}

/// Declares and defines `func` (and its outlined parallel bodies and kernels) in `module`.
/// `level` bounds the hand-assembled kernels tensor intrinsics may call.
pub fn translate<M: Module>(
    module: &mut M,
    func: &ir::Func,
    linkage: Linkage,
    level: IsaLevel,
) -> Result<Translation, CompileError> {
    let mut cx = func::ModuleCtx::new(module, func, level)?;
    let entry = func::define_entry(&mut cx, func, linkage)?;
    let stored = analysis::stored_buffers(&func.body);
    let mut functions = cx.functions;
    // The entry is defined after the functions it calls; list it first.
    if let Some(pos) = functions.iter().position(|f| f.id == entry) {
        let e = functions.remove(pos);
        functions.insert(0, e);
    }
    Ok(Translation {
        entry,
        has_parallel: cx.outlined > 0,
        clif: cx.clif,
        stored_params: func.params.iter().map(|p| stored.contains(&p.id())).collect(),
        functions,
    })
}
