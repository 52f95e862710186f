//! tensorlift: Cranelift code generation, runtime and CLI for the tensorlift compiler.
