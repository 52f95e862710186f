//! `Storage`, the owned zeroed bytes behind a `Tensor`: 64-byte aligned, and for large tensors
//! (a megabyte or more: the deep layers' packed weights) mapped on 2 MB boundaries with
//! transparent huge pages requested (`MADV_HUGEPAGE`), so that a kernel streaming them once
//! per inference walks one page table entry per 2 MB instead of one per 4 kB. Such a mapping
//! is rounded up to whole huge pages (a tensor of just over a megabyte takes 2 MB). The request
//! is advice: where the kernel declines it the pages are ordinary ones, with the same contents.
//! A `Storage` may also be a range of a mapping shared with others (`WeightArena`, which cuts a
//! compile's weights from one reservation), the mapping kept until its last range is dropped.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::ALIGN;

/// The huge page size mappings are aligned to.
const HUGE: usize = 2 << 20;

/// Owned, zero-initialized bytes.
pub(crate) struct Storage {
    ptr: NonNull<u8>,
    /// Bytes allocated (at least one line).
    size: usize,
    backing: Backing,
}

// SAFETY: `Storage` owns its bytes exclusively, like a `Vec<u8>`.
unsafe impl Send for Storage {}
// SAFETY: shared access only reads through `&self`.
unsafe impl Sync for Storage {}

/// Where a `Storage`'s bytes come from.
enum Backing {
    /// The global allocator, with `Storage::layout(size)`.
    Heap,
    /// A range of a mapping: one of its own, or of a `WeightArena` shared with other tensors.
    /// Held for its drop: the mapping is unmapped when its last range is dropped.
    Mapped { _mapping: Arc<Mapping> },
}

/// An anonymous private mapping on huge page boundaries with huge pages requested, unmapped on
/// drop.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    size: usize,
}

// SAFETY: the mapping is plain memory; who may touch which bytes is up to the `Storage`s cut
// from it, each of which owns its range exclusively.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself exposes no access to the bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Fresh anonymous pages (zero, untouched) for `size` bytes rounded up to whole huge pages,
    /// on a huge page boundary, with huge pages requested before the first touch; `None` where
    /// the mapping fails (the caller falls back to the allocator).
    pub(crate) fn huge(size: usize) -> Option<Mapping> {
        let size = size.max(1).checked_next_multiple_of(HUGE)?;
        let span = size.checked_add(HUGE)?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let start = (base as usize).next_multiple_of(HUGE);
        let head = start - base as usize;
        let tail = span - head - size;
        // SAFETY: the head and tail lie inside the mapping just made and are not used; the
        // advice concerns the kept range only. Failures leave valid (if unadvised) memory.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + size) as *mut libc::c_void, tail);
            }
            libc::madvise(start as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
        }
        Some(Mapping { base: NonNull::new(start as *mut u8)?, size })
    }

    /// Bytes mapped (a multiple of the huge page size).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The mapping's first byte (tests look at which of its pages are resident).
    #[cfg(test)]
    pub(crate) fn start(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Faults in the first `bytes` of the mapping (whole huge pages, at most all of it) now, as
    /// a write would, without changing a byte (`MADV_POPULATE_WRITE`), one huge page at a time
    /// until `stop` is set: the fresh pages' faults and zeroing are paid by the calling thread
    /// while it has nothing else to do, rather than by the threads that write them later (the
    /// pages not reached fault on first touch, as without the call). Whether the kernel did
    /// every page asked (it lacks the advice before Linux 5.14).
    pub(crate) fn populate(&self, bytes: usize, stop: &AtomicBool) -> bool {
        let len = bytes.checked_next_multiple_of(HUGE).map_or(self.size, |b| b.min(self.size));
        for offset in (0..len).step_by(HUGE) {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            // SAFETY: the range lies inside the mapping, which lives as long as `self`;
            // populating maps pages without writing to them, so it races with no write to a
            // range handed out.
            let page = unsafe { self.base.as_ptr().add(offset) };
            if unsafe { libc::madvise(page.cast(), HUGE, libc::MADV_POPULATE_WRITE) } != 0 {
                return false;
            }
        }
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `Mapping::huge` and is unmapped once, after the last
        // `Storage` cut from it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size) };
    }
}

impl Storage {
    /// `bytes` zero bytes (at least one line, so even an empty tensor has addressable memory).
    pub(crate) fn zeroed(bytes: usize) -> Storage {
        let size = Storage::lines(bytes);
        if size >= HUGE / 2
            && let Some(mapping) = Mapping::huge(size)
        {
            return Storage { ptr: mapping.base, size, backing: Backing::Mapped { _mapping: Arc::new(mapping) } };
        }
        let layout = Storage::layout(size);
        // SAFETY: `layout` has a non-zero size; the pointer is checked.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else { std::alloc::handle_alloc_error(layout) };
        Storage { ptr, size, backing: Backing::Heap }
    }

    /// The bytes a `Storage` of `bytes` takes: whole lines, at least one.
    pub(crate) fn lines(bytes: usize) -> usize {
        bytes.max(1).div_ceil(ALIGN) * ALIGN
    }

    /// The `size` bytes of `mapping` from `offset` on, as a `Storage` that keeps the mapping.
    ///
    /// # Safety
    /// `offset` is a multiple of `ALIGN`, `size` of `Storage::lines`, the range lies inside the
    /// mapping, was never written and is handed out once (no other `Storage` overlaps it).
    pub(crate) unsafe fn in_mapping(mapping: &Arc<Mapping>, offset: usize, size: usize) -> Storage {
        debug_assert!(offset.is_multiple_of(ALIGN) && offset + size <= mapping.size);
        // SAFETY: the caller keeps `offset` inside the mapping.
        let ptr = unsafe { mapping.base.add(offset) };
        Storage { ptr, size, backing: Backing::Mapped { _mapping: Arc::clone(mapping) } }
    }

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, ALIGN).expect("tensor sizes are bounded by isize::MAX")
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Clone for Storage {
    fn clone(&self) -> Storage {
        let mut copy = Storage::zeroed(self.size);
        // SAFETY: both hold at least `self.size` bytes and are distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), copy.as_mut_ptr(), self.size) };
        copy
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // A mapped range goes with its mapping (`Mapping`'s drop, after the last range).
        if let Backing::Heap = self.backing {
            // SAFETY: the bytes came from the global allocator with this layout and are
            // released once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Storage::layout(self.size)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_is_zeroed_aligned_and_clones_its_bytes() {
        for bytes in [0, 1, 63, 4096, HUGE / 2 - 1, HUGE / 2, HUGE + 3] {
            let mut s = Storage::zeroed(bytes);
            let n = bytes.max(1);
            assert!((s.as_ptr() as usize).is_multiple_of(ALIGN), "{bytes}");
            if bytes >= HUGE / 2 {
                assert!(
                    matches!(s.backing, Backing::Mapped { .. }) && (s.as_ptr() as usize).is_multiple_of(HUGE),
                    "{bytes}: on a huge page boundary"
                );
            }
            // SAFETY: `s` holds at least `n` bytes.
            let view = unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr(), n) };
            assert!(view.iter().all(|&b| b == 0), "{bytes}");
            view.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
            let c = s.clone();
            // SAFETY: as above.
            let copied = unsafe { std::slice::from_raw_parts(c.as_ptr(), n) };
            assert!(copied.iter().enumerate().all(|(i, &b)| b == i as u8), "{bytes}");
        }
    }
}
