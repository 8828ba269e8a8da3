//! The request semantics, protocol-neutral: a validated request in, an `Exchange` out (its
//! status, its head, one body source, what the transfer counts against). No socket, no
//! connection, no framing: HTTP/1.1 (`conn::h1`) and HTTP/2 (`conn::h2`) call `answer` the
//! same way, and so will any later protocol (HTTP/3: a QUIC endpoint beside the TCP
//! listeners, one call per request stream).
//!
//! * `answer`: the one entry. HTTP-01 answers first (`acme.rs`, feature `acme`); the
//!   transport's early decisions (`Early`: the redirect to
//!   HTTPS, the 421 rule, both in `https.rs`), the health endpoint, the status page,
//!   GET/HEAD of a file (`pipeline.rs`), OPTIONS, or 405.
//! * `pipeline.rs`: target → site → referrer check → routing (`routing.rs`) → cache lookup →
//!   access policy → representation → preconditions and ranges → headers.
//! * `exchange.rs`: the contract with the protocols: the head, the body source, the parts of
//!   a multipart body, the access record, the rate limits.

#[cfg(feature = "acme")]
mod acme;
mod exchange;
#[cfg(feature = "tls")]
mod https;
mod pipeline;
mod routing;

pub(crate) use exchange::{Body, Exchange, Staged, CLIENT_CLOSED};
#[cfg(feature = "tls")]
pub(crate) use https::early;

use crate::ctx::Ctx;
use crate::http::request::{Method, Request};

/// The methods a resource here allows (`Allow` of OPTIONS and 405).
const ALLOW: &[u8] = b"GET, HEAD, OPTIONS";

/// What [`answer`] returns instead of a status when the request is paused (its credentials
/// are being verified off the loop: `Exchange::waiting` says which job).
pub(crate) const PAUSED: u16 = 0;

/// What the transport decides before the pipeline runs ([`early`], from facts the
/// connection gives: plain or TLS, the SNI name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Early {
    /// Nothing: the pipeline answers.
    Pipeline,
    /// The 421 rule: the Host picks another site than the TLS connection's SNI name.
    #[cfg(feature = "tls")]
    Misdirected,
    /// `[tls] redirect_http` on a plain connection.
    #[cfg(feature = "tls")]
    RedirectHttps,
}

/// The request pipeline, for every protocol: the transport's early answers (421, the
/// redirect to HTTPS), the health endpoint, the status page, GET/HEAD of a file, OPTIONS, or
/// 405. Returns the status queued in `ex` (its head block and body source), or [`PAUSED`]
/// with `ex.waiting` set.
pub(crate) fn answer(ex: &mut Exchange, cx: &mut Ctx, req: &Request<'_>, early: Early) -> u16 {
    #[cfg(not(feature = "tls"))]
    let Early::Pipeline = early;
    #[cfg(feature = "acme")]
    if let Some(status) = ex.acme_challenge(cx, req) {
        return status;
    }
    let is_status_page = cx.cfg.status_path.as_deref() == Some(req.path);
    let is_health = cx.cfg.health_path.as_deref() == Some(req.path);
    match req.method {
        #[cfg(feature = "tls")]
        _ if early == Early::RedirectHttps => https::redirect_https(ex, cx, req),
        #[cfg(feature = "tls")]
        _ if early == Early::Misdirected => ex.simple_response(cx, 421, req, None),
        Method::Get | Method::Head if is_health => ex.health(cx, req),
        Method::Get | Method::Head if is_status_page => ex.status_page(cx, req),
        Method::Get | Method::Head => ex.serve_file(cx, req),
        Method::Options => ex.options(cx, req),
        _ => ex.simple_response(cx, 405, req, None),
    }
}
