//! One client connection: a small state machine, its transport, and the HTTP/1.1 writer of
//! its [`Exchange`] (the current request's answer, `exchange.rs`).
//!
//! ```text
//!  (Proxy) ─header─▶
//!   Idle ──bytes──▶ Head ──complete head──▶ Send ──done, keep-alive──▶ Idle
//!     │               │ (bad head: error response, close)   │
//!     └──── deadline / EOF / error: close ◀─────────────────┴──done, close──▶ (Linger) ─▶ close
//!                     │▲
//!                     ▼│ (a password to verify off the loop; resumed when it is done)
//!                   Paused
//! ```
//!
//! * **Proxy**: on a listener named in `[server] proxy_protocol`, waiting for the PROXY
//!   protocol header (`crate::proxy`, read in `proxy_io.rs`) before anything else, within
//!   `header_timeout` of the accept. It is peeked at and consumed exactly, so what follows
//!   (a request, or a TLS ClientHello) is read by the ordinary paths. The address it gives
//!   becomes `peer`; a bad, truncated or late header closes the connection without a
//!   response. Until then the connection counts against no per-IP limit.
//! * **Idle**: waiting for the first byte of a request (keep-alive deadline). Holds no buffer.
//! * **Head**: part of a request head has arrived (header deadline, set once for the whole head).
//! * **Paused**: a complete request waits for its credentials to be verified off the loop
//!   (`access::auth`). The request stays unread in the buffer and nothing more is read; its
//!   deadline still runs. When the verification is done the server resumes the connection,
//!   which parses the same request again and now finds the outcome remembered.
//! * **Send**: a response is queued; nothing more is read until it is out (backpressure, so
//!   pipelined requests cost no memory). A short write moves a cursor; the write-stall
//!   deadline restarts on every byte of progress.
//! * **Linger**: the response is out and the connection is closing while the client may still
//!   be sending; our side is shut down for writing and what arrives is read and dropped for
//!   a short while, so the client is not hit by a reset before it has read the response.
//!
//! Sockets are edge-triggered: `readable`/`writable` remember readiness until a call returns
//! `WouldBlock` (or a read comes back short, which means the socket was drained), so no
//! syscall is made that is known to fail. [`Conn::drive`] runs the machine until it must wait,
//! then says whether the connection waits, yields (its byte budget is spent), or closes.

use std::io::{self, Read};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

#[cfg(feature = "acme")]
mod acme;
mod exchange;
#[cfg(feature = "http2")]
mod h2;
mod proxy_io;
mod routing;
mod serve;
#[cfg(feature = "tls")]
mod tls_io;

use crate::access::throttle::{self, RateLimiter};
use crate::fs::cache;
use crate::http::request::{self, ChunkedSkipper, Framing, Method, Reject, Request};
use crate::http::response::Head;
use crate::log::RequestLine;
use crate::server::Ctx;
use crate::sys;
use exchange::{Body, Exchange};

/// Bytes one connection may write per wake-up before others get their turn.
const WRITE_BUDGET: usize = 1024 * 1024;
/// Requests one connection may have answered per wake-up (pipelining) before yielding.
const REQUEST_BUDGET: u32 = 64;
/// The largest single `sendfile` call.
const SENDFILE_CHUNK: usize = 512 * 1024;
/// Staging buffer size when sendfile is off.
const COPY_CHUNK: usize = 64 * 1024;
/// `[server] loopback_copy`: bodies from this size on, to a loopback peer, take the staged
/// copy instead of `sendfile`. On loopback the receiver's reads of spliced page-cache pages
/// cost it more than reads of pages just copied in (wrk: 7 against 4 µs per 8 KiB read), and
/// with one connection the slower side sets the pace: copying measured 1.15–1.27× the
/// throughput at 2–32 MiB, level at 1 MiB, 0.76× at 256 KiB (BENCHMARKS.md, issue 17).
pub const LOOPBACK_COPY_MIN: u64 = 2 * 1024 * 1024;
/// How long a closing connection keeps draining what the client still sends, counted from
/// the last bytes it sent.
const LINGER: Duration = Duration::from_secs(2);
/// Most time spent lingering in all (nginx's `lingering_time`): an HTTP/2 client reading the
/// megabytes still queued for it keeps sending WINDOW_UPDATE until it has read them.
const LINGER_MAX: Duration = Duration::from_secs(30);
/// Most bytes drained while lingering before giving up.
const LINGER_BYTES: usize = 256 * 1024;

const ALLOW: &[u8] = b"GET, HEAD, OPTIONS";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Proxy,
    Idle,
    Head,
    Paused,
    Send,
    Linger,
}

/// A connection's state as the status page reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    Idle,
    Reading,
    Writing,
    Closing,
}

