//! HTTP/3's transport: a QUIC endpoint beside the TCP listeners, in the same `mio::Poll`
//! (feature `http3`, `[http3] enabled`).
//!
//! * **Sockets.** One UDP socket per `[http3] listen` address (by default each `[tls] listen`
//!   address, on the port its TCP listener got), bound with `SO_REUSEPORT` by the process
//!   that supervises (two halves of one per worker; `steer`: packets reach their connection's
//!   worker by connection ID, through a binary upgrade too) and
//!   driven through `quinn-udp`: each wake-up drains the socket with `recvmmsg` into
//!   [`BATCH`] buffers, each of which GRO may fill with several datagrams of one flow, and
//!   every transmit of up to `max_gso_segments` datagrams, and no more than fit in one UDP
//!   datagram ([`MAX_GSO_BYTES`]), leaves in one `sendmsg` with `UDP_SEGMENT` (GSO). A send
//!   the socket refuses (`EAGAIN`) is kept and sent when the socket turns writable;
//!   meanwhile the connections behind it wait, so nothing is dropped by us.
//! * **QUIC.** `quinn-proto`, sans-IO, does the rest: one [`Endpoint`] routes datagrams to
//!   connections by connection ID, and each [`Connection`] is fed what arrived, polled for
//!   what to send, for its next deadline and for its application events (the streams).
//!   Its deadlines are kept in a heap here; the earliest is put in the server's timer heap
//!   ([`Quic::rearm`]).
//! * **TLS.** The certificates and SNI resolver of the TCP listeners (`crate::tls`), in a
//!   configuration of its own: TLS 1.3 only, ALPN `h3`, no early data (0-RTT is refused:
//!   nothing a client sends before the handshake completes can be replayed), the same session
//!   tickets.
//! * **Defences.** Each new connection attempt (an Initial no connection knows) is decided
//!   at once by [`admit`], before any handshake work or state: refused (CONNECTION_CLOSE
//!   with CONNECTION_REFUSED, stateless) once the server is stopping, past
//!   `max_connections` QUIC connections or past `[http3] max_connections_per_ip` from its
//!   address; else, from an address not yet validated, sent a Retry (RFC 9000 §8.1.2) per
//!   `[http3] retry`: never, always, or `under_load`, only while `retry_threshold` or more
//!   handshakes are in progress, so that a flood of Initials from forged addresses gets
//!   stateless Retries and no connection once the threshold is reached. Before validation
//!   `quinn-proto` sends at most three times what it received (§8.1). Streams per connection:
//!   `[http3] max_streams` bidirectional, [`UNI_STREAMS`] unidirectional (within a
//!   connection, `h3.rs` adds a budget of cancelled requests and `send_timeout`). Each outcome is
//!   counted (`status::Http3Counters`), and so are stateless resets; so are, once a
//!   connection is gone, its packets sent and lost and its congestion events.
//! * **HTTP/3** is in `h3.rs`: the glue between the streams and `serve::answer`, over the
//!   sans-IO HTTP/3 and QPACK layer in `crate::h3`.

mod guard;
mod h3;
pub mod steer;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, EcnCodepoint, Endpoint, EndpointConfig, Event, IdleTimeout, ServerConfig,
    TransportConfig, VarInt,
};
use quinn_udp::{RecvMeta, UdpSocketState};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{Config, Http3Retry};
use crate::ctx::Ctx;

/// Receive buffers filled by one `recvmmsg`; each holds one datagram or, with GRO, several
/// of one flow.
const BATCH: usize = 8;
/// The size of each receive buffer: room for what GRO coalesces (at most 64 KiB).
const RBUF: usize = 64 * 1024;
/// Unidirectional streams a client may open: its control stream, its QPACK encoder and
/// decoder streams, and a few of unknown types (grease, RFC 9114 §6.2.3), which are refused.
const UNI_STREAMS: u32 = 8;
/// Bytes a connection may have sent and not yet acknowledged (quinn-proto's send buffer):
/// enough to keep a loopback or LAN path full, bounded per connection.
const SEND_WINDOW: u64 = 1024 * 1024;
/// The flow-control window a client gets per request stream and for the connection (request
/// heads; bodies are not accepted by a static server).
const STREAM_WINDOW: u32 = 64 * 1024;
const CONN_WINDOW: u32 = 256 * 1024;
/// The most payload one `sendmsg` may carry: the kernel refuses (`EMSGSIZE`) a send whose
/// UDP datagram, GSO batch or not, is longer than 65,535 bytes with its IPv4 and UDP headers.
const MAX_GSO_BYTES: usize = 65_535 - 20 - 8;
/// Datagrams read per socket per wake-up before the other sockets and the TCP side get
/// their turn (the rest is read on the next turn: the socket is put back on the ready list).
const READ_BUDGET: usize = 256;
/// HTTP/3's error code for a connection the server closes because it is going away
/// (H3_NO_ERROR, RFC 9114 §8.1).
const H3_NO_ERROR: u32 = 0x100;

