//! Architecture invariants from README.md, checked mechanically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use proc_macro2::Ident;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Block, Expr, Item, ItemMod, ItemUse, Token, UseTree, Visibility};

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
/// name (`crate::<module>`, a `super::` path that reaches the crate root, or a re-export of
/// `src/lib.rs` such as `crate::IsaLevel`). Arrows point down: the ground floor (`isa`, `abi`,
/// `disasm`, `error`, `target`) ← `kernels` (assemblers) ← `codegen` ← `runtime` ← `build`,
/// `bench` ← `layer` (the resnet-18 table's layers set up to run) ← `tune`, `export`; `record`
/// (tuning records) stands on `isa` alone, so that both
/// `tune` and `export` read records without `export` depending on `tune`. `src/lib.rs` (the root's re-exports), the binary (`src/main.rs`,
/// `src/cli/`) and the unit tests (`src/tests/`) sit above everything and are not checked.
const LAYERS: &[(&str, &[&str])] = &[
    ("isa", &[]),
    ("abi", &[]),
    ("disasm", &["isa"]),
    ("error", &["isa"]),
    ("target", &["isa", "error"]),
    ("record", &["isa"]),
    ("kernels", &["isa", "abi", "disasm", "error", "target"]),
    ("codegen", &["isa", "abi", "disasm", "error", "target", "kernels"]),
    ("runtime", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen"]),
    ("build", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime"]),
    ("bench", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime"]),
    ("layer", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench"]),
    (
        "tune",
        &[
            "isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench", "layer",
            "record",
        ],
    ),
    (
        "export",
        &[
            "isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench", "layer",
            "record",
        ],
    ),
];

/// Edges outside the layering that are being removed (none today).
const EXCEPTIONS: &[(&str, &str)] = &[];

/// Every leaf of a `use` tree: the path it imports (a glob's ends at its module) and the name it
/// binds (none for a glob).
fn use_leaves(tree: &UseTree, prefix: &mut Vec<Ident>, out: &mut Vec<(Vec<Ident>, Option<Ident>)>) {
    let with = |prefix: &[Ident], name: &Ident| [prefix, std::slice::from_ref(name)].concat();
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.clone());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => out.push((with(prefix, &n.ident), Some(n.ident.clone()))),
        UseTree::Rename(r) => out.push((with(prefix, &r.ident), Some(r.rename.clone()))),
        UseTree::Glob(_) => out.push((prefix.clone(), None)),
        UseTree::Group(g) => g.items.iter().for_each(|t| use_leaves(t, prefix, out)),
    }
}

/// Collects the names right below the crate root that paths reach: `crate::<name>`, or
/// `super::` climbing `depth` levels (the module's depth below the root, inline `mod` blocks
/// included) to `<name>`.
struct RootReferences {
    depth: usize,
    names: Vec<Ident>,
}

impl RootReferences {
    fn path(&mut self, segments: &[Ident]) {
        let supers = segments.iter().take_while(|s| *s == "super").count();
        let below_root = match segments.first() {
            Some(first) if first == "crate" => 1,
            _ if supers > 0 && supers >= self.depth => supers,
            _ => return,
        };
        // `pub(crate)` and `pub(super)` name the root itself, no module below it.
        self.names.extend(segments.get(below_root).cloned());
    }
}

impl<'ast> Visit<'ast> for RootReferences {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.path(&path.segments.iter().map(|s| s.ident.clone()).collect::<Vec<_>>());
        }
        visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&item.tree, &mut Vec::new(), &mut leaves);
        leaves.iter().for_each(|(path, _)| self.path(path));
    }

    fn visit_item_mod(&mut self, item: &'ast ItemMod) {
        self.depth += 1;
        visit::visit_item_mod(self, item);
        self.depth -= 1;
    }

    /// The macro's own path, and its body if it parses as expressions (`format!`, `vec!`,
    /// `assert_eq!`...) or statements; other bodies (`macro_rules!` rules) are skipped.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        if let Ok(exprs) = mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated) {
            exprs.iter().for_each(|e| self.visit_expr(e));
        } else if let Ok(stmts) = mac.parse_body_with(Block::parse_within) {
            stmts.iter().for_each(|s| self.visit_stmt(s));
        }
    }
}