/// What the server should do with a connection after [`Conn::drive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drive {
    /// Wait for the next readiness event or deadline.
    Wait,
    /// Budget spent with work left: drive again after this poll round.
    Yield,
    /// Close the connection now.
    Close,
    /// A rate limit holds the response back: drive again at this time.
    Sleep(Instant),
    /// The request waits for this verification job; drive again (after
    /// [`Conn::resume`]) once it is done.
    Pause(u64),
}

/// A request body still to be read and thrown away before the next request.
enum Discard {
    None,
    Length(u64),
    Chunked(ChunkedSkipper),
}

/// How a connection's bytes reach its socket, chosen once at accept. The plain branch is
/// the code paths above (recv, sendmsg, sendfile) untouched; TLS is `tls_io.rs`. (Without
/// the `tls` feature every connection is plain and the field is gone.)
#[cfg(feature = "tls")]
enum Transport {
    Plain,
    Tls(Box<crate::tls::TlsState>),
}

enum WriteResult {
    Done,
    Blocked,
    Budget,
    Closed,
    Sleep(Instant),
}

pub struct Conn {
    sock: TcpStream,
    #[cfg(feature = "tls")]
    transport: Transport,
    pub peer: IpAddr,
    /// Unique for the life of the process (slab keys are reused after a close).
    id: u64,
    /// Accepted on a PROXY protocol listener.
    proxied: bool,
    phase: Phase,
    /// Read buffer (from the pool), `rbuf[rstart..rend]` unconsumed.
    rbuf: Option<Box<[u8]>>,
    rstart: usize,
    rend: usize,
    readable: bool,
    writable: bool,
    peer_eof: bool,
    /// The poller reported the peer's FIN.
    rdhup: bool,
    /// The response of the current request.
    ex: Exchange,
    /// The HTTP/2 state, once the connection speaks it (a pointer: an HTTP/1.1 connection
    /// grows by one word).
    #[cfg(feature = "http2")]
    h2: Option<Box<h2::H2>>,
    /// Close once the queued response is out.
    close_after: bool,
    discard: Discard,
    served: u32,
    /// The peer is a loopback address, and `loopback_copy` applies.
    loopback_copy: bool,
    pub deadline: Instant,
    /// On the server's ready list already.
    pub queued: bool,
    /// In the poller's set (a connection answered at once after accept never joins it).
    pub registered: bool,
    lingered: usize,
    /// While lingering: when it ends however much the client still sends.
    linger_end: Instant,
}

impl Conn {
    pub fn new(sock: TcpStream, peer: IpAddr, cx: &Ctx) -> Conn {
        let fd = sock.as_raw_fd();
        Conn {
            sock,
            #[cfg(feature = "tls")]
            transport: Transport::Plain,
            peer,
            id: cx.counters.accepted,
            proxied: false,
            phase: Phase::Idle,
            rbuf: None,
            rstart: 0,
            rend: 0,
            readable: true,
            writable: true,
            peer_eof: false,
            rdhup: false,
            ex: Exchange::new(fd, peer, cx.clock.now),
            #[cfg(feature = "http2")]
            h2: None,
            close_after: false,
            discard: Discard::None,
            served: 0,
            loopback_copy: cx.cfg.loopback_copy && peer.is_loopback(),
            deadline: cx.clock.now + cx.cfg.header_timeout,
            queued: false,
            registered: false,
            lingered: 0,
            linger_end: cx.clock.now,
        }
    }

    /// Makes the connection wait for a PROXY protocol header first (its deadline is the
    /// header timeout from now); its `peer` is the proxy's until the header names the client.
    pub fn expect_proxy_header(mut self, cx: &Ctx) -> Conn {
        self.phase = Phase::Proxy;
        self.proxied = true;
        self.deadline = cx.clock.now + cx.cfg.header_timeout;
        self
    }

    /// The client address this connection counts against `max_connections_per_ip`: none
    /// while a PROXY header is awaited (the client is not known yet).
    pub fn counted_ip(&self) -> Option<IpAddr> {
        (self.phase != Phase::Proxy).then_some(self.peer)
    }

    /// True while the PROXY protocol header has not arrived.
    pub fn awaiting_proxy(&self) -> bool {
        self.phase == Phase::Proxy
    }

    /// Unique for the life of the process, unlike the connection's slab key.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Ends a pause: the verification the request waited for is done (or was forgotten);
    /// the next [`Conn::drive`] parses the request again.
    pub fn resume(&mut self) {
        #[cfg(feature = "http2")]
        self.h2_resume();
        if self.phase == Phase::Paused {
            self.phase = Phase::Head;
            self.ex.waiting = None;
        }
    }

    /// Verification jobs of paused HTTP/2 streams beyond the one [`Drive::Pause`] carried
    /// (none for HTTP/1.1, which pauses one request at a time).
    pub fn more_jobs(&mut self) -> Vec<u64> {
        #[cfg(feature = "http2")]
        if let Some(h) = &mut self.h2 {
            return h.take_jobs();
        }
        Vec::new()
    }

