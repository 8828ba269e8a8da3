//! The TLS transport of a connection: the same phases and output queue as the plain one,
//! with rustls between the queue and the socket.
//!
//! * **Reading**: ciphertext goes from the socket into rustls (`read_tls`), and the
//!   decrypted bytes into the connection's read buffer, where the HTTP/1.1 parser finds them
//!   exactly as it finds plain ones. Nothing is read while a response is pending, so rustls
//!   holds at most one TLS record of unread input (backpressure as for plain connections).
//! * **Writing**: the head and up to [`CHUNK`] bytes of body are handed to rustls together
//!   (`write_vectored`), which copies them into one record (a small response is one record)
//!   and encrypts it in place. Memory bodies are handed over in place; a mapped body is
//!   copied out of the mapping (`sys::copy_mapped`, fault-recovering) into a per-process scratch
//!   buffer, so a file truncated under the server gives `EFAULT` (close, entry dropped) and
//!   never SIGBUS, which is the mapping's invariant; fd bodies are read with `pread` into
//!   the same buffer, in the same bounded chunks. At most `tls::OUT_LIMIT`
//!   bytes are encrypted ahead of the socket; they are flushed before more are encrypted, so
//!   a slow reader costs its socket buffer plus that. Never `sendfile`: without kernel TLS
//!   the kernel cannot encrypt (kTLS would plug in here: after the handshake, hand the
//!   traffic secrets to the socket with `setsockopt(SOL_TLS)` and take the plain paths).
//! * **Handshake**: runs in the loop like any other input, under `[tls] handshake_timeout`.
//!   Garbage, plain HTTP sent to the TLS port, a failed handshake or a truncated record
//!   closes the connection (after rustls's alert, when it has one) without a log line.
//! * **Kept out of the plain path**: the entry points `Conn::drive` calls (`fill_tls`,
//!   `write_tls`, `tls_close_notify`) are never inlined. Inlined, rustls's record processing
//!   and the 16 KiB record buffer it then had on the stack gave `drive` a 32 KiB stack frame,
//!   probed page by page on every wake-up of every connection, plain ones too, and kept
//!   resident.

use std::io::{self, Read, Write};

use super::h1::Discard;
use super::{is_peer_gone, Conn, Phase, Transport, WriteResult};
use crate::ctx::Ctx;
use crate::tls::{TlsState, OUT_LIMIT};

/// Plaintext handed to rustls at once: one full TLS record.
const CHUNK: usize = 16 * 1024;

/// What flushing the encrypted output came to.
pub(super) enum Flush {
    /// Nothing left in rustls.
    Done,
    Blocked,
    Budget,
    Closed,
}

impl Conn {
    /// Makes this a TLS connection: the handshake has `handshake_timeout` from now.
    pub fn with_tls(mut self, tls: Box<TlsState>, cx: &Ctx) -> Conn {
        self.deadline = cx.clock.now + cx.cfg.tls.handshake_timeout;
        self.transport = Transport::Tls(tls);
        self
    }

    /// The name the client sent in its TLS handshake (SNI), if any.
    pub(super) fn sni(&self) -> Option<&str> {
        let Transport::Tls(t) = &self.transport else { return None };
        t.conn.server_name()
    }

    /// The protocol and cipher for the access log (None on a plain connection).
    pub(super) fn tls_names(&self) -> Option<crate::log::TlsInfo> {
        let Transport::Tls(t) = &self.transport else { return None };
        crate::tls::names(&t.conn)
    }

    /// At close: a handshake that neither completed nor failed ended by the deadline or
    /// by the client.
    pub(super) fn count_unfinished_handshake(&self, cx: &mut Ctx) {
        let Transport::Tls(t) = &self.transport else { return };
        if !t.established && !t.failed {
            let c = &mut cx.counters.tls;
            if self.deadline <= cx.clock.now {
                c.timeout += 1;
            } else {
                c.closed += 1;
            }
        }
    }

    /// True for a TLS connection whose client has sent something. Before the first request
    /// a TLS connection has no plaintext in its read buffer, handshake or not, so without
    /// this a connection in mid-handshake would count as empty (`received_nothing`), and
    /// the ghost rule (`Server::sort_out_ghosts`) would reset a fresh client whose address
    /// and port had ended an empty connection in the last minute, just after the server's
    /// first flight: a client that opens many connections (`openssl s_time -new`, a load
    /// tool reconnecting) reuses its ports within that minute and saw one handshake in a
    /// few thousand fail (BENCHMARKS.md, "HTTPS").
    pub(super) fn tls_received(&self) -> bool {
        matches!(&self.transport, Transport::Tls(t) if t.received)
    }

