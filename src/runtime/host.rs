//! Runtime functions called by generated code (`abi::HostFn`), and the thread pools
//! parallel loops run on. None of these can panic: a panic cannot unwind through JIT frames.

use std::alloc::{Layout, alloc, dealloc};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::abi::{ALIGN, HostFn};
use crate::error::RuntimeError;

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

/// Runs `body(closure, i)` for every `i in 0..n` on the pool of the call that runs it
/// (`with_pool`), serially where there is none (one thread, or a loop nested in a parallel
/// one). After an iteration fails, the remaining ones are skipped.
extern "C" fn parallel_for(body: Body, closure: *const u8, n: i64) -> i32 {
    let pool = CURRENT.with(Cell::get);
    // SAFETY: `CURRENT` is non-null only inside `with_pool`, whose pool outlives the call.
    match unsafe { pool.as_ref() } {
        Some(pool) => pool.run(body, closure, n, false),
        None => run_serially(body, closure, n),
    }
}

/// A loop body as generated code emits it: `body(closure, index)`, non-zero on failure.
type Body = extern "C" fn(*const u8, i64) -> i32;

fn run_serially(body: Body, closure: *const u8, n: i64) -> i32 {
    (0..n).map(|i| body(closure, i)).find(|&s| s != 0).unwrap_or(0)
}

thread_local! {
    /// The pool parallel loops of the running call use (null: none).
    static CURRENT: Cell<*const Pool> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with `pool` as the pool of the parallel loops it runs on this thread.
pub fn with_pool<R>(pool: &Pool, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Pool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(pool)));
    f()
}

/// Spins (`pause`) before a waiting thread sleeps. A layer runs several parallel loops in a
/// row, and waking a sleeping thread costs a system call and a reschedule each time, far more
/// than a short spin (the exported libraries' runtime spins the same way).
const SPINS: usize = 4096;

/// A thread takes what is left of a share divided by this: large first chunks (few atomic
/// operations), single iterations where the threads meet.
const GUIDED: u64 = 2;

/// The threads parallel loops run on: the calling thread and `threads - 1` workers, one loop
/// at a time (a loop that finds the pool busy runs serially). Each thread owns an equal,
/// contiguous share of a loop's iterations and runs it front to back in guided chunks
/// (`GUIDED`); a thread out of iterations takes chunks from the back of the others' shares
/// (`Shared::drain`). Workers spin between loops before they sleep; so does the caller waiting
/// for them. The caller waits only for workers that joined the loop before it ran out of
/// iterations. A worker that wakes on the caller's CPU moves off it. The exported libraries'
/// runtime (`export/runtime.c`) has the same scheme.
pub struct Pool {
    threads: usize,
    busy: Mutex<()>,
    shared: Arc<Shared>,
}

/// The current loop, published by bumping `generation` (release) after its fields are set.
struct Shared {
    workers: usize,
    /// The CPU the caller of the current loop ran on when it published the loop (-1: unknown).
    caller_cpu: AtomicI32,
    generation: AtomicU64,
    /// Whether the current loop takes workers: the caller closes it once it ran out of
    /// iterations, and does not wait for a worker that has not joined by then (one still
    /// waking up, or descheduled by another process).
    open: AtomicBool,
    /// Workers inside (or joining) the current loop.
    running: AtomicUsize,
    body: AtomicUsize,
    closure: AtomicUsize,
    /// The iterations not yet taken, one share per thread (the caller's first, then worker
    /// `i`'s at `i + 1`).
    shares: Box<[Share]>,
    status: AtomicI32,
    /// Each thread runs at most one iteration (`Pool::broadcast`).
    once: AtomicBool,
    /// Workers asleep on `wake` (changed under `lock`): a loop is published with a wake-up
    /// only when there is one, since `Condvar::notify_all` is a system call even when nobody
    /// waits.
    sleepers: AtomicUsize,
    /// Whether the caller sleeps on `idle` (set under `lock`): the last worker out wakes it
    /// only then, for the same reason.
    caller_sleeps: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    idle: Condvar,
}

