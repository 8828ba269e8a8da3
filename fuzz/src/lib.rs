//! The fuzz targets' invariants: `fuzz/checks.rs` and `fuzz/checks_hpack.rs`, which
//! `tests/fuzz.rs` includes as well.

#[path = "../checks.rs"]
mod checks;
#[path = "../checks_hpack.rs"]
mod checks_hpack;

pub use checks::*;
pub use checks_hpack::*;
