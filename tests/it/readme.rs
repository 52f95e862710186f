//! README.md shows what compiles: its "Writing an operator" block is `examples/write_operator.rs`
//! (which `cargo test` builds), character for character. README.md, BENCHMARKS.md and the pages
//! of `docs/` name only files of the repository.

use std::path::Path;

const README: &str = include_str!("../../README.md");
const EXAMPLE: &str = include_str!("../../examples/write_operator.rs");

/// The body of the first fenced block of `lang` after the line `heading`.
fn block_after<'a>(text: &'a str, heading: &str, lang: &str) -> Option<&'a str> {
    let section = &text[text.find(&format!("\n{heading}\n"))?..];
    let fence = format!("\n```{lang}\n");
    let start = section.find(&fence)? + fence.len();
    let len = section[start..].find("\n```\n")? + 1;
    Some(&section[start..start + len])
}

#[test]
fn the_writing_an_operator_block_is_the_example_file() {
    let block =
        block_after(README, "## Writing an operator", "rust").expect("a rust block under \"## Writing an operator\"");
    assert_eq!(block, EXAMPLE, "README's block and examples/write_operator.rs differ");
}

/// The files `text` names: every `path/with/a/slash.ext` in backticks whose extension is that of
/// a file of this tree, and every relative link target `](path)`; each relative to the
/// repository's root, or for a link to `dir`, the directory of the page.
fn named_files(text: &str, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for quoted in text.split('`').skip(1).step_by(2) {
        let file = quoted.rsplit('/').next().unwrap_or("");
        let ext = [".rs", ".md", ".py", ".sh", ".c", ".jsonl", ".toml"];
        if quoted.contains('/') && !quoted.contains(' ') && ext.iter().any(|e| file.ends_with(e)) {
            out.push(quoted.trim_start_matches("./").to_string());
        }
    }
    for link in text.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or("");
        let target = target.split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") {
            out.push(if dir.is_empty() { target.to_string() } else { format!("{dir}/{target}") });
        }
    }
    out
}

#[test]
fn the_readme_and_the_docs_name_only_files_of_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![("README.md".to_string(), String::new()), ("BENCHMARKS.md".to_string(), String::new())];
    for entry in std::fs::read_dir(root.join("docs")).expect("a docs directory") {
        let name = entry.expect("a docs entry").file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pages.push((format!("docs/{name}"), "docs".to_string()));
        }
    }
    let mut checked = 0;
    for (page, dir) in &pages {
        let text = std::fs::read_to_string(root.join(page)).expect("read the page");
        for file in named_files(&text, dir) {
            assert!(root.join(&file).exists(), "{page} names {file}, which is not in the repository");
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} paths found: the scan is broken");
    // The scan finds both spellings, and only them.
    let sample = "`src/lib.rs`, [t](testing.md), `not a/path.rs`, [w](https://x.org/a.md), `a.rs`";
    assert_eq!(named_files(sample, "docs"), ["src/lib.rs", "docs/testing.md"]);
}
