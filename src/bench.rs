//! Deterministic data and timing shared by the CLI, the examples and the tests: the same inputs
//! and the same measurement everywhere, so figures from one are comparable with another's.

use std::time::{Duration, Instant};

use ir::DType;
use ir::interp::Array;

use crate::runtime::peak::Probe;
use crate::{CompiledFunc, RuntimeError, Tensor};

/// The `i`-th value of the pattern with `seed`: a cheap hash of the position whose low bits
/// cover every byte value, so that wrapped into a narrow integer type it spans the whole range.
pub fn pattern_value(i: i64, seed: i64) -> i64 {
    i.wrapping_mul(7919).wrapping_add(seed.wrapping_mul(104_729)) ^ (i >> 3)
}

/// `len` values of the pattern with `seed` (`pattern_value(0, seed)`, `pattern_value(1, seed)`, ...).
pub fn pattern_values(len: usize, seed: i64) -> impl ExactSizeIterator<Item = i64> {
    (0..len).map(move |i| pattern_value(i as i64, seed))
}

/// An integer array of `shape` holding the pattern with `seed`, wrapped into `dtype` (`Cast`
/// semantics): deterministic data spanning the type's whole range.
pub fn pattern(dtype: DType, shape: &[i64], seed: i64) -> Array {
    let len: i64 = shape.iter().product();
    Array::from_i64(dtype, shape, &pattern_values(len.max(0) as usize, seed).collect::<Vec<_>>())
}

/// `pattern(dtype, shape, seed)` as a runtime tensor, built without the interpreter's `Array`
/// (8 bytes an element): the values' low `dtype.bytes()` bytes, which is wrapping. Panics
/// unless `dtype` is a scalar integer type and the shape is valid.
pub fn pattern_tensor(dtype: DType, shape: &[i64], seed: i64) -> Tensor {
    assert!(dtype.is_int() && dtype.is_scalar(), "pattern_tensor of {dtype}");
    let len: i64 = shape.iter().product();
    let size = dtype.bytes();
    let mut bytes = Vec::with_capacity(len.max(0) as usize * size);
    for v in pattern_values(len.max(0) as usize, seed) {
        bytes.extend_from_slice(&v.to_le_bytes()[..size]);
    }
    Tensor::from_le_bytes(dtype, shape, &bytes).unwrap_or_else(|e| panic!("pattern_tensor: {e}"))
}

/// The table's generator and its uniform draws (`schedules::resnet18`), shared by the CLI,
/// examples and tests.
pub use schedules::resnet18::{Lcg, uniform};

/// The median (the upper one of an even count); NaN for no values.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// What `time` and `time_against_peak` measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Median seconds of one call.
    pub median_s: f64,
    /// Timed calls (the warm-up call is not one of them).
    pub runs: usize,
    /// The probe's GOPS summed over the threads (median), when there is a probe.
    pub peak_gops: Option<f64>,
}

/// Runs `call` once to warm up, then `repeat` times (at least once): the median seconds.
pub fn time<E>(repeat: usize, mut call: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    call()?;
    timed(repeat, call)
}

/// `repeat` timed calls (at least one), no warm-up: the median seconds.
fn timed<E>(repeat: usize, mut call: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    let mut times = Vec::with_capacity(repeat.max(1));
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        call()?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok(Timing { runs: times.len(), median_s: median(times), peak_gops: None })
}

/// Calls `func` on `inputs` and a zero output shaped like `expected` (its last parameter), timed
/// by `time`: the timing and whether the output equals `expected` bit for bit.
pub fn time_and_check(
    func: &CompiledFunc,
    inputs: &[&Array],
    expected: &Array,
    repeat: usize,
) -> Result<(Timing, bool), RuntimeError> {
    let mut tensors: Vec<Tensor> = inputs.iter().map(|a| Tensor::from_array(a)).collect();
    tensors.push(Tensor::zeros(expected.dtype(), expected.shape())?);
    let mut args: Vec<&mut Tensor> = tensors.iter_mut().collect();
    let timing = time(repeat, || func.call(&mut args))?;
    Ok((timing, tensors.last().is_some_and(|out| out.to_array().bits_eq(expected))))
}

