//! `Clif`: the Cranelift IR of every function a translation generated, as generated (before
//! Cranelift's own passes), printed only when asked for: printing costs about as much as a
//! small function's code generation, and only tests and debugging read the text.

use std::sync::OnceLock;

use cranelift_codegen::ir::Function;

/// The generated functions, each under its name, and their text once printed.
#[derive(Clone, Debug, Default)]
pub struct Clif {
    functions: Vec<(String, Function)>,
    text: OnceLock<String>,
}

impl Clif {
    /// Keeps a copy of `func` as generated, under `name`.
    pub(crate) fn push(&mut self, name: &str, func: &Function) {
        self.functions.push((name.to_string(), func.clone()));
        self.text = OnceLock::new();
    }

    /// Every function in the order generated: `; NAME` then its CLIF text.
    pub fn text(&self) -> &str {
        self.text
            .get_or_init(|| self.functions.iter().map(|(name, f)| format!("; {name}\n{}\n", f.display())).collect())
    }
}
