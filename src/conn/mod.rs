//! One client TCP connection: a small state machine, its transport and its protocol. Nothing
//! here decides what to answer: each request goes to `serve::answer`, which fills an
//! `Exchange`; the protocol code writes it out.
//!
//! * `mod.rs`: [`Conn`], the phases below, the read buffer, deadlines, the close and
//!   `Linger`, and [`Conn::drive`].
//! * Protocols: `h1.rs` (HTTP/1.1: parsing, body discarding, writing an exchange with
//!   `sendmsg`/`sendfile`), `h2.rs` (HTTP/2: the glue between `crate::h2`'s sans-IO
//!   session, the pipeline and the transport).
//! * Transports: plain (the socket), `tls_io.rs` (rustls between the queue and the socket),
//!   `proxy_io.rs` (the PROXY protocol header before either).
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

mod h1;
#[cfg(feature = "http2")]
mod h2;
mod proxy_io;
#[cfg(feature = "tls")]
mod tls_io;

use crate::access::throttle;
use crate::ctx::Ctx;
use crate::serve::Exchange;
use crate::sys;
use h1::Discard;

/// Bytes one connection may write per wake-up before others get their turn.
const WRITE_BUDGET: usize = 1024 * 1024;
/// Requests one connection may have answered per wake-up (pipelining) before yielding.
const REQUEST_BUDGET: u32 = 64;
/// How long a closing connection keeps draining what the client still sends, counted from
/// the last bytes it sent.
const LINGER: Duration = Duration::from_secs(2);
/// Most time spent lingering in all (nginx's `lingering_time`): an HTTP/2 client reading the
/// megabytes still queued for it keeps sending WINDOW_UPDATE until it has read them.
const LINGER_MAX: Duration = Duration::from_secs(30);
/// Most bytes drained while lingering before giving up.
const LINGER_BYTES: usize = 256 * 1024;

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
        let rate = throttle::floor_rate(cx.cfg.min_send_rate, self.ex.paced_rate().unwrap_or(u64::MAX));
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
        // A response cut short (client gone, deadline, shutdown) or a request closed while
        // paused is accounted now; a completed one was at its end.
        let started = self.ex.head_pos > 0;
        self.ex.account_aborted(cx, started);
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