/// Runs `call` once to calibrate, then `repeat` times (at least once), each timed call preceded
/// by a run of the peak probe of the same length (at most `MAX_PROBE_RUN`) on each of the
/// `threads` threads of the pool the call uses: the machine is shared, and the ratio of medians
/// taken side by side is what is comparable across runs. (On one thread the probe runs on the calling thread, where the call
/// runs too.) Without a probe this is `time`.
pub fn time_against_peak<E: From<RuntimeError>>(
    probe: Option<&Probe>,
    threads: usize,
    repeat: usize,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<Timing, E> {
    let start = Instant::now();
    call()?;
    time_against_peak_after(probe, threads, repeat, start.elapsed(), call)
}

/// The longest probe run beside a timed call: a rate needs no longer, and a probe as long as
/// each call of the tuner's slow candidates (tiles that leave part of each row to the fallback
/// loops) would double the time their measurement takes.
pub const MAX_PROBE_RUN: Duration = Duration::from_millis(1);

/// `time_against_peak` after a warm-up call the caller made, which took `warm_up` (the tuner's
/// verification call): a slow candidate costs one call less.
pub fn time_against_peak_after<E: From<RuntimeError>>(
    probe: Option<&Probe>,
    threads: usize,
    repeat: usize,
    warm_up: Duration,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<Timing, E> {
    let Some(probe) = probe else { return timed(repeat, call) };
    let iterations = probe.calibrate(warm_up.min(MAX_PROBE_RUN));
    let (mut times, mut peaks) = (Vec::new(), Vec::new());
    for _ in 0..repeat.max(1) {
        peaks.push(probe_gops(probe, threads, iterations)?);
        let start = Instant::now();
        call()?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok(Timing { runs: times.len(), median_s: median(times), peak_gops: Some(median(peaks)) })
}

/// One run of `probe` (`iterations` loop iterations) on each of `threads` threads: the summed
/// GOPS (on one thread the probe runs on the calling thread).
fn probe_gops(probe: &Probe, threads: usize, iterations: u64) -> Result<f64, RuntimeError> {
    if threads > 1 {
        probe.gops_on_pool(iterations, threads)
    } else {
        Ok(probe.gops(iterations, probe.run(iterations).as_secs_f64()))
    }
}

/// The timing of one call already made, which took `call`: that time, with one run of `probe`
/// beside it (as long as the call, at most `MAX_PROBE_RUN`). The tuner's search times a
/// candidate this way when its verification call left no room in its budget for another.
pub fn one_call_against_peak(probe: Option<&Probe>, threads: usize, call: Duration) -> Result<Timing, RuntimeError> {
    let peak_gops = match probe {
        Some(probe) => Some(probe_gops(probe, threads, probe.calibrate(call.min(MAX_PROBE_RUN)))?),
        None => None,
    };
    Ok(Timing { runs: 1, median_s: call.as_secs_f64(), peak_gops })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_span_the_byte_range_and_depend_on_the_seed() {
        let bytes: std::collections::BTreeSet<u8> = pattern_values(4096, 3).map(|v| v as u8).collect();
        assert_eq!(bytes.len(), 256);
        let a = pattern(DType::I8, &[4, 8], 1);
        assert_eq!(a.shape(), [4, 8]);
        assert!(!a.bits_eq(&pattern(DType::I8, &[4, 8], 2)));
        // The array is the values wrapped into the type.
        let wrapped: Vec<i64> = pattern_values(32, 1).map(|v| v as i8 as i64).collect();
        assert_eq!(a.to_i64_vec(), wrapped);
        for dtype in [DType::U8, DType::I8, DType::I32] {
            assert!(pattern_tensor(dtype, &[3, 5], 7).to_array().bits_eq(&pattern(dtype, &[3, 5], 7)), "{dtype}");
        }
    }

    #[test]
    fn uniform_stays_in_its_range_and_reaches_both_ends() {
        let v = uniform(2000, 9, -3, 4);
        assert!(v.iter().all(|x| (-3..=4).contains(x)));
        assert!(v.contains(&-3) && v.contains(&4));
        assert_eq!(v, uniform(2000, 9, -3, 4));
        assert_ne!(v, uniform(2000, 10, -3, 4));
    }

    #[test]
    fn median_takes_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn timing_warms_up_then_counts_the_timed_calls() {
        let mut calls = 0;
        let t = time::<RuntimeError>(3, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, t.runs, t.peak_gops), (4, 3, None));
        let mut calls = 0;
        let t = time_against_peak::<RuntimeError>(None, 1, 0, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, t.runs), (2, 1));
    }
}
