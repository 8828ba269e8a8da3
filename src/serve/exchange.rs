//! One request's answer: the contract between the request pipeline and the protocols.
//!
//! The pipeline (`pipeline.rs`, `routing.rs`: target → site → policy → cache → representation →
//! preconditions/ranges → headers) answers into an [`Exchange`]: a response head (its status
//! and fields, written as HTTP/1.1 bytes and, in an exchange of HTTP/2 or HTTP/3, with the
//! spans of the fields recorded as they are written: `http::response::FieldSpans`), a body
//! *source* (nothing, bytes in memory, a range of a cached mapping, a range of a cached
//! file's descriptor, or the parts of a multipart body), and what the transfer counts
//! against (the access log record, throttles, `limit_rate`). Body bytes are described,
//! never copied: the protocol's writer pulls them at the last moment.
//!
//! HTTP/1.1 has one exchange per connection (`Conn::ex`), reused from request to request,
//! and writes the head's bytes as they are. A protocol with several requests in flight keeps
//! one per stream and encodes the recorded status and fields in its own framing, never
//! reading the text. Nothing here knows about the transport.

#[cfg(any(feature = "tls", feature = "http2"))]
use std::io;
use std::net::IpAddr;
use std::os::fd::{BorrowedFd, RawFd};
#[cfg(feature = "tls")]
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::access::throttle::{Admission, RateLimiter};
use crate::ctx::Ctx;
#[cfg(any(feature = "tls", feature = "http2"))]
use crate::fs::cache;
use crate::fs::cache::FileEntry;
use crate::http::range::ByteRange;
use crate::http::request::{Method, Request};
use crate::http::response::FieldSpans;
use crate::log::{Pending, Record, RequestLine, TlsInfo};
#[cfg(any(feature = "tls", feature = "http2"))]
use crate::sys;

/// nginx's status for a request whose client went away before the response started.
pub(crate) const CLIENT_CLOSED: u16 = 499;

/// One part of a `multipart/byteranges` body still to be sent: its framing, then its range
/// of the representation (none for the closing delimiter).
pub(crate) struct Part {
    pub(crate) framing: Vec<u8>,
    pub(crate) range: Option<ByteRange>,
}

/// Where the body bytes of a response come from.
pub(crate) enum Body {
    None,
    /// Bytes in memory (error pages), sent with the head in one `sendmsg`.
    Mem {
        buf: Vec<u8>,
        pos: usize,
    },
    /// A range of a cached, memory-mapped file or of a cached listing (shared, never copied),
    /// sent with the head in one `sendmsg`.
    Mapped {
        entry: Rc<FileEntry>,
        pos: usize,
        end: usize,
    },
    /// A range of a cached file's descriptor, sent with `sendfile` (or, when sendfile is
    /// off, read into `stage` and written); `pos..end` is what is left to read.
    File {
        entry: Rc<FileEntry>,
        pos: u64,
        end: u64,
        stage: Option<Staged>,
    },
}

/// How the protocols that copy body bytes into their own records or frames (TLS, HTTP/2;
/// QUIC next) pull them: what is left, the next bytes, the cursor moved. HTTP/1.1 in clear
/// hands the kernel pointers and descriptors instead (`conn::h1`).
#[cfg(any(feature = "tls", feature = "http2"))]
impl Body {
    /// Body bytes not yet handed on (for a file being sent by `sendfile` or a staged copy,
    /// not yet read from the file: HTTP/1.1 keeps its own cursors there).
    pub(crate) fn remaining(&self) -> u64 {
        match self {
            Body::None => 0,
            Body::Mem { buf, pos } => (buf.len() - pos) as u64,
            Body::Mapped { pos, end, .. } => (end - pos) as u64,
            Body::File { pos, end, .. } => end - pos,
        }
    }

    /// Moves the cursor past `n` bytes handed on by [`Body::peek`] or [`Body::append_to`].
    pub(crate) fn consume(&mut self, n: usize) {
        match self {
            Body::Mem { pos, .. } | Body::Mapped { pos, .. } => *pos += n,
            Body::File { pos, .. } => *pos += n as u64,
            Body::None => {}
        }
    }

