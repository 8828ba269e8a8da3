//! Reading the PROXY protocol header of a connection in phase `Proxy` (`crate::proxy` parses).
//!
//! The header is peeked at (`MSG_PEEK`) until it is complete, then exactly its bytes are
//! read, so the socket holds just the client's bytes afterwards and the plain and the TLS
//! paths read them as on any other listener (rustls never sees the header). A header that
//! arrives in pieces is peeked at again as each piece arrives: at most a few hundred bytes,
//! once per segment, and only on listeners that enable the protocol.
//!
//! A bad header, one that cannot fit, or the peer's end before it is complete closes the
//! connection at once without a response and counts in `proxy_header_errors` (as does the
//! deadline, in `Server::sweep`); a peer that closes having sent nothing is not counted.

use std::io::{self, Read};

#[cfg(feature = "tls")]
use super::Transport;
use super::{Conn, Phase};
use crate::ctx::Ctx;
use crate::proxy::{self, Parsed};

impl Conn {
    /// `Ok(true)`: the header is consumed and the connection is `Idle`; `Ok(false)`: wait
    /// for more bytes; `Err`: close.
    pub(super) fn read_proxy(&mut self, cx: &mut Ctx) -> Result<bool, ()> {
        if !self.readable {
            return Ok(false);
        }
        let mut buf = cx.take_rbuf();
        let cap = buf.len().min(proxy::V2_MAX);
        let outcome = match self.sock.peek(&mut buf[..cap]) {
            // Closed before sending a byte: a port probe, not a protocol error.
            Ok(0) => Err(false),
            Ok(n) => match proxy::parse(&buf[..n]) {
                Ok(Parsed::Done(h)) => self.take_proxy_header(cx, &mut buf, h),
                // No more bytes can come (the FIN is in), or no more fit.
                Ok(Parsed::Incomplete) if self.rdhup || n == cap => Err(true),
                Ok(Parsed::Incomplete) => {
                    // A short peek saw everything there is; the next segment is an edge.
                    self.readable = false;
                    Ok(false)
                }
                Err(_) => Err(true),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(false)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(_) => Err(false),
        };
        cx.put_rbuf(buf);
        outcome.map_err(|counted| {
            if counted {
                cx.counters.proxy_errors += 1;
            }
        })
    }

    /// Consumes the header's bytes (peeked already, so they are there) and takes the client
    /// address it gives; the per-IP limit applies to that address from now on.
    fn take_proxy_header(&mut self, cx: &mut Ctx, buf: &mut [u8], h: proxy::Header) -> Result<bool, bool> {
        let mut taken = 0;
        while taken < h.len {
            match self.sock.read(&mut buf[taken..h.len]) {
                Ok(0) => return Err(true),
                Ok(n) => taken += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(false),
            }
        }
        let ip = h.source.map_or(self.peer, |s| s.ip().to_canonical());
        if !cx.admit_ip(ip) {
            cx.counters.refused += 1;
            return Err(false);
        }
        self.peer = ip;
        self.ex.peer = ip;
        self.ex.client = ip;
        self.phase = Phase::Idle;
        // The request head keeps the deadline the header had; a TLS handshake starts now.
        #[cfg(feature = "tls")]
        if let Transport::Tls(_) = self.transport {
            self.deadline = cx.clock.now + cx.cfg.tls.handshake_timeout;
        }
        Ok(true)
    }
}
