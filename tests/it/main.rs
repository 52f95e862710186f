//! The integration test binary (one binary, many modules, for link time).

mod cli;
mod differential;
mod errors;
mod golden;
mod indexing;
mod invariants;
mod quant;
mod tensorize;
mod vnni;
