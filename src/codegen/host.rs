//! The Cranelift signatures of the runtime functions generated code imports (`abi::HostFn`,
//! which documents them): the one part of the ABI that needs Cranelift.

use cranelift_codegen::ir::{AbiParam, Signature, types};
use cranelift_codegen::isa::CallConv;

use crate::abi::HostFn;

/// The Cranelift signature of `f`, as `HostFn` documents it; pointers are `i64` (x86-64 only).
pub fn signature(f: HostFn, call_conv: CallConv) -> Signature {
    let (params, returns): (&[_], &[_]) = match f {
        HostFn::ParallelFor => (&[types::I64, types::I64, types::I64], &[types::I32]),
        HostFn::Alloc => (&[types::I64], &[types::I64]),
        HostFn::Free => (&[types::I64, types::I64], &[]),
        HostFn::F16ToF64 | HostFn::Bf16ToF64 => (&[types::I32], &[types::F64]),
        HostFn::F64ToF16 | HostFn::F64ToBf16 => (&[types::F64], &[types::I32]),
    };
    let mut sig = Signature::new(call_conv);
    sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    sig.returns.extend(returns.iter().map(|&t| AbiParam::new(t)));
    sig
}