/// The names right below the crate root that a file, `depth` levels below it, refers to.
fn root_references(file: &syn::File, depth: usize) -> Vec<Ident> {
    let mut refs = RootReferences { depth, names: Vec::new() };
    refs.visit_file(file);
    refs.names
}

/// The top-level modules `src/lib.rs` declares (but the unit tests), and its root re-exports:
/// name → the module it comes from (`None` for an external crate re-exported whole).
fn crate_root(lib: &str) -> (Vec<String>, HashMap<String, Option<String>>) {
    let (mut modules, mut reexports) = (Vec::new(), HashMap::new());
    for item in syn::parse_file(lib).expect("src/lib.rs parses").items {
        match item {
            Item::Mod(m) if m.content.is_none() && m.ident != "tests" => modules.push(m.ident.to_string()),
            Item::Use(u) if matches!(u.vis, Visibility::Public(_)) => {
                let mut leaves = Vec::new();
                use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                for (path, name) in leaves {
                    let source = (path.len() > 1).then(|| path[0].to_string());
                    reexports.extend(name.map(|n| (n.to_string(), source)));
                }
            }
            _ => {}
        }
    }
    (modules, reexports)
}

/// The top-level module of a file under `src/`, and how deep its module sits below the root.
fn module_of(relative: &Path) -> (String, usize) {
    let parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let top = parts[0].trim_end_matches(".rs").to_string();
    let depth = if parts.last().is_some_and(|p| p == "mod.rs") { parts.len() - 1 } else { parts.len() };
    (top, depth)
}

/// Parses a file of `src/`, panicking with its path if it does not parse.
fn parse(relative: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| panic!("src/{} does not parse: {e}", relative.display()))
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
        for ident in root_references(&parse(relative, text), depth) {
            let (name, at) = (ident.to_string(), format!("src/{}:{}", relative.display(), ident.span().start().line));
            let to = match reexports.get(&name) {
                _ if modules.contains(&name) => &name,
                Some(Some(module)) => module,
                Some(None) => continue,
                None => {
                    violations.push(format!("{at}: `{name}` at the crate root is neither a module nor a re-export"));
                    continue;
                }
            };
            if !allowed(&from, to) {
                let why = "is not allowed by LAYERS in tests/it/invariants.rs";
                violations.push(format!("{at}: {from} → {to} (`{name}`) {why}"));
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
    let references: usize = files.iter().map(|(r, t)| root_references(&parse(r, t), module_of(r).1).len()).sum();
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
            "mod inner {\n    use super::super::tune;\n    use super::sibling;\n}\nuse crate::ir::Func;\npub(crate) fn h() {}\n",
        ),
        file(
            "runtime/mod.rs",
            "use crate::{compile, codegen::jit};\nfn g<'a>(c: char) -> bool { c == '{' }\nuse crate::tune::x;\n",
        ),
        file(
            "runtime/jit.rs",
            "fn f() {\n    crate::tune::log!(\"{}\", 1);\n    let v = vec![super::super::tune::X];\n    format!(\"crate::tune\");\n}\n",
        ),
    ];
    let violations = layering_violations(lib, &files);
    let expected = [
        "src/isa/mod.rs:3: isa → codegen (`codegen`)",
        "src/codegen/func.rs:1: codegen → runtime (`T`)",
        "src/codegen/mod.rs:2: codegen → tune (`tune`)",
        "src/runtime/mod.rs:3: runtime → tune (`tune`)",
        "src/runtime/jit.rs:2: runtime → tune (`tune`)",
        "src/runtime/jit.rs:3: runtime → tune (`tune`)",
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