    /// The next body bytes (at most `room`), without moving the cursor, for a protocol that
    /// must copy them (TLS, and any protocol that encrypts): in place for bytes in memory
    /// (an error page, a cached listing); copied into `scratch` for a mapping
    /// (`sys::copy_mapped`: a page gone with a truncation is `EFAULT` there, not SIGBUS),
    /// read with `pread` for a descriptor. `Ok(None)`: the file shrank under the server.
    #[cfg(feature = "tls")]
    pub(crate) fn peek<'a>(&'a self, room: usize, scratch: &'a mut [u8]) -> io::Result<Option<&'a [u8]>> {
        let room = room.min(scratch.len());
        let got = match self {
            Body::None => return Ok(Some(&[])),
            Body::Mem { buf, pos } => return Ok(Some(&buf[*pos..(*pos + room).min(buf.len())])),
            Body::Mapped { entry, pos, end } => {
                let n = (end - pos).min(room);
                if n == 0 {
                    return Ok(Some(&[]));
                }
                match (&entry.body, entry.body.bytes().and_then(|b| b.get(*pos..*pos + n))) {
                    // A rendering (a cached listing) is ordinary memory.
                    (cache::Body::Memory(_), Some(src)) => return Ok(Some(src)),
                    (_, Some(src)) => sys::copy_mapped(src, &mut scratch[..n]),
                    // The range is inside the entry by construction; if it were not, the
                    // response cannot be completed: as for a truncation.
                    (_, None) => return Ok(None),
                }
            }
            Body::File { entry, pos, end, .. } => {
                let cache::Body::Fd(file) = &entry.body else { return Ok(None) };
                let n = usize::try_from(end - pos).unwrap_or(usize::MAX).min(room);
                if n == 0 {
                    return Ok(Some(&[]));
                }
                file.read_at(&mut scratch[..n], *pos)
            }
        };
        match got {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(&scratch[..n])),
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Appends the next `n` body bytes to `out` (at most [`Body::remaining`]), without
    /// moving the cursor: the copy a framing protocol makes into its own output (HTTP/2's
    /// DATA payloads over TLS, HTTP/3's), with the same truncation rules as [`Body::peek`].
    /// `Err` with `EFAULT`: the file shrank under the server; `out` may then hold part of it.
    #[cfg(any(feature = "http2", feature = "http3"))]
    pub(crate) fn append_to(&self, out: &mut Vec<u8>, n: usize) -> io::Result<()> {
        let efault = || io::Error::from_raw_os_error(libc::EFAULT);
        match self {
            Body::None => Err(efault()),
            Body::Mem { buf, pos } => {
                out.extend_from_slice(buf.get(*pos..*pos + n).ok_or_else(efault)?);
                Ok(())
            }
            Body::Mapped { entry, pos, end } => {
                let src = entry.body.bytes().and_then(|bytes| bytes.get(*pos..*pos + n)).filter(|_| *pos + n <= *end);
                let Some(src) = src else { return Err(efault()) };
                if let cache::Body::Memory(_) = entry.body {
                    // A rendering (a cached listing) is ordinary memory.
                    out.extend_from_slice(src);
                    return Ok(());
                }
                // A page gone with a truncation is EFAULT here, not SIGBUS; the room is not
                // zeroed first (a memset as long as the copy).
                sys::copy_mapped_append(src, out)
            }
            Body::File { entry, pos, .. } => {
                let cache::Body::Fd(file) = &entry.body else { return Err(efault()) };
                let mut done = 0;
                while done < n {
                    match sys::pread_append(file, out, n - done, *pos + done as u64)? {
                        // The file ended before its cached size.
                        0 => return Err(efault()),
                        r => done += r,
                    }
                }
                Ok(())
            }
        }
    }
}

/// File bytes read into memory when sendfile is off.
pub(crate) struct Staged {
    pub(crate) buf: Vec<u8>,
    pub(crate) pos: usize,
}

/// A request's response and its transfer state. See the module docs.
pub(crate) struct Exchange {
    /// The connection's socket, for its local address (thttpd's `-v` without a Host). Valid
    /// for the life of the connection that owns this exchange.
    fd: RawFd,
    /// The local address when the transport knows it better than `fd` does: HTTP/3, whose
    /// UDP socket may be bound to a wildcard address (the destination of the client's
    /// datagrams, from QUIC).
    pub(crate) local: Option<IpAddr>,
    /// The connection's peer, and the client of the current request: `peer`, or the
    /// address a trusted proxy gave.
    pub(crate) peer: IpAddr,
    pub(crate) client: IpAddr,
    /// The response head keeps the connection open (HTTP/1.1's `Connection` field).
    pub(crate) keep: bool,
    /// Response head, `head[head_pos..]` unsent. While a multipart body is sent, the
    /// framing of the current part. Taken from the buffer pool for each response
    /// ([`Exchange::take_head`]) and given back when the transfer ends, so an idle connection
    /// holds none, and with many connections busy the head is rendered into the one buffer
    /// the last response used, still in the CPU's cache, instead of one per connection.
    pub(crate) head: Vec<u8>,
    pub(crate) head_pos: usize,
    /// The head's status and where its fields are, recorded as it is rendered for the
    /// protocols that encode fields themselves (HTTP/2, HTTP/3; `FieldSpans::record`).
    pub(crate) fields: FieldSpans,
    pub(crate) body: Body,
    /// Remaining parts of a multipart response (last part first) and their representation.
    pub(crate) parts: Vec<Part>,
    pub(crate) rep: Option<Rc<FileEntry>>,
    /// The verification job a paused request waits for.
    pub(crate) waiting: Option<u64>,
    /// Status of the response being sent, when sending started, and body bytes sent.
    pub(crate) status: u16,
    pub(crate) send_started: Instant,
    pub(crate) body_sent: u64,
    /// The request's access record and status count are still to be written: set when its
    /// response is ready to send, taken by [`Exchange::account`], so each request read is
    /// accounted exactly once, however it ends.
    pub(crate) unaccounted: bool,
    pub(crate) log: Pending,
    /// The authenticated user and the virtual host of the current request, for the log.
    pub(crate) user: Option<String>,
    pub(crate) vhost: Option<String>,
    /// The connection's TLS protocol and cipher, for the log (None for plain HTTP).
    pub(crate) tls: Option<TlsInfo>,
    /// The throttle rules this transfer counts against, with its share of their rate.
    pub(crate) throttle: Option<(Admission, RateLimiter)>,
    /// The per-connection rate limit (`limit_rate`).
    pub(crate) limit: Option<RateLimiter>,
}

impl Exchange {
    pub(crate) fn new(fd: RawFd, peer: IpAddr, now: Instant) -> Exchange {
        Exchange {
            fd,
            local: None,
            peer,
            client: peer,
            keep: true,
            head: Vec::new(),
            head_pos: 0,
            fields: FieldSpans::default(),
            body: Body::None,
            parts: Vec::new(),
            rep: None,
            waiting: None,
            status: 0,
            send_started: now,
            body_sent: 0,
            unaccounted: false,
            log: Pending::default(),
            user: None,
            vhost: None,
            tls: None,
            throttle: None,
            limit: None,
        }
    }

