//! A model file's bytes: mapped into memory read-only where the OS allows (Linux `mmap` with
//! `MAP_POPULATE`), so that decoding reads the page cache in place, with no copy of the file
//! into fresh memory and no page fault per page of it; else read. Decoding from the returned
//! `Bytes` leaves every `bytes` field (tensors' `raw_data`) a view of it.
//!
//! As with any mapped file, another process truncating or rewriting the file while it is
//! imported changes what is read (or faults); the mapping lives until the decoded model and
//! every view of it are dropped.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use prost::bytes::Bytes;

/// The bytes of the file at `path`: mapped where possible (a non-empty regular file on
/// Linux), else read.
pub fn file_bytes(path: &Path) -> std::io::Result<Bytes> {
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    #[cfg(target_os = "linux")]
    if meta.is_file()
        && let Some(mapped) = Mapped::new(&file, meta.len())
    {
        return Ok(Bytes::from_owner(mapped));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(Bytes::from(bytes))
}

/// A private read-only mapping of a whole file, unmapped on drop.
#[cfg(target_os = "linux")]
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone (unmapped once, on drop), so
// that it may be read from, and dropped on, any thread.
#[cfg(target_os = "linux")]
unsafe impl Send for Mapped {}
#[cfg(target_os = "linux")]
unsafe impl Sync for Mapped {}

#[cfg(target_os = "linux")]
impl Mapped {
    /// The first `len` bytes of `file` mapped (`None`: empty, or the OS refused).
    fn new(file: &File, len: u64) -> Option<Mapped> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: a new private read-only mapping of an open file; the result is checked before
        // use, and nothing else refers to the address range it returns.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Mapped { ptr, len })
    }
}

#[cfg(target_os = "linux")]
impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live read-only mapping of `len` bytes until `drop`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no view of it outlives `self`
        // (`Bytes::from_owner` drops the owner after its last view).
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapped file's bytes are exactly the file's; an empty file (read, not mapped) has none;
    /// a missing one is an error.
    #[test]
    fn the_bytes_are_the_files() {
        let dir = std::env::temp_dir().join(format!("tensorlift-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..70_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let (full, empty) = (dir.join("full.bin"), dir.join("empty.bin"));
        std::fs::write(&full, &data).unwrap();
        std::fs::write(&empty, b"").unwrap();
        let bytes = file_bytes(&full).unwrap();
        assert_eq!(&bytes[..], &data[..]);
        // A view of the mapping outlives the `Bytes` it was cut from.
        let view = bytes.slice(1000..2000);
        drop(bytes);
        assert_eq!(&view[..], &data[1000..2000]);
        assert!(file_bytes(&empty).unwrap().is_empty());
        assert!(file_bytes(&dir.join("missing.bin")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
