//! Runtime functions called by generated code (`codegen::HostFn`), and the thread pools
//! parallel loops run on. None of these can panic: a panic cannot unwind through JIT frames.

use std::alloc::{Layout, alloc, dealloc};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rayon::ThreadPool;
use rayon::iter::{IntoParallelIterator, ParallelIterator};

use crate::codegen::HostFn;
use crate::error::RuntimeError;

/// Alignment of scratch buffers and tensors: one cache line, and enough for any vector load.
pub const ALIGN: usize = 64;

/// The address generated code calls for `f`.
pub fn address(f: HostFn) -> *const u8 {
    match f {
        HostFn::ParallelFor => parallel_for as *const () as *const u8,
        HostFn::Alloc => alloc_scratch as *const () as *const u8,
        HostFn::Free => free_scratch as *const () as *const u8,
        HostFn::F16ToF64 => f16_to_f64 as *const () as *const u8,
        HostFn::Bf16ToF64 => bf16_to_f64 as *const () as *const u8,
        HostFn::F64ToF16 => f64_to_f16 as *const () as *const u8,
        HostFn::F64ToBf16 => f64_to_bf16 as *const () as *const u8,
    }
}

/// Runs `body(closure, i)` for every `i in 0..n` on the current rayon pool (callers enter the
/// function's pool with `install`). After an iteration fails, the remaining ones are skipped.
extern "C" fn parallel_for(body: extern "C" fn(*const u8, i64) -> i32, closure: *const u8, n: i64) -> i32 {
    let status = AtomicI32::new(0);
    // The closure block outlives this call and is only read, so sharing its address is sound.
    let closure = closure as usize;
    (0..n).into_par_iter().for_each(|i| {
        if status.load(Ordering::Relaxed) == 0 {
            #[cfg(test)]
            record_worker();
            let s = body(closure as *const u8, i);
            if s != 0 {
                let _ = status.compare_exchange(0, s, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    });
    status.into_inner()
}

extern "C" fn alloc_scratch(bytes: i64) -> *mut u8 {
    match usize::try_from(bytes).ok().and_then(|b| Layout::from_size_align(b.max(1), ALIGN).ok()) {
        // SAFETY: the layout has a non-zero size.
        Some(layout) => unsafe { alloc(layout) },
        None => std::ptr::null_mut(),
    }
}

extern "C" fn free_scratch(ptr: *mut u8, bytes: i64) {
    // Generated code passes back exactly the size it allocated, which made a valid layout.
    if let Some(layout) = usize::try_from(bytes).ok().and_then(|b| Layout::from_size_align(b.max(1), ALIGN).ok()) {
        // SAFETY: `ptr` came from `alloc_scratch` with this layout.
        unsafe { dealloc(ptr, layout) }
    }
}

extern "C" fn f16_to_f64(bits: u32) -> f64 {
    half::f16::from_bits(bits as u16).to_f64()
}

extern "C" fn bf16_to_f64(bits: u32) -> f64 {
    half::bf16::from_bits(bits as u16).to_f64()
}

extern "C" fn f64_to_f16(x: f64) -> u32 {
    ir::dtype::f16_bits_from_f64(x) as u32
}

extern "C" fn f64_to_bf16(x: f64) -> u32 {
    ir::dtype::bf16_bits_from_f64(x) as u32
}

/// The pool with `threads` threads, shared by every function compiled for that count.
pub fn pool(threads: usize) -> Result<Arc<ThreadPool>, RuntimeError> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = pools.get(&threads) {
        return Ok(pool.clone());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("tensorlift-{threads}-{i}"))
        .build()
        .map_err(|e| RuntimeError::ThreadPool { threads, message: e.to_string() })?;
    let pool = Arc::new(pool);
    pools.insert(threads, pool.clone());
    Ok(pool)
}

#[cfg(test)]
static WORKERS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers which pool thread ran a parallel iteration (tests check pools really fan out).
#[cfg(test)]
fn record_worker() {
    if let Some(name) = std::thread::current().name() {
        let mut seen = WORKERS.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.iter().any(|s| s == name) {
            seen.push(name.to_string());
        }
    }
}

/// How many distinct threads whose name starts with `prefix` ran parallel iterations.
#[cfg(test)]
pub(crate) fn workers_seen(prefix: &str) -> usize {
    WORKERS.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|s| s.starts_with(prefix)).count()
}