    /// The address the connection was accepted on.
    pub(crate) fn local_ip(&self) -> Option<IpAddr> {
        if let Some(ip) = self.local {
            return Some(ip.to_canonical());
        }
        // SAFETY: `fd` is the socket of the connection that owns this exchange, open for as
        // long as the exchange exists; it is only borrowed for this call.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        let addr = socket2::SockRef::from(&fd).local_addr().ok()?;
        addr.as_socket().map(|a| a.ip().to_canonical())
    }

    /// Starts the access record of the response (completed with the bytes sent when the
    /// transfer ends).
    pub(crate) fn begin_log(
        &mut self,
        cx: &Ctx,
        status: u16,
        line: RequestLine<'_>,
        referer: Option<&[u8]>,
        ua: Option<&[u8]>,
    ) {
        if cx.access.enabled() {
            let rec = Record {
                client: self.client,
                time: cx.clock.log_date(),
                line,
                status,
                referer,
                user_agent: ua,
                user: self.user.as_deref(),
                vhost: self.vhost.as_deref(),
                tls: self.tls,
            };
            cx.access.begin(&mut self.log, &rec);
        }
    }

    /// Starts the access record of an answered request, logged with `minor` (HTTP/1.x's,
    /// or `log::HTTP2`); health checks only with `[health] log`.
    pub(crate) fn log_request(&mut self, cx: &Ctx, req: &Request<'_>, status: u16, minor: u8) {
        if !cx.access.enabled() {
            // No record is written (`account`): none to begin, nor a path to compare.
            return;
        }
        let is_health = cx.cfg.health_path.as_deref() == Some(req.path);
        if is_health && !cx.cfg.health_log && matches!(req.method, Method::Get | Method::Head) {
            // An empty pending line is never written.
            self.log = Pending::default();
        } else {
            let line = RequestLine::Parsed { method: req.method_str, target: req.target, minor };
            self.begin_log(cx, status, line, req.referer, req.user_agent);
        }
    }

