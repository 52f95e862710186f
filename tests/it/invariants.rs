//! Architecture invariants from README.md, checked mechanically.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The packages `package` depends on, transitively, for normal (non-dev) builds.
fn normal_dependencies(package: &str) -> String {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none", "-p", package])
        .current_dir(root())
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn ir_and_schedules_never_depend_on_cranelift() {
    for package in ["tensorlift-ir", "tensorlift-schedules"] {
        let deps = normal_dependencies(package);
        assert!(deps.contains(package), "cargo tree output does not list {package}:\n{deps}");
        for forbidden in ["cranelift", "iced-x86", "rayon"] {
            assert!(!deps.contains(forbidden), "{package} depends on {forbidden}:\n{deps}");
        }
    }
    let schedules = normal_dependencies("tensorlift-schedules");
    assert!(schedules.contains("tensorlift-ir"), "schedules builds on ir");
    assert!(!normal_dependencies("tensorlift-ir").contains("tensorlift-schedules"), "ir never depends on schedules");
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_opens_with_a_module_doc_and_ir_has_no_unsafe_or_io() {
    let mut files = Vec::new();
    for dir in ["ir/src", "schedules/src", "src", "tests", "examples"] {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} files", files.len());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.starts_with("//!"), "{} does not start with a `//!` module doc", file.display());
        // Spelled in two pieces so this file does not match itself.
        let (should_panic, ignore) = (concat!("#[should", "_panic"), concat!("#[ign", "ore"));
        assert!(!text.contains(should_panic), "{} uses should_panic; assert on the Err instead", file.display());
        assert!(!text.contains(ignore), "{} ignores a test", file.display());
        let in_ir = file.starts_with(root().join("ir/src")) || file.starts_with(root().join("schedules/src"));
        if in_ir {
            for forbidden in ["unsafe ", "std::fs", "std::time", "std::env", "println!", "eprintln!"] {
                assert!(!text.contains(forbidden), "{} uses `{forbidden}`", file.display());
            }
        }
    }
}

#[test]
fn every_pass_file_exports_one_function_named_after_it() {
    for dir in ["ir/src/passes", "ir/src/lower"] {
        // Passes are the public modules; private ones are helpers shared by passes.
        let list = std::fs::read_to_string(root().join(dir).join("mod.rs")).unwrap();
        let passes: Vec<&str> =
            list.lines().filter_map(|l| l.strip_prefix("pub mod ").and_then(|l| l.strip_suffix(';'))).collect();
        assert!(passes.len() >= 3, "{dir}/mod.rs lists passes as `pub mod`");
        for stem in passes {
            let file = root().join(dir).join(format!("{stem}.rs"));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.contains(&format!("pub fn {stem}(")), "{} does not export `pub fn {stem}`", file.display());
        }
    }
}
