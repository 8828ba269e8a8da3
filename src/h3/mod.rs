//! HTTP/3 (RFC 9114) and QPACK (RFC 9204), behind the cargo feature `http3` (off by
//! default), sans-IO like `h2`: this module never sees a socket, a QUIC connection or a
//! clock. It works on the bytes of QUIC streams, which the QUIC endpoint (`quic`, on
//! `quinn-proto`) reads and writes.
//!
//! * [`varint`]: QUIC variable-length integers (RFC 9000 §16).
//! * [`frame`]: frame headers read incrementally, the payloads a server reads (SETTINGS,
//!   GOAWAY, MAX_PUSH_ID, CANCEL_PUSH, PRIORITY_UPDATE), the writers (HEADERS, DATA's
//!   header, SETTINGS, GOAWAY), and the error codes ([`Code`]) with the stream/connection
//!   error classes ([`StreamError`], [`ConnError`]).
//! * [`qpack`]: the static table, a decoder for field sections with no dynamic table (we
//!   advertise SETTINGS_QPACK_MAX_TABLE_CAPACITY = 0 and QPACK_BLOCKED_STREAMS = 0) and a
//!   static-table encoder for response heads; the peer's encoder and decoder stream
//!   instructions are checked against that.
//! * [`stream`]: the connection's state above its QUIC streams: [`RequestStream`], the
//!   reader of one request stream (bytes in, [`Event`]s out: the request's fields once,
//!   body byte counts, the end), and [`Session`], which reads the peer's unidirectional
//!   streams (control, QPACK encoder and decoder; push and unknown types) and writes ours.
//!
//! A request's fields go into `http::fields::Fields`, the list HTTP/2 fills, so
//! `Fields::request` builds the same `http::request::Request` with the same 4xx decisions,
//! and the request goes through `serve::answer` like any other.
//!
//! # API (what the QUIC glue codes against)
//!
//! ```text
//! let mut s = Session::new(Config { max_field_section_size, grease });
//! s.control_stream_preamble(&mut out)      // our control stream's first bytes: type 0x00,
//!                                          // SETTINGS; open it at once and never close it
//! // Every peer-initiated unidirectional stream, each chunk in order (fin: the chunk ends it):
//! loop { let (n, ev) = s.on_uni_stream_data(id, &buf, fin)?;  buf = &buf[n..];
//!        match ev { None => break,                        // all of buf taken
//!                   Some(UniEvent::Settings) => ...,      // s.peer_settings()
//!                   Some(UniEvent::Priority { stream, priority }) => ...,
//!                   Some(UniEvent::GoAway(id)) => ...,    // the client's, a push ID
//!                   Some(UniEvent::Ignore) => stop_sending(id, Code::StreamCreationError) } }
//! s.on_uni_stream_reset(id)?                // the peer reset one: critical ones close us
//! // Every client-initiated bidirectional stream (a request):
//! let mut r = s.request_stream(id);         // or RequestStream::new(id, limit)
//! loop { let (n, ev) = r.recv(&buf, fin)?; buf = &buf[n..];   // Err: Error::Stream (reset
//!        match ev { None => break,                             // this stream) or ::Conn
//!                   Some(Event::Headers) => answer(r.fields()),   // validated, once
//!                   Some(Event::HeadersTooLarge) => answer 431,
//!                   Some(Event::Data(n)) => {},                    // body bytes, dropped
//!                   Some(Event::End) => {} } }                     // FIN, all well
//! s.encode_response_head(status, fields, &mut out)  // a complete HEADERS frame, within
//!     -> Result<(), HeadTooLarge>                   // the peer's MAX_FIELD_SECTION_SIZE
//! data_frame_header(len, &mut out)          // then `len` body bytes
//! s.goaway(id, &mut out)                    // graceful shutdown: requests >= id refused
//! s.accepts(id)                             // false for a request stream at/after our GOAWAY
//! s.shed()                                  // idle: drop the value codings kept for reuse
//! ```
//!
//! Every error a peer can cause is a value ([`ConnError`]: close the connection with its
//! code; [`StreamError`]: reset the stream and stop reading it with its code); no input
//! panics. Memory per connection is bounded: a request stream buffers one HEADERS frame
//! (at most the advertised MAX_FIELD_SECTION_SIZE), the control stream one frame payload
//! of at most 4 KiB, and bodies are counted, never kept.

pub mod frame;
pub mod qpack;
pub mod stream;
pub mod varint;

pub use frame::{data_frame_header, data_frame_header_len, goaway, Code, ConnError, Error, Settings, StreamError};
pub use qpack::{encode_response_head, HeadTooLarge};
pub use stream::{Config, Event, RequestStream, Session, UniEvent};