    /// The request's response is ready to send: from now on it is accounted however it ends.
    pub(crate) fn start(&mut self, status: u16, now: Instant) {
        self.status = status;
        self.send_started = now;
        self.body_sent = 0;
        self.unaccounted = true;
    }

    /// Writes the access record with the body bytes sent and counts the response, once: a
    /// second call (the connection closed after the response completed) does nothing.
    pub(crate) fn account(&mut self, cx: &mut Ctx) {
        if !std::mem::take(&mut self.unaccounted) {
            return;
        }
        if cx.access.enabled() {
            cx.access.finish(&self.log, self.body_sent, cx.clock.now);
        }
        cx.counters.response(self.status, self.body_sent);
    }

    /// The transfer ended before it completed (the client closed or reset, a deadline or the
    /// end of `shutdown_timeout` cut it): accounted with the bytes sent, as a response of its
    /// status, or of 499 when no byte of it had left (`started` false), as nginx does; and
    /// counted among the aborted transfers.
    pub(crate) fn account_aborted(&mut self, cx: &mut Ctx, started: bool) {
        if !self.unaccounted {
            return;
        }
        if !started {
            self.status = CLIENT_CLOSED;
            self.log.set_status(CLIENT_CLOSED);
        }
        cx.counters.aborted += 1;
        self.account(cx);
    }

    /// Takes a head buffer from the pool (one that served a response before: rendering into
    /// it allocates nothing), unless the exchange holds one.
    pub(crate) fn take_head(&mut self, cx: &mut Ctx) {
        if self.head.capacity() == 0 {
            self.head = cx.take_body();
        }
    }

    /// Releases everything that belongs to the response just sent (or abandoned), the head
    /// buffer included.
    pub(crate) fn end_transfer(&mut self, cx: &mut Ctx) {
        self.release_body(cx);
        cx.put_body(std::mem::take(&mut self.head));
        self.head_pos = 0;
        for part in self.parts.drain(..) {
            cx.put_body(part.framing);
        }
        self.rep = None;
        if let Some((adm, _)) = self.throttle.take() {
            cx.throttles.finish(&adm);
        }
        self.limit = None;
        self.user = None;
        self.vhost = None;
    }

    pub(crate) fn release_body(&mut self, cx: &mut Ctx) {
        match std::mem::replace(&mut self.body, Body::None) {
            Body::Mem { buf, .. } | Body::File { stage: Some(Staged { buf, .. }), .. } => cx.put_body(buf),
            _ => {}
        }
    }

    /// The slowest rate a limit (throttle share, `limit_rate`) paces this transfer to, if one
    /// does (a rate of 0 is no limit): what `[http] min_send_rate`'s floor is taken from.
    pub(crate) fn paced_rate(&self) -> Option<u64> {
        let limits = [self.throttle.as_ref().map(|(_, l)| l), self.limit.as_ref()];
        limits.into_iter().flatten().map(RateLimiter::rate).filter(|&r| r != 0).min()
    }

    /// Bytes the rate limits (throttle share, `limit_rate`) allow now, `usize::MAX` without
    /// limits; when nothing is allowed, also when to try again. (Inline: a transfer without
    /// limits, the usual one, pays two tests and no call.)
    #[inline]
    pub(crate) fn rate_cap(&mut self, cx: &mut Ctx) -> (usize, Option<Instant>) {
        if self.throttle.is_none() && self.limit.is_none() {
            return (usize::MAX, None);
        }
        self.limited_cap(cx)
    }

