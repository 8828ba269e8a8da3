//! HTTP/2 (RFC 9113), behind the cargo feature `http2` (on by default).
//!
//! * [`frame`]: the frame header and every frame type of RFC 9113 §6, parsed from and
//!   written to byte buffers, with the stream/connection error classification of §5.4.
//! * [`hpack`] is the header compression (RFC 7541): a decoder for the client's header
//!   blocks with a bounded dynamic table and header-list-size accounting, and an encoder for
//!   the response heads.
//! * RFC 9218's priority parameters, from the `priority` field and PRIORITY_UPDATE frames,
//!   are parsed by `http::priority` (HTTP/3 carries the same).
//! * A request's decoded fields are validated and turned into the same
//!   `http::request::Request` HTTP/1.1 produces by `http::fields`, whose rules HTTP/3
//!   shares.
//! * [`session`]: the connection state machine, sans-IO: bytes in, requests and stream
//!   events out, frames into a write buffer; streams, flow control, limits, defences.
//!
//! The connection glue (transport, the serving pipeline per stream, DATA from the body
//! sources) is `conn/h2.rs`.

pub mod frame;
pub mod hpack;
pub mod session;
