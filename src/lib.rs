//! ferrohttpd: a static-file server speaking HTTP/1.1 and HTTP/2 (in clear and over TLS with
//! rustls, feature `tls` and `http2`), with on-demand compression (feature `compression`),
//! on one `mio` event loop per process. ARCHITECTURE.md has the whole picture.
//!
//! Three layers. [`server`] runs the loop: it accepts connections and drives each
//! [`conn::Conn`] when its socket is ready, with [`ctx::Ctx`] (everything a request may use)
//! beside it. A connection is a transport (plain, TLS, a PROXY header first) and a protocol:
//! HTTP/1.1 reads into a bounded buffer and [`http::request`] parses the head with
//! `httparse` and validates it (Host, framing, target form, limits, version) or rejects it
//! with a 4xx/5xx and a close; HTTP/2 ([`h2`]) decodes frames and HPACK into the same
//! validated request. Every request then goes through one protocol-neutral pipeline,
//! [`serve`]: [`fs::resolve`] percent-decodes and normalizes the path and opens the file under
//! the document root, enforcing the dotfile and symlink policies, index files and directory
//! redirects (the only code that touches the filesystem on behalf of a client); [`route`]
//! applies the site's routing when any is configured; the file cache, the access policy,
//! the choice of representation, preconditions and ranges decide the answer, queued as a
//! head and a body *source*. The protocol writes it: small bodies with the head in one
//! `sendmsg`, larger files with `sendfile` (HTTP/1.1 in clear), or copied into records and
//! frames. The access record is completed in [`log`] when the last byte is out.
//! Configuration comes from [`config`]: a TOML file and thttpd-style flags.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod access;
#[cfg(feature = "acme")]
pub mod acme;
pub mod background;
#[cfg(feature = "compression")]
pub mod compress;
pub mod config;
pub mod conn;
pub mod ctx;
pub mod fs;
pub mod glob;
#[cfg(feature = "http2")]
pub mod h2;
#[cfg(feature = "http3")]
pub mod h3;
pub mod http;
pub mod log;
#[cfg(feature = "compression")]
pub mod ondemand;
pub mod proxy;
pub mod route;
pub mod serve;
pub mod server;
pub mod status;
pub mod sys;
pub mod thttpd;
#[cfg(feature = "tls")]
pub mod tls;
pub mod upgrade;
pub mod workers;
