//! Vector loads of interleaved runs: lane `l` reads element `start[l % P] + l / P`, `P` runs of
//! contiguous elements taken one element of each in turn (a packing of `P` rows of `B` into
//! the GEMM kernel's layout reads its rows so). Each run is loaded as whole 16-byte windows,
//! once, and every 128-bit piece of the result is shuffled together from the windows it
//! needs, instead of one scalar load and lane insert per lane.

use rustc_hash::FxHashMap as HashMap;

use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value};
use cranelift_module::Module;

use super::func::FnTx;

/// A piece's bytes as `(window, byte in window)`, windows numbered `run · per_run + chunk`.
pub(crate) type PiecePlan = Vec<(usize, u8)>;

/// The interleaved-run plan of byte offsets `offsets` (one per lane, lanes of `bytes` bytes):
/// the byte start of each run's windows and, per 16-byte piece of the result, where each of its
/// bytes comes from. `None` unless the lanes are `P ≥ 2` interleaved runs of whole windows
/// (every byte of a window is read, so that loading it whole stays in bounds).
pub(crate) fn plan(offsets: &[i32], bytes: usize) -> Option<(Vec<i32>, Vec<PiecePlan>)> {
    let n = offsets.len();
    let total = n * bytes;
    if !total.is_multiple_of(16) {
        return None;
    }
    let p = (2..=n / 2).find(|&p| n.is_multiple_of(p) && offsets[p] == offsets[0] + bytes as i32)?;
    let run_bytes = n / p * bytes;
    if !run_bytes.is_multiple_of(16) {
        return None;
    }
    let interleaved =
        offsets.iter().enumerate().all(|(l, &o)| o as i64 == offsets[l % p] as i64 + ((l / p) * bytes) as i64);
    if !interleaved {
        return None;
    }
    let per_run = run_bytes / 16;
    let windows: Vec<i32> = (0..p).flat_map(|r| (0..per_run).map(move |c| offsets[r] + (16 * c) as i32)).collect();
    let pieces = (0..total / 16)
        .map(|q| {
            (0..16)
                .map(|j| {
                    let (lane, byte) = ((16 * q + j) / bytes, (16 * q + j) % bytes);
                    let within = (lane / p) * bytes + byte;
                    ((lane % p) * per_run + within / 16, (within % 16) as u8)
                })
                .collect()
        })
        .collect();
    Some((windows, pieces))
}

/// A partly built piece: where each of its 16 bytes sits in `value`, `None` where it has none
/// of them yet.
struct Part {
    value: Value,
    at: [Option<u8>; 16],
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// The pieces (of type `ty`) of an interleaved-run load at `addr` planned by `plan`.
    pub(crate) fn load_interleaved(
        &mut self,
        addr: Value,
        flags: MemFlagsData,
        ty: Type,
        (windows, pieces): (Vec<i32>, Vec<PiecePlan>),
    ) -> Vec<Value> {
        let mut loaded: HashMap<usize, Value> = HashMap::default();
        let mut out = Vec::with_capacity(pieces.len());
        for piece in pieces {
            // The windows of this piece in order of first use, each as a part of its bytes.
            let mut parts: Vec<(usize, Part)> = Vec::new();
            for (j, &(w, b)) in piece.iter().enumerate() {
                let i = match parts.iter().position(|(x, _)| *x == w) {
                    Some(i) => i,
                    None => {
                        let value = *loaded.entry(w).or_insert_with(|| self.b.ins().load(ty, flags, addr, windows[w]));
                        parts.push((w, Part { value, at: [None; 16] }));
                        parts.len() - 1
                    }
                };
                parts[i].1.at[j] = Some(b);
            }
            // Merged pairwise, level by level: each merge puts the bytes it has at their places.
            let mut level: Vec<Part> = parts.into_iter().map(|(_, p)| p).collect();
            while level.len() > 1 || level[0].at.iter().enumerate().any(|(j, b)| *b != Some(j as u8)) {
                let mut next = Vec::with_capacity(level.len().div_ceil(2));
                let mut it = level.into_iter();
                while let Some(a) = it.next() {
                    let b = it.next();
                    let mut mask = [0u8; 16];
                    let mut at = [None; 16];
                    for j in 0..16 {
                        if let Some(x) = a.at[j] {
                            mask[j] = x;
                        } else if let Some(x) = b.as_ref().and_then(|b| b.at[j]) {
                            mask[j] = 16 + x;
                        } else {
                            continue;
                        }
                        at[j] = Some(j as u8);
                    }
                    let other = b.as_ref().map_or(a.value, |b| b.value);
                    let value = self.shuffle_bytes(a.value, other, mask);
                    next.push(Part { value, at });
                }
                level = next;
            }
            let piece = level.pop().expect("a piece has bytes").value;
            out.push(self.bitcast_vec(piece, ty));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn four_rows_of_sixteen_bytes_are_four_windows() {
        // Rows at 0, 64, 128, 192: lane l reads row l % 4 at byte l / 4.
        let offsets: Vec<i32> = (0..64).map(|l| (l % 4) * 64 + l / 4).collect();
        let (windows, pieces) = plan(&offsets, 1).unwrap();
        assert_eq!(windows, [0, 64, 128, 192]);
        assert_eq!(pieces.len(), 4);
        assert_eq!(&pieces[1][..5], [(0, 4), (1, 4), (2, 4), (3, 4), (0, 5)]);
        // Two rows of 32 bytes: two windows each.
        let offsets: Vec<i32> = (0..64).map(|l| (l % 2) * 100 + l / 2).collect();
        let (windows, pieces) = plan(&offsets, 1).unwrap();
        assert_eq!(windows, [0, 16, 100, 116]);
        assert_eq!(&pieces[2][..3], [(1, 0), (3, 0), (1, 1)]);
    }

    #[test]
    fn wider_lanes_keep_their_bytes_together() {
        // i16 lanes of two rows: bytes of a lane stay in order.
        let offsets: Vec<i32> = (0..16).map(|l| (l % 2) * 40 + (l / 2) * 2).collect();
        let (_, pieces) = plan(&offsets, 2).unwrap();
        assert_eq!(&pieces[0][..6], [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3)]);
    }

    #[test]
    fn other_patterns_or_partial_windows_have_no_plan() {
        // Contiguous, reversed, runs of 8 bytes (a window would read past them).
        assert!(plan(&(0..16).collect::<Vec<_>>(), 1).is_none());
        assert!(plan(&(0..16).rev().collect::<Vec<_>>(), 1).is_none());
        let short: Vec<i32> = (0..16).map(|l| (l % 2) * 64 + l / 2).collect();
        assert!(plan(&short, 1).is_none());
        let broken: Vec<i32> = (0..64).map(|l| if l == 63 { 0 } else { (l % 4) * 64 + l / 4 }).collect();
        assert!(plan(&broken, 1).is_none());
    }
}
