//! `compile_jobs`: the quantized convolutions and products of a network compiled on every core
//! (`std::thread::scope`) with one shared `KernelCache`, so that distinct functions compile in
//! parallel and layers of one geometry share one. The first layer of each geometry is taken
//! first, so that a thread seldom waits for a function another thread is compiling; among those
//! and among the others, the layers with the most weights first, so that no long preparation
//! ends the queue while other cores idle. The layers' packed weights are cut from the cache's
//! reservation (`runtime::WeightArena`, made by the caller). The auto-scheduled convolutions
//! (`Work::Auto`) are jobs of the same queue, taken before the others since each compiles its
//! own function.
//! `TENSORLIFT_TRACE_JOBS=1` prints, per job, its thread, when it started and ended, the CPU
//! time its thread spent on it and a layer's function and weight times.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use schedules::auto::AutoPoint;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::compile::Tuning;
use super::kernel::Kernel;
use super::spec::Spec;
use crate::layer::{KernelCache, LayerError, QConvAutoSpec, compile_qconv_auto_at};
use crate::runtime::CompileOptions;

/// What a job compiles.
pub(super) enum Work {
    /// A layer of the x86 path with its knobs (`None`: the defaults) and where they came from.
    Layer { layer: Spec, knobs: Option<Conv2dInt8Knobs>, tuning: Tuning },
    /// A convolution the x86 path does not take: the auto-scheduled definition, at a tuning
    /// record's point (`None`: the rules') and where it came from.
    Auto { spec: QConvAutoSpec, point: Option<Box<AutoPoint>>, tuning: Tuning },
}

/// One partition's compile.
pub(super) struct Job {
    pub(super) work: Work,
}

impl Job {
    /// What the function of the layer depends on besides what it takes as arguments (zero
    /// points, scales, weights): layers that agree here most likely share it. A fused residual
    /// add's constants and the destination's zero point are part of the function of a layer
    /// with one. `None`: an auto-scheduled convolution, which compiles its own.
    fn geometry(&self) -> Option<String> {
        let Work::Layer { layer, knobs, .. } = &self.work else { return None };
        let knobs = *knobs;
        Some(match layer {
            Spec::Conv(s) => {
                let sum = s.sum.map(|add| (add, s.dst.zero_point));
                format!(
                    "conv {} {} {} {} {} {} {:?} {:?} {} {} {knobs:?} {sum:?}",
                    s.h, s.w, s.ic, s.oc, s.kh, s.kw, s.stride, s.pads, s.src.dtype, s.dst.dtype
                )
            }
            Spec::Dense(s) => format!("dense {} {} {} {} {} {:?}", s.m, s.k, s.n, s.src.dtype, s.dst.dtype, knobs),
        })
    }

    /// The weights a layer job prepares, in bytes: what sets its cost apart beyond its
    /// function (the deep layers' weights fault in fresh pages as they are packed).
    pub(super) fn weight_bytes(&self) -> usize {
        match &self.work {
            Work::Layer { layer: Spec::Conv(s), .. } => s.weights.len(),
            Work::Layer { layer: Spec::Dense(s), .. } => s.weights.len(),
            Work::Auto { spec, .. } => spec.weights.len(),
        }
    }

    fn compile(&self, cache: &KernelCache, options: &CompileOptions) -> Result<Kernel, LayerError> {
        Ok(match &self.work {
            Work::Layer { layer, knobs, .. } => {
                let compiled = Box::new(layer.compile_in(cache, *knobs, options)?);
                match layer {
                    Spec::Conv(_) => Kernel::Conv(compiled),
                    Spec::Dense(_) => Kernel::Dense(compiled),
                }
            }
            Work::Auto { spec, point, .. } => {
                Kernel::Auto(Box::new(compile_qconv_auto_at(spec, options, point.as_deref())?))
            }
        })
    }
}

/// A compiled layer (or why not) and the time it took its thread.
pub(super) type Compiled = (Result<Kernel, LayerError>, Duration);

/// Compiles `jobs` (each with the index the result is returned under) with `options` and
/// `cache` (its weight arena holding the layers' packed weights) on as many threads as the
/// machine has cores (at most one per job).
pub(super) fn compile_jobs<'a>(
    jobs: impl Iterator<Item = (usize, &'a Job)>,
    options: &CompileOptions,
    cache: &KernelCache,
) -> HashMap<usize, Compiled> {
    // Auto-scheduled convolutions first (each compiles its own function), then the first layer
    // of each geometry, then the layers that find theirs; each geometry is formatted once.
    let (mut auto, mut first, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen = HashSet::new();
    for (index, job) in jobs {
        match job.geometry() {
            None => auto.push((index, job)),
            Some(g) => if seen.insert(g) { &mut first } else { &mut rest }.push((index, job)),
        }
    }
    // Within each group the jobs with the most weights first (longest first): a large
    // preparation last would leave the other cores idle at the end.
    for group in [&mut first, &mut rest] {
        group.sort_by_key(|&(index, job)| (std::cmp::Reverse(job.weight_bytes()), index));
    }
    let order: Vec<(usize, &Job)> = auto.into_iter().chain(first).chain(rest).collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(HashMap::with_capacity(order.len()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(order.len()).max(1);
    let trace = std::env::var_os("TENSORLIFT_TRACE_JOBS").is_some_and(|v| v == "1");
    let (begin, traced) = (Instant::now(), Mutex::new(Vec::new()));
    let work = |thread: usize| {
        while let Some(&(index, job)) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
            let (start, cpu) = (Instant::now(), trace.then(thread_cpu));
            let result = job.compile(cache, options);
            let done = (result, start.elapsed());
            if let Some(cpu) = cpu {
                let span = (start - begin, start - begin + done.1, thread_cpu().saturating_sub(cpu));
                traced.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((thread, index, span));
            }
            results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(index, done);
        }
    };
    std::thread::scope(|scope| {
        for thread in 1..threads {
            scope.spawn(move || work(thread));
        }
        work(0);
    });
    if trace {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let traced = traced.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let done = results.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (thread, index, (start, end, cpu)) in traced {
            // A layer's split: its function (or the wait for it, when cached) and its weights.
            let split = match done.get(&index) {
                Some((Ok(Kernel::Conv(c) | Kernel::Dense(c)), _)) => format!(
                    ", function {:.2} ms{}, weights {:.2} ms",
                    ms(c.compile_time()),
                    if c.cached() { " (cached)" } else { "" },
                    ms(c.prepare_time())
                ),
                _ => String::new(),
            };
            eprintln!(
                "job of step {index}: thread {thread}, {:.2}..{:.2} ms, cpu {:.2} ms{split}",
                ms(start),
                ms(end),
                ms(cpu)
            );
        }
        drop(done);
        let weights: usize = order.iter().map(|(_, job)| job.weight_bytes()).sum();
        eprintln!("jobs: {:.2} ms on {threads} thread(s)", ms(begin.elapsed()));
        eprintln!("weight arena: {} bytes packed from {weights} bytes of weights", cache.weight_arena_used());
    }
    results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The CPU time of the calling thread so far (zero where the clock cannot be read).
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    if ok { Duration::new(t.tv_sec as u64, t.tv_nsec as u32) } else { Duration::ZERO }
}
