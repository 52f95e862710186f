//! `KernelCache`: the compiled per-call functions of quantized layers by definition and
//! schedule, so that the layers of a network that share both (shapes, dtypes, knobs, level,
//! threads) compile once. In onnxruntime's order zero points, per-tensor and per-channel scales
//! and the ReLU bound are arguments, as are packed weights and compensations: none is part of
//! the function. Shared between threads, so that distinct functions compile in parallel; a
//! thread that needs a function another is compiling waits for it. A cache made
//! `keeping_weights` also keeps each layer's prepared weights by its name, panel width and GEMM
//! operands (what the tuner's measurement of one layer under many schedules reuses). A cache made
//! `with_weight_arena` has the layers' packed weights cut from one reservation (`WeightArena`:
//! a network's compile).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ir::trace::Trace;
use schedules::ops::GemmOperands;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::LayerError;
use super::qprepare::PreparedWeights;
use crate::isa::IsaLevel;
use crate::runtime::{CompiledFunc, WeightArena};

/// What identifies a compiled function: the workload key of its definition, the knobs, the
/// level, the threads and the optimization level (its `Debug` text).
pub(super) type CacheKey = (String, Conv2dInt8Knobs, IsaLevel, Option<usize>, String);

/// A function once compiled, with the schedule it was lowered from as replayable data (`None`
/// while compiling or after a failed build).
type Slot = Arc<Mutex<Option<(Arc<CompiledFunc>, Trace)>>>;

/// Compiled functions by `CacheKey`.
#[derive(Default)]
pub struct KernelCache {
    kernels: Mutex<HashMap<CacheKey, Slot>>,
    hits: AtomicUsize,
    /// Prepared weights by (layer name, nr, operands), when kept (`keeping_weights`).
    weights: Option<Mutex<HashMap<WeightsKey, PreparedWeights>>>,
    /// Where the layers' packed weights are cut from (`None`: each allocated on its own).
    arena: Option<WeightArena>,
}

/// What identifies prepared weights in a cache that keeps them: the layer's name, the panel
/// width and the GEMM operands with the layout's reduction length and space-to-depth stride
/// (their `Debug` text).
type WeightsKey = (String, i64, String);

impl KernelCache {
    pub fn new() -> KernelCache {
        KernelCache::default()
    }

    /// A cache that also keeps prepared weights, by layer name: only for layers whose name
    /// means one set of weights, bias and source zero point (one spec compiled many times).
    pub fn keeping_weights() -> KernelCache {
        KernelCache { weights: Some(Mutex::default()), ..KernelCache::default() }
    }

    /// A cache whose layers' packed weights are cut from one reservation of at least `bytes`
    /// (`WeightArena`; where the OS refuses it, each is allocated on its own).
    pub fn with_weight_arena(bytes: usize) -> KernelCache {
        KernelCache { arena: WeightArena::reserve(bytes), ..KernelCache::default() }
    }

    /// Faults in the first `bytes` of the weight arena until `stop` is set, if the cache has one
    /// (`WeightArena::populate`); whether all were.
    pub fn populate_weight_arena(&self, bytes: usize, stop: &AtomicBool) -> bool {
        self.arena.as_ref().is_some_and(|a| a.populate(bytes, stop))
    }

    /// Bytes of the weight arena handed out so far (zero without one).
    pub fn weight_arena_used(&self) -> usize {
        self.arena.as_ref().map_or(0, WeightArena::used)
    }

    /// Where the layers' packed weights are cut from, if anywhere.
    pub(super) fn weight_arena(&self) -> Option<&WeightArena> {
        self.arena.as_ref()
    }

    /// The prepared weights of `key` (name, panel width, operands, and the reduction length and
    /// space-to-depth stride of their layout), prepared by `prepare` unless kept from before.
    pub(super) fn prepared(
        &self,
        (name, nr, operands, (gemm_k, space_to_depth)): (String, i64, GemmOperands, (i64, Option<i64>)),
        prepare: impl FnOnce() -> Result<PreparedWeights, LayerError>,
    ) -> Result<PreparedWeights, LayerError> {
        let Some(kept) = &self.weights else { return prepare() };
        let key = (name, nr, format!("{operands:?} k {gemm_k} space to depth {space_to_depth:?}"));
        if let Some(w) = kept.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(w.clone());
        }
        let w = prepare()?;
        kept.lock().unwrap_or_else(PoisonError::into_inner).insert(key, w.clone());
        Ok(w)
    }

    /// Functions compiled so far.
    pub fn len(&self) -> usize {
        let kernels = self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        kernels.values().filter(|s| s.lock().unwrap_or_else(PoisonError::into_inner).is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Compiles that found their function here.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// The function of `key` and its schedule's trace, built by `build` unless built before
    /// (then `build`, which schedules, lowers and compiles, is not called); and whether it was.
    /// While one thread builds a key, others asking for it wait (a failed build leaves the key
    /// to the next to try).
    pub(super) fn get_or_build(
        &self,
        key: CacheKey,
        build: impl FnOnce() -> Result<(CompiledFunc, Trace), LayerError>,
    ) -> Result<((Arc<CompiledFunc>, Trace), bool), LayerError> {
        let slot = Arc::clone(self.kernels.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_default());
        let mut kernel = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((kernel, trace)) = &*kernel {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(((Arc::clone(kernel), trace.clone()), true));
        }
        let (built, trace) = build()?;
        let built = Arc::new(built);
        *kernel = Some((Arc::clone(&built), trace.clone()));
        Ok(((built, trace), false))
    }
}
