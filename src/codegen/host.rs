//! The runtime functions generated code imports, by symbol name and signature.
//!
//! This list is the whole contract between generated code and its host: the JIT registers
//! these symbols (`runtime::host::address`) and an exported object file must be linked with a
//! runtime providing the same names.

use cranelift_codegen::ir::{AbiParam, Signature, types};
use cranelift_codegen::isa::CallConv;

/// A runtime function callable from generated code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum HostFn {
    /// `fn(body: extern "C" fn(closure: *const u8, index: i64) -> i32, closure: *const u8,
    /// n: i64) -> i32`: runs `body(closure, i)` for `i in 0..n` on the thread pool; returns
    /// 0, or the first non-zero status an iteration returned.
    ParallelFor,
    /// `fn(bytes: i64) -> *mut u8`: 64-byte aligned scratch memory, null on failure.
    Alloc,
    /// `fn(ptr: *mut u8, bytes: i64)`: releases memory from `Alloc`.
    Free,
    /// `fn(bits: u32) -> f64`: `half::f16::from_bits(bits).to_f64()`.
    F16ToF64,
    /// `fn(bits: u32) -> f64`: `half::bf16::from_bits(bits).to_f64()`.
    Bf16ToF64,
    /// `fn(x: f64) -> u32`: `ir::dtype::f16_bits_from_f64(x)` (correctly rounded).
    F64ToF16,
    /// `fn(x: f64) -> u32`: `ir::dtype::bf16_bits_from_f64(x)` (correctly rounded).
    F64ToBf16,
}

impl HostFn {
    pub const ALL: [HostFn; 7] = [
        HostFn::ParallelFor,
        HostFn::Alloc,
        HostFn::Free,
        HostFn::F16ToF64,
        HostFn::Bf16ToF64,
        HostFn::F64ToF16,
        HostFn::F64ToBf16,
    ];

    pub fn symbol(self) -> &'static str {
        match self {
            HostFn::ParallelFor => "tensorlift_parallel_for",
            HostFn::Alloc => "tensorlift_alloc",
            HostFn::Free => "tensorlift_free",
            HostFn::F16ToF64 => "tensorlift_f16_to_f64",
            HostFn::Bf16ToF64 => "tensorlift_bf16_to_f64",
            HostFn::F64ToF16 => "tensorlift_f64_to_f16",
            HostFn::F64ToBf16 => "tensorlift_f64_to_bf16",
        }
    }

    /// The Cranelift signature; pointers are `i64` (x86-64 only).
    pub fn signature(self, call_conv: CallConv) -> Signature {
        let (params, returns): (&[_], &[_]) = match self {
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
}
