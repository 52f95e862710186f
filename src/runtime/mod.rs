//! Compiling functions to machine code and calling them safely.
//!
//! `compile` JIT-compiles a final loop-IR function; `CompiledFunc::call` checks every argument
//! against the function's parameters before generated code runs, which together with
//! `guard_accesses` (every access is clamped in bounds) makes calls memory safe. Whatever else
//! loads and runs hand-assembled bytes lives here too, above the assemblers (`kernels`): one
//! GEMM kernel on its own (`GemmKernel`) and the throughput probes (`peak`).
//!
//! The target vocabulary `CompileOptions` and `CompiledFunc` name lives on the ground floor:
//! import it from there (`isa::IsaLevel`, `target::Target`), or use the crate root's short names.

mod arena;
pub(crate) mod host;
mod kernel;
pub mod peak;
mod storage;
mod tensor;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ir::DType;

pub use arena::WeightArena;
pub use kernel::GemmKernel;
pub use tensor::{Arg, CheckedTensor, Element, Tensor};

use crate::abi::{STATUS_INDEX_OUT_OF_BOUNDS, STATUS_OK, STATUS_OUT_OF_MEMORY};
use crate::codegen::build_isa;
use crate::codegen::jit::{self, JitCode};
use crate::disasm::{self, MachineCode};
use crate::error::{CompileError, RuntimeError};
use crate::isa::{IsaLevel, KernelVariant};
use crate::target::{OptLevel, Target};

/// How to compile a function.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    pub target: Target,
    /// Threads running parallel loops; `None` (or 0) uses one per available core.
    pub threads: Option<usize>,
    pub opt_level: OptLevel,
}

impl CompileOptions {
    /// The default Cranelift optimization level: `None`. The code generator does the e-graph
    /// pass's useful work itself (structural CSE and loop-invariant hoisting, `codegen::cse`),
    /// while `Speed` compiles slower and regroups unrolled bodies so that register-blocked
    /// accumulators spill.
    pub const DEFAULT_OPT_LEVEL: OptLevel = OptLevel::None;
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { target: Target::Native, threads: None, opt_level: CompileOptions::DEFAULT_OPT_LEVEL }
    }
}

struct Param {
    name: String,
    dtype: DType,
    shape: Vec<i64>,
    len: usize,
    stored: bool,
    /// The declared range of every element (`Buffer::value_range`), checked before each call.
    value_range: Option<(i64, i64)>,
}

/// Arguments bound for repeated calls (`CompiledFunc::bind`).
pub struct BoundArgs {
    args: Vec<Bound>,
}

enum Bound {
    Plain(Tensor),
    Checked(CheckedTensor),
}

impl BoundArgs {
    /// Calls `func` on these arguments (every check but the bound ranges' scans runs).
    pub fn call(&mut self, func: &CompiledFunc) -> Result<(), RuntimeError> {
        let mut args: Vec<Arg<'_>> = self
            .args
            .iter_mut()
            .map(|b| match b {
                Bound::Plain(t) => Arg::tensor(t),
                Bound::Checked(c) => Arg::checked(c),
            })
            .collect();
        func.call_args(&mut args)
    }

    /// Argument `index`.
    pub fn get(&self, index: usize) -> Option<&Tensor> {
        self.args.get(index).map(|b| match b {
            Bound::Plain(t) => t,
            Bound::Checked(c) => c.tensor(),
        })
    }

    /// The last argument (a function's output, by convention).
    pub fn last(&self) -> Option<&Tensor> {
        self.get(self.args.len().checked_sub(1)?)
    }
}

/// A compiled function, callable from any thread.
pub struct CompiledFunc {
    code: JitCode,
    name: String,
    params: Vec<Param>,
    /// Names of the buffers gathers are checked against, numbered as the statuses number them.
    checked: Vec<String>,
    clif: crate::codegen::Clif,
    machine_code: Vec<MachineCode>,
    level: IsaLevel,
    compile_time: Duration,
    /// Threads for parallel loops, and the pool once first needed (`None`: no parallel loop).
    threads: Option<usize>,
    pool: OnceLock<Arc<host::Pool>>,
}

impl Param {
    /// The declared range calls check this argument against; `None` when there is none or it
    /// covers the whole dtype (which promises nothing, so nothing is scanned).
    fn scanned_range(&self) -> Option<(i64, i64)> {
        let whole = |(lo, hi): (i64, i64)| {
            self.dtype.scalar.int_range().is_some_and(|(min, max)| i128::from(lo) <= min && max <= i128::from(hi))
        };
        self.value_range.filter(|&r| !whole(r))
    }
}

/// Set to `1` to append every compiled function to `/tmp/perf-<pid>.map`, the file through
/// which `perf report` names JIT code.
pub const PERF_MAP_ENV: &str = "TENSORLIFT_PERF_MAP";