/// One thread's share of the current loop: the iterations not yet taken, `front..back`, as
/// `back << 32 | front`, on a cache line of its own (its owner takes from it at every chunk).
#[repr(align(64))]
struct Share(AtomicU64);

impl Share {
    /// Takes the next chunk, `1/GUIDED` of what is left (at least one iteration): from the
    /// front for its owner, from the back for another thread; `None` when none are left.
    fn take(&self, own: bool) -> Option<(i64, i64)> {
        let mut range = self.0.load(Ordering::Relaxed);
        loop {
            let (front, back) = (range & u64::from(u32::MAX), range >> 32);
            if front >= back {
                return None;
            }
            let chunk = ((back - front) / GUIDED).max(1);
            let (first, end) = if own { (front, front + chunk) } else { (back - chunk, back) };
            let next = if own { (back << 32) | end } else { (first << 32) | front };
            match self.0.compare_exchange_weak(range, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some((first as i64, end as i64)),
                Err(now) => range = now,
            }
        }
    }

    fn is_empty(&self) -> bool {
        let range = self.0.load(Ordering::Relaxed);
        range & u64::from(u32::MAX) >= range >> 32
    }
}

impl Shared {
    fn new(workers: usize) -> Shared {
        Shared {
            workers,
            caller_cpu: AtomicI32::new(-1),
            generation: AtomicU64::new(0),
            open: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            body: AtomicUsize::new(0),
            closure: AtomicUsize::new(0),
            shares: (0..=workers).map(|_| Share(AtomicU64::new(0))).collect(),
            status: AtomicI32::new(0),
            once: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            caller_sleeps: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            idle: Condvar::new(),
        }
    }

    /// Runs iterations of the current loop until none are left or one failed: thread `me`'s
    /// own share front to back, then (unless each thread runs one iteration) chunks from the
    /// back of the other threads' shares. A thread's iterations are thus one contiguous run,
    /// the same part of every loop over the same rows: a layer reads mostly what the same core
    /// wrote in the layer before, from its own cache, and a kernel's prefetch of the next
    /// panel of weights (which runs forward) serves the thread's next chunk. Chunks are guided,
    /// so a thread taking from another's share meets it at single iterations, and neither
    /// waits long for the other's last chunk.
    fn drain(&self, me: usize) {
        let body = self.body.load(Ordering::Relaxed);
        // SAFETY: `body` was stored from a `Body` by `Pool::run` before the loop was published.
        let body: Body = unsafe { std::mem::transmute::<usize, Body>(body) };
        let closure = self.closure.load(Ordering::Relaxed) as *const u8;
        let once = self.once.load(Ordering::Relaxed);
        let threads = self.shares.len();
        let others = if once { 0 } else { threads - 1 };
        for share in std::iter::once(me).chain((1..=others).map(|k| (me + k) % threads)) {
            let own = share == me;
            while self.status.load(Ordering::Relaxed) == 0 {
                let Some((first, end)) = self.shares[share].take(own) else { break };
                for i in first..end {
                    #[cfg(test)]
                    record_worker();
                    let s = body(closure, i);
                    if s != 0 {
                        let _ = self.status.compare_exchange(0, s, Ordering::Relaxed, Ordering::Relaxed);
                        return;
                    }
                }
            }
        }
    }

    /// Publishes `0..n` as the threads' shares: thread `t` owns `t·n/threads..(t+1)·n/threads`.
    fn share_out(&self, n: u64) {
        let threads = self.shares.len() as u64;
        for (t, share) in (0..threads).zip(self.shares.iter()) {
            let (front, back) = (t * n / threads, (t + 1) * n / threads);
            share.0.store((back << 32) | front, Ordering::Relaxed);
        }
    }

