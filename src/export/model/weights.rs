//! The read-only data of an exported network: every level's prepared weights (packed,
//! compensation, per-channel parameters) and the graph's constant tensors, each stored once
//! (equal bytes share one copy, as levels with the same operands do), 64-byte aligned, emitted
//! as one data object rather than as C text (megabytes of array literals compile slowly).

use std::collections::HashMap;

/// The bytes and where each distinct piece starts.
#[derive(Default)]
pub(super) struct Weights {
    pub bytes: Vec<u8>,
    offsets: HashMap<Vec<u8>, usize>,
}

/// Alignment of each piece (a cache line, as the JIT's tensors).
const ALIGN: usize = 64;

impl Weights {
    /// The offset of `piece`, appended unless an equal piece already was.
    pub fn add(&mut self, piece: &[u8]) -> usize {
        if let Some(&at) = self.offsets.get(piece) {
            return at;
        }
        let at = self.bytes.len().next_multiple_of(ALIGN);
        self.bytes.resize(at, 0);
        self.bytes.extend_from_slice(piece);
        self.offsets.insert(piece.to_vec(), at);
        at
    }
}