/// One UDP socket and what is waiting to go out on it.
struct Sock {
    sock: UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    /// A transmit the socket refused (`EAGAIN`), sent first when it turns writable.
    stalled: Option<(quinn_proto::Transmit, Vec<u8>)>,
    /// Connections that had more to send while it was stalled.
    waiting: Vec<usize>,
    /// Datagrams may be left to read (the read budget ran out).
    more: bool,
}

/// One QUIC connection.
struct QConn {
    conn: quinn_proto::Connection,
    /// The socket its datagrams arrive on and leave by.
    sock: usize,
    h3: h3::H3Conn,
    /// Its next deadline, as last put in [`Quic::deadlines`].
    timeout: Option<Instant>,
    /// It is on its socket's waiting list.
    waiting: bool,
    /// The client address it counts against `[http3] max_connections_per_ip`.
    ip: IpAddr,
    /// Its handshake is done (it no longer counts as in progress).
    established: bool,
    /// It counts as pending for its address: accepted before its address was validated,
    /// and its handshake is not done.
    pending: bool,
}

/// An address's open connections: those whose address is validated (a token, or the
/// handshake done) and those still pending.
#[derive(Clone, Copy, Debug, Default)]
struct PerIp {
    validated: u32,
    pending: u32,
}

/// What is done with a new connection attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Accept,
    Retry,
    Refuse(Refusal),
}

/// Why a new connection is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    Stopping,
    Full,
    PerIp,
}

/// The limits a new connection attempt is decided by.
#[derive(Clone, Copy, Debug)]
struct Limits {
    retry: Http3Retry,
    /// Handshakes in progress from which `Http3Retry::UnderLoad` sends Retries.
    retry_threshold: usize,
    max_connections: usize,
    /// Connections per client address; 0: no limit.
    per_ip: u32,
}

/// The endpoint's state a new connection attempt is decided by.
#[derive(Clone, Copy, Debug)]
struct Load {
    stopping: bool,
    open: usize,
    handshaking: usize,
    /// Connections open from the attempt's address.
    from_ip: PerIp,
}

/// Decides a new connection attempt: `validated`, its address was validated (a Retry or
/// NEW_TOKEN token); `may_retry`, it did not already come after a Retry. Refusals for the
/// whole endpoint come first (stateless as a Retry is, and final), then the Retry policy.
/// The per-address limit counts, for a validated attempt, only the address's validated
/// connections; for one not validated, its pending handshakes too, and past the limit it
/// gets a Retry rather than a refusal (unless `retry = "never"`): Initials forged in a
/// victim's name (pending handshakes that never finish) cannot lock the victim out, whose
/// next attempt comes back validated.
fn admit(lim: &Limits, load: &Load, validated: bool, may_retry: bool) -> Verdict {
    if load.stopping {
        return Verdict::Refuse(Refusal::Stopping);
    }
    if load.open >= lim.max_connections {
        return Verdict::Refuse(Refusal::Full);
    }
    let retry = match lim.retry {
        Http3Retry::Never => false,
        Http3Retry::Always => true,
        Http3Retry::UnderLoad => load.handshaking >= lim.retry_threshold,
    };
    if retry && !validated && may_retry {
        return Verdict::Retry;
    }
    let PerIp { validated: v, pending: p } = load.from_ip;
    let mine = if validated { v } else { v + p };
    if lim.per_ip > 0 && mine >= lim.per_ip {
        if !validated && may_retry && lim.retry != Http3Retry::Never {
            return Verdict::Retry;
        }
        return Verdict::Refuse(Refusal::PerIp);
    }
    Verdict::Accept
}

/// The QUIC endpoint: sockets, connections, deadlines. See the module docs.
pub(crate) struct Quic {
    socks: Vec<Sock>,
    endpoint: Endpoint,
    server: Arc<ServerConfig>,
    /// Connections by `ConnectionHandle` index.
    conns: Vec<Option<QConn>>,
    open: usize,
    /// Of them, those whose handshake is in progress.
    handshaking: usize,
    /// Open connections by client address (every one, whatever the limit, so that a reload
    /// may change it).
    per_ip: HashMap<IpAddr, PerIp>,
    deadlines: BinaryHeap<Reverse<(Instant, usize)>>,
    /// The deadline last handed to the server's timer heap.
    armed: Option<Instant>,
    limits: Limits,
    rbuf: Vec<u8>,
    tbuf: Vec<u8>,
    /// Scratch of [`Quic::receive`]: the connections that got datagrams (kept: no allocation
    /// per wake-up).
    touched: Vec<usize>,
    /// Paused requests by the verification job they wait for: (connection, stream).
    waiters: HashMap<u64, Vec<(usize, u64)>>,
    /// Stopping: no new connections; each open one has been sent GOAWAY.
    stopping: bool,
}

