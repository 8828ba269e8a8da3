//! The one place a request meets the site's routing (`crate::route`): called by
//! `serve::serve_path` after the site is picked and before the file cache lookup, only
//! when routing is configured. The health endpoint is answered here too. It asks the router, answering its redirects here, and lets
//! the pipeline serve whatever path the router settled on, so preconditions, ranges,
//! precompressed siblings, access checks and `[[headers]]` all apply to the file served.

use std::rc::Rc;

use super::exchange::{Body, Exchange};
use crate::ctx::Ctx;
use crate::fs::cache::{FileEntry, Lookup};
use crate::fs::resolve::{ResolveError, ResolveOptions};
use crate::http::range::ByteRange;
use crate::http::request::{Method, Request};
use crate::http::response::Head;
use crate::route::{Action, Probe};

/// What `serve_path` does after routing.
pub(crate) enum Routed {
    /// Serve `path` (maybe changed); a status other than 200 sends the file found as the
    /// body of that status.
    Serve(u16),
    /// A response (a redirect) is queued with this status.
    Sent(u16),
    /// Answer with this error status and its error page.
    Error(u16),
}

impl Exchange {
    /// Routes `path` of the site whose root is `root` (None: the main root).
    pub(crate) fn route(&mut self, cx: &mut Ctx, req: &Request<'_>, root: Option<usize>, path: &mut String) -> Routed {
        let (dir, space) = match root {
            Some(i) => (&cx.vroots[i].1, i + 1),
            None => (&cx.root, 0),
        };
        // Routing never runs under thttpd's `-v` host directories: no site prefix.
        let opts = ResolveOptions {
            symlinks: cx.cfg.symlinks,
            dotfiles: cx.cfg.dotfiles,
            index: &cx.cfg.index,
            site_depth: 0,
        };
        let (cache, mime, now, secs) = (&mut cx.cache, &cx.mime, cx.clock.now, cx.clock.unix_secs());
        let mut probe = |p: &str| match cache.get(dir, space, p, &opts, mime, now, secs) {
            Ok(Lookup::File(_)) => Probe::File,
            Ok(Lookup::Redirect) => Probe::DirNoSlash,
            Ok(Lookup::Directory(_)) => Probe::Listing,
            Ok(Lookup::Status(404)) | Err(ResolveError::NotFound) => Probe::Missing,
            Ok(Lookup::Status(_)) | Err(_) => Probe::Other,
        };
        match cx.routes.route(space, path, req.query, req.accept.as_deref(), &mut probe) {
            Action::Serve { status } => Routed::Serve(status),
            Action::Redirect { status, location } => {
                Routed::Sent(self.simple_response(cx, status, req, Some(("Location", &location))))
            }
            Action::Status(status) => Routed::Error(status),
        }
    }

    /// The health endpoint (`[health] path`): `200 OK` from memory, for any client, with
    /// no filesystem access, so a load balancer sees the process answering.
    pub(crate) fn health(&mut self, cx: &mut Ctx, req: &Request<'_>) -> u16 {
        let mut h =
            Head::new(&mut self.head, &mut self.fields, 200, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        h.field("Content-Type", b"text/plain; charset=utf-8");
        h.number("Content-Length", 3);
        h.field("Cache-Control", b"no-store");
        h.finish(self.keep, req.minor);
        if req.method != Method::Head {
            let mut buf = cx.take_body();
            buf.extend_from_slice(b"OK\n");
            self.body = Body::Mem { buf, pos: 0 };
        }
        200
    }

    /// A file sent as the body of an error status (the fallback's 404, a `_redirects` 404
    /// rewrite), as error pages are: no ranges, no validators, preconditions ignored (RFC
    /// 9110 §13.2.1), `Cache-Control: no-store`.
    pub(crate) fn routed_page(&mut self, cx: &mut Ctx, req: &Request<'_>, page: Rc<FileEntry>, status: u16) -> u16 {
        let mut h =
            Head::new(&mut self.head, &mut self.fields, status, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        h.field("Content-Type", page.content_type.as_bytes());
        h.number("Content-Length", page.size);
        h.field("Cache-Control", b"no-store");
        h.finish(self.keep, req.minor);
        if req.method != Method::Head && page.size > 0 {
            let end = page.size - 1;
            self.body = super::pipeline::body_for(page, ByteRange { start: 0, end });
        }
        status
    }
}
