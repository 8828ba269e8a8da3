//! Filesystem side of the server: mapping request paths to files under a document root.
//!
//! Every filesystem access the server makes on behalf of a request goes through
//! [`resolve::resolve`]. It takes a path already produced by [`resolve::normalize`]
//! (percent-decoded once, dot segments removed, NUL/control bytes/backslash refused), applies
//! the dotfile and symlink policies, finds index files, and returns an open file descriptor
//! plus its metadata, never a path string for later use. Opening relative to the document
//! root's directory descriptor (with `openat2(2)` `RESOLVE_BENEATH` where the kernel has it)
//! is what keeps a request inside the root; later modules (cache, listing) work from the
//! descriptor they were handed, so they cannot be talked out of the root either.

pub mod cache;
pub mod listing;
pub mod lru;
pub mod resolve;
