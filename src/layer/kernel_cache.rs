//! `KernelCache`: the compiled per-call functions of quantized layers by definition and
//! schedule, so that the layers of a network that share both (shapes, dtypes, constants such as
//! zero points and per-tensor scales, knobs, level, threads) compile once. Per-channel scales,
//! packed weights and compensations are arguments, not part of the function. A cache made
//! `keeping_weights` also keeps each layer's prepared weights by its name, panel width and GEMM
//! operands (what the tuner's measurement of one layer under many schedules reuses).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use schedules::ops::GemmOperands;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::LayerError;
use super::qprepare::PreparedWeights;
use crate::build::Kernel;
use crate::isa::IsaLevel;

/// What identifies a compiled function: the workload key of its definition, the knobs, the
/// level, the threads and the optimization level (its `Debug` text).
pub(super) type CacheKey = (String, Conv2dInt8Knobs, IsaLevel, Option<usize>, String);

/// What identifies prepared weights in a cache that keeps them: the layer's name, the panel
/// width and the GEMM operands (their `Debug` text).
type WeightsKey = (String, i64, String);

/// Compiled functions by `CacheKey`, for one thread (the compile loop of a network).
#[derive(Default)]
pub struct KernelCache {
    kernels: RefCell<HashMap<CacheKey, Rc<Kernel>>>,
    hits: Cell<usize>,
    /// Prepared weights by (layer name, nr, operands), when kept (`keeping_weights`).
    weights: Option<RefCell<HashMap<WeightsKey, PreparedWeights>>>,
}

impl KernelCache {
    pub fn new() -> KernelCache {
        KernelCache::default()
    }

    /// A cache that also keeps prepared weights, by layer name: only for layers whose name
    /// means one set of weights, bias and source zero point (one spec compiled many times).
    pub fn keeping_weights() -> KernelCache {
        KernelCache { weights: Some(RefCell::default()), ..KernelCache::default() }
    }

    /// The prepared weights of `key`, prepared by `prepare` unless kept from before.
    pub(super) fn prepared(
        &self,
        (name, nr, operands): (String, i64, GemmOperands),
        prepare: impl FnOnce() -> Result<PreparedWeights, LayerError>,
    ) -> Result<PreparedWeights, LayerError> {
        let Some(kept) = &self.weights else { return prepare() };
        let key = (name, nr, format!("{operands:?}"));
        if let Some(w) = kept.borrow().get(&key) {
            return Ok(w.clone());
        }
        let w = prepare()?;
        kept.borrow_mut().insert(key, w.clone());
        Ok(w)
    }

    /// Functions compiled so far.
    pub fn len(&self) -> usize {
        self.kernels.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Compiles that found their function here.
    pub fn hits(&self) -> usize {
        self.hits.get()
    }

    /// The function of `key`, built by `build` unless built before; and whether it was.
    pub(super) fn get_or_build(
        &self,
        key: CacheKey,
        build: impl FnOnce() -> Result<Kernel, LayerError>,
    ) -> Result<(Rc<Kernel>, bool), LayerError> {
        if let Some(kernel) = self.kernels.borrow().get(&key) {
            self.hits.set(self.hits.get() + 1);
            return Ok((Rc::clone(kernel), true));
        }
        let kernel = Rc::new(build()?);
        self.kernels.borrow_mut().insert(key, Rc::clone(&kernel));
        Ok((kernel, false))
    }
}
