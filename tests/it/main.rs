//! The integration test binary (one binary, many modules, for link time).

mod cli;
mod differential;
mod errors;
mod golden;
mod invariants;
mod quant;
mod readme;
mod tensorize;
mod vnni;
