//! The repository's pre-tuned database (`tuning/pretuned.jsonl`, written by `tensorlift tune
//! resnet18 --db` and `tensorlift db best`): the best record per layer and target of the CPUs
//! this project was measured on, compiled into the binary and applied by `tensorlift resnet18`
//! unless another database has a record for the layer.

use std::path::Path;

use super::file::{Database, DbError};
use super::format::without_traces;

/// The text of `tuning/pretuned.jsonl`.
pub const PRETUNED: &str = include_str!("../../tuning/pretuned.jsonl");

/// `PRETUNED` parsed; a malformed line is an error (the file is part of the repository).
pub fn pretuned() -> Result<Database, DbError> {
    Database::parse_strict(PRETUNED, Path::new("tuning/pretuned.jsonl"))
}

/// `PRETUNED` with each record's trace cut out of its line by the build script (`build.rs`).
const PRETUNED_TO_APPLY: &str = include_str!(concat!(env!("OUT_DIR"), "/pretuned_to_apply.jsonl"));

/// `pretuned` without the records' traces, for applying them: what `tensorlift run` parses
/// beside the model's import, without the costliest part (the traces, most of the file's
/// bytes, are not in the text it parses; `without_traces` would skip any left).
pub fn pretuned_to_apply() -> Result<Database, DbError> {
    without_traces(|| Database::parse_strict(PRETUNED_TO_APPLY, Path::new("tuning/pretuned.jsonl")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    /// Every line parses and serializes back to itself, with the knobs that records written
    /// before them lack spelled out as the defaults they mean (`packing` bytes, `accumulation`
    /// whole): the format is unchanged for this file and for users' databases.
    #[test]
    fn every_pretuned_line_round_trips() {
        let db = pretuned().expect("the pre-tuned database parses");
        let lines: Vec<&str> = PRETUNED.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(db.records.len(), lines.len());
        let mut complete = 0;
        for (i, (line, record)) in lines.iter().zip(&db.records).enumerate() {
            let mut expected: serde_json::Value = serde_json::from_str(line).unwrap();
            let knobs = expected["schedule"]["knobs"].as_object_mut().expect("a knobs object");
            let is_complete = knobs.contains_key("packing") && knobs.contains_key("accumulation");
            knobs.entry("packing").or_insert("bytes".into());
            knobs.entry("accumulation").or_insert("whole".into());
            let written = serde_json::to_string(record).unwrap();
            assert_eq!(written, serde_json::to_string(&expected).unwrap(), "line {}", i + 1);
            if is_complete {
                assert_eq!(&written, line, "line {}", i + 1);
                complete += 1;
            }
            assert_eq!(&serde_json::from_str::<Record>(&written).unwrap(), record, "line {}", i + 1);
        }
        // Both kinds of line are in the file, so both are checked.
        assert!(0 < complete && complete < lines.len(), "{complete} of {} lines", lines.len());
    }

    /// Read to apply, every record is the full record with no trace, and the flag is off again
    /// afterwards (a later read on the thread parses traces).
    #[test]
    fn records_read_to_apply_are_the_records_without_traces() {
        let full = pretuned().expect("the pre-tuned database parses");
        let lean = pretuned_to_apply().expect("the pre-tuned database parses without traces");
        assert_eq!(full.records.len(), lean.records.len());
        let traced = full.records.iter().filter(|r| r.schedule.trace.is_some()).count();
        assert!(traced > 0, "no record of the file has a trace");
        for (i, (f, l)) in full.records.iter().zip(&lean.records).enumerate() {
            assert_eq!(l.schedule.trace, None, "record {i}");
            let mut f = f.clone();
            f.schedule.trace = None;
            assert_eq!(&f, l, "record {i}");
        }
        let again = pretuned().expect("the pre-tuned database parses");
        assert_eq!(again.records.iter().filter(|r| r.schedule.trace.is_some()).count(), traced);
    }
}
