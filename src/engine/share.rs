//! `plan`: which tensors share a buffer. A tensor a step writes lives from that step to the
//! last step that reads it; a later tensor may take its buffer once it is dead. A network's
//! intermediate tensors then fit in a few buffers, a fraction of the memory one buffer per
//! tensor takes, and a layer writes where a recent one read rather than into memory last
//! touched an inference ago.

/// A buffer shared by tensors whose lifetimes do not overlap.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Buffer {
    /// Bytes: the largest of its tensors'.
    pub bytes: usize,
    /// Its tensors' slots, in the order the steps write them.
    pub slots: Vec<usize>,
}

/// Where each written tensor keeps its bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Sharing {
    pub buffers: Vec<Buffer>,
    /// Per step, the slots it writes that take a shared buffer, with the buffer's index: each
    /// takes the buffer from its holder before the step runs.
    pub takes: Vec<Vec<(usize, usize)>>,
}

/// The buffers of the tensors `steps` write (each step its input and output slots), of
/// `bytes[slot]` bytes each. Pinned slots (the graph's inputs and outputs, constants) keep
/// buffers of their own and are left out, as is a tensor no other shares with. A step's
/// outputs never share with its inputs (they are live at that step). Best fit: a new tensor
/// takes the free buffer nearest its size, the smallest that holds it if any does.
pub(super) fn plan(steps: &[(Vec<usize>, Vec<usize>)], bytes: &[usize], pinned: &[bool]) -> Sharing {
    let slots = bytes.len();
    let (mut written, mut last_read) = (vec![None; slots], vec![None; slots]);
    for (i, (ins, outs)) in steps.iter().enumerate() {
        for &s in outs {
            written[s].get_or_insert(i);
        }
        for &s in ins {
            last_read[s] = Some(i);
        }
    }
    // A tensor is dead after its last read (or, never read, after it is written).
    let dead_after = |s: usize| last_read[s].max(written[s]);
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut buffer_of = vec![None; slots];
    let mut free: Vec<usize> = Vec::new();
    let mut takes = vec![Vec::new(); steps.len()];
    for (i, (_, outs)) in steps.iter().enumerate() {
        // The buffers whose last tensor died before this step.
        for (b, buffer) in buffers.iter().enumerate() {
            let last = *buffer.slots.last().expect("a buffer has a tensor");
            if dead_after(last).is_some_and(|d| d < i) && !free.contains(&b) {
                free.push(b);
            }
        }
        for &s in outs {
            if pinned[s] || written[s] != Some(i) || buffer_of[s].is_some() {
                continue;
            }
            let fit = |b: &usize| (buffers[*b].bytes < bytes[s], buffers[*b].bytes.abs_diff(bytes[s]));
            let b = match free.iter().enumerate().min_by_key(|(_, b)| fit(b)).map(|(k, &b)| (k, b)) {
                Some((k, b)) => {
                    free.swap_remove(k);
                    buffers[b].bytes = buffers[b].bytes.max(bytes[s]);
                    b
                }
                None => {
                    buffers.push(Buffer { bytes: bytes[s], slots: Vec::new() });
                    buffers.len() - 1
                }
            };
            buffers[b].slots.push(s);
            buffer_of[s] = Some(b);
            takes[i].push((s, b));
        }
    }
    // A buffer of one tensor is that tensor's own: nothing to pass on.
    let alone: Vec<bool> = buffers.iter().map(|b| b.slots.len() < 2).collect();
    let mut renumber = vec![None; buffers.len()];
    let mut kept = Vec::new();
    for (b, buffer) in buffers.into_iter().enumerate() {
        if !alone[b] {
            renumber[b] = Some(kept.len());
            kept.push(buffer);
        }
    }
    for step in &mut takes {
        step.retain_mut(|(_, b)| match renumber[*b] {
            Some(n) => {
                *b = n;
                true
            }
            None => false,
        });
    }
    Sharing { buffers: kept, takes }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For every buffer, its tensors' lifetimes (written .. dead) are disjoint and in order,
    /// it holds the largest of them, and every tensor of it is taken at the step writing it.
    fn check(steps: &[(Vec<usize>, Vec<usize>)], bytes: &[usize], pinned: &[bool], sharing: &Sharing) {
        let written = |s: usize| steps.iter().position(|(_, o)| o.contains(&s)).unwrap();
        let dead = |s: usize| steps.iter().rposition(|(i, _)| i.contains(&s)).unwrap_or(0).max(written(s));
        for (b, buffer) in sharing.buffers.iter().enumerate() {
            assert!(buffer.slots.len() >= 2, "{buffer:?}");
            assert_eq!(buffer.bytes, buffer.slots.iter().map(|&s| bytes[s]).max().unwrap());
            for pair in buffer.slots.windows(2) {
                assert!(dead(pair[0]) < written(pair[1]), "{pair:?} overlap in {buffer:?}");
            }
            for &s in &buffer.slots {
                assert!(!pinned[s], "pinned {s} shared");
                assert!(sharing.takes[written(s)].contains(&(s, b)), "{s} not taken at its step");
            }
        }
        let taken: usize = sharing.takes.iter().map(Vec::len).sum();
        assert_eq!(taken, sharing.buffers.iter().map(|b| b.slots.len()).sum::<usize>());
    }

    #[test]
    fn a_chain_ping_pongs_between_two_buffers_and_pinned_tensors_keep_theirs() {
        // 0 (input) → 1 → 2 → 3 → 4 (output); step k reads k and writes k + 1.
        let steps: Vec<_> = (0..4).map(|k| (vec![k], vec![k + 1])).collect();
        let bytes = [100, 50, 80, 50, 10];
        let pinned = [true, false, false, false, true];
        let sharing = plan(&steps, &bytes, &pinned);
        check(&steps, &bytes, &pinned, &sharing);
        // 1 dies at step 1, so 3 (step 2) takes its buffer; 2 has nobody after it.
        assert_eq!(sharing.buffers, [Buffer { bytes: 50, slots: vec![1, 3] }]);
    }

    #[test]
    fn a_residual_input_stays_alive_until_its_add() {
        // 0 → 1 (step 0); 1 → 2 (step 1); 2 → 3 (step 2); 3 + 1 → 4 (step 3); 4 → 5 (step 4).
        let steps =
            vec![(vec![0], vec![1]), (vec![1], vec![2]), (vec![2], vec![3]), (vec![3, 1], vec![4]), (vec![4], vec![5])];
        let bytes = [8, 8, 8, 8, 8, 8];
        let pinned = [true, false, false, false, false, true];
        let sharing = plan(&steps, &bytes, &pinned);
        check(&steps, &bytes, &pinned, &sharing);
        // 2 is read by step 2, which writes 3: 4 is the first to take 2's buffer. 1 lives
        // until the add at step 3, and nothing after it needs a buffer.
        assert_eq!(sharing.buffers, [Buffer { bytes: 8, slots: vec![2, 4] }]);
    }

    #[test]
    fn random_step_lists_never_share_a_live_buffer() {
        let mut state = 7u64;
        let mut next = |n: usize| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize % n
        };
        for _ in 0..500 {
            let n = 1 + next(12);
            // Slot k is written by step k - 1 (slot 0 is the input); steps read earlier slots.
            let steps: Vec<_> =
                (0..n).map(|k| ((0..1 + next(3)).map(|_| next(k + 1)).collect(), vec![k + 1])).collect();
            let bytes: Vec<usize> = (0..=n).map(|_| 1 + next(1000)).collect();
            let mut pinned: Vec<bool> = (0..=n).map(|_| next(5) == 0).collect();
            pinned[0] = true;
            check(&steps, &bytes, &pinned, &plan(&steps, &bytes, &pinned));
        }
    }
}
