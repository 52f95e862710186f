//! Skipped checks say so. A test that cannot run a check on this host (an ISA level the CPU
//! lacks, an interpreter without numpy) reports it here rather than passing silently: the line
//! `skipped: <test>[ (<what>)]: <reason>` goes to stderr, past libtest's capture and once per
//! process, and is appended to the file `TENSORLIFT_SKIP_LOG` names, if set (`.ci/run` sets it
//! and prints the file's lines after the tests). One file serves the unit tests (`src/tests/`)
//! and the integration tests (`tests/it/main.rs` includes it by path); each names `IsaLevel` in
//! its parent module.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;

use super::IsaLevel;

/// Reports that the running test skipped `what` (`""`: all of it) because of `reason`. The
/// test's name is its thread's, which libtest sets to the test's path (`vnni::...`, `tests::kernels::...`).
pub fn skip(what: &str, reason: &str) {
    static REPORTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed thread)");
    let line = match what {
        "" => format!("skipped: {test}: {reason}\n"),
        _ => format!("skipped: {test} ({what}): {reason}\n"),
    };
    if !REPORTED.lock().unwrap_or_else(|e| e.into_inner()).insert(line.clone()) {
        return;
    }
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("TENSORLIFT_SKIP_LOG") {
        let mut log =
            std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("open TENSORLIFT_SKIP_LOG");
        log.write_all(line.as_bytes()).expect("append to TENSORLIFT_SKIP_LOG");
    }
}

/// Whether this CPU has `level`; if not, reports `what` skipped ("<level>: this CPU lacks it").
pub fn has_level(level: IsaLevel, what: &str) -> bool {
    let has = level.is_supported();
    if !has {
        skip(what, &format!("{level}: this CPU lacks it"));
    }
    has
}

/// The levels of `levels` this CPU has; the others are reported skipped by the running test.
pub fn levels_here(levels: impl IntoIterator<Item = IsaLevel>) -> Vec<IsaLevel> {
    levels_here_for(levels, "")
}

/// `levels_here`, reporting `what` of the test as skipped at each level this CPU lacks.
pub fn levels_here_for(levels: impl IntoIterator<Item = IsaLevel>, what: &str) -> Vec<IsaLevel> {
    levels.into_iter().filter(|&level| has_level(level, what)).collect()
}
