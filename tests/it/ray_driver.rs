//! The Ray driver (`python/tensorlift_ray.py`) for real: a local Ray cluster with two worker
//! processes tunes one operator end to end, then resumes from its database after a simulated
//! crash (`python/test_ray.py` holds the checks).

use std::process::Command;

#[test]
fn a_local_ray_cluster_with_two_workers_tunes_an_operator() {
    let Some(python) = crate::python::python_with(&["ray"]) else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/test_ray.py");
    let out = Command::new(python)
        .args([script, "--tensorlift", env!("CARGO_BIN_EXE_tensorlift")])
        .env("RAY_USAGE_STATS_ENABLED", "0")
        .output()
        .expect("run python");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "test_ray.py failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ray driver: ok"), "{stdout}");
}