    pub fn socket(&mut self) -> &mut TcpStream {
        &mut self.sock
    }

    /// Records readiness reported by the poller. `read_closed`: the peer's FIN has arrived
    /// (possibly together with data, so a short read must not end the reading).
    pub fn ready(&mut self, readable: bool, writable: bool, read_closed: bool) {
        self.readable |= readable || read_closed;
        self.writable |= writable;
        self.rdhup |= read_closed;
    }

    /// True when the connection is past a deadline, or is receiving a response so slowly
    /// (below `min_send_rate` on average, counting the bytes the client has acknowledged,
    /// once `send_timeout` has passed) that it is holding resources hostage. A transfer we pace ourselves (throttle, `limit_rate`) is
    /// held to half of the rate it is allowed, capped by `min_send_rate`
    /// ([`throttle::floor_rate`]): our pacing is not the client's fault, but a client reading
    /// far slower than allowed must not keep a throttle slot for as long as it likes.
    pub fn expired(&self, now: Instant, cx: &Ctx) -> bool {
        if self.deadline <= now {
            return true;
        }
        if self.phase != Phase::Send {
            return false;
        }
        let paced = [self.ex.throttle.as_ref().map(|(_, l)| l), self.ex.limit.as_ref()];
        let allowed = paced.into_iter().flatten().map(RateLimiter::rate).filter(|&r| r != 0).min();
        let rate = throttle::floor_rate(cx.cfg.min_send_rate, allowed.unwrap_or(u64::MAX));
        if rate == 0 {
            return false;
        }
        let age = now.saturating_duration_since(self.ex.send_started);
        if age <= cx.cfg.send_timeout {
            return false;
        }
        // What the client has received, not what the kernel took: the send buffer can hold
        // megabytes, and a client that reads nothing would otherwise look fast for a while.
        let queued = sys::unacked_bytes(self.sock.as_raw_fd()).unwrap_or(0);
        (self.ex.body_sent.saturating_sub(queued) as f64) < rate as f64 * age.as_secs_f64()
    }

    /// The connection's state, for the status page.
    pub fn state(&self) -> ConnState {
        #[cfg(feature = "http2")]
        if let Some(h) = &self.h2 {
            return h.state();
        }
        match self.phase {
            Phase::Idle => ConnState::Idle,
            Phase::Proxy | Phase::Head | Phase::Paused => ConnState::Reading,
            Phase::Send => ConnState::Writing,
            Phase::Linger => ConnState::Closing,
        }
    }

    /// True for a connection that has received nothing at all (no byte, no request): still
    /// waiting for its first byte, or, with `eof`, ended by the client before sending one.
    /// (A connection of a PROXY listener never counts as empty: it has had the header, or
    /// is waiting for it under its own deadline.)
    pub fn received_nothing(&self, eof: bool) -> bool {
        let empty =
            self.phase == Phase::Idle && self.served == 0 && self.rend == 0 && self.peer_eof == eof && !self.proxied;
        // A TLS handshake in progress has received its ClientHello, and no plaintext yet.
        #[cfg(feature = "tls")]
        let empty = empty && !self.tls_received();
        empty
    }

    /// How long a connection that has received nothing (with `eof`, ended by the client
    /// before its first byte; see [`Conn::received_nothing`]) has been open, `None` once
    /// anything arrived: the server's measure of silent connections, for
    /// `defer_accept = "auto"`.
    pub fn silent_for(&self, now: Instant, eof: bool) -> Option<Duration> {
        // Nothing has been sent on it either, so `send_started` is still the accept time.
        self.received_nothing(eof).then(|| now.saturating_duration_since(self.ex.send_started))
    }

    /// True while nothing of a request has arrived: safe to close on shutdown.
    pub fn is_idle(&self) -> bool {
        (self.phase == Phase::Idle && self.rstart == self.rend) || self.phase == Phase::Proxy
    }

    /// Called at shutdown: finish what is in flight, then close. True when the connection
    /// must be driven for that to start (HTTP/2: its GOAWAY is queued).
    pub fn stop_keepalive(&mut self) -> bool {
        self.close_after = true;
        #[cfg(feature = "http2")]
        return self.h2_go_away();
        #[cfg(not(feature = "http2"))]
        false
    }

    /// Its deadline has passed and it is about to be closed: an HTTP/2 connection's last
    /// GOAWAY goes out if the socket takes it at once (RFC 9113 §9.1).
    pub fn expire(&mut self, cx: &mut Ctx) {
        #[cfg(feature = "http2")]
        self.h2_expire(cx);
        #[cfg(not(feature = "http2"))]
        let _ = cx;
    }