    /// True for a connection without TLS.
    pub(super) fn is_plain(&self) -> bool {
        matches!(self.transport, Transport::Plain)
    }

    /// Sends what rustls has encrypted. `budget` counts the bytes written.
    pub(super) fn flush_tls(&mut self, cx: &mut Ctx, budget: &mut usize) -> Flush {
        let Transport::Tls(t) = &mut self.transport else { return Flush::Done };
        while t.conn.wants_write() {
            if !self.writable {
                return Flush::Blocked;
            }
            if *budget == 0 {
                return Flush::Budget;
            }
            match t.conn.write_tls(&mut self.sock) {
                Ok(n) => {
                    *budget = budget.saturating_sub(n);
                    if self.phase == Phase::Send {
                        self.deadline = cx.clock.now + cx.cfg.send_timeout;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Flush::Blocked;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if !is_peer_gone(&e) {
                        cx.error(format_args!("write to {}: {e}", self.peer));
                    }
                    return Flush::Closed;
                }
            }
        }
        Flush::Done
    }

    /// Moves input forward while a request is awaited: sends handshake output, reads
    /// ciphertext, decrypts into the read buffer. `Ok(true)`: progress (decrypted bytes, or
    /// the peer's end); `Ok(false)`: wait for readiness; `Err`: close.
    #[inline(never)]
    pub(super) fn fill_tls(&mut self, cx: &mut Ctx) -> Result<bool, ()> {
        let mut unlimited = usize::MAX;
        loop {
            if let Flush::Closed = self.flush_tls(cx, &mut unlimited) {
                return Err(());
            }
            let Transport::Tls(t) = &mut self.transport else { return Err(()) };
            let state = match t.conn.process_new_packets() {
                Ok(s) => s,
                Err(e) => {
                    // Garbage, plain HTTP, a failed handshake: rustls has queued an alert;
                    // send it if the socket takes it, then close, quietly.
                    if !t.established {
                        t.failed = true;
                        crate::tls::count_failure(&mut cx.counters.tls, &e);
                    }
                    let _ = t.conn.write_tls(&mut self.sock);
                    return Err(());
                }
            };
            if !t.established && !t.conn.is_handshaking() {
                t.established = true;
                let c = &mut cx.counters.tls;
                match t.conn.protocol_version() {
                    Some(rustls::ProtocolVersion::TLSv1_3) => c.tls13 += 1,
                    _ => c.tls12 += 1,
                }
                if t.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    c.resumed += 1;
                }
                if self.phase == Phase::Idle {
                    self.deadline = cx.clock.now + cx.cfg.header_timeout;
                }
                // ALPN chose HTTP/2 (offered only when `[http2]` enables it).
                #[cfg(feature = "http2")]
                if t.conn.alpn_protocol() == Some(b"h2") && self.h2.is_none() {
                    self.start_h2(cx);
                    return Ok(true);
                }
            }
            if state.plaintext_bytes_to_read() > 0 {
                let mut rbuf = self.rbuf_for_read(cx);
                let space = rbuf.len() - self.rend;
                let Transport::Tls(t) = &mut self.transport else {
                    self.rbuf = Some(rbuf);
                    return Err(());
                };
                let n = if space == 0 { Ok(0) } else { t.conn.reader().read(&mut rbuf[self.rend..]) };
                self.rbuf = Some(rbuf);
                let n = match n {
                    Ok(n) if n > 0 => n,
                    // A full buffer is a parse error first; anything else is rustls's.
                    _ => return Err(()),
                };
                if self.phase == Phase::Idle && matches!(self.discard, Discard::None) {
                    self.phase = Phase::Head;
                    self.deadline = cx.clock.now + cx.cfg.header_timeout;
                }
                self.rend += n;
                return Ok(true);
            }
            if state.peer_has_closed() {
                self.peer_eof = true;
                return Ok(true);
            }
            if !self.readable {
                return Ok(false);
            }
            match t.conn.read_tls(&mut self.sock) {
                // The end of the stream, with or without close_notify, possibly inside a
                // record: the request (if any) is incomplete, nothing to answer.
                Ok(0) => {
                    self.peer_eof = true;
                    return Ok(true);
                }
                Ok(_) => t.received = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
    }

    /// Sends close_notify before the connection closes (best effort: what the socket takes
    /// now).
    #[inline(never)]
    pub(super) fn tls_close_notify(&mut self) {
        if let Transport::Tls(t) = &mut self.transport {
            t.conn.send_close_notify();
            if self.writable {
                let _ = t.conn.write_tls(&mut self.sock);
            }
        }
    }

    /// [`Conn::write`] for TLS: flush what is encrypted, encrypt the next batch, repeat.
    #[inline(never)]
    pub(super) fn write_tls(&mut self, cx: &mut Ctx, budget: &mut usize) -> WriteResult {
        loop {
            match self.flush_tls(cx, budget) {
                Flush::Done => {}
                Flush::Blocked => return WriteResult::Blocked,
                Flush::Budget => return WriteResult::Budget,
                Flush::Closed => return WriteResult::Closed,
            }
            match self.encrypt_batch(cx) {
                Ok(true) => {}
                Ok(false) => return WriteResult::Done,
                Err(r) => return r,
            }
        }
    }

    /// Hands up to `OUT_LIMIT` bytes of head and body to rustls. `Ok(false)`: the response
    /// is all out; `Err`: sleep (rate limit) or close.
    fn encrypt_batch(&mut self, cx: &mut Ctx) -> Result<bool, WriteResult> {
        let mut scratch = SCRATCH.take().unwrap_or_else(|| vec![0; CHUNK].into_boxed_slice());
        let r = self.encrypt_batch_with(cx, &mut scratch);
        SCRATCH.set(Some(scratch));
        r
    }

    fn encrypt_batch_with(&mut self, cx: &mut Ctx, scratch: &mut [u8]) -> Result<bool, WriteResult> {
        let (mut cap, wake) = self.ex.rate_cap(cx);
        let mut handed = 0;
        while handed < OUT_LIMIT {
            let Transport::Tls(t) = &mut self.transport else { return Err(WriteResult::Closed) };
            let head = &self.ex.head[self.ex.head_pos..];
            let head = &head[..head.len().min(CHUNK)];
            let body = match self.ex.body.peek((CHUNK - head.len()).min(cap), scratch) {
                Ok(Some(b)) => b,
                Ok(None) => return Err(self.truncated(cx)),
                Err(e) => {
                    cx.error(format_args!("read error while sending a file: {e}"));
                    return Err(WriteResult::Closed);
                }
            };
            let (h, n) = (head.len(), head.len() + body.len());
            if n == 0 {
                if self.ex.body.remaining() == 0 {
                    return Ok(handed > 0);
                }
                if handed > 0 {
                    return Ok(true);
                }
                // Only a rate limit holds the body back here, and it says when to go on.
                return Err(WriteResult::Sleep(wake.unwrap_or(cx.clock.now + std::time::Duration::from_millis(10))));
            }
            // One record of head and body: rustls copies both into it and encrypts in place.
            let both = [io::IoSlice::new(head), io::IoSlice::new(body)];
            let parts = match (h, body.len()) {
                (0, _) => &both[1..],
                (_, 0) => &both[..1],
                _ => &both[..],
            };
            let took = match t.conn.writer().write_vectored(parts) {
                Ok(k) => k,
                Err(e) => {
                    cx.error(format_args!("tls write to {}: {e}", self.peer));
                    return Err(WriteResult::Closed);
                }
            };
            let from_head = took.min(h);
            self.ex.head_pos += from_head;
            let from_body = took - from_head;
            self.ex.body.consume(from_body);
            self.ex.body_sent += from_body as u64;
            self.ex.charge(cx, from_body as u64);
            cap = cap.saturating_sub(from_body);
            handed += took;
            if took < n {
                // rustls's outgoing buffer is at its limit: flush first.
                break;
            }
        }
        Ok(true)
    }
}

thread_local! {
    /// Where mapped and fd body bytes go on their way to rustls: one record's worth, made
    /// once per process. (A stack array, zeroed for every batch, cost 32 KiB of memset per
    /// response and a 16 KiB stack frame; bytes in memory are handed over in place.)
    static SCRATCH: std::cell::Cell<Option<Box<[u8]>>> = const { std::cell::Cell::new(None) };
}
