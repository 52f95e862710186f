//! `WeightArena`: one reservation of fresh memory that the packed weights of a compile are cut
//! from, one after the other, rather than a mapping or allocation each. A fresh page costs a
//! fault and its zeroing when first written; cut from one reservation on huge pages, the
//! weights fault one 2 MB page at a time and leave no partly used page per tensor (a tensor of
//! its own mapping rounds up to whole huge pages, one in the allocator's heap takes 4 kB
//! pages). The reservation is address space only: pages never written cost nothing. A tensor
//! that no longer fits is allocated as `Tensor::zeros` allocates; the mapping lives until the
//! arena and every tensor cut from it are dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ir::DType;

use super::Tensor;
use super::storage::{Mapping, Storage};
use crate::error::RuntimeError;

/// Zeroed tensors cut in turn from one mapping (module doc). Shared between threads.
pub struct WeightArena {
    mapping: Arc<Mapping>,
    /// Bytes handed out so far, from the mapping's start.
    used: AtomicUsize,
}

impl WeightArena {
    /// Reserves at least `bytes` (whole huge pages); `None` where the OS refuses the mapping.
    pub fn reserve(bytes: usize) -> Option<WeightArena> {
        Some(WeightArena { mapping: Arc::new(Mapping::huge(bytes)?), used: AtomicUsize::new(0) })
    }

    /// A tensor of zeros, cut from the arena while it has room, else as `Tensor::zeros` makes
    /// one. Errors as `Tensor::zeros`.
    pub fn zeros(&self, dtype: DType, shape: &[i64]) -> Result<Tensor, RuntimeError> {
        Tensor::zeros_on(dtype, shape, |bytes| self.take(bytes).unwrap_or_else(|| Storage::zeroed(bytes)))
    }

    /// The next `bytes` (whole lines) of the mapping, if they fit.
    fn take(&self, bytes: usize) -> Option<Storage> {
        let size = Storage::lines(bytes);
        let capacity = self.mapping.size();
        let offset = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(size).filter(|&end| end <= capacity)
            })
            .ok()?;
        // SAFETY: `used` only grows, so `offset..offset + size` (inside the mapping, lines from
        // its line-aligned start) is handed out this once; the mapping's pages are fresh, and
        // nothing writes a range before it is handed out.
        Some(unsafe { Storage::in_mapping(&self.mapping, offset, size) })
    }

    /// Faults in the arena's first `bytes` now, on the calling thread, until `stop` is set
    /// (`Mapping::populate`): one with nothing else to do while the compile plans its layers,
    /// so that the threads packing weights into those pages later find them mapped and zeroed.
    /// Contents and placement are unchanged. Whether every page asked was.
    pub fn populate(&self, bytes: usize, stop: &AtomicBool) -> bool {
        self.mapping.populate(bytes, stop)
    }

    /// Bytes handed out so far.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tensors cut from an arena are zero, line-aligned and disjoint, outlive the arena, and
    /// once it is full come from the allocator with the same contents.
    #[test]
    fn tensors_are_zero_disjoint_and_outlive_the_arena() {
        let arena = WeightArena::reserve(1).unwrap();
        let capacity = arena.mapping.size();
        let shapes: [&[i64]; 4] = [&[3, 5], &[1000], &[7, 9, 11], &[64]];
        let mut tensors: Vec<Tensor> = shapes.iter().map(|s| arena.zeros(DType::I8, s).unwrap()).collect();
        assert_eq!(arena.used(), 64 + 1024 + 704 + 64);
        // A tensor larger than what is left comes from the allocator; the arena is not used up.
        let big = arena.zeros(DType::I32, &[capacity as i64 / 4]).unwrap();
        assert_eq!(arena.used(), 64 + 1024 + 704 + 64);
        tensors.push(big);
        for (i, t) in tensors.iter_mut().enumerate() {
            assert!((t.as_bytes().as_ptr() as usize).is_multiple_of(crate::abi::ALIGN), "tensor {i}");
            assert!(t.as_bytes().iter().all(|&b| b == 0), "tensor {i} is zero");
            t.as_mut_bytes().fill(i as u8 + 1);
        }
        drop(arena);
        for (i, t) in tensors.iter().enumerate() {
            assert!(t.as_bytes().iter().all(|&b| b == i as u8 + 1), "tensor {i} kept its own bytes");
        }
        // The copy of an arena tensor is a tensor of its own.
        let copy = tensors[1].clone();
        drop(tensors);
        assert!(copy.as_bytes().iter().all(|&b| b == 2));
    }

    /// The 4 kB pages of the first `bytes` of the arena's mapping that are resident (`mincore`).
    fn resident(arena: &WeightArena, bytes: usize) -> usize {
        let mut pages = vec![0u8; bytes.div_ceil(4096)];
        // SAFETY: the range lies inside the mapping; `pages` has a byte per page of it.
        let ok = unsafe { libc::mincore(arena.mapping.start().cast(), bytes, pages.as_mut_ptr()) } == 0;
        assert!(ok, "mincore: {}", std::io::Error::last_os_error());
        pages.iter().filter(|&&p| p & 1 == 1).count()
    }

    /// Populating maps the first huge pages asked for, and no others (none once stopped),
    /// without changing them: the tensors cut from them are zero and their own. Where the
    /// kernel does not know the advice (before Linux 5.14) the call says so, with `EINVAL`, and
    /// maps nothing.
    #[test]
    fn populating_maps_the_first_pages_and_keeps_them_zero() {
        let arena = WeightArena::reserve(3 << 20).unwrap();
        assert_eq!(arena.mapping.size(), 4 << 20);
        assert_eq!(resident(&arena, 4 << 20), 0, "a fresh reservation has no pages");
        let go = AtomicBool::new(false);
        // Stopped before it starts, it maps nothing.
        assert!(!arena.populate(usize::MAX, &AtomicBool::new(true)));
        assert_eq!(resident(&arena, 4 << 20), 0);
        let populated = arena.populate(1, &go);
        let error = std::io::Error::last_os_error();
        if populated {
            assert_eq!(resident(&arena, 2 << 20), 512, "the first huge page is mapped");
            assert_eq!(resident(&arena, 4 << 20), 512, "the second is not");
        } else {
            assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{error}");
            assert_eq!(resident(&arena, 4 << 20), 0);
        }
        let mut a = arena.zeros(DType::I8, &[3000]).unwrap();
        let b = arena.zeros(DType::I32, &[1000]).unwrap();
        assert!(a.as_bytes().iter().chain(b.as_bytes()).all(|&x| x == 0));
        a.as_mut_bytes().fill(7);
        assert!(b.as_bytes().iter().all(|&x| x == 0), "the tensors are disjoint");
        // Populating again, now past what was handed out, changes none of it.
        assert_eq!(arena.populate(usize::MAX, &go), populated);
        assert!(a.as_bytes().iter().all(|&x| x == 7) && b.as_bytes().iter().all(|&x| x == 0));
    }
}