    /// After a reload: an HTTP/2 connection gets GOAWAY (its SETTINGS and limits are the old
    /// configuration's); its streams finish, then it closes and the client reconnects. An
    /// HTTP/1.1 connection carries no such state and goes on. True: drive it now.
    pub fn go_away(&mut self) -> bool {
        #[cfg(feature = "http2")]
        return self.h2_go_away();
        #[cfg(not(feature = "http2"))]
        false
    }

    /// Gives buffers back to the pools, and throttle shares back, before the connection is
    /// dropped.
    pub fn release(&mut self, cx: &mut Ctx) {
        if let Some(b) = self.rbuf.take() {
            cx.put_rbuf(b);
        }
        self.ex.end_transfer(cx);
        #[cfg(feature = "tls")]
        self.count_unfinished_handshake(cx);
        #[cfg(feature = "http2")]
        self.h2_release(cx);
    }

    /// Runs the state machine until it has to wait.
    pub fn drive(&mut self, cx: &mut Ctx) -> Drive {
        #[cfg(feature = "http2")]
        if self.h2.is_some() {
            return self.drive_h2(cx);
        }
        let mut budget = WRITE_BUDGET;
        let mut answered = 0;
        loop {
            match self.phase {
                Phase::Send => match self.write(cx, &mut budget) {
                    WriteResult::Done => {
                        if self.ex.next_part(cx) {
                            continue;
                        }
                        self.finish_response(cx);
                        if self.close_after {
                            return self.close(cx);
                        }
                    }
                    WriteResult::Blocked => return Drive::Wait,
                    WriteResult::Budget => return Drive::Yield,
                    WriteResult::Closed => return Drive::Close,
                    WriteResult::Sleep(t) => return Drive::Sleep(t),
                },
                Phase::Linger => return self.linger(cx),
                Phase::Proxy => match self.read_proxy(cx) {
                    Ok(true) => continue,
                    Ok(false) => return Drive::Wait,
                    Err(()) => return Drive::Close,
                },
                // Readiness is remembered; nothing is read until the server resumes it.
                Phase::Paused => return Drive::Wait,
                Phase::Idle | Phase::Head => {
                    if answered >= REQUEST_BUDGET {
                        return Drive::Yield;
                    }
                    // Nothing buffered: nothing to consume (the call is skipped, not cheap).
                    let consumed = if self.rstart == self.rend { Ok(false) } else { self.consume(cx) };
                    match consumed {
                        Ok(true) => {
                            #[cfg(feature = "http2")]
                            if self.h2.is_some() {
                                // The preface came: the rest is HTTP/2's.
                                return self.drive_h2(cx);
                            }
                            answered += 1;
                            continue;
                        }
                        Ok(false) => {
                            if let (Phase::Paused, Some(job)) = (self.phase, self.ex.waiting) {
                                return Drive::Pause(job);
                            }
                        }
                        Err(()) => return Drive::Close,
                    }
                    // Need more bytes.
                    if self.peer_eof {
                        return Drive::Close;
                    }
                    #[cfg(feature = "tls")]
                    if let Transport::Tls(_) = self.transport {
                        match self.fill_tls(cx) {
                            #[cfg(feature = "http2")]
                            Ok(true) if self.h2.is_some() => return self.drive_h2(cx),
                            Ok(true) => continue,
                            Ok(false) => return self.park(cx),
                            Err(()) => return Drive::Close,
                        }
                    }
                    if !self.readable {
                        return self.park(cx);
                    }
                    if !self.fill(cx) {
                        return Drive::Close;
                    }
                }
            }
        }
    }

    /// Waits for input, giving the read buffer back if it holds nothing.
    fn park(&mut self, cx: &mut Ctx) -> Drive {
        if self.rstart == self.rend {
            if let Some(b) = self.rbuf.take() {
                cx.put_rbuf(b);
            }
            self.rstart = 0;
            self.rend = 0;
        }
        Drive::Wait
    }

    /// True for a connection without TLS.
    #[cfg(feature = "http2")]
    fn plain(&self) -> bool {
        #[cfg(feature = "tls")]
        return matches!(self.transport, Transport::Plain);
        #[cfg(not(feature = "tls"))]
        true
    }