    fn worker(&self, me: usize) {
        let mut seen = 0;
        let placement = placement::Allowed::of_this_thread();
        loop {
            let published = || self.generation.load(Ordering::Acquire) != seen;
            if !(0..SPINS).any(|_| published() || spin()) {
                let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.sleepers.fetch_add(1, Ordering::Relaxed);
                while !published() {
                    guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
            }
            seen = self.generation.load(Ordering::Acquire);
            // Join, then look whether the loop is still open: the caller closes it before it
            // waits for `running` (both sequentially consistent, so one sees the other).
            self.running.fetch_add(1, Ordering::SeqCst);
            if self.open.load(Ordering::SeqCst) {
                self.join(me, &placement);
                // AMX kernels keep their tile configuration between calls; this worker's
                // share of the loop is done.
                crate::isa::release_tiles();
            }
            // The caller sets `caller_sleeps` before it looks at `running` for the last time
            // (both sequentially consistent): it sees this worker gone, or is seen asleep.
            if self.running.fetch_sub(1, Ordering::SeqCst) == 1 && self.caller_sleeps.load(Ordering::SeqCst) {
                let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.idle.notify_one();
            }
        }
    }

    /// Runs a worker's share of the open loop. A worker woken onto the caller's CPU would
    /// share it with the caller (and spin on it between loops), slowing the whole layer down:
    /// it moves off it first. The scheduler can put it there after another process ran.
    fn join(&self, me: usize, placement: &Option<placement::Allowed>) {
        let caller = self.caller_cpu.load(Ordering::Relaxed);
        if let Some(allowed) = placement
            && caller >= 0
            && placement::current_cpu() == caller
        {
            allowed.avoid(caller);
        }
        self.drain(me);
    }
}

/// Which CPU a thread runs on, and moving a worker off one (Linux; elsewhere nothing moves).
mod placement {
    /// The CPU the calling thread runs on (-1: unknown).
    pub fn current_cpu() -> i32 {
        #[cfg(target_os = "linux")]
        // SAFETY: `sched_getcpu` has no preconditions.
        return unsafe { libc::sched_getcpu() };
        #[cfg(not(target_os = "linux"))]
        return -1;
    }

    /// The CPUs a thread may run on, as it started.
    pub struct Allowed {
        #[cfg(target_os = "linux")]
        pub(super) set: libc::cpu_set_t,
    }

    impl Allowed {
        pub fn of_this_thread() -> Option<Allowed> {
            #[cfg(target_os = "linux")]
            {
                // SAFETY: an all-zero `cpu_set_t` is a valid empty set, which
                // `sched_getaffinity` fills for the calling thread (pid 0).
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                let size = std::mem::size_of::<libc::cpu_set_t>();
                let ok = unsafe { libc::sched_getaffinity(0, size, &mut set) } == 0;
                ok.then_some(Allowed { set })
            }
            #[cfg(not(target_os = "linux"))]
            None
        }

        /// Restricts the calling thread to these CPUs but `cpu`, if that leaves any: the
        /// scheduler moves it at once. A later call for another CPU lifts this one.
        pub fn avoid(&self, cpu: i32) {
            #[cfg(target_os = "linux")]
            {
                let (mut set, size) = (self.set, std::mem::size_of::<libc::cpu_set_t>());
                let Ok(cpu) = usize::try_from(cpu) else { return };
                // SAFETY: `set` is a valid set; `cpu` is below the set's capacity when
                // `CPU_ISSET` (bounds-checked by libc's macros) holds; `sched_setaffinity`
                // applies to the calling thread (pid 0).
                unsafe {
                    if cpu >= 8 * size || !libc::CPU_ISSET(cpu, &set) {
                        return;
                    }
                    libc::CPU_CLR(cpu, &mut set);
                    if libc::CPU_COUNT(&set) > 0 {
                        libc::sched_setaffinity(0, size, &set);
                    }
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = cpu;
        }
    }
}

/// One `pause`; false, so that `any` goes on spinning.
fn spin() -> bool {
    std::hint::spin_loop();
    false
}

impl Pool {
    fn new(threads: usize) -> Result<Pool, RuntimeError> {
        let workers = threads.max(1) - 1;
        let shared = Arc::new(Shared::new(workers));
        for i in 0..workers {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("tensorlift-{threads}-{i}"))
                .spawn(move || shared.worker(i + 1))
                .map_err(|e| RuntimeError::ThreadPool { threads, message: e.to_string() })?;
        }
        Ok(Pool { threads, busy: Mutex::new(()), shared })
    }

