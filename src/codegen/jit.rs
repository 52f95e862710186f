//! The JIT driver: translates a function into a fresh `JITModule` and finalizes it.

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, default_libcall_names};

use super::{HostFn, Translation, translate};
use crate::error::CompileError;

/// Finalized machine code of one function. Dropping it releases the code memory.
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

/// Compiles `func` for `isa`; `symbol` gives the address of each runtime function.
pub fn compile(
    func: &ir::Func,
    isa: OwnedTargetIsa,
    symbol: impl Fn(HostFn) -> *const u8,
) -> Result<(JitCode, Translation), CompileError> {
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    for f in HostFn::ALL {
        builder.symbol(f.symbol(), symbol(f));
    }
    let mut module = JITModule::new(builder);
    let translation = translate(&mut module, func, Linkage::Export)?;
    module
        .finalize_definitions()
        .map_err(|e| CompileError::Cranelift { func: func.name.clone(), message: e.to_string() })?;
    let entry = module.get_finalized_function(translation.entry);
    Ok((JitCode { module: Some(module), entry }, translation))
}