    /// Uses buffered bytes: skips body bytes being discarded, then parses and answers one
    /// request. `Ok(true)`: a response was queued; `Ok(false)`: more bytes are needed;
    /// `Err`: close now.
    fn consume(&mut self, cx: &mut Ctx) -> Result<bool, ()> {
        if !self.skip_body(cx)? {
            return Ok(false);
        }
        if self.rstart == self.rend {
            return Ok(false);
        }
        let Some(mut rbuf) = self.rbuf.take() else {
            return Ok(false);
        };
        let limits = cx.limits;
        let region = &rbuf[self.rstart..self.rend];
        // Matched by reference: moving the parsed request out would copy it.
        let queued = match &request::parse_head(region, &limits) {
            Ok(Some(req)) => match held_body_error(req, &region[req.head_len..], cx.cfg.max_body_discard) {
                Some(rej) => {
                    self.reject(cx, rej, req_line(req));
                    self.rstart = self.rend;
                    true
                }
                None => {
                    let head_len = req.head_len;
                    let queued = self.respond(cx, req);
                    if queued {
                        self.rstart += head_len;
                    }
                    queued
                }
            },
            Ok(None) => {
                if self.phase == Phase::Idle {
                    self.phase = Phase::Head;
                    self.deadline = cx.clock.now + cx.cfg.header_timeout;
                }
                false
            }
            #[cfg(feature = "http2")]
            Err(_) if self.plain() && self.served == 0 && h2::preface(cx, region).is_some() => {
                // The HTTP/2 preface (its `HTTP/2.0` is what failed): switch, or wait for
                // the rest of it.
                let complete = h2::preface(cx, region) == Some(true);
                self.rbuf = Some(rbuf);
                if complete {
                    self.start_h2(cx);
                }
                return Ok(complete);
            }
            Err(rej) if *rej == request::NEWER_MINOR => {
                // HTTP/1.2 to 1.9: read as 1.1 (RFC 9110 §2.5), so patched, and parsed again.
                request::patch_version(&mut rbuf[self.rstart..self.rend]);
                self.rbuf = Some(rbuf);
                return self.consume(cx);
            }
            Err(rej) => {
                let rej = *rej;
                let line = first_line(&rbuf[self.rstart..self.rend]);
                self.reject(cx, rej, line);
                self.rstart = self.rend;
                true
            }
        };
        self.rbuf = Some(rbuf);
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        Ok(queued)
    }

