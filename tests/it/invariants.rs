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
/// `disasm`, `error`, `target`, `shared`) ← `kernels` (assemblers) ← `codegen` ← `runtime` ←
/// `build`, `bench` ← `layer` (the resnet-18 table's layers set up to run) ← `tune`, `export`; `record`
/// (tuning records) stands on `isa` alone, so that both
/// `tune` and `export` read records without `export` depending on `tune`. `src/lib.rs` (the root's re-exports), the binary (`src/main.rs`,
/// `src/cli/`) and the unit tests (`src/tests/`) sit above everything and are not checked.
const LAYERS: &[(&str, &[&str])] = &[
    ("shared", &[]),
    ("graph", &["shared"]),
    ("isa", &[]),
    ("abi", &[]),
    ("onnx", &["graph", "shared"]),
    ("npy", &["graph", "shared"]),
    (
        "engine",
        &[
            "isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench", "layer",
            "graph", "shared",
        ],
    ),
    ("disasm", &["isa"]),
    ("error", &["isa"]),
    ("target", &["isa", "error"]),
    ("record", &["isa"]),
    ("kernels", &["isa", "abi", "disasm", "error", "target"]),
    ("codegen", &["isa", "abi", "disasm", "error", "target", "kernels"]),
    ("runtime", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen"]),
    ("build", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime"]),
    ("bench", &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime"]),
    (
        "layer",
        &["isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench", "shared"],
    ),
    (
        "tune",
        &[
            "isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench", "layer",
            "record", "graph", "onnx", "engine", "shared",
        ],
    ),
    (
        "export",
        &[
            "isa", "abi", "disasm", "error", "target", "kernels", "codegen", "runtime", "build", "bench", "layer",
            "record", "graph", "onnx", "engine", "tune", "shared",
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

/// The languages whose comments `comment_lines` reads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lang {
    Rust,
    C,
    Python,
    Shell,
}

impl Lang {
    fn of(path: &Path) -> Option<Lang> {
        match path.extension()?.to_str()? {
            "rs" => Some(Lang::Rust),
            "c" => Some(Lang::C),
            "py" => Some(Lang::Python),
            "sh" => Some(Lang::Shell),
            _ => None,
        }
    }
}

/// The comments of `text`, one entry per line a comment covers: (line number, the comment's
/// text on that line). Rust and C: `//` and `/* */` (nested in Rust); Python and shell: `#`
/// (in shell at the start of a word). Strings (with escapes, Rust raw strings, Python triple
/// quotes), char literals and lifetimes are skipped, so a `//` or `#` inside them starts nothing.
fn comment_lines(text: &str, lang: Lang) -> Vec<(usize, String)> {
    let c: Vec<char> = text.chars().collect();
    let line: Vec<usize> =
        c.iter().scan(1, |n, &ch| Some(std::mem::replace(n, *n + usize::from(ch == '\n')))).collect();
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, ch)| c.get(i + k) == Some(&ch));
    let ident = |i: usize| i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    // The `#`s of a Rust raw string starting at `i` (`r"`, `r#"`, `br#"`, ...).
    let raw_string = |i: usize| {
        let hashes = c[i + 1..].iter().take_while(|&&ch| ch == '#').count();
        let prefixed = !ident(i) || (c[i - 1] == 'b' && !ident(i - 1));
        (lang == Lang::Rust && c[i] == 'r' && prefixed && c.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
    };
    let c_like = matches!(lang, Lang::Rust | Lang::C);
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut note = |i: usize| match out.last_mut() {
        _ if c[i] == '\n' => {}
        Some((l, s)) if *l == line[i] => s.push(c[i]),
        _ => out.push((line[i], c[i].to_string())),
    };
    let mut i = 0;
    while i < c.len() {
        let line_comment = match lang {
            Lang::Rust | Lang::C => at(i, "//"),
            Lang::Python => c[i] == '#',
            Lang::Shell => c[i] == '#' && (i == 0 || c[i - 1].is_whitespace()),
        };
        if line_comment {
            while i < c.len() && c[i] != '\n' {
                note(i);
                i += 1;
            }
        } else if c_like && at(i, "/*") {
            let mut depth = 0;
            while i < c.len() {
                let step = if at(i, "/*") && (depth == 0 || lang == Lang::Rust) {
                    depth += 1;
                    2
                } else if at(i, "*/") {
                    depth -= 1;
                    2
                } else {
                    1
                };
                (i..(i + step).min(c.len())).for_each(&mut note);
                i += step;
                if depth == 0 {
                    break;
                }
            }
        } else if let Some(hashes) = raw_string(i) {
            // No escapes: it ends at a quote followed by as many `#`.
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            i += hashes + 2;
            while i < c.len() && !at(i, &close) {
                i += 1;
            }
            i += close.len();
        } else if c_like && c[i] == '\'' {
            // A char literal (`'x'`, `'\n'`, `'\''`), else a lifetime or a label.
            i = if c.get(i + 1) == Some(&'\\') {
                c.get(i + 3..).and_then(|rest| rest.iter().position(|&ch| ch == '\'')).map_or(c.len(), |p| i + 4 + p)
            } else if c.get(i + 2) == Some(&'\'') {
                i + 3
            } else {
                i + 1
            };
        } else if c[i] == '"' || (matches!(lang, Lang::Python | Lang::Shell) && c[i] == '\'') {
            let quote = c[i].to_string();
            let close = if lang == Lang::Python && at(i, &quote.repeat(3)) { quote.repeat(3) } else { quote };
            let escapes = !(lang == Lang::Shell && close == "'");
            i += close.len();
            while i < c.len() && !at(i, &close) {
                i += if escapes && c[i] == '\\' { 2 } else { 1 };
            }
            i += close.len();
        } else {
            i += 1;
        }
    }
    out
}

/// What a comment must not mention (issue 21 §4): the name of a host's CPU, a date, or a
/// pointer to an old revision. Comments state the rule and its reason; where and when a figure
/// was measured belongs in BENCHMARKS.md and in commit messages. The first such mention in
/// `comment`, if any.
fn notebook_entry(comment: &str) -> Option<String> {
    let lower = comment.to_lowercase();
    let words = ["zen 3", "zen 4", "zen 5", "zen3", "zen4", "zen5", "xeon", "epyc", "git show"];
    let is_word = |w: &str| lower.match_indices(w).any(|(i, _)| !lower[..i].ends_with(char::is_alphanumeric));
    if let Some(w) = words.into_iter().find(|w| is_word(w)) {
        return Some(w.to_string());
    }
    // A date: `20dd-dd-dd`.
    let (b, shape) = (lower.as_bytes(), b"20dd-dd-dd");
    (0..b.len().saturating_sub(shape.len() - 1))
        .find(|&i| shape.iter().zip(&b[i..]).all(|(&s, &x)| if s == b'd' { x.is_ascii_digit() } else { s == x }))
        .map(|i| lower[i..i + shape.len()].to_string())
}

/// Every comment line of `text` (the file `name`, in `lang`) that mentions what
/// `notebook_entry` rules out, as `name:line: `found` in: comment` messages.
fn notebook_violations(name: &str, text: &str, lang: Lang) -> Vec<String> {
    comment_lines(text, lang)
        .into_iter()
        .filter_map(|(line, comment)| {
            notebook_entry(&comment).map(|found| format!("{name}:{line}: `{found}` in: {}", comment.trim()))
        })
        .collect()
}

/// Every Rust, C, Python and shell file under `dir`.
fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, out);
        } else if Lang::of(&path).is_some() {
            out.push(path);
        }
    }
}