/// The rustls configuration of HTTP/3: the TCP listeners' certificates, SNI resolver and
/// session resumption, TLS 1.3 only, ALPN `h3`, no early data.
fn tls_config(tcp: &rustls::ServerConfig) -> Result<rustls::ServerConfig, String> {
    let mut sc = rustls::ServerConfig::builder_with_provider(Arc::new(crate::tls::provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("http3 tls: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&tcp.cert_resolver));
    sc.alpn_protocols = vec![b"h3".to_vec()];
    sc.session_storage = Arc::clone(&tcp.session_storage);
    sc.ticketer = Arc::clone(&tcp.ticketer);
    sc.max_early_data_size = 0;
    Ok(sc)
}

/// The QUIC server configuration from `[http3]` and the TLS configuration.
fn server_config(cfg: &Config, tcp: &rustls::ServerConfig) -> Result<Arc<ServerConfig>, String> {
    let crypto = QuicServerConfig::try_from(tls_config(tcp)?).map_err(|e| format!("http3 tls: {e}"))?;
    let mut tc = TransportConfig::default();
    let h = &cfg.http3;
    tc.max_concurrent_bidi_streams(VarInt::from_u32(h.max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(UNI_STREAMS))
        .max_idle_timeout(Some(IdleTimeout::try_from(h.idle_timeout).map_err(|e| format!("http3.idle_timeout: {e}"))?))
        .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
        .receive_window(VarInt::from_u32(CONN_WINDOW))
        .send_window(SEND_WINDOW)
        .datagram_receive_buffer_size(None);
    let mut sc = ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(tc));
    Ok(Arc::new(sc))
}

/// Datagrams per GSO batch: what the socket takes, as many of `mtu` bytes (quinn-proto's
/// segment size) as fit in [`MAX_GSO_BYTES`], at least one. With the socket's 64 segments of
/// 1,452 bytes, a batch would be 92,928 bytes: refused whole, and each of its datagrams lost.
fn gso_segments(max: usize, mtu: u16) -> usize {
    max.min(MAX_GSO_BYTES / usize::from(mtu).max(1)).max(1)
}

/// The limits of new connections from the configuration.
fn limits(cfg: &Config) -> Limits {
    let h = &cfg.http3;
    Limits {
        retry: h.retry,
        retry_threshold: h.retry_threshold as usize,
        max_connections: cfg.max_connections,
        per_ip: h.max_connections_per_ip,
    }
}

/// A UDP socket bound for QUIC: non-blocking, `SO_REUSEPORT` (one per worker), IPv6 only
/// for an IPv6 address (as the TCP listeners).
fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    Ok(UdpSocket::from_std(sock.into()))
}

impl Quic {
    /// The endpoint `[http3]` asks for, bound: on `[http3] listen`, or on `tls_addrs` (the
    /// TLS listeners' bound addresses). `Ok(None)` when HTTP/3 is off.
    pub(crate) fn bind(
        cfg: &Config,
        tls: Option<&rustls::ServerConfig>,
        tls_addrs: &[SocketAddr],
    ) -> Result<Option<Quic>, String> {
        let (true, Some(tcp)) = (cfg.http3.enabled, tls) else { return Ok(None) };
        let server = server_config(cfg, tcp)?;
        let addrs = if cfg.http3.listen.is_empty() { tls_addrs } else { &cfg.http3.listen };
        let mut socks = Vec::new();
        let mut ecfg = EndpointConfig::default();
        // A single process binds (or, after an upgrade, takes over) both halves of its
        // sockets itself (`steer`).
        if cfg.workers <= 1 {
            if let Some(line) = steer::prepare(addrs, 1)? {
                eprintln!("ferrohttpd: {line}");
            }
            steer::adopt(0).map_err(|e| format!("http3: {e}"))?;
        }
        // `workers = N`: the sockets the parent bound for this worker, and connection IDs
        // that carry its number (`steer`).
        let mut adopted = steer::take().filter(|a| a.sockets.len() == addrs.len()).map(|a| {
            let (index, key) = (a.index, a.key);
            ecfg.cid_generator(move || Box::new(steer::Gen::new(index, key)));
            a.sockets.into_iter()
        });
        for &a in addrs {
            let sock = match adopted.as_mut().and_then(Iterator::next) {
                Some(s) => {
                    s.set_nonblocking(true).map_err(|e| format!("http3: udp {a}: {e}"))?;
                    UdpSocket::from_std(s)
                }
                None => bind_udp(a).map_err(|e| format!("http3: bind udp {a}: {e}"))?,
            };
            let state = UdpSocketState::new((&sock).into()).map_err(|e| format!("http3: udp {a}: {e}"))?;
            let local = sock.local_addr().map_err(|e| format!("http3: udp {a}: {e}"))?;
            socks.push(Sock { sock, state, local, stalled: None, waiting: Vec::new(), more: false });
        }
        let endpoint = Endpoint::new(Arc::new(ecfg), Some(Arc::clone(&server)), true, None);
        Ok(Some(Quic {
            socks,
            endpoint,
            server,
            conns: Vec::new(),
            open: 0,
            handshaking: 0,
            per_ip: HashMap::new(),
            deadlines: BinaryHeap::new(),
            armed: None,
            limits: limits(cfg),
            rbuf: vec![0; BATCH * RBUF],
            tbuf: Vec::new(),
            touched: Vec::new(),
            waiters: HashMap::new(),
            stopping: false,
        }))
    }

    /// Registers the sockets for both directions, from token `base` on.
    pub(crate) fn register(&mut self, registry: &Registry, base: usize) -> io::Result<()> {
        for (i, s) in self.socks.iter_mut().enumerate() {
            registry.register(&mut s.sock, Token(base + i), Interest::READABLE | Interest::WRITABLE)?;
        }
        Ok(())
    }

    /// How many sockets (tokens from the base on).
    pub(crate) fn sockets(&self) -> usize {
        self.socks.len()
    }

    /// The bound UDP addresses.
    pub(crate) fn local_addrs(&self) -> Vec<SocketAddr> {
        self.socks.iter().map(|s| s.local).collect()
    }

    /// Open connections.
    pub(crate) fn connections(&self) -> usize {
        self.open
    }

    /// A new TLS configuration (reload): new connections get it.
    pub(crate) fn reconfigure(&mut self, cfg: &Config, tcp: &rustls::ServerConfig) -> Result<(), String> {
        let server = server_config(cfg, tcp)?;
        self.endpoint.set_server_config(Some(Arc::clone(&server)));
        self.server = server;
        self.limits = limits(cfg);
        Ok(())
    }

    /// Socket `i` had an event: sends what it held back (writable), reads what came
    /// (readable), and drives the connections that got something.
    pub(crate) fn on_socket(&mut self, i: usize, readable: bool, writable: bool, cx: &mut Ctx) {
        if writable && i < self.socks.len() {
            self.unstall(i, cx);
        }
        if readable || self.socks.get(i).is_some_and(|s| s.more) {
            self.receive(i, cx);
        }
    }

    /// Sockets whose read budget ran out last turn (read again on the next).
    pub(crate) fn has_more(&self) -> bool {
        self.socks.iter().any(|s| s.more)
    }

    /// Reads the sockets left with datagrams waiting.
    pub(crate) fn read_more(&mut self, cx: &mut Ctx) {
        for i in 0..self.socks.len() {
            if self.socks[i].more {
                self.receive(i, cx);
            }
        }
    }

    /// Drains socket `i` (up to [`READ_BUDGET`] datagrams), handing each datagram to the
    /// endpoint; the connections that got any are driven once, after the batch.
    fn receive(&mut self, i: usize, cx: &mut Ctx) {
        let now = cx.clock.now;
        let mut touched = std::mem::take(&mut self.touched);
        let mut read = 0;
        self.socks[i].more = false;
        loop {
            if read >= READ_BUDGET {
                self.socks[i].more = true;
                break;
            }
            let mut meta = [RecvMeta::default(); BATCH];
            let n = {
                let mut chunks = self.rbuf.chunks_mut(RBUF);
                let mut bufs: [IoSliceMut<'_>; BATCH] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
                let s = &self.socks[i];
                match s.state.recv((&s.sock).into(), &mut bufs, &mut meta) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // ICMP errors surface here (a port unreachable from a gone client):
                        // not the socket's fault; try again next time.
                        if e.raw_os_error() != Some(libc::ECONNREFUSED) {
                            cx.error(format_args!("http3: udp receive on {}: {e}", self.socks[i].local));
                        }
                        break;
                    }
                }
            };
            let rbuf = std::mem::take(&mut self.rbuf);
            for (k, m) in meta.iter().enumerate().take(n) {
                let buf = &rbuf[k * RBUF..k * RBUF + m.len.min(RBUF)];
                // GRO: datagrams of `stride` bytes each, the last one maybe shorter.
                for d in buf.chunks(m.stride.max(1)) {
                    read += 1;
                    let ecn = m.ecn.and_then(|e| EcnCodepoint::from_bits(e as u8));
                    self.datagram(i, now, m.addr, m.dst_ip, ecn, d, &mut touched, cx);
                }
            }
            self.rbuf = rbuf;
        }
        touched.sort_unstable();
        touched.dedup();
        for &key in &touched {
            self.drive(key, cx);
        }
        touched.clear();
        self.touched = touched;
    }

    /// One datagram from `from` on socket `i`.
    #[allow(clippy::too_many_arguments)]
    fn datagram(
        &mut self,
        i: usize,
        now: Instant,
        from: SocketAddr,
        dst: Option<std::net::IpAddr>,
        ecn: Option<EcnCodepoint>,
        data: &[u8],
        touched: &mut Vec<usize>,
        cx: &mut Ctx,
    ) {
        self.tbuf.clear();
        let event = self.endpoint.handle(now, from, dst, ecn, data.into(), &mut self.tbuf);
        match event {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                if let Some(Some(c)) = self.conns.get_mut(ch.0) {
                    c.conn.handle_event(ev);
                    touched.push(ch.0);
                }
            }
            Some(DatagramEvent::Response(t)) => {
                // A short header: a stateless reset; a long one with version 0: Version
                // Negotiation; else an Initial's CONNECTION_CLOSE (a bad token or Initial).
                let c = &mut cx.counters.http3;
                match self.tbuf.as_slice() {
                    [b, ..] if b & 0x80 == 0 => c.stateless_resets += 1,
                    [_, 0, 0, 0, 0, ..] => c.version_negotiations += 1,
                    _ => c.handshake_failures += 1,
                }
                let buf = std::mem::take(&mut self.tbuf);
                self.send(i, t, &buf, cx);
                self.tbuf = buf;
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                let ip = from.ip().to_canonical();
                let load = Load {
                    stopping: self.stopping,
                    open: self.open,
                    handshaking: self.handshaking,
                    from_ip: self.per_ip.get(&ip).copied().unwrap_or_default(),
                };
                let validated = incoming.remote_address_validated();
                let c = &mut cx.counters.http3;
                match admit(&self.limits, &load, validated, incoming.may_retry()) {
                    Verdict::Refuse(why) => {
                        *match why {
                            Refusal::Stopping => &mut c.refused_stopping,
                            Refusal::Full => &mut c.refused_full,
                            Refusal::PerIp => &mut c.refused_per_ip,
                        } += 1;
                        let t = self.endpoint.refuse(incoming, &mut self.tbuf);
                        let buf = std::mem::take(&mut self.tbuf);
                        self.send(i, t, &buf, cx);
                        self.tbuf = buf;
                        return;
                    }
                    Verdict::Retry => {
                        match self.endpoint.retry(incoming, &mut self.tbuf) {
                            Ok(t) => {
                                c.retries += 1;
                                let buf = std::mem::take(&mut self.tbuf);
                                self.send(i, t, &buf, cx);
                                self.tbuf = buf;
                            }
                            Err(e) => self.endpoint.ignore(e.into_incoming()),
                        }
                        return;
                    }
                    Verdict::Accept => {}
                }
                let fd = self.socks[i].sock.as_raw_fd();
                match self.endpoint.accept(incoming, now, &mut self.tbuf, Some(Arc::clone(&self.server))) {
                    Ok((ch, conn)) => {
                        if self.conns.len() <= ch.0 {
                            self.conns.resize_with(ch.0 + 1, || None);
                        }
                        self.conns[ch.0] = Some(QConn {
                            conn,
                            sock: i,
                            h3: h3::H3Conn::new(fd, from.ip(), cx),
                            timeout: None,
                            waiting: false,
                            ip,
                            established: false,
                            pending: !validated,
                        });
                        self.open += 1;
                        self.handshaking += 1;
                        let n = self.per_ip.entry(ip).or_default();
                        *if validated { &mut n.validated } else { &mut n.pending } += 1;
                        let c = &mut cx.counters.http3;
                        c.connections += 1;
                        c.validated += u64::from(validated);
                        self.gauges(cx);
                        touched.push(ch.0);
                    }
                    Err(e) => {
                        cx.counters.http3.handshake_failures += 1;
                        if let Some(t) = e.response {
                            let buf = std::mem::take(&mut self.tbuf);
                            self.send(i, t, &buf, cx);
                            self.tbuf = buf;
                        }
                    }
                }
            }
            None => {}
        }
    }

    /// Puts the open and handshaking connections on the status page.
    fn gauges(&self, cx: &mut Ctx) {
        let c = &mut cx.counters.http3;
        c.open = self.open as u64;
        c.handshaking = self.handshaking as u64;
    }

    /// Sends one transmit on socket `i`; a refused one is kept for when the socket turns
    /// writable. `false`: it was kept (the socket is stalled).
    fn send(&mut self, i: usize, t: quinn_proto::Transmit, buf: &[u8], cx: &mut Ctx) -> bool {
        let Some(s) = self.socks.get_mut(i) else { return true };
        if s.stalled.is_some() {
            return false;
        }
        let ut = quinn_udp::Transmit {
            destination: t.destination,
            ecn: t.ecn.map(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)).unwrap_or(None),
            contents: &buf[..t.size.min(buf.len())],
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        match s.state.try_send((&s.sock).into(), &ut) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let kept = buf[..t.size.min(buf.len())].to_vec();
                s.stalled = Some((t, kept));
                false
            }
            Err(e) => {
                // EMSGSIZE for one datagram: a path MTU probe too large (expected; for a GSO
                // batch it is not); other errors (an ICMP error reported on this send, a route
                // gone) lose the datagram, which QUIC recovers from as from any loss.
                let probe = t.segment_size.is_none() && e.raw_os_error() == Some(libc::EMSGSIZE);
                let expected = [libc::ECONNREFUSED, libc::EHOSTUNREACH, libc::ENETUNREACH];
                if !probe && !e.raw_os_error().is_some_and(|c| expected.contains(&c)) {
                    cx.error(format_args!("http3: udp send to {}: {e}", t.destination));
                }
                true
            }
        }
    }

    /// Socket `i` is writable: sends what it held back, then lets the waiting connections
    /// send.
    fn unstall(&mut self, i: usize, cx: &mut Ctx) {
        let Some((t, buf)) = self.socks[i].stalled.take() else { return };
        if !self.send(i, t, &buf, cx) {
            return;
        }
        for key in std::mem::take(&mut self.socks[i].waiting) {
            if let Some(Some(c)) = self.conns.get_mut(key) {
                c.waiting = false;
            }
            self.drive(key, cx);
        }
    }

    /// Drives connection `key`: its application events (HTTP/3), what it has to send, its
    /// endpoint events, its deadline; drops it once drained.
    fn drive(&mut self, key: usize, cx: &mut Ctx) {
        let now = cx.clock.now;
        let Some(Some(c)) = self.conns.get_mut(key) else { return };
        let stopping = self.stopping;
        while let Some(ev) = c.conn.poll() {
            match ev {
                Event::Connected => {
                    cx.counters.http3.handshakes += 1;
                    if !c.established {
                        c.established = true;
                        self.handshaking -= 1;
                        cx.counters.http3.handshaking = self.handshaking as u64;
                    }
                    // The handshake validated the address (RFC 9000 §8.1).
                    if std::mem::take(&mut c.pending) {
                        let n = self.per_ip.entry(c.ip).or_default();
                        n.pending = n.pending.saturating_sub(1);
                        n.validated += 1;
                    }
                    c.h3.start(&mut c.conn, stopping);
                }
                Event::ConnectionLost { .. } => c.h3.lost(cx),
                Event::Stream(se) => c.h3.on_stream(&mut c.conn, se, cx),
                Event::HandshakeDataReady | Event::DatagramReceived | Event::DatagramsUnblocked => {}
            }
        }
        let jobs = c.h3.pump(&mut c.conn, cx);
        for (job, stream) in jobs {
            self.waiters.entry(job).or_default().push((key, stream));
        }
        if c.h3.finished() && !c.conn.is_closed() {
            c.conn.close(now, VarInt::from_u32(H3_NO_ERROR), bytes::Bytes::new());
        }
        self.flush(key, cx);
        let Some(Some(c)) = self.conns.get_mut(key) else { return };
        while let Some(ev) = c.conn.poll_endpoint_events() {
            if let Some(ce) = self.endpoint.handle_event(ConnectionHandle(key), ev) {
                c.conn.handle_event(ce);
            }
        }
        if c.conn.is_drained() {
            c.h3.lost(cx);
            let path = c.conn.stats().path;
            let k = &mut cx.counters.http3;
            k.packets_sent += path.sent_packets;
            k.packets_lost += path.lost_packets;
            k.congestion_events += path.congestion_events;
            let (ip, established, pending) = (c.ip, c.established, c.pending);
            self.conns[key] = None;
            self.open -= 1;
            self.handshaking -= usize::from(!established);
            if let Some(n) = self.per_ip.get_mut(&ip) {
                let count = if pending { &mut n.pending } else { &mut n.validated };
                *count = count.saturating_sub(1);
                if n.validated + n.pending == 0 {
                    self.per_ip.remove(&ip);
                }
            }
            self.gauges(cx);
            return;
        }
        let t = match (c.conn.poll_timeout(), c.h3.wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if t != c.timeout {
            c.timeout = t;
            if let Some(t) = t {
                self.deadlines.push(Reverse((t, key)));
            }
            // Each change leaves the old entry behind (skipped when it comes up): past a
            // few per connection, the heap is rebuilt from the current deadlines.
            if self.deadlines.len() > 4 * self.open + 64 {
                self.deadlines = self
                    .conns
                    .iter()
                    .enumerate()
                    .filter_map(|(k, c)| Some(Reverse((c.as_ref()?.timeout?, k))))
                    .collect();
            }
        }
    }

    /// Sends what connection `key` has to send, as many datagrams per `sendmsg` as GSO
    /// takes, until it has nothing more or its socket is stalled.
    fn flush(&mut self, key: usize, cx: &mut Ctx) {
        let now = cx.clock.now;
        loop {
            let Some(Some(c)) = self.conns.get_mut(key) else { return };
            let i = c.sock;
            let Some(s) = self.socks.get_mut(i) else { return };
            if s.stalled.is_some() {
                if !c.waiting {
                    c.waiting = true;
                    s.waiting.push(key);
                }
                return;
            }
            let segments = gso_segments(s.state.max_gso_segments(), c.conn.current_mtu());
            self.tbuf.clear();
            let Some(t) = c.conn.poll_transmit(now, segments, &mut self.tbuf) else { return };
            let buf = std::mem::take(&mut self.tbuf);
            self.send(i, t, &buf, cx);
            self.tbuf = buf;
        }
    }

    /// The deadline to put in the server's timer heap, if it is new (earlier than the one
    /// there, or that one has passed).
    pub(crate) fn rearm(&mut self, now: Instant) -> Option<Instant> {
        // A deadline already due is handled on the next turn, never in a loop within this
        // one.
        let next = self.deadlines.peek().map(|Reverse((t, _))| *t)?.max(now + Duration::from_millis(1));
        match self.armed {
            // The armed one comes first (or is due: it fires on the next turn).
            Some(a) if a <= next => None,
            _ => {
                self.armed = Some(next);
                Some(next)
            }
        }
    }

    /// A timer the server armed for the endpoint (at `at`) fired: handles every connection
    /// deadline that has passed. Only the one last armed counts: an earlier deadline put a
    /// new entry in the server's heap without taking out the old one, which is skipped here
    /// (handled, each would arm a new entry, and their number would only grow: thousands
    /// firing each millisecond after a few thousand requests).
    pub(crate) fn on_timer(&mut self, at: Instant, cx: &mut Ctx) {
        if self.armed != Some(at) {
            return;
        }
        let now = cx.clock.now;
        self.armed = None;
        while let Some(&Reverse((t, key))) = self.deadlines.peek() {
            if t > now {
                break;
            }
            self.deadlines.pop();
            let Some(Some(c)) = self.conns.get_mut(key) else { continue };
            if c.timeout != Some(t) {
                continue;
            }
            c.timeout = None;
            // Early for quinn-proto when the deadline was a rate limit's: it then does
            // nothing.
            c.conn.handle_timeout(now);
            self.drive(key, cx);
        }
    }

    /// Verification job `job` is done: its paused requests are answered again.
    pub(crate) fn resume(&mut self, job: u64, cx: &mut Ctx) {
        let Some(list) = self.waiters.remove(&job) else { return };
        let mut keys = Vec::new();
        for (key, stream) in list {
            if let Some(Some(c)) = self.conns.get_mut(key) {
                c.h3.resume(stream);
                keys.push(key);
            }
        }
        keys.dedup();
        for key in keys {
            self.drive(key, cx);
        }
    }

    /// Graceful stop or reload: no new connections; each open one gets GOAWAY, finishes its
    /// requests in flight and is closed once it has none.
    pub(crate) fn go_away(&mut self, cx: &mut Ctx) {
        self.stopping = true;
        for key in 0..self.conns.len() {
            if let Some(Some(c)) = self.conns.get_mut(key) {
                c.h3.go_away();
                self.drive(key, cx);
            }
        }
    }

    /// Closes every connection at once (the shutdown deadline passed); transfers still
    /// going are logged with what they sent.
    pub(crate) fn close_all(&mut self, cx: &mut Ctx) {
        let now = cx.clock.now;
        for key in 0..self.conns.len() {
            if let Some(Some(c)) = self.conns.get_mut(key) {
                c.h3.lost(cx);
                c.conn.close(now, VarInt::from_u32(H3_NO_ERROR), bytes::Bytes::new());
                self.flush(key, cx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits { retry: Http3Retry::UnderLoad, retry_threshold: 4, max_connections: 10, per_ip: 2 };
    const IDLE: Load = Load { stopping: false, open: 0, handshaking: 0, from_ip: PerIp { validated: 0, pending: 0 } };

    fn from_ip(validated: u32, pending: u32) -> Load {
        Load { from_ip: PerIp { validated, pending }, open: (validated + pending) as usize, ..IDLE }
    }

    #[test]
    fn gso_batches_fit_in_one_udp_datagram() {
        assert_eq!(gso_segments(64, 1452), 45);
        assert_eq!(gso_segments(10, 1452), 10);
        assert_eq!(gso_segments(1, 1200), 1);
        assert_eq!(gso_segments(64, 1200), 54);
        assert_eq!(gso_segments(64, 65_527), 1);
        for mtu in [1200u16, 1280, 1452, 1500, 9000, 16_384, 65_507] {
            let n = gso_segments(64, mtu);
            assert!(n * usize::from(mtu) <= MAX_GSO_BYTES && (n + 1) * usize::from(mtu) > MAX_GSO_BYTES, "{mtu}");
        }
    }

    #[test]
    fn retry_policies() {
        let busy = Load { handshaking: 4, open: 4, ..IDLE };
        let below = Load { handshaking: 3, open: 3, ..IDLE };
        for (retry, load, want) in [
            (Http3Retry::Never, busy, Verdict::Accept),
            (Http3Retry::Always, IDLE, Verdict::Retry),
            (Http3Retry::UnderLoad, below, Verdict::Accept),
            (Http3Retry::UnderLoad, busy, Verdict::Retry),
        ] {
            let lim = Limits { retry, ..LIM };
            assert_eq!(admit(&lim, &load, false, true), want, "{retry:?} {load:?}");
            // A validated address, or one that already came after a Retry, is not retried.
            assert_eq!(admit(&lim, &load, true, true), Verdict::Accept, "{retry:?} {load:?}");
            assert_eq!(admit(&lim, &load, false, false), Verdict::Accept, "{retry:?} {load:?}");
        }
    }

    #[test]
    fn refusals() {
        let always = Limits { retry: Http3Retry::Always, ..LIM };
        let stopping = Load { stopping: true, ..IDLE };
        assert_eq!(admit(&always, &stopping, true, true), Verdict::Refuse(Refusal::Stopping));
        let full = Load { open: 10, ..IDLE };
        assert_eq!(admit(&always, &full, false, true), Verdict::Refuse(Refusal::Full));
        assert_eq!(admit(&LIM, &Load { open: 9, ..IDLE }, true, true), Verdict::Accept);
        // Per address: a validated attempt counts the validated connections only; one not
        // validated counts the pending handshakes too and, past the limit, is sent a Retry
        // (refused with retry = "never"); 0 is no limit.
        let never = Limits { retry: Http3Retry::Never, ..LIM };
        assert_eq!(admit(&LIM, &from_ip(2, 0), true, true), Verdict::Refuse(Refusal::PerIp));
        assert_eq!(admit(&LIM, &from_ip(2, 0), false, true), Verdict::Retry);
        assert_eq!(admit(&never, &from_ip(2, 0), false, true), Verdict::Refuse(Refusal::PerIp));
        assert_eq!(admit(&LIM, &from_ip(1, 3), true, true), Verdict::Accept);
        assert_eq!(admit(&LIM, &from_ip(0, 2), false, true), Verdict::Retry);
        assert_eq!(admit(&never, &from_ip(0, 2), false, true), Verdict::Refuse(Refusal::PerIp));
        assert_eq!(admit(&LIM, &from_ip(1, 0), false, true), Verdict::Accept);
        assert_eq!(admit(&always, &from_ip(2, 0), true, true), Verdict::Refuse(Refusal::PerIp));
        assert_eq!(
            admit(&Limits { per_ip: 0, ..LIM }, &Load { open: 0, ..from_ip(9, 9) }, true, true),
            Verdict::Accept
        );
    }
}
