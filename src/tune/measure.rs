//! What measuring one point gives (`Measurement`), and the timing every bench shares
//! (`time_verified`: median of repeats after a warm-up, interleaved with the peak probe of the
//! kernel's method, as `tensorlift resnet18` does). A table layer's or a model task's point is
//! measured by `task_bench::TaskBench`, an operator's by `op_bench`.

use std::time::Duration;

use ir::interp::{Array, Scalar};
use ir::trace::Trace;

use crate::bench::{one_call_against_peak, time_against_peak_after};
use crate::error::RuntimeError;
use crate::kernels::peak::ProbeKind;
use crate::record::Status;
use crate::runtime::peak::Probe;

/// What measuring a point gave.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub status: Status,
    pub median_ns: Option<f64>,
    pub gops: Option<f64>,
    /// The probe's GOPS measured beside it, and which probe.
    pub peak_gops: Option<f64>,
    pub probe: Option<ProbeKind>,
    pub compile_ms: Option<f64>,
    pub verified: bool,
    pub error: Option<String>,
    /// The schedule's trace, when it was built.
    pub trace: Option<Trace>,
    /// The threads the compiled point ran on, when it ran.
    pub threads: Option<usize>,
}

impl Measurement {
    /// A measurement that ended with `status` before any time was taken.
    pub fn failed(status: Status, error: String, compile_ms: Option<f64>) -> Measurement {
        Measurement {
            status,
            median_ns: None,
            gops: None,
            peak_gops: None,
            probe: None,
            compile_ms,
            verified: false,
            error: Some(error),
            trace: None,
            threads: None,
        }
    }
}

/// How `output` differs from `expected`, if it does: their types and shapes, or the first
/// element that is not bit-identical.
pub(super) fn difference(output: &Array, expected: &Array) -> Option<String> {
    if (output.dtype(), output.shape()) != (expected.dtype(), expected.shape()) {
        return Some(format!(
            "expected {}{:?}, found {}{:?}",
            expected.dtype(),
            expected.shape(),
            output.dtype(),
            output.shape()
        ));
    }
    let (index, found, wanted) = output.first_difference(expected)?;
    let value = |s: Scalar| match s {
        Scalar::Int(v) => v.to_string(),
        Scalar::Float(v) => v.to_string(),
    };
    Some(format!("element {index}: expected {}, found {}", value(wanted), value(found)))
}

/// Timed calls after a verification call that took `warm_up`: `repeat`, or with a `budget`
/// (the search), as many as fit in what the verification call left of it, at most `repeat`
/// and at least one where the verification call took less than the budget: that call ran
/// cold (its output pages untouched, the code and the thread pool not yet run), so a point
/// near the top is timed warm as its neighbours are, at the cost of one more call. 0: the
/// verification call is the only timed call (its time is the measurement): a candidate as
/// slow as the budget or slower costs one call, not two. The validation (no budget) always
/// makes `repeat` calls.
pub fn timed_calls(repeat: usize, budget: Option<Duration>, warm_up: Duration) -> usize {
    match budget {
        Some(b) if !warm_up.is_zero() => {
            if warm_up >= b {
                return 0;
            }
            let fit = (b.saturating_sub(warm_up).as_secs_f64() / warm_up.as_secs_f64()) as usize;
            repeat.min(fit.max(1))
        }
        _ => repeat,
    }
}

/// Times a compiled point whose output was verified by a call of `warm_up`: `timed_calls`
/// calls, each interleaved with `probe` on `threads` (`bench::time_against_peak_after`), or
/// none, the verification call's time with one probe run beside it
/// (`bench::one_call_against_peak`). `ops`: operations of one call.
pub(super) fn time_verified<E: From<RuntimeError> + std::fmt::Display>(
    (probe, threads): (Option<Probe>, usize),
    ops: u64,
    (repeat, budget): (usize, Option<Duration>),
    warm_up: Duration,
    (compile_ms, trace): (Option<f64>, Option<Trace>),
    call: impl FnMut() -> Result<(), E>,
) -> Measurement {
    let timing = match timed_calls(repeat, budget, warm_up) {
        0 => one_call_against_peak(probe.as_ref(), threads, warm_up).map_err(E::from),
        repeat => time_against_peak_after(probe.as_ref(), threads, repeat, warm_up, call),
    };
    match timing {
        Ok(timing) => Measurement {
            status: Status::Ok,
            median_ns: Some(timing.median_s * 1e9),
            gops: Some(ops as f64 / timing.median_s / 1e9),
            peak_gops: timing.peak_gops,
            probe: probe.map(|p| p.kind),
            compile_ms,
            verified: true,
            error: None,
            trace,
            threads: Some(threads),
        },
        Err(e) => Measurement { trace, ..Measurement::failed(Status::RunError, e.to_string(), compile_ms) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verification_call_counts_against_the_search_budget() {
        let ms = Duration::from_millis;
        // Room for two more calls of 2 ms in 6 ms after the first; capped by `repeat`.
        assert_eq!(timed_calls(10, Some(ms(6)), ms(2)), 2);
        assert_eq!(timed_calls(1, Some(ms(6)), ms(2)), 1);
        assert_eq!(timed_calls(10, Some(ms(60)), ms(1)), 10);
        // A call slower than half the budget, within it: one warm call after the cold one.
        assert_eq!(timed_calls(10, Some(ms(6)), ms(4)), 1);
        assert_eq!(timed_calls(10, Some(ms(6)), Duration::from_micros(5999)), 1);
        // A call as slow as the budget or slower: the verification call is the timing.
        assert_eq!(timed_calls(10, Some(ms(6)), ms(6)), 0);
        assert_eq!(timed_calls(10, Some(ms(6)), ms(9)), 0);
        // No budget (the validation), or a call too quick to time: `repeat`.
        assert_eq!(timed_calls(10, None, ms(9)), 10);
        assert_eq!(timed_calls(7, Some(ms(6)), Duration::ZERO), 7);
    }
}
