//! Reference interpreters: the definition of what every program means.

pub mod scalar;