    /// Runs the loop `body(closure, i)`, `i in 0..n`, on every thread of the pool (`once`: at
    /// most one iteration per thread); its status.
    fn run(&self, body: Body, closure: *const u8, n: i64, once: bool) -> i32 {
        let shared = &self.shared;
        // Loops of 2^32 iterations or more (none in practice) run serially: `range` holds
        // 32-bit bounds.
        let splits = n > 1 && n <= i64::from(u32::MAX) && shared.workers > 0;
        let busy = if splits { self.busy.try_lock().ok() } else { None };
        let Some(_busy) = busy else { return run_serially(body, closure, n) };
        {
            let _guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.body.store(body as usize, Ordering::Relaxed);
            shared.closure.store(closure as usize, Ordering::Relaxed);
            shared.share_out(n as u64);
            shared.status.store(0, Ordering::Relaxed);
            shared.once.store(once, Ordering::Relaxed);
            shared.caller_cpu.store(placement::current_cpu(), Ordering::Relaxed);
            shared.open.store(true, Ordering::SeqCst);
            shared.generation.fetch_add(1, Ordering::Release);
            // A worker goes to sleep under the lock, after it looked at `generation`.
            if shared.sleepers.load(Ordering::Relaxed) > 0 {
                shared.wake.notify_all();
            }
        }
        shared.drain(0);
        if once {
            // Every thread runs one iteration: wait until each has taken its own.
            let taken = || shared.shares.iter().all(Share::is_empty) || shared.status.load(Ordering::Relaxed) != 0;
            while !(0..SPINS).any(|_| taken() || spin()) {
                std::thread::yield_now();
            }
        }
        shared.open.store(false, Ordering::SeqCst);
        let done = || shared.running.load(Ordering::SeqCst) == 0;
        if !(0..SPINS).any(|_| done() || spin()) {
            let mut guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.caller_sleeps.store(true, Ordering::SeqCst);
            while !done() {
                guard = shared.idle.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            shared.caller_sleeps.store(false, Ordering::Relaxed);
        }
        shared.status.load(Ordering::Relaxed)
    }

    /// `f(i)` once on each of the pool's threads, all at once (`i` numbers them); the results
    /// in that order. What the peak probe runs to measure every core together.
    pub fn broadcast<T: Send>(&self, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
        let results: Vec<Mutex<Option<T>>> = (0..self.threads).map(|_| Mutex::new(None)).collect();
        let task = |i: i64| {
            let value = f(i as usize);
            *results[i as usize].lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
        };
        extern "C" fn trampoline<F: Fn(i64)>(closure: *const u8, i: i64) -> i32 {
            // SAFETY: `closure` is the `&F` `broadcast` passed, alive until `run` returns.
            let f = unsafe { &*closure.cast::<F>() };
            f(i);
            0
        }
        fn body_of<F: Fn(i64)>(_: &F) -> Body {
            trampoline::<F>
        }
        self.run(body_of(&task), std::ptr::from_ref(&task).cast::<u8>(), self.threads as i64, true);
        results.into_iter().filter_map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner())).collect()
    }
}

impl Pool {
    /// The number of threads loops run on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(i)` for every `i in 0..n` on the pool's threads (serially where the pool is busy
    /// or has one thread), each index once. A panic in `f` skips the remaining iterations and
    /// is raised again here.
    pub fn for_each(&self, n: usize, f: impl Fn(usize) + Sync) {
        let panicked = Mutex::new(None);
        let task = |i: i64| -> i32 {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i as usize))) {
                Ok(()) => 0,
                Err(payload) => {
                    *panicked.lock().unwrap_or_else(|e| e.into_inner()) = Some(payload);
                    1
                }
            }
        };
        extern "C" fn trampoline<F: Fn(i64) -> i32>(closure: *const u8, i: i64) -> i32 {
            // SAFETY: `closure` is the `&F` `for_each` passed, alive until `run` returns.
            let f = unsafe { &*closure.cast::<F>() };
            f(i)
        }
        fn body_of<F: Fn(i64) -> i32>(_: &F) -> Body {
            trampoline::<F>
        }
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.run(body_of(&task), std::ptr::from_ref(&task).cast::<u8>(), n, false);
        if let Some(payload) = panicked.into_inner().unwrap_or_else(|e| e.into_inner()) {
            std::panic::resume_unwind(payload);
        }
    }

    /// Runs `f(i, part)` for the `i`-th piece of `chunk` elements of `data` (the last may be
    /// shorter), the pieces on the pool's threads (`for_each`).
    pub fn for_each_chunk_mut<T: Send>(&self, data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
        struct Base<T>(*mut T);
        // SAFETY: the pointer is only used to form disjoint pieces of a `&mut [T]`, `T: Send`.
        unsafe impl<T: Send> Sync for Base<T> {}
        let (len, chunk) = (data.len(), chunk.max(1));
        let base = Base(data.as_mut_ptr());
        let base = &base;
        self.for_each(len.div_ceil(chunk), |i| {
            let start = i * chunk;
            let end = (start + chunk).min(len);
            // SAFETY: `for_each` runs each index once, so the pieces `start..end` are disjoint
            // ranges inside `data`, which stays mutably borrowed until it returns.
            let part = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), end - start) };
            f(i, part)
        });
    }
}

