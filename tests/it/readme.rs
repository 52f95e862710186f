//! README.md shows what compiles: its "Writing an operator" block is `examples/write_operator.rs`
//! (which `cargo test` builds), character for character.

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

#[test]
fn the_readme_names_only_files_of_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // Every `path/with/a/slash.ext` in backticks that looks like a file of this tree exists.
    let mut checked = 0;
    for quoted in README.split('`').skip(1).step_by(2) {
        let is_path = quoted.contains('/')
            && !quoted.contains(' ')
            && quoted
                .rsplit('/')
                .next()
                .is_some_and(|file| file.ends_with(".rs") || file.ends_with(".md") || file.ends_with(".py"));
        if is_path {
            assert!(root.join(quoted).exists(), "README names {quoted}, which is not in the repository");
            checked += 1;
        }
    }
    assert!(checked > 5, "only {checked} paths found: the scan is broken");
}
