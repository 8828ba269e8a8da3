//! ferrohttpd: a static-file HTTP/1.1 server on one `mio` event loop.
//!
//! A request flows through the modules in order. [`server`] accepts connections and drives
//! each [`conn::Conn`] state machine when its socket is ready. The connection reads into a
//! bounded buffer; [`http::request`] parses the head with `httparse` and validates it
//! (Host, framing, target form, limits, version) or rejects it with a 4xx/5xx and a close.
//! [`fs::resolve`] percent-decodes and normalizes the path and opens the file under the
//! document root, enforcing the dotfile and symlink policies, index files and directory
//! redirects; it is the only code that touches the filesystem on behalf of a client.
//! Before the file is looked up, [`route`] applies the site's routing (redirects, rewrites,
//! clean URLs, the SPA fallback) when any is configured.
//! [`http::response`] renders the head into a reused buffer; small bodies go out with the
//! head in one `sendmsg`, larger files with `sendfile`. The access record is completed in
//! [`log`] when the last byte is out, and the connection goes back to idle (keep-alive) or
//! closes. Configuration comes from [`config`]: a TOML file and thttpd-style flags.

pub mod access;
pub mod background;
#[cfg(feature = "compression")]
pub mod compress;
pub mod config;
pub mod conn;
pub mod fs;
pub mod glob;
#[cfg(feature = "http2")]
pub mod h2;
pub mod http;
pub mod log;
#[cfg(feature = "compression")]
pub mod ondemand;
pub mod proxy;
pub mod route;
pub mod server;
pub mod status;
pub mod sys;
pub mod thttpd;
#[cfg(feature = "tls")]
pub mod tls;
pub mod upgrade;
pub mod workers;