#[test]
fn no_comment_names_a_host_a_date_or_an_old_revision() {
    let mut files = Vec::new();
    for dir in ["ir", "schedules", "src", "examples", "tests", "scripts", "python"] {
        source_files(&root().join(dir), &mut files);
    }
    let count = |ext: &str| files.iter().filter(|f| f.extension().is_some_and(|e| e == ext)).count();
    for (ext, at_least) in [("rs", 100), ("c", 2), ("py", 5), ("sh", 2)] {
        assert!(count(ext) >= at_least, "found only {} .{ext} files: the scan is broken", count(ext));
    }
    let (mut comments, mut violations) = (0, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lang = Lang::of(file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        comments += comment_lines(&text, lang).len();
        violations.extend(notebook_violations(&name, &text, lang));
    }
    assert!(comments > 3000, "found only {comments} comment lines: the scan is broken");
    assert!(
        violations.is_empty(),
        "comments state the rule and its reason; hosts, dates and old revisions belong in BENCHMARKS.md \
         and commit messages:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_notebook_check_reads_comments_and_only_comments() {
    let rust = concat!(
        "//! Module doc.\n",
        "fn f<'a>(s: &'a str) -> char {\n",
        "    let url = \"https://example.com/ Xeon\"; // measured on a Xeon\n",
        "    let raw = r#\"// EPYC \"quoted\"\"#;\n",
        "    /* a block over\n",
        "       two lines, 2026-11-25 */\n",
        "    /* nested /* Zen 4 */ still a comment */ let q = '\"';\n",
        "    '#' // git show abc1234:BENCHMARKS.md\n",
        "}\n",
        "/// A citizen 4 is no host, and 1920-11-25 no date of this project.\n",
    );
    let found = notebook_violations("a.rs", rust, Lang::Rust);
    let lines: Vec<&str> = found.iter().map(|v| v.split(": ").next().unwrap()).collect();
    assert_eq!(lines, ["a.rs:3", "a.rs:6", "a.rs:7", "a.rs:8"], "{found:#?}");
    assert_eq!(found[0], "a.rs:3: `xeon` in: // measured on a Xeon");
    assert_eq!(found[1], "a.rs:6: `2026-11-25` in: two lines, 2026-11-25 */");
    assert_eq!(found[2], "a.rs:7: `zen 4` in: /* nested /* Zen 4 */ still a comment */");
    assert_eq!(found[3], "a.rs:8: `git show` in: // git show abc1234:BENCHMARKS.md");

    let c = "/* Runtime.\n * Tuned on the EPYC. */\nconst char *s = \"// Zen 5\"; char q = '\\'';\n";
    assert_eq!(notebook_violations("r.c", c, Lang::C), ["r.c:2: `epyc` in: * Tuned on the EPYC. */"]);

    let python = concat!(
        "\"\"\"Doc: a # Zen 3 in a docstring is a string.\"\"\"\n",
        "x = '# Xeon' + \"#EPYC\"  # but this is a Zen 3\n",
    );
    assert_eq!(notebook_violations("p.py", python, Lang::Python), ["p.py:2: `zen 3` in: # but this is a Zen 3"]);

    let shell = "echo ${#args} \"# Xeon\" '# EPYC'\n# 2026-11-23: ran here\n";
    assert_eq!(notebook_violations("s.sh", shell, Lang::Shell), ["s.sh:2: `2026-11-23` in: # 2026-11-23: ran here"]);
}