    /// Drops buffered bytes of a request body. `Ok(true)` when no body is pending any more.
    fn skip_body(&mut self, cx: &Ctx) -> Result<bool, ()> {
        let avail = self.rend - self.rstart;
        match &mut self.discard {
            Discard::None => return Ok(true),
            Discard::Length(left) => {
                let take = avail.min(usize::try_from(*left).unwrap_or(usize::MAX));
                self.rstart += take;
                *left -= take as u64;
                if *left == 0 {
                    self.discard = Discard::None;
                }
            }
            Discard::Chunked(skip) => {
                let Some(rbuf) = self.rbuf.as_deref() else {
                    return Ok(false);
                };
                let used = skip.feed(&rbuf[self.rstart..self.rend]).map_err(|_| ())?;
                self.rstart += used;
                if skip.consumed > cx.cfg.max_body_discard {
                    return Err(());
                }
                if skip.done() {
                    self.discard = Discard::None;
                }
            }
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        Ok(matches!(self.discard, Discard::None))
    }

    /// The read buffer for the next read (the connection's, or one from the pool), its
    /// unread bytes moved to the front when it is full. Put it back in `self.rbuf` after.
    fn rbuf_for_read(&mut self, cx: &mut Ctx) -> Box<[u8]> {
        let mut rbuf = match self.rbuf.take() {
            Some(b) => b,
            None => cx.take_rbuf(),
        };
        if self.rend == rbuf.len() && self.rstart > 0 {
            rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        rbuf
    }

    /// Reads once into the buffer. False: close (EOF handled via `peer_eof`, error, full).
    fn fill(&mut self, cx: &mut Ctx) -> bool {
        let mut rbuf = self.rbuf_for_read(cx);
        let space = rbuf.len() - self.rend;
        let result = if space == 0 { Ok(0) } else { self.sock.read(&mut rbuf[self.rend..]) };
        self.rbuf = Some(rbuf);
        match result {
            Ok(0) if space == 0 => {
                // Unreachable in practice: a full buffer is a parse error first.
                false
            }
            Ok(0) => {
                self.peer_eof = true;
                true
            }
            Ok(n) => {
                if n < space && !self.rdhup {
                    // A short read drained the socket; edge-triggered readiness will report
                    // the next bytes, so don't spend a read on EAGAIN. (Unless the FIN is
                    // already in: no edge will come for it, so the next read must see the 0.)
                    self.readable = false;
                }
                if self.phase == Phase::Idle && matches!(self.discard, Discard::None) {
                    self.phase = Phase::Head;
                    self.deadline = cx.clock.now + cx.cfg.header_timeout;
                }
                self.rend += n;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(_) => false,
        }
    }

    /// Answers a parsed request: queues head and body and enters `Send`; or, when the
    /// answer waits for a verification, leaves the request unconsumed, enters `Paused` and
    /// returns false.
    fn respond(&mut self, cx: &mut Ctx, req: &Request<'_>) -> bool {
        let close_before = self.close_after;
        let mut keep = req.keep_alive && !self.close_after && self.served + 1 < cx.cfg.keepalive_requests;
        match req.framing {
            Framing::None => {}
            Framing::Length(n) if n > cx.cfg.max_body_discard => {
                self.reject(cx, Reject { status: 413, why: "request body too large" }, req_line(req));
                return true;
            }
            _ if req.expect_continue => {
                // The client may be waiting for 100 Continue before it sends the body; we
                // don't want the body, so answer now and close instead of reading it.
                keep = false;
            }
            Framing::Length(n) => self.discard = Discard::Length(n),
            Framing::Chunked => self.discard = Discard::Chunked(ChunkedSkipper::default()),
        }
        self.close_after = !keep;
        self.ex.keep = keep;
        self.ex.take_head(cx);
        self.ex.client = if cx.cfg.trusted_proxies.is_empty() {
            self.peer
        } else {
            crate::http::forwarded::client(self.peer, &cx.cfg.trusted_proxies, req.forwarded, req.x_forwarded_for)
        };

        #[cfg(feature = "tls")]
        let early = self.early(cx, req);
        #[cfg(not(feature = "tls"))]
        let early = Early::Pipeline;
        let status = answer(&mut self.ex, cx, req, early);
        if self.ex.waiting.is_some() {
            // Undo what answering began; the request is parsed again on resume.
            debug_assert_eq!(status, serve::PAUSED);
            self.discard = Discard::None;
            self.close_after = close_before;
            self.ex.user = None;
            self.ex.vhost = None;
            self.phase = Phase::Paused;
            return false;
        }
        #[cfg(feature = "tls")]
        {
            self.ex.tls = self.tls_names();
        }
        self.ex.log_request(cx, req, status, req.minor);
        self.start_send(cx, status);
        true
    }

    /// Answers a request that cannot be trusted, and closes after the response.
    fn reject(&mut self, cx: &mut Ctx, rej: Reject, line: RequestLine<'_>) {
        self.close_after = true;
        self.ex.keep = false;
        self.ex.client = self.peer;
        self.discard = Discard::None;
        self.ex.take_head(cx);
        self.ex.simple_response_raw(cx, rej.status, 1, false, None);
        #[cfg(feature = "tls")]
        {
            self.ex.tls = self.tls_names();
        }
        self.ex.begin_log(cx, rej.status, line, None, None);
        self.start_send(cx, rej.status);
    }

    fn start_send(&mut self, cx: &Ctx, status: u16) {
        self.ex.status = status;
        self.ex.send_started = cx.clock.now;
        self.ex.head_pos = 0;
        self.ex.body_sent = 0;
        self.phase = Phase::Send;
        self.deadline = cx.clock.now + cx.cfg.send_timeout;
    }

    fn finish_response(&mut self, cx: &mut Ctx) {
        if cx.access.enabled() {
            cx.access.finish(&self.ex.log, self.ex.body_sent, cx.clock.now);
        }
        cx.counters.response(self.ex.status, self.ex.body_sent);
        self.ex.end_transfer(cx);
        self.served += 1;
        self.phase = Phase::Idle;
        self.deadline = cx.clock.now + cx.cfg.keepalive_timeout;
    }

    /// Writes as much of the queued response as the socket and the budget allow.
    fn write(&mut self, cx: &mut Ctx, budget: &mut usize) -> WriteResult {
        #[cfg(feature = "tls")]
        if let Transport::Tls(_) = self.transport {
            return self.write_tls(cx, budget);
        }
        let fd = self.sock.as_raw_fd();
        loop {
            if !self.writable {
                return WriteResult::Blocked;
            }
            if *budget == 0 {
                return WriteResult::Budget;
            }
            let (cap, wake) = self.ex.rate_cap(cx);
            let head = &self.ex.head[self.ex.head_pos..];
            // The connection closes once the bytes of this send are out: flag them MSG_MORE,
            // and the close (or the shutdown of Linger) that follows at once sends them with
            // the FIN in one segment, a packet and a wake-up fewer for the client.
            let last = self.close_after && self.ex.parts.is_empty();
            let (result, body_part) = match &mut self.ex.body {
                Body::None if head.is_empty() => return WriteResult::Done,
                Body::None => (sys::send2(fd, head, &[], last), false),
                Body::Mem { buf, pos } => {
                    if head.is_empty() && *pos == buf.len() {
                        return WriteResult::Done;
                    }
                    (sys::send2(fd, head, &buf[*pos..], last), true)
                }
                Body::Mapped { entry, pos, end } => {
                    if head.is_empty() && *pos == *end {
                        return WriteResult::Done;
                    }
                    let stop = (*end).min(pos.saturating_add(cap));
                    if head.is_empty() && stop == *pos {
                        if let Some(t) = wake {
                            return WriteResult::Sleep(t);
                        }
                    }
                    // Only a pointer into the mapping is taken here; the kernel does the reading.
                    // The entry's size is the mapping's, so the range is inside it; if it ever
                    // were not, the response cannot be completed: close, as for a truncation.
                    let Some(bytes) = entry.body.bytes().and_then(|b| b.get(*pos..stop)) else {
                        return self.truncated(cx);
                    };
                    (sys::send2(fd, head, bytes, last && stop == *end), true)
                }
                Body::File { entry, pos, end, stage } => {
                    let cache::Body::Fd(file) = &entry.body else { return WriteResult::Closed };
                    // Copied (read into a staging buffer and sent) with sendfile off, and to a
                    // loopback peer from `LOOPBACK_COPY_MIN` on; else sent by sendfile.
                    if stage.is_none()
                        && (!cx.cfg.sendfile || self.loopback_copy && end.saturating_sub(*pos) >= LOOPBACK_COPY_MIN)
                    {
                        *stage = Some(exchange::Staged { buf: cx.take_body(), pos: 0 });
                    }
                    if *pos == *end && stage.as_ref().is_none_or(|s| s.pos == s.buf.len()) {
                        if head.is_empty() {
                            // A file that shrank before the last bytes were handed over made
                            // sendfile come up short (0, below: the connection closes with
                            // bytes owed). Once they are handed over nothing can be checked:
                            // sendfile queues page-cache pages by reference, and a truncation
                            // in place zeroes them while they wait in the socket, for as long
                            // as the client takes to read them. An fstat here would cover only
                            // the microseconds since the last call, for a system call per
                            // response. Files should be replaced by rename (README).
                            return WriteResult::Done;
                        }
                        (sys::send2(fd, head, &[], false), false)
                    } else if let Some(st) = stage {
                        if st.pos == st.buf.len() {
                            // Refill the staging buffer from the file, in one read: a short
                            // one (the file shrank) is sent, the next, empty, closes the
                            // connection as truncated.
                            let want = (*end - *pos).min(COPY_CHUNK as u64) as usize;
                            st.buf.clear();
                            st.pos = 0;
                            match sys::pread_append(file, &mut st.buf, want, *pos) {
                                Ok(0) => return self.truncated(cx),
                                Ok(n) => *pos += n as u64,
                                Err(e) => {
                                    cx.error(format_args!("read error while sending a file: {e}"));
                                    return WriteResult::Closed;
                                }
                            }
                        }
                        let stop = st.buf.len().min(st.pos.saturating_add(cap));
                        if head.is_empty() && stop == st.pos {
                            if let Some(t) = wake {
                                return WriteResult::Sleep(t);
                            }
                        }
                        // MSG_MORE while more of the body follows (and, as above, when the
                        // close follows): a 64 KiB chunk is not a whole number of segments
                        // (loopback MSS 65483), and with TCP_NODELAY each send would push its
                        // tail as a segment of its own. Held back, the tail leaves with the
                        // next chunk: up to half the data segments, where the client reads
                        // faster than the server sends (nstat, 10 × 32 MiB by curl, both
                        // directions: 15267 segments against 11899).
                        let more = stop < st.buf.len() || *pos < *end || last;
                        (sys::send2(fd, head, &st.buf[st.pos..stop], more), true)
                    } else if !head.is_empty() {
                        // The head first, flagged so it leaves together with the file data.
                        (sys::send2(fd, head, &[], true), false)
                    } else {
                        let count = ((*end - *pos).min(SENDFILE_CHUNK as u64) as usize).min(*budget).min(cap);
                        if count == 0 {
                            if let Some(t) = wake {
                                return WriteResult::Sleep(t);
                            }
                        }
                        match sys::sendfile(fd, file.as_raw_fd(), pos, count) {
                            Ok(0) => return self.truncated(cx),
                            other => (other, true),
                        }
                    }
                }
            };
            match result {
                Ok(n) => {
                    *budget = budget.saturating_sub(n);
                    self.deadline = cx.clock.now + cx.cfg.send_timeout;
                    let body = self.ex.advance(n, body_part);
                    self.ex.charge(cx, body);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return WriteResult::Blocked;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => return self.truncated(cx),
                Err(e) => {
                    if !is_peer_gone(&e) {
                        cx.error(format_args!("write to {}: {e}", self.peer));
                    }
                    return WriteResult::Closed;
                }
            }
        }
    }

    /// The file shrank while being sent: the connection closes (`Exchange::truncated`).
    fn truncated(&mut self, cx: &mut Ctx) -> WriteResult {
        self.ex.truncated(cx);
        WriteResult::Closed
    }

    /// Ends the connection after a response: at once when the client has nothing more in
    /// flight, else through `Linger`. Closing a socket with unread input resets it, and the
    /// reset can destroy the response before the client reads it (the last bytes may even
    /// still be queued, flagged MSG_MORE). The input is known to be drained only after a
    /// short read: `readable` still set (a full buffer, as for a 431) means the kernel may
    /// hold more.
    fn close(&mut self, cx: &mut Ctx) -> Drive {
        let unread = self.rstart != self.rend
            || !matches!(self.discard, Discard::None)
            || self.phase == Phase::Head
            || self.readable;
        self.end(cx, unread)
    }

    /// Ends the connection, through `Linger` if the client may still send (`unread`) and has
    /// not closed its side.
    fn end(&mut self, cx: &mut Ctx, unread: bool) -> Drive {
        #[cfg(feature = "tls")]
        self.tls_close_notify();
        if self.peer_eof || !unread {
            return Drive::Close;
        }
        sys::shutdown_write(self.sock.as_raw_fd());
        self.phase = Phase::Linger;
        self.deadline = cx.clock.now + LINGER;
        self.linger_end = cx.clock.now + LINGER_MAX;
        self.linger(cx)
    }

    fn linger(&mut self, cx: &mut Ctx) -> Drive {
        let mut scratch = match self.rbuf.take() {
            Some(b) => b,
            None => cx.take_rbuf(),
        };
        let result = loop {
            if !self.readable {
                break Drive::Wait;
            }
            match self.sock.read(&mut scratch) {
                Ok(0) => break Drive::Close,
                Ok(n) => {
                    self.lingered += n;
                    if self.lingered > LINGER_BYTES {
                        break Drive::Close;
                    }
                    self.deadline = (cx.clock.now + LINGER).min(self.linger_end);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break Drive::Close,
            }
        };
        cx.put_rbuf(scratch);
        self.rstart = 0;
        self.rend = 0;
        result
    }
}

/// What the transport decides before the pipeline runs (`Conn::early`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Early {
    /// Nothing: the pipeline answers.
    Pipeline,
    /// The 421 rule: the Host picks another site than the TLS connection's SNI name.
    #[cfg(feature = "tls")]
    Misdirected,
    /// `[tls] redirect_http` on a plain connection.
    #[cfg(feature = "tls")]
    RedirectHttps,
}

/// The request pipeline, for either protocol: the transport's early answers (421, the
/// redirect to HTTPS), the health endpoint, the status page, GET/HEAD of a file, OPTIONS, or
/// 405. Returns the status queued in `ex` (its head block and body source), or
/// `serve::PAUSED` with `ex.waiting` set.
fn answer(ex: &mut Exchange, cx: &mut Ctx, req: &Request<'_>, early: Early) -> u16 {
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
        _ if early == Early::RedirectHttps => tls_io::redirect_https(ex, cx, req),
        #[cfg(feature = "tls")]
        _ if early == Early::Misdirected => ex.simple_response(cx, 421, req, None),
        Method::Get | Method::Head if is_health => ex.health(cx, req),
        Method::Get | Method::Head if is_status_page => ex.status_page(cx, req),
        Method::Get | Method::Head => ex.serve_file(cx, req),
        Method::Options => {
            let mut h = Head::new(&mut ex.head, 204, cx.clock.http_date(), &cx.fixed_fields);
            h.field("Allow", ALLOW);
            h.finish(ex.keep, req.minor);
            204
        }
        _ => ex.simple_response(cx, 405, req, None),
    }
}

/// Whether the body bytes already received with a head make the request invalid: a chunked
/// body whose framing is broken (or over `max_body_discard`) in bytes the server holds is
/// answered 400 (413) and the connection closed, never served first. Bytes that arrive after
/// the response has started can only close the connection (`skip_body`).
fn held_body_error(req: &Request<'_>, held: &[u8], max_discard: u64) -> Option<Reject> {
    if req.framing != Framing::Chunked || held.is_empty() {
        return None;
    }
    let mut skip = ChunkedSkipper::default();
    match skip.feed(held) {
        Err(rej) => Some(rej),
        Ok(_) if skip.consumed > max_discard => Some(Reject { status: 413, why: "request body too large" }),
        Ok(_) => None,
    }
}

fn req_line<'a>(req: &Request<'a>) -> RequestLine<'a> {
    RequestLine::Parsed { method: req.method_str, target: req.target, minor: req.minor }
}

/// The first line of what the client sent, for logging a request that did not parse.
fn first_line(b: &[u8]) -> RequestLine<'_> {
    let start = b.iter().position(|&c| c != b'\r' && c != b'\n').unwrap_or(b.len());
    let b = &b[start..];
    let end = b.iter().position(|&c| c == b'\r' || c == b'\n').unwrap_or(b.len());
    RequestLine::Raw(&b[..end])
}

/// Resets and broken pipes are how clients leave; they are not worth a log line.
fn is_peer_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EPIPE
                | libc::ECONNRESET
                | libc::ECONNABORTED
                | libc::ETIMEDOUT
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
        )
    )
}
