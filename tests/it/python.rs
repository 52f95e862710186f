//! The Python interpreter the tests that call Python use: `TENSORLIFT_PYTHON`, else `python3`.

use std::process::Command;

/// The interpreter if it imports every module of `modules`; else `None`, reported skipped, or a
/// failure when `TENSORLIFT_REQUIRE_PYTHON=1` (as `.ci/run` sets it).
pub fn python_with(modules: &[&str]) -> Option<String> {
    let python = std::env::var("TENSORLIFT_PYTHON").unwrap_or_else(|_| "python3".into());
    let import = format!("import {}", modules.join(", "));
    if Command::new(&python).args(["-c", &import]).output().is_ok_and(|o| o.status.success()) {
        return Some(python);
    }
    let missing = format!("{python} cannot `{import}`");
    assert!(
        std::env::var("TENSORLIFT_REQUIRE_PYTHON").as_deref() != Ok("1"),
        "{missing}, and TENSORLIFT_REQUIRE_PYTHON=1"
    );
    crate::skip::skip("", &format!("{missing} (set TENSORLIFT_PYTHON to an interpreter that can)"));
    None
}