    /// [`Exchange::rate_cap`] of a transfer under a limit.
    #[inline(never)]
    fn limited_cap(&mut self, cx: &mut Ctx) -> (usize, Option<Instant>) {
        let now = cx.clock.now;
        let mut cap = u64::MAX;
        let mut wake: Option<Instant> = None;
        let mut apply = |lim: &mut RateLimiter| {
            let allowed = lim.allowed(now, u64::MAX);
            if allowed == 0 {
                let chunk = (lim.rate() / 10).clamp(1, 4096);
                let t = lim.next_at(now, chunk).unwrap_or(now + Duration::from_millis(10));
                wake = Some(wake.map_or(t, |w| w.max(t)));
            }
            cap = cap.min(allowed);
        };
        if let Some((adm, lim)) = &mut self.throttle {
            // After a reload changed the rules, a transfer admitted before keeps its rate.
            if cx.throttles.owns(adm) {
                lim.set_rate(cx.throttles.allowance(adm));
            }
            apply(lim);
        }
        if let Some(lim) = &mut self.limit {
            apply(lim);
        }
        (usize::try_from(cap).unwrap_or(usize::MAX), wake)
    }

    /// Counts body bytes sent against the rate limits.
    #[inline]
    pub(crate) fn charge(&mut self, cx: &mut Ctx, body: u64) {
        if body == 0 {
            return;
        }
        if let Some((adm, lim)) = &mut self.throttle {
            lim.consume(body);
            cx.throttles.sent(adm, body);
        }
        if let Some(lim) = &mut self.limit {
            lim.consume(body);
        }
    }

    /// Moves the cursors past `n` sent bytes: head first, then body. Returns the body bytes.
    pub(crate) fn advance(&mut self, n: usize, body_part: bool) -> u64 {
        let from_head = n.min(self.head.len() - self.head_pos);
        self.head_pos += from_head;
        if !body_part {
            return 0;
        }
        let rest = n - from_head;
        self.body_sent += rest as u64;
        match &mut self.body {
            Body::Mem { pos, .. } | Body::Mapped { pos, .. } | Body::File { stage: Some(Staged { pos, .. }), .. } => {
                *pos += rest
            }
            // sendfile advanced the file offset itself.
            Body::File { stage: None, .. } | Body::None => {}
        }
        rest as u64
    }

    /// For a framing protocol (HTTP/2, HTTP/3): appends up to `n` bytes of the current
    /// part's framing (a multipart part's delimiter and fields, in `head[head_pos..]`) to
    /// `out`; returns how many of the `n` are left for body bytes.
    #[cfg(any(feature = "http2", feature = "http3"))]
    pub(crate) fn take_framing(&mut self, out: &mut Vec<u8>, n: usize) -> usize {
        let framing = &self.head[self.head_pos..];
        let f = framing.len().min(n);
        out.extend_from_slice(&framing[..f]);
        self.head_pos += f;
        n - f
    }

    /// For a framing protocol: `b` body bytes were handed on (`result`: copied, or recorded
    /// to be sent from where they lie): the cursor moves, they are counted and charged to
    /// the rate limits. `Err`: the file changed under us (the entry leaves the cache) or
    /// could not be read; the stream must end.
    #[cfg(any(feature = "http2", feature = "http3"))]
    pub(crate) fn body_handed(&mut self, cx: &mut Ctx, result: io::Result<()>, b: usize) -> Result<(), ()> {
        match result {
            Ok(()) => {
                self.body.consume(b);
                self.body_sent += b as u64;
                self.charge(cx, b as u64);
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                self.truncated(cx);
                Err(())
            }
            Err(e) => {
                cx.error(format_args!("read error while sending a file: {e}"));
                Err(())
            }
        }
    }

    /// For a protocol that copies every byte into its frames (HTTP/3): appends the next `n`
    /// bytes of the current part (framing, then body; at most what is left of it) to `out`.
    #[cfg(feature = "http3")]
    pub(crate) fn copy_out(&mut self, cx: &mut Ctx, out: &mut Vec<u8>, n: usize) -> Result<(), ()> {
        let b = self.take_framing(out, n);
        if b == 0 {
            return Ok(());
        }
        let r = self.body.append_to(out, b);
        self.body_handed(cx, r, b)
    }

    /// The file shrank while being sent (sendfile hit its end early, or the kernel faulted
    /// on a mapped page past the new end): the promised length can't be delivered, so the
    /// stale entry leaves the cache and the caller closes the connection (or the stream).
    pub(crate) fn truncated(&mut self, cx: &mut Ctx) {
        if let Body::Mapped { entry, .. } | Body::File { entry, .. } = &self.body {
            cx.cache.invalidate(entry);
            cx.errors.log(
                cx.clock.log_date(),
                format_args!(
                    "file {:?} changed size while being sent to {}; connection closed",
                    entry.url_path, self.peer
                ),
            );
        }
    }
}
