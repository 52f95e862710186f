//! Analyses of the loop IR that passes query but that never rewrite it.

pub mod features;
pub mod interval;
pub mod linear;
