//! The fuzz targets' invariants: `fuzz/checks.rs`, which `tests/fuzz.rs` includes as well.

#[path = "../checks.rs"]
mod checks;

pub use checks::*;
