//! `KernelCache`: the compiled per-call functions of quantized layers by definition and
//! schedule, so that the layers of a network that share both (shapes, dtypes, constants such as
//! zero points and per-tensor scales, knobs, level, threads) compile once. Per-channel scales,
//! packed weights and compensations are arguments, not part of the function.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::LayerError;
use crate::build::Kernel;
use crate::isa::IsaLevel;

/// What identifies a compiled function: the workload key of its definition, the knobs, the
/// level, the threads and the optimization level (its `Debug` text).
pub(super) type CacheKey = (String, Conv2dInt8Knobs, IsaLevel, Option<usize>, String);

/// Compiled functions by `CacheKey`, for one thread (the compile loop of a network).
#[derive(Default)]
pub struct KernelCache {
    kernels: RefCell<HashMap<CacheKey, Rc<Kernel>>>,
    hits: Cell<usize>,
}

impl KernelCache {
    pub fn new() -> KernelCache {
        KernelCache::default()
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
