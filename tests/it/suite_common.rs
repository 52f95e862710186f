//! The suite's common-timing count (`scripts/common_timing.py`): its pieces on made-up
//! databases, then two real searches of a small max pool re-measured together, every trial
//! counted in its place from its point's median (`scripts/test_common_timing.py` holds the
//! checks).

use std::process::Command;

#[test]
fn the_suite_recounts_both_searches_on_common_timings() {
    let Some(python) = crate::python::python_with(&["json", "unittest"]) else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test_common_timing.py");
    let out = Command::new(python)
        .args([script, "--tensorlift", env!("CARGO_BIN_EXE_tensorlift")])
        .output()
        .expect("run python");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "test_common_timing.py failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("common timing: ok"), "{stdout}");
    assert!(stderr.contains("OK") && !stderr.contains("Ran 0 tests"), "{stderr}");
}
