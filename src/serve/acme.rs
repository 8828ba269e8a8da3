//! HTTP-01 answers (RFC 8555 §8.3): `/.well-known/acme-challenge/TOKEN` is answered before
//! every rule of the pipeline (redirects to HTTPS, `[[auth]]`, routing, hidden paths), on
//! the plain listeners and the TLS ones alike (a CA follows a redirect to HTTPS).

use super::exchange::{Body, Exchange};
use crate::ctx::Ctx;
use crate::http::request::{Method, Request};
use crate::http::response::Head;

impl Exchange {
    /// The answer to an HTTP-01 validation request, or None for any other request.
    pub(super) fn acme_challenge(&mut self, cx: &mut Ctx, req: &Request<'_>) -> Option<u16> {
        let answer = crate::acme::http01(&cx.cfg.acme, req.path)?;
        if !matches!(req.method, Method::Get | Method::Head) {
            return Some(self.simple_response(cx, 405, req, Some(("Allow", b"GET, HEAD"))));
        }
        let Some(key_auth) = answer else { return Some(self.simple_response(cx, 404, req, None)) };
        let mut h =
            Head::new(&mut self.head, &mut self.fields, 200, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        h.field("Content-Type", b"application/octet-stream");
        h.number("Content-Length", key_auth.len() as u64);
        h.field("Cache-Control", b"no-store");
        h.finish(self.keep, req.minor);
        if req.method != Method::Head {
            self.body = Body::Mem { buf: key_auth, pos: 0 };
        }
        Some(200)
    }
}
