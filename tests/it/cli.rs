//! The `tensorlift` binary: verified results on success, a message and a failure status on
//! bad input.

use std::process::Command;

fn tensorlift(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorlift")).args(args).output().expect("run tensorlift");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn matmul_reports_a_verified_result_for_both_schedules() {
    for schedule in ["naive", "tiled"] {
        let (ok, stdout, stderr) =
            tensorlift(&["matmul", "--m", "33", "--n", "20", "--k", "17", "--schedule", schedule, "--repeat", "2", "--print-ir"]);
        assert!(ok, "{schedule}: {stderr}");
        assert!(stdout.contains("func matmul(A: u8[33, 17], B: i8[17, 20], C: i32[33, 20])"), "{stdout}");
        assert!(stdout.contains("matmul 33x20x17: verified true"), "{stdout}");
    }
}

#[test]
fn matmul_rejects_non_positive_sizes() {
    let (ok, _, stderr) = tensorlift(&["matmul", "--m", "0"]);
    assert!(!ok);
    assert!(stderr.contains("sizes must be positive, found m=0"), "{stderr}");
}
