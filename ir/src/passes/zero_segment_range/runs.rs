//! `ZeroRuns`, the elements of one buffer `zero_segment_range` knows hold 0, as runs: a padded
//! buffer's facts are a few runs (its borders), so copying, intersecting and querying them
//! costs per run, not per element.

/// Sorted, disjoint half-open runs `[start, end)` of elements known to hold 0, in a buffer of
/// `len` elements; no two runs touch (`end < next start`), so equal facts are equal values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ZeroRuns {
    len: usize,
    runs: Vec<(usize, usize)>,
}

impl ZeroRuns {
    /// Nothing known to be zero.
    pub(super) fn none(len: usize) -> ZeroRuns {
        ZeroRuns { len, runs: Vec::new() }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether some element is known to be zero.
    pub(super) fn any(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Forgets every element.
    pub(super) fn clear(&mut self) {
        self.runs.clear();
    }

    /// Elements `[from, to)` (within the buffer) are zero, or not, from now on.
    pub(super) fn set(&mut self, from: usize, to: usize, zero: bool) {
        debug_assert!(to <= self.len, "a range inside the buffer");
        if from >= to {
            return;
        }
        // The runs overlapping or touching `[from, to)`: ends are increasing, so are starts.
        let i = self.runs.partition_point(|&(_, e)| e < from);
        let j = self.runs.partition_point(|&(s, _)| s <= to);
        if zero {
            let (a, b) = if i < j { (self.runs[i].0.min(from), self.runs[j - 1].1.max(to)) } else { (from, to) };
            self.runs.splice(i..j, [(a, b)]);
        } else {
            let (head, tail) = if i < j {
                let (s, e) = (self.runs[i].0, self.runs[j - 1].1);
                ((s < from).then_some((s, from)), (e > to).then_some((to, e)))
            } else {
                (None, None)
            };
            self.runs.splice(i..j, [head, tail].into_iter().flatten());
        }
    }

    /// Keeps only the elements `other` also knows to be zero (same buffer).
    pub(super) fn intersect(&mut self, other: &ZeroRuns) {
        let (mut a, mut b) = (0, 0);
        let mut out = Vec::new();
        while a < self.runs.len() && b < other.runs.len() {
            let ((s0, e0), (s1, e1)) = (self.runs[a], other.runs[b]);
            let (s, e) = (s0.max(s1), e0.min(e1));
            if s < e {
                out.push((s, e));
            }
            if e0 <= e1 {
                a += 1;
            } else {
                b += 1;
            }
        }
        self.runs = out;
    }

    /// How many leading elements are zero.
    pub(super) fn prefix(&self) -> usize {
        match self.runs.first() {
            Some(&(0, e)) => e,
            _ => 0,
        }
    }

    /// Where the trailing zero elements start (`len` when there are none).
    pub(super) fn suffix_start(&self) -> usize {
        match self.runs.last() {
            Some(&(s, e)) if e == self.len => s,
            _ => self.len,
        }
    }

    /// Per element, whether it is known to be zero.
    #[cfg(test)]
    pub(super) fn to_bits(&self) -> Vec<bool> {
        let mut bits = vec![false; self.len];
        for &(s, e) in &self.runs {
            bits[s..e].iter_mut().for_each(|z| *z = true);
        }
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Operations on a buffer of `len` elements: `(from, to, zero)` sets, or an intersection
    /// with a second buffer that went through the same kind of operations.
    fn ops(len: usize) -> impl Strategy<Value = Vec<(usize, usize, u8)>> {
        proptest::collection::vec((0..=len, 0..=len, 0u8..4), 0..24)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Runs agree with one bool per element, the facts they replace, after any sequence
        /// of sets, clears and intersections; the runs stay sorted, disjoint and apart.
        #[test]
        fn runs_agree_with_one_bool_per_element(len in 0usize..40, ops in ops(40), other in ops(40)) {
            let mut runs = ZeroRuns::none(len);
            let mut bits = vec![false; len];
            let mut second = ZeroRuns::none(len);
            let mut second_bits = vec![false; len];
            for &(a, b, kind) in &other {
                let (a, b) = (a.min(len), b.min(len));
                second.set(a.min(b), a.max(b), kind % 2 == 0);
                second_bits[a.min(b)..a.max(b)].iter_mut().for_each(|z| *z = kind % 2 == 0);
            }
            for &(a, b, kind) in &ops {
                let (from, to) = (a.min(b).min(len), a.max(b).min(len));
                match kind {
                    0 | 1 => {
                        runs.set(from, to, kind == 0);
                        bits[from..to].iter_mut().for_each(|z| *z = kind == 0);
                    }
                    2 => {
                        runs.intersect(&second);
                        bits.iter_mut().zip(&second_bits).for_each(|(x, y)| *x &= *y);
                    }
                    _ if from == 0 => {
                        runs.clear();
                        bits.iter_mut().for_each(|z| *z = false);
                    }
                    _ => {}
                }
                prop_assert_eq!(runs.to_bits(), bits.clone());
                prop_assert!(runs.runs.windows(2).all(|w| w[0].1 < w[1].0));
                prop_assert!(runs.runs.iter().all(|&(s, e)| s < e && e <= len));
                prop_assert_eq!(runs.any(), bits.iter().any(|z| *z));
                prop_assert_eq!(runs.prefix(), bits.iter().take_while(|z| **z).count());
                prop_assert_eq!(runs.suffix_start(), len - bits.iter().rev().take_while(|z| **z).count());
            }
        }
    }
}
