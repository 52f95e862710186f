//! A model file's bytes: mapped into memory read-only where the OS allows (`memmap2`), so that
//! decoding reads the page cache in place, with no copy of the file into fresh memory; else
//! read. Decoding from the returned `Bytes` leaves every `bytes` field (tensors' `raw_data`) a
//! view of it, and the graph's s8 constants (a quantized network's weights) stay views of it
//! (`tensor::decode`). The pages are not mapped up front (no `MAP_POPULATE`): the serial import
//! touches only the protobuf's structure, and the weights' pages are mapped as the compile's
//! jobs read them to pack them, on every core.
//!
//! As with any mapped file, another process truncating or rewriting the file while it is
//! imported or its graph is used changes what is read (or faults); the mapping lives until the
//! decoded model and every view of it (the graph, the kernel specs) are dropped.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use memmap2::{Mmap, MmapOptions};
use prost::bytes::Bytes;

/// The bytes of the file at `path`: mapped where possible (a non-empty regular file the OS
/// agrees to map), else read.
pub fn file_bytes(path: &Path) -> std::io::Result<Bytes> {
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file()
        && meta.len() > 0
        && let Some(mapped) = map(&file)
    {
        return Ok(Bytes::from_owner(mapped));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(Bytes::from(bytes))
}

/// A private read-only mapping of the whole of `file`; `None` if the OS refused (the caller
/// reads instead).
fn map(file: &File) -> Option<Mmap> {
    // SAFETY: a read-only mapping of an open file; memmap2 owns it (unmapped on drop, after the
    // last `Bytes` view). Changes to the file by another process while mapped are the caveat of
    // the module doc, not undefined behaviour this process causes.
    unsafe { MmapOptions::new().map(file) }.ok()
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
