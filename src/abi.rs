//! Ground floor: the ABI of generated functions, the whole contract between generated code and
//! its host (the JIT's runtime, `runtime::host`, or an exported library's `export/runtime.c`).
//!
//! A function `f` compiles to the entry `fn f(args: *const *mut u8) -> i32`, where
//! `args[k]` is the data pointer of parameter `k`; it returns a status: `STATUS_OK`,
//! `STATUS_OUT_OF_MEMORY` when a scratch allocation failed, or `STATUS_INDEX_OUT_OF_BOUNDS + n`
//! when the `BoundsCheck` of a gather from the `n`th buffer of `ir::passes::checked_buffers`
//! failed. Generated code imports the runtime functions of `HostFn` by their symbol names; the
//! JIT registers these symbols (`runtime::host::address`) and an exported object file must be
//! linked with a runtime providing the same names. Besides these, generated code may call
//! libc's `memset` and `memmove` (a contiguous fill or copy, `codegen::idiom`), which the JIT
//! finds in the process and an exported library takes from the C library it is linked with.
//!
//! Plain Rust, free of Cranelift: each import's Cranelift `Signature` is built where Cranelift
//! is, in `codegen` (from the signatures documented here), so that the runtime and the exporter
//! name the contract without depending on the code generator.

/// Status a generated function returns: 0 on success.
pub const STATUS_OK: i64 = 0;
/// Status when a scratch allocation failed.
pub const STATUS_OUT_OF_MEMORY: i64 = 1;
/// Status of a failed `BoundsCheck` (a gather out of bounds): this plus the position of the
/// checked buffer in `ir::passes::checked_buffers` of the function, which names it.
pub const STATUS_INDEX_OUT_OF_BOUNDS: i64 = 2;

/// Alignment of scratch buffers and tensors: one cache line, and enough for any vector load.
pub const ALIGN: usize = 64;

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
}
