//! The JIT driver: translates a function into a fresh `JITModule` and finalizes it.

use cranelift_codegen::ir::{AbiParam, Signature, types};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, default_libcall_names};

use super::{Translation, translate};
use crate::abi::HostFn;
use crate::disasm::MachineCode;
use crate::error::CompileError;
use crate::isa::IsaLevel;

/// Finalized machine code of one function (and what it calls). Dropping it releases the code
/// memory.
pub struct JitCode {
    module: Option<JITModule>,
    entry: *const u8,
}

// SAFETY: the module is only touched again by `drop`, and finalized code is immutable, so the
// entry pointer may be called from any thread.
unsafe impl Send for JitCode {}
unsafe impl Sync for JitCode {}

impl JitCode {
    /// Address of the entry function `fn(args: *const *mut u8) -> i32`.
    pub fn entry(&self) -> *const u8 {
        self.entry
    }

    /// The finalized machine code of every function `translate` defined (relocations patched).
    pub fn machine_code(&self, translation: &Translation) -> Vec<MachineCode> {
        let Some(module) = &self.module else { return Vec::new() };
        translation
            .functions
            .iter()
            .map(|f| {
                let ptr = module.get_finalized_function(f.id);
                // SAFETY: the module finalized `f.size` bytes of code at `ptr` (its compiled
                // size), which stay mapped readable until `self` drops.
                let bytes = unsafe { std::slice::from_raw_parts(ptr, f.size) }.to_vec();
                MachineCode {
                    name: f.name.clone(),
                    origin: f.origin.clone(),
                    kernel: f.kernel,
                    address: ptr as u64,
                    bytes,
                }
            })
            .collect()
    }
}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: `JitCode` owns the only pointer into this memory, and no call can be
            // running because calls borrow the owner.
            unsafe { module.free_memory() };
        }
    }
}

/// Compiles `func` for `isa`, with kernels up to `level`; `symbol` gives the address of each
/// runtime function.
pub fn compile(
    func: &ir::Func,
    isa: OwnedTargetIsa,
    level: IsaLevel,
    symbol: impl Fn(HostFn) -> *const u8,
) -> Result<(JitCode, Translation), CompileError> {
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    for f in HostFn::ALL {
        builder.symbol(f.symbol(), symbol(f));
    }
    let mut module = JITModule::new(builder);
    let translation = translate(&mut module, func, Linkage::Export, level)?;
    module
        .finalize_definitions()
        .map_err(|e| CompileError::Cranelift { func: func.name.clone(), message: e.to_string() })?;
    let entry = module.get_finalized_function(translation.entry);
    Ok((JitCode { module: Some(module), entry }, translation))
}

/// Loads hand-assembled, position-independent `bytes` (no relocations) as a function taking
/// `params` i64 arguments, through `define_function_bytes` like the kernels of `translate`.
pub fn load_bytes(isa: OwnedTargetIsa, name: &str, bytes: &[u8], params: usize) -> Result<JitCode, CompileError> {
    let error =
        |e: cranelift_module::ModuleError| CompileError::Cranelift { func: name.to_string(), message: e.to_string() };
    let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
    let mut sig = Signature::new(module.target_config().default_call_conv);
    sig.params.extend((0..params).map(|_| AbiParam::new(types::I64)));
    let id = module.declare_function(name, Linkage::Export, &sig).map_err(error)?;
    module.define_function_bytes(id, super::KERNEL_ALIGN, bytes, &[]).map_err(error)?;
    module.finalize_definitions().map_err(error)?;
    let entry = module.get_finalized_function(id);
    Ok(JitCode { module: Some(module), entry })
}
