//! The fuzz targets' invariants: `fuzz/checks.rs`, `fuzz/checks_hpack.rs`,
//! `fuzz/checks_h2.rs` and `fuzz/checks_h3.rs`, which `tests/fuzz.rs` includes as well.

#[path = "../checks.rs"]
mod checks;
#[path = "../checks_h2.rs"]
mod checks_h2;
#[path = "../checks_h3.rs"]
mod checks_h3;
#[path = "../checks_hpack.rs"]
mod checks_hpack;

pub use checks::*;
pub use checks_h2::*;
pub use checks_h3::*;
pub use checks_hpack::*;
