//! Sizes the machine cannot hold: a command adds up the bytes of every buffer it will allocate
//! (inputs, outputs, packed copies, the reference's output) with checked arithmetic, and
//! compares the sum with the memory available before allocating any of it.

use std::fmt::Write;

/// Why a command's buffers do not fit.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{command}: the size of {buffer} overflows 64 bits")]
    Overflow { command: String, buffer: &'static str },
    #[error("{command} needs {needed} ({parts}) but {available} of memory are available (MemAvailable)")]
    TooLarge { command: String, needed: String, parts: String, available: String },
}

/// A buffer: its name (as the message shows it), shape and element size in bytes.
pub type Buffer<'a> = (&'static str, &'a [i64], u64);

/// The bytes of `buffers`, checked against the memory available (Linux: MemAvailable of
/// `/proc/meminfo`; elsewhere, or if it cannot be read, only the overflow check). `command` is
/// the command line as the message names it, e.g. `gemm --m 8 --n 8 --k 8`. Shapes are
/// positive (the flags' parsers saw to it).
pub fn check(command: &str, buffers: &[Buffer<'_>]) -> Result<u64, MemoryError> {
    let overflow = |buffer| MemoryError::Overflow { command: command.to_string(), buffer };
    let mut sizes = Vec::with_capacity(buffers.len());
    for &(name, shape, element) in buffers {
        let bytes = shape
            .iter()
            .try_fold(element, |acc, &d| u64::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
            .ok_or(overflow(name))?;
        sizes.push((name, bytes));
    }
    let total = sizes.iter().try_fold(0u64, |acc, &(_, b)| acc.checked_add(b)).ok_or(overflow("all buffers"))?;
    // The buffers must also be addressable here (a 32-bit `usize`).
    usize::try_from(total).map_err(|_| overflow("all buffers"))?;
    if let Some(available) = available_bytes()
        && total > available
    {
        let mut parts = String::new();
        for (i, (name, bytes)) in sizes.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(parts, "{sep}{name} {}", human(*bytes));
        }
        return Err(MemoryError::TooLarge {
            command: command.to_string(),
            needed: human(total),
            parts,
            available: human(available),
        });
    }
    Ok(total)
}

/// MemAvailable of `/proc/meminfo` in bytes.
#[cfg(target_os = "linux")]
fn available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(not(target_os = "linux"))]
fn available_bytes() -> Option<u64> {
    None
}

/// `bytes` in the largest binary unit that keeps a number of at least 1.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} bytes") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_buffers_and_rejects_what_overflows_or_does_not_fit() {
        assert_eq!(check("t", &[("A", &[3, 5], 1), ("C", &[3, 7], 4)]).unwrap(), 15 + 84);
        let err = check("t", &[("A", &[i64::MAX, 3], 1)]).unwrap_err();
        assert_eq!(err.to_string(), "t: the size of A overflows 64 bits");
        if available_bytes().is_some() {
            let err = check("t", &[("A", &[1 << 40], 1), ("B", &[1 << 40], 1)]).unwrap_err();
            assert!(err.to_string().starts_with("t needs 2.0 TiB (A 1.0 TiB, B 1.0 TiB) but "), "{err}");
        }
        assert_eq!(human(1023), "1023 bytes");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }
}
