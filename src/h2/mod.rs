//! HTTP/2 (RFC 9113), behind the cargo feature `http2` (on by default).
//!
//! [`hpack`] is the header compression (RFC 7541): a decoder for the client's header blocks
//! with a bounded dynamic table and header-list-size accounting, and an encoder for the
//! response heads.

pub mod hpack;