/// Freed scratch blocks a thread keeps for its next allocation of the same size: a layer's
/// scratch buffers (a padded source and an accumulator of hundreds of KiB) would otherwise go
/// back to the OS on every call and come back page-faulting (the exported libraries' runtime
/// keeps blocks the same way). A network's layers each use blocks of their own sizes, so the
/// cache holds enough of them for every layer of one, up to a total size.
const CACHED_BLOCKS: usize = 64;

/// The most bytes of freed blocks a thread keeps.
const CACHED_BYTES: usize = 64 << 20;

struct BlockCache(Vec<(*mut u8, Layout)>);

impl Drop for BlockCache {
    fn drop(&mut self) {
        for &(ptr, layout) in &self.0 {
            // SAFETY: every cached block came from `alloc` with its layout and is owned here.
            unsafe { dealloc(ptr, layout) }
        }
    }
}

thread_local! {
    static BLOCKS: RefCell<BlockCache> = const { RefCell::new(BlockCache(Vec::new())) };
}

fn scratch_layout(bytes: i64) -> Option<Layout> {
    usize::try_from(bytes).ok().and_then(|b| Layout::from_size_align(b.max(1), ALIGN).ok())
}

extern "C" fn alloc_scratch(bytes: i64) -> *mut u8 {
    let Some(layout) = scratch_layout(bytes) else { return std::ptr::null_mut() };
    let cached = BLOCKS.with(|b| {
        let mut blocks = b.borrow_mut();
        let position = blocks.0.iter().position(|&(_, l)| l == layout)?;
        Some(blocks.0.swap_remove(position).0)
    });
    // SAFETY: the layout has a non-zero size.
    cached.unwrap_or_else(|| unsafe { alloc(layout) })
}

