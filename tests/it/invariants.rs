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

/// The layering of the root crate's top-level modules: each module, and the modules it may
/// name (`crate::<module>`, or a `super::` path that reaches the crate root). Arrows point down:
/// the ground floor (`isa`, `abi`, `disasm`, `error`, `target`) ← `kernels` (assemblers) ←
/// `codegen` ← `runtime` ← `build`, `bench` ← `tune`, `export`. `src/lib.rs` (the root's
/// re-exports), the binary (`src/main.rs`, `src/cli/`) and the unit tests (`src/tests/`) sit
/// above everything and are not checked.
const LAYERS: &[(&str, &[&str])] = &[
    ("isa", &[]),
    ("abi", &[]),
    ("disasm", &["isa"]),
    ("error", &["isa"]),
    ("target", &["isa", "error"]),
    ("kernels", &["isa", "abi", "disasm", "error", "target"]),
    ("codegen", &["isa", "abi", "disasm", "error", "target", "kernels"]),
    ("runtime", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen"]),
    ("build", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime"]),
    ("bench", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime"]),
    ("tune", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench"]),
    ("export", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench"]),
];

/// Edges outside the layering that are being removed.
const EXCEPTIONS: &[(&str, &str)] = &[
    ("export", "tune"), // removed by the knobs branch
];

/// A token of Rust source, comments, strings and character literals dropped.
#[derive(Clone, PartialEq, Debug)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Other,
}

/// The tokens of `text` that matter to paths, each with its line (1-based).
fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    // Skips a quoted literal from its opening quote at `i` (escapes honoured); returns the index
    // after the closing quote, counting lines.
    let quoted = |mut i: usize, quote: char, line: &mut usize| {
        i += 1;
        while i < c.len() && c[i] != quote {
            if c[i] == '\\' {
                i += 1;
            }
            if at(i) == '\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            line += usize::from(ch == '\n');
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else if i >= c.len() {
                    break;
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = quoted(i, '"', &mut line);
        } else if ch == '\'' {
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                i = quoted(i, '\'', &mut line);
            } else {
                // A lifetime or label: skip its name.
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = quoted(i, '"', &mut line);
            } else if word == "b" && at(i) == '\'' {
                i = quoted(i, '\'', &mut line);
            } else if raw && at(i) == '#' && at(i + 1) != '"' && at(i + 1) != '#' {
                // `r#ident`, a raw identifier.
                let start = i + 1;
                i = start;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
                out.push((Tok::Ident(c[start..i].iter().collect()), line));
            } else if raw && (at(i) == '"' || at(i) == '#') {
                // A raw string, `r#"..."#`: it ends at a quote followed by as many `#`.
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1;
                while i < c.len() && !(c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#')) {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
                i += 1 + hashes;
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if ch.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else {
            let tok = match ch {
                ':' if at(i + 1) == ':' => {
                    i += 1;
                    Tok::PathSep
                }
                '{' => Tok::Open,
                '}' => Tok::Close,
                ',' => Tok::Comma,
                ';' => Tok::Semi,
                _ => Tok::Other,
            };
            out.push((tok, line));
            i += 1;
        }
    }
    out
}

/// The names a path continues with at `k`: one identifier, or the first identifier of each
/// item of a `{...}` group (`self` left out).
fn names_at(toks: &[(Tok, usize)], k: usize) -> Vec<(String, usize)> {
    match toks.get(k) {
        Some((Tok::Ident(name), line)) => vec![(name.clone(), *line)],
        Some((Tok::Open, _)) => {
            let (mut names, mut depth, mut item_start) = (Vec::new(), 0, true);
            for (tok, line) in &toks[k..] {
                match tok {
                    Tok::Open => depth += 1,
                    Tok::Close => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Comma if depth == 1 => item_start = true,
                    Tok::Ident(name) if depth == 1 && item_start => {
                        if name != "self" {
                            names.push((name.clone(), *line));
                        }
                        item_start = false;
                    }
                    _ if depth == 1 => item_start = false,
                    _ => {}
                }
            }
            names
        }
        _ => Vec::new(),
    }
}

/// The crate-root names a file refers to, with their lines: what follows `crate::` and what
/// follows a chain of `super::` that climbs to the root from the file's module, `depth` levels
/// below the root (inline `mod name { ... }` blocks add a level).
fn root_references(text: &str, depth: usize) -> Vec<(String, usize)> {
    let toks = tokens(text);
    let ident = |k: usize, s: &str| matches!(toks.get(k), Some((Tok::Ident(w), _)) if w == s);
    let sep = |k: usize| matches!(toks.get(k), Some((Tok::PathSep, _)));
    let (mut out, mut braces, mut inline_mods, mut mod_pending) = (Vec::new(), 0usize, Vec::new(), false);
    for k in 0..toks.len() {
        let path_start = k == 0 || !sep(k - 1);
        match &toks[k].0 {
            Tok::Ident(w) if w == "mod" && matches!(toks.get(k + 2), Some((Tok::Open, _))) => mod_pending = true,
            Tok::Open => {
                braces += 1;
                if std::mem::take(&mut mod_pending) {
                    inline_mods.push(braces);
                }
            }
            Tok::Close => {
                if inline_mods.last() == Some(&braces) {
                    inline_mods.pop();
                }
                braces = braces.saturating_sub(1);
            }
            Tok::Ident(w) if w == "crate" && path_start && sep(k + 1) => out.extend(names_at(&toks, k + 2)),
            Tok::Ident(w) if w == "super" && path_start => {
                let mut j = k;
                while ident(j, "super") && sep(j + 1) {
                    j += 2;
                }
                if (j - k) / 2 >= depth + inline_mods.len() {
                    out.extend(names_at(&toks, j));
                }
            }
            _ => {}
        }
    }
    out
}

/// The top-level modules `src/lib.rs` declares (but the unit tests), and its root re-exports:
/// name → the module it comes from (`None` for an external crate re-exported whole).
fn crate_root(lib: &str) -> (Vec<String>, std::collections::HashMap<String, Option<String>>) {
    let toks = tokens(lib);
    let mut modules = Vec::new();
    let mut reexports = std::collections::HashMap::new();
    let mut depth = 0;
    let ident = |k: usize| match toks.get(k) {
        Some((Tok::Ident(w), _)) => Some(w.as_str()),
        _ => None,
    };
    for k in 0..toks.len() {
        match &toks[k].0 {
            Tok::Open => depth += 1,
            Tok::Close => depth -= 1,
            Tok::Ident(w) if w == "mod" && depth == 0 && matches!(toks.get(k + 2), Some((Tok::Semi, _))) => {
                modules.extend(ident(k + 1).filter(|&m| m != "tests").map(String::from));
            }
            Tok::Ident(w) if w == "use" && depth == 0 && ident(k.wrapping_sub(1)) == Some("pub") => {
                let Some(source) = ident(k + 1) else { continue };
                let end = (k..toks.len()).find(|&j| toks[j].0 == Tok::Semi).unwrap_or(toks.len());
                if !sep(&toks, k + 2) {
                    reexports.insert(source.to_string(), None);
                    continue;
                }
                let mut leaves: Vec<String> = Vec::new();
                let mut rename = false;
                for j in k + 2..end {
                    let Some(name) = ident(j) else { continue };
                    if sep(&toks, j + 1) {
                        continue;
                    }
                    if name == "as" {
                        rename = true;
                    } else if std::mem::take(&mut rename) {
                        *leaves.last_mut().unwrap() = name.to_string();
                    } else {
                        leaves.push(name.to_string());
                    }
                }
                for leaf in leaves {
                    reexports.insert(leaf, Some(source.to_string()));
                }
            }
            _ => {}
        }
    }
    (modules, reexports)
}

fn sep(toks: &[(Tok, usize)], k: usize) -> bool {
    matches!(toks.get(k), Some((Tok::PathSep, _)))
}

/// The top-level module of a file under `src/`, and how deep its module sits below the root.
fn module_of(relative: &Path) -> (String, usize) {
    let parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let top = parts[0].trim_end_matches(".rs").to_string();
    let depth = if parts.last().is_some_and(|p| p == "mod.rs") { parts.len() - 1 } else { parts.len() };
    (top, depth)
}

/// Every import in `files` (path relative to `src/`, text) that the layering does not allow, as
/// `file:line: from → to` messages.
fn layering_violations(lib: &str, files: &[(PathBuf, String)]) -> Vec<String> {
    let (modules, reexports) = crate_root(lib);
    let allowed = |from: &str, to: &str| {
        from == to
            || LAYERS.iter().any(|(m, uses)| *m == from && uses.contains(&to))
            || EXCEPTIONS.iter().any(|&(m, u)| m == from && u == to)
    };
    let mut violations = Vec::new();
    for (relative, text) in files {
        let (from, depth) = module_of(relative);
        for (name, line) in root_references(text, depth) {
            let to = if modules.contains(&name) {
                name.clone()
            } else {
                match reexports.get(&name) {
                    Some(Some(module)) => module.clone(),
                    Some(None) => continue,
                    None => {
                        violations.push(format!(
                            "src/{}:{line}: `{name}` at the crate root is neither a module nor a re-export of lib.rs",
                            relative.display()
                        ));
                        continue;
                    }
                }
            };
            if !allowed(&from, &to) {
                violations.push(format!(
                    "src/{}:{line}: {from} → {to} (`{name}`) is not allowed by LAYERS in tests/it/invariants.rs",
                    relative.display()
                ));
            }
        }
    }
    violations
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let src = root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let (modules, _) = crate_root(&lib);
    let mut listed: Vec<&str> = LAYERS.iter().map(|(m, _)| *m).collect();
    listed.sort_unstable();
    let mut declared: Vec<&str> = modules.iter().map(String::as_str).collect();
    declared.sort_unstable();
    assert_eq!(listed, declared, "LAYERS must place every top-level module of src/lib.rs, and only those");

    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let skipped = |r: &Path| {
        r.starts_with("tests") || r.starts_with("cli") || r == Path::new("main.rs") || r == Path::new("lib.rs")
    };
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| p.strip_prefix(&src).unwrap().to_path_buf())
        .filter(|r| !skipped(r))
        .map(|r| {
            let text = std::fs::read_to_string(src.join(&r)).unwrap();
            (r, text)
        })
        .collect();
    assert!(files.len() > 40, "found only {} files under src/", files.len());
    let references: usize = files.iter().map(|(r, t)| root_references(t, module_of(r).1).len()).sum();
    assert!(references > 50, "found only {references} references to the crate root: the scan is broken");
    let violations = layering_violations(&lib, &files);
    assert!(violations.is_empty(), "imports against the layering:\n{}", violations.join("\n"));
}

#[test]
fn the_layering_check_catches_upward_imports() {
    let lib = "pub mod isa;\npub mod codegen;\npub mod runtime;\npub mod tune;\npub use runtime::{Tensor as T, compile};\npub use ir;\n";
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_string());
    let files = [
        file("isa/mod.rs", "//! doc\nuse crate::{\n    codegen::x,\n    isa::y,\n};\n"),
        file("codegen/func.rs", "fn f() { let s = \"crate::tune\"; crate::T::new(); }\n// crate::tune\n"),
        file(
            "codegen/mod.rs",
            "mod inner {\n    use super::super::tune;\n    use super::sibling;\n}\nuse crate::ir::Func;\n",
        ),
        file(
            "runtime/mod.rs",
            "use crate::{compile, codegen::jit};\nfn g<'a>(c: char) -> bool { c == '{' }\nuse crate::tune::x;\n",
        ),
    ];
    let violations = layering_violations(lib, &files);
    let expected = [
        "src/isa/mod.rs:3: isa → codegen (`codegen`)",
        "src/codegen/func.rs:1: codegen → runtime (`T`)",
        "src/codegen/mod.rs:2: codegen → tune (`tune`)",
        "src/runtime/mod.rs:3: runtime → tune (`tune`)",
    ];
    assert_eq!(violations.len(), expected.len(), "{violations:#?}");
    for (v, e) in violations.iter().zip(expected) {
        assert!(v.starts_with(e), "{v} should start with {e}");
    }
}

#[test]
fn the_layering_is_acyclic() {
    let edges: Vec<(&str, &str)> = LAYERS
        .iter()
        .flat_map(|&(m, uses)| uses.iter().map(move |&u| (m, u)))
        .chain(EXCEPTIONS.iter().copied())
        .collect();
    for &(from, to) in &edges {
        assert!(LAYERS.iter().any(|(m, _)| *m == to), "{from} → {to}: {to} has no row in LAYERS");
    }
    // Depth-first search; `path` is the chain being explored, so meeting one of its modules
    // again is a cycle.
    fn visit<'a>(m: &'a str, edges: &[(&'a str, &'a str)], path: &mut Vec<&'a str>, done: &mut Vec<&'a str>) {
        if let Some(start) = path.iter().position(|&p| p == m) {
            panic!("the layering has a cycle: {} → {m}", path[start..].join(" → "));
        }
        if done.contains(&m) {
            return;
        }
        path.push(m);
        for &(_, to) in edges.iter().filter(|(from, _)| *from == m) {
            visit(to, edges, path, done);
        }
        path.pop();
        done.push(m);
    }
    let mut done = Vec::new();
    for (m, _) in LAYERS {
        visit(m, &edges, &mut Vec::new(), &mut done);
    }
}