/// Best effort: a profiling aid must not fail a compile.
fn write_perf_map(code: &[MachineCode]) {
    use std::io::Write;
    let path = format!("/tmp/perf-{}.map", std::process::id());
    let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) else { return };
    let lines: String = code.iter().map(|c| format!("{:x} {:x} {}\n", c.address, c.bytes.len(), c.name)).collect();
    let _ = file.write_all(lines.as_bytes());
}

/// JIT-compiles `func`, which must be in the final loop-IR form.
pub fn compile(func: &ir::Func, options: &CompileOptions) -> Result<CompiledFunc, CompileError> {
    let start = Instant::now();
    let (isa, level) = build_isa(options.target, options.opt_level)?;
    let (code, translation) = jit::compile(func, isa, level, host::address)?;
    let machine_code = code.machine_code(&translation);
    if std::env::var_os(PERF_MAP_ENV).is_some_and(|v| v == "1") {
        write_perf_map(&machine_code);
    }
    let params = func
        .params
        .iter()
        .zip(&translation.stored_params)
        .map(|(p, &stored)| Param {
            name: p.name().to_string(),
            dtype: p.dtype(),
            shape: p.shape().to_vec(),
            len: p.len() as usize,
            stored,
            value_range: p.value_range(),
        })
        .collect();
    Ok(CompiledFunc {
        code,
        name: func.name.clone(),
        params,
        checked: ir::passes::checked_buffers(func).iter().map(|b| b.name().to_string()).collect(),
        clif: translation.clif,
        machine_code,
        level,
        compile_time: start.elapsed(),
        threads: translation.has_parallel.then(|| {
            options
                .threads
                .filter(|&t| t > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        }),
        pool: OnceLock::new(),
    })
}

/// The first element of `bytes` (little-endian elements of integer `dtype`) outside `lo..=hi`.
pub(crate) fn first_outside(dtype: DType, bytes: &[u8], lo: i64, hi: i64) -> Option<(usize, i128)> {
    let (lo, hi) = (i128::from(lo), i128::from(hi));
    let size = dtype.bytes();
    let signed = dtype.scalar.int_range().is_some_and(|(min, _)| min < 0);
    // Bytes, the common case, first get a min/max pass the compiler vectorizes.
    if size == 1 {
        let value = |b: u8| if signed { i128::from(b as i8) } else { i128::from(b) };
        // i8 as u8 with the top bit flipped keeps the order, and unsigned byte min/max are
        // baseline SSE2 (`pminub`/`pmaxub`): tens of bytes per cycle on packed weights.
        let flip = if signed { 0x80 } else { 0 };
        let (min, max) = bytes.iter().fold((u8::MAX, u8::MIN), |(mn, mx), &b| (mn.min(b ^ flip), mx.max(b ^ flip)));
        let (min, max) = (value(min ^ flip), value(max ^ flip));
        if bytes.is_empty() || (lo <= min && max <= hi) {
            return None;
        }
        return bytes.iter().position(|&b| !(lo..=hi).contains(&value(b))).map(|p| (p, value(bytes[p])));
    }
    bytes.chunks_exact(size).enumerate().find_map(|(p, chunk)| {
        let mut raw = [0u8; 16];
        raw[..size].copy_from_slice(chunk);
        let mut v = i128::from_le_bytes(raw);
        if signed {
            // Sign-extend from `size` bytes.
            let shift = 128 - 8 * size as u32;
            v = (v << shift) >> shift;
        }
        (!(lo..=hi).contains(&v)).then_some((p, v))
    })
}

impl CompiledFunc {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared range every call checks argument `index` against (scanning it), if any:
    /// an input given as `Arg::checked` with a `CheckedTensor` of this range is not scanned.
    pub fn scanned_range(&self, index: usize) -> Option<(i64, i64)> {
        self.params.get(index)?.scanned_range()
    }

    /// `tensors` (one per parameter) bound for repeated calls: every input whose declared range
    /// calls would scan is checked now, once (`CheckedTensor`), and not again per call.
    pub fn bind(&self, tensors: Vec<Tensor>) -> Result<BoundArgs, RuntimeError> {
        let args = tensors
            .into_iter()
            .enumerate()
            .map(|(i, t)| match self.params.get(i).filter(|p| !p.stored).and_then(Param::scanned_range) {
                Some(range) => CheckedTensor::new(t, range).map(Bound::Checked),
                None => Ok(Bound::Plain(t)),
            })
            .collect::<Result<_, _>>()?;
        Ok(BoundArgs { args })
    }

    /// Runs the function on tensors, one per parameter, checked for dtype and shape.
    pub fn call(&self, args: &mut [&mut Tensor]) -> Result<(), RuntimeError> {
        let mut args: Vec<Arg<'_>> = args.iter_mut().map(|t| Arg::tensor(t)).collect();
        self.call_args(&mut args)
    }

    /// Runs the function on borrowed arguments: tensors are checked for dtype and shape, slices
    /// for dtype and length (longer slices are fine), and read-only arguments must not be
    /// parameters the function writes.
    pub fn call_args(&self, args: &mut [Arg<'_>]) -> Result<(), RuntimeError> {
        if args.len() != self.params.len() {
            return Err(RuntimeError::ArgumentCount { expected: self.params.len(), found: args.len() });
        }
        for (index, (arg, p)) in args.iter().zip(&self.params).enumerate() {
            let name = || p.name.clone();
            if arg.dtype != p.dtype {
                return Err(RuntimeError::ArgumentDType { index, name: name(), expected: p.dtype, found: arg.dtype });
            }
            match arg.shape {
                Some(shape) if shape != p.shape => {
                    return Err(RuntimeError::ArgumentShape {
                        index,
                        name: name(),
                        expected: p.shape.clone(),
                        found: shape.to_vec(),
                    });
                }
                _ if arg.len < p.len => {
                    return Err(RuntimeError::BufferTooSmall { index, name: name(), expected: p.len, found: arg.len });
                }
                _ => {}
            }
            if p.stored && !arg.writable {
                return Err(RuntimeError::ReadOnlyArgument { index, name: name() });
            }
            // A `CheckedTensor` inside the declared range was scanned when it was made.
            let checked = |(lo, hi): (i64, i64)| arg.checked.is_some_and(|(c_lo, c_hi)| lo <= c_lo && c_hi <= hi);
            if let Some((lo, hi)) = p.scanned_range().filter(|&r| !checked(r)) {
                // Code generation may have relied on the range (e.g. to use `vpmaddubsw` for
                // exact sums), so data outside it must never reach generated code.
                // SAFETY: the argument holds at least `p.len` elements of `p.dtype` (checked above).
                let bytes = unsafe { std::slice::from_raw_parts(arg.ptr.cast_const(), p.len * p.dtype.bytes()) };
                if let Some((position, value)) = first_outside(p.dtype, bytes, lo, hi) {
                    return Err(RuntimeError::ValueOutOfRange { index, name: name(), position, value, lo, hi });
                }
            }
        }
        // The pointers on the stack for the usual few parameters (no allocation per call).
        let mut few = [std::ptr::null_mut(); 8];
        match few.get_mut(..args.len()) {
            Some(pointers) => {
                for (p, a) in pointers.iter_mut().zip(args.iter()) {
                    *p = a.ptr;
                }
                self.run(pointers)
            }
            None => self.run(&args.iter().map(|a| a.ptr).collect::<Vec<_>>()),
        }
    }

    fn run(&self, pointers: &[*mut u8]) -> Result<(), RuntimeError> {
        // SAFETY: the entry has this signature (`abi` module doc), the arguments were
        // checked against the parameters, and the code stays alive while `self` is borrowed.
        let entry: extern "C" fn(*const *mut u8) -> i32 = unsafe { std::mem::transmute(self.code.entry()) };
        let args = pointers.as_ptr() as usize;
        let status = match self.threads {
            None => entry(args as *const *mut u8),
            Some(threads) => {
                let pool = match self.pool.get() {
                    Some(pool) => pool,
                    None => {
                        let pool = host::pool(threads)?;
                        self.pool.get_or_init(|| pool)
                    }
                };
                host::with_pool(pool, || entry(args as *const *mut u8))
            }
        };
        // AMX kernels keep their tile configuration between calls; this thread's work ends.
        crate::isa::release_tiles();
        match status as i64 {
            STATUS_OK => Ok(()),
            STATUS_OUT_OF_MEMORY => Err(RuntimeError::OutOfMemory),
            s if s >= STATUS_INDEX_OUT_OF_BOUNDS
                && ((s - STATUS_INDEX_OUT_OF_BOUNDS) as usize) < self.checked.len() =>
            {
                let tensor = self.checked[(s - STATUS_INDEX_OUT_OF_BOUNDS) as usize].clone();
                Err(RuntimeError::IndexOutOfBounds { tensor })
            }
            other => panic!("generated code returned unknown status {other}"),
        }
    }

    /// Wall time `compile` took, including ISA setup and finalization.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// CLIF of every generated function, as emitted before Cranelift's passes.
    pub fn clif_text(&self) -> &str {
        self.clif.text()
    }

    /// Intel-syntax disassembly of every function the call runs (entry, outlined parallel
    /// bodies, hand-assembled kernels), as finalized in memory.
    pub fn disassembly(&self) -> String {
        disasm::disassemble(&self.machine_code)
    }

    /// The machine code of every function, entry first.
    pub fn machine_code(&self) -> &[MachineCode] {
        &self.machine_code
    }

    /// The hand-assembled kernel families the function calls, in definition order, each once.
    pub fn kernel_variants(&self) -> Vec<KernelVariant> {
        let mut variants = Vec::new();
        for v in self.machine_code.iter().filter_map(|c| c.kernel) {
            if !variants.contains(&v) {
                variants.push(v);
            }
        }
        variants
    }

    /// The ISA level the function was compiled for (bounds the kernels it calls).
    pub fn isa_level(&self) -> IsaLevel {
        self.level
    }

    /// Number of threads parallel loops run on, or `None` if the function has none.
    pub fn threads(&self) -> Option<usize> {
        self.threads
    }
}