extern "C" fn free_scratch(ptr: *mut u8, bytes: i64) {
    // Generated code passes back exactly the size it allocated, which made a valid layout.
    let Some(layout) = scratch_layout(bytes) else { return };
    let kept = BLOCKS.with(|b| {
        let mut blocks = b.borrow_mut();
        let held: usize = blocks.0.iter().map(|(_, l)| l.size()).sum();
        let room = blocks.0.len() < CACHED_BLOCKS && held + layout.size() <= CACHED_BYTES;
        if room {
            blocks.0.push((ptr, layout));
        }
        room
    });
    if !kept {
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
pub fn pool(threads: usize) -> Result<Arc<Pool>, RuntimeError> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<Pool>>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = pools.get(&threads) {
        return Ok(pool.clone());
    }
    let pool = Arc::new(Pool::new(threads)?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicU32};

    #[test]
    fn broadcast_runs_once_on_every_thread_of_the_pool() {
        let pool = Pool::new(3).unwrap();
        for _ in 0..20 {
            let names = pool.broadcast(|i| (i, std::thread::current().id()));
            assert_eq!(names.iter().map(|n| n.0).collect::<Vec<_>>(), [0, 1, 2]);
            let mut ids: Vec<_> = names.iter().map(|n| format!("{:?}", n.1)).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 3, "each thread ran one iteration");
        }
    }

    extern "C" fn count(closure: *const u8, i: i64) -> i32 {
        // SAFETY: the tests pass a `&AtomicI64`.
        let counter = unsafe { &*closure.cast::<AtomicI64>() };
        counter.fetch_add(1, Ordering::Relaxed);
        if i == 700 { 7 } else { 0 }
    }

    #[test]
    fn loops_run_every_iteration_and_stop_at_a_failure() {
        let pool = Pool::new(2).unwrap();
        let counter = AtomicI64::new(0);
        let closure = std::ptr::from_ref(&counter).cast::<u8>();
        assert_eq!(pool.run(count, closure, 500, false), 0);
        assert_eq!(counter.load(Ordering::Relaxed), 500);
        counter.store(0, Ordering::Relaxed);
        // Iteration 700 fails: its status comes back, and the loop stops well before the end.
        assert_eq!(pool.run(count, closure, 100_000, false), 7);
        assert!(counter.load(Ordering::Relaxed) < 100_000, "{}", counter.load(Ordering::Relaxed));
        // Without a pool (no `with_pool`), and for a loop nested in a busy pool: serially.
        counter.store(0, Ordering::Relaxed);
        assert_eq!(parallel_for(count, closure, 10), 0);
        let _busy = pool.busy.lock().unwrap();
        assert_eq!(with_pool(&pool, || parallel_for(count, closure, 10)), 0);
        assert_eq!(counter.load(Ordering::Relaxed), 20);
    }

    /// Counts the runs of each iteration; iteration `fail_at` fails with status 9.
    struct Tally {
        runs: Vec<AtomicU32>,
        fail_at: i64,
    }

    extern "C" fn count_runs(closure: *const u8, i: i64) -> i32 {
        // SAFETY: the test passes a `&Tally`.
        let tally = unsafe { &*closure.cast::<Tally>() };
        tally.runs[i as usize].fetch_add(1, Ordering::Relaxed);
        if i == tally.fail_at { 9 } else { 0 }
    }

    #[test]
    fn guided_chunks_run_every_iteration_exactly_once() {
        for threads in 1..=4 {
            let pool = Pool::new(threads).unwrap();
            for n in 0..200usize {
                let tally = Tally { runs: (0..n).map(|_| AtomicU32::new(0)).collect(), fail_at: -1 };
                let closure = std::ptr::from_ref(&tally).cast::<u8>();
                assert_eq!(pool.run(count_runs, closure, n as i64, false), 0, "{n} on {threads}");
                let runs: Vec<u32> = tally.runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
                assert!(runs.iter().all(|&r| r == 1), "{n} on {threads}: {runs:?}");
                // A failing iteration: its status comes back, and no iteration runs twice.
                if n > 0 {
                    let tally = Tally { runs: (0..n).map(|_| AtomicU32::new(0)).collect(), fail_at: (n / 3) as i64 };
                    let closure = std::ptr::from_ref(&tally).cast::<u8>();
                    assert_eq!(pool.run(count_runs, closure, n as i64, false), 9, "{n} on {threads}");
                    let runs: Vec<u32> = tally.runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
                    assert_eq!(runs[n / 3], 1, "{n} on {threads}");
                    assert!(runs.iter().all(|&r| r <= 1), "{n} on {threads}: {runs:?}");
                }
            }
            // A failure stops the thread it happens on: the first iteration fails, and the
            // rest of the caller's first chunk (the front `1/GUIDED` of its share, `n /
            // (GUIDED · threads)`, which no other thread takes) never runs; alone, the caller runs nothing else. How much
            // the workers run before they see the failure is up to the scheduler (a caller
            // descheduled before its first iteration leaves them everything else): not checked.
            let n = 100_000;
            let tally = Tally { runs: (0..n).map(|_| AtomicU32::new(0)).collect(), fail_at: 0 };
            let closure = std::ptr::from_ref(&tally).cast::<u8>();
            assert_eq!(pool.run(count_runs, closure, n as i64, false), 9, "on {threads}");
            let runs: Vec<u32> = tally.runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
            assert!(runs[0] == 1 && runs.iter().all(|&r| r <= 1), "on {threads}");
            let front = n / (GUIDED as usize * threads);
            let next = runs[1..].iter().position(|&r| r > 0).map_or(n, |i| i + 1);
            assert!(next >= front, "iteration {next} ran after the first failed, on {threads}");
            if threads == 1 {
                assert_eq!(next, n, "a lone caller stops at the failure");
            }
        }
    }

    /// Logs which thread ran each iteration, in the order they ran.
    struct Log(Mutex<Vec<(std::thread::ThreadId, i64)>>);

    extern "C" fn log_run(closure: *const u8, i: i64) -> i32 {
        // SAFETY: the test passes a `&Log`.
        let log = unsafe { &*closure.cast::<Log>() };
        log.0.lock().unwrap().push((std::thread::current().id(), i));
        // Long enough iterations that workers join before the caller runs out.
        (0..200).for_each(|_| std::hint::spin_loop());
        0
    }

    /// The order one thread runs a loop in where no other thread takes part: its own share front
    /// to back, then each following share from the back in halves.
    #[test]
    fn a_thread_alone_runs_its_share_then_the_others_from_their_backs() {
        let shared = Shared::new(2);
        let log = Log(Mutex::new(Vec::new()));
        shared.body.store(log_run as Body as usize, Ordering::Relaxed);
        shared.closure.store(std::ptr::from_ref(&log) as usize, Ordering::Relaxed);
        shared.share_out(30);
        shared.drain(1);
        let ran: Vec<i64> = log.0.into_inner().unwrap().into_iter().map(|(_, i)| i).collect();
        let mut expected: Vec<i64> = (10..20).collect();
        // Share 2 (20..30): chunks of half of what is left, from the back.
        for (first, end) in [(25, 30), (23, 25), (22, 23), (21, 22), (20, 21)] {
            expected.extend(first..end);
        }
        for (first, end) in [(5, 10), (3, 5), (2, 3), (1, 2), (0, 1)] {
            expected.extend(first..end);
        }
        assert_eq!(ran, expected);
    }

    #[test]
    fn each_thread_runs_its_own_share_front_to_back_before_taking_from_others() {
        for threads in 2..=4 {
            let pool = Pool::new(threads).unwrap();
            for n in [1usize, 5, 64, 1000] {
                let log = Log(Mutex::new(Vec::new()));
                assert_eq!(pool.run(log_run, std::ptr::from_ref(&log).cast::<u8>(), n as i64, false), 0);
                let log = log.0.into_inner().unwrap();
                let mut all: Vec<i64> = log.iter().map(|&(_, i)| i).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n as i64).collect::<Vec<_>>(), "{n} on {threads}");
                let share = |i: i64| (0..threads).find(|&t| i < ((t + 1) * n / threads) as i64).unwrap();
                let front = |t: usize| (t * n / threads) as i64;
                let caller = std::thread::current().id();
                let mut ids: Vec<_> = log.iter().map(|&(id, _)| id).collect();
                ids.dedup();
                for id in ids {
                    let ran: Vec<i64> = log.iter().filter(|&&(t, _)| t == id).map(|&(_, i)| i).collect();
                    // The caller owns share 0; a worker, the share whose front it ran first
                    // (none where others took all of it before the worker joined; taking the
                    // last iteration of another's share passes for owning it, harmlessly).
                    let own = if id == caller { Some(0) } else { Some(share(ran[0])).filter(|&t| front(t) == ran[0]) };
                    let Some(own) = own else { continue };
                    let mine = ran.iter().take_while(|&&i| share(i) == own).count();
                    let expected: Vec<i64> = (front(own)..).take(mine).collect();
                    assert_eq!(ran[..mine], expected[..], "{n} on {threads}: its share from the front, in order");
                    assert!(ran[mine..].iter().all(|&i| share(i) != own), "{n} on {threads}: {ran:?}");
                }
            }
        }
    }

    #[test]
    fn chunked_loops_visit_every_element_once_and_raise_a_panic_again() {
        let pool = Pool::new(2).unwrap();
        for (len, chunk) in [(0, 4), (1, 4), (1000, 7), (4096, 64), (10, 0)] {
            let mut data = vec![0u32; len];
            pool.for_each_chunk_mut(&mut data, chunk, |i, part| {
                for (j, x) in part.iter_mut().enumerate() {
                    *x += (i * chunk.max(1) + j) as u32 + 1;
                }
            });
            assert!(data.iter().enumerate().all(|(j, &x)| x == j as u32 + 1), "{len} by {chunk}");
        }
        let caught = std::panic::catch_unwind(|| pool.for_each(100, |i| assert_ne!(i, 50, "iteration 50")));
        assert!(caught.is_err());
        // The pool still runs loops afterwards.
        let count = AtomicI64::new(0);
        pool.for_each(100, |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn a_worker_asleep_between_loops_is_woken_for_the_next() {
        let pool = Pool::new(2).unwrap();
        for _ in 0..3 {
            // Far longer than the spin: the worker sleeps when the loop is published.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let threads = Mutex::new(Vec::new());
            pool.for_each(40, |_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                let mut seen = threads.lock().unwrap();
                let id = std::thread::current().id();
                if !seen.contains(&id) {
                    seen.push(id);
                }
            });
            assert_eq!(threads.lock().unwrap().len(), 2, "the worker joined");
        }
    }

    #[test]
    fn a_caller_asleep_waiting_for_a_slow_worker_is_woken() {
        let pool = Pool::new(2).unwrap();
        let caller = std::thread::current().id();
        for _ in 0..5 {
            let count = AtomicI64::new(0);
            // The worker's iterations outlast the caller's spin: the caller sleeps until the
            // last worker out wakes it.
            pool.for_each(2, |_| {
                if std::thread::current().id() != caller {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                count.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(count.load(Ordering::Relaxed), 2);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_that_avoids_its_cpu_leaves_it_when_it_may_run_elsewhere() {
        let moved = std::thread::spawn(|| {
            let allowed = placement::Allowed::of_this_thread().expect("affinity is readable on Linux");
            // SAFETY: `allowed.set` is a valid set.
            let cpus = unsafe { libc::CPU_COUNT(&allowed.set) };
            let before = placement::current_cpu();
            allowed.avoid(before);
            let after = placement::current_cpu();
            (cpus, before, after)
        })
        .join()
        .unwrap();
        let (cpus, before, after) = moved;
        assert!(before >= 0, "sched_getcpu works");
        if cpus > 1 {
            assert_ne!(before, after, "{cpus} CPUs allowed");
        } else {
            assert_eq!(before, after, "one CPU: nowhere to go");
        }
    }
}
