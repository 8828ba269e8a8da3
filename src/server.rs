//! The event loop: one thread, one `mio::Poll`, listeners and connections.
//!
//! Each turn reads the clock once, accepts until `WouldBlock`, drives every connection that
//! had an event or was left on the ready list (its budget was spent), and once a second
//! sweeps deadlines and flushes the access log. Readiness is edge-triggered; every socket is
//! registered once for both directions and never re-registered. Signals arrive through a
//! signalfd in the same poll, and the helper thread's results (`background`, password
//! verification) through a `mio::Waker`: a connection paused for a verification is resumed
//! when its job is reported done.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener as StdListener};
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use socket2::{Domain, Socket, Type};

use crate::access::throttle::THROTTLE_TIME;
use crate::config::{Config, DeferAccept};
use crate::conn::{Conn, ConnState, Drive};
use crate::ctx::{Ctx, Derived, StartError};
use crate::fs::resolve::ResolveOptions;
use crate::status::ConnStates;
use crate::sys::{self, SignalFd};
use crate::upgrade::Role;

/// Connections use tokens from here up; listeners and the signalfd sit below.
const CONN_BASE: usize = 1 << 16;
const SIGNAL_TOKEN: Token = Token(CONN_BASE - 1);
/// The helper thread's wake-ups (finished password verifications).
const WAKE_TOKEN: Token = Token(CONN_BASE - 2);
/// The new process's ready pipe during an upgrade (`upgrade`).
const UPGRADE_TOKEN: Token = Token(CONN_BASE - 3);
/// The QUIC endpoint's UDP sockets (`quic`) use tokens from here up.
#[cfg(feature = "http3")]
const QUIC_BASE: usize = CONN_BASE / 2;
/// The key of the QUIC endpoint's deadline in the timer heap.
#[cfg(feature = "http3")]
const QUIC_TIMER: usize = usize::MAX;
/// How long accepting pauses when the process runs out of descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Running out of descriptors is reported at most this often.
const EMFILE_LOG_EVERY: Duration = Duration::from_secs(60);
/// Timeouts are checked this often.
const TICK: Duration = Duration::from_secs(1);
/// How long, and for how many client addresses, an empty connection that the client ended
/// is remembered to recognise its ghost (`Server::sort_out_ghosts`): as long as the client's
/// side stays in TIME-WAIT (60 s on Linux), since a ghost can be handed over for a port the
/// client reuses in that time. As many open empty connections are indexed by address.
const GHOST_MEMORY: Duration = Duration::from_secs(60);
const GHOSTS_MAX: usize = 65_536;
/// `defer_accept = "auto"`: this many silent connections seen by one sweep (open and
/// waiting for their first byte for `SILENT_AFTER`, or, since the last sweep, closed at
/// their header timeout or ended by the client after that long without one) turn deferred
/// accept on. A client that opens a spare connection it may not use (a browser's
/// preconnect, a TCP health check) stays far below it.
const SILENT_THRESHOLD: usize = 16;
/// Without deferral the request follows its handshake within microseconds; an open
/// connection silent for this long counts.
const SILENT_AFTER: Duration = Duration::from_secs(1);
/// Deferral ends after this many `header_timeout`s (a minute by default) of sweeps below the
/// threshold. While it is on, the kernel still hands over a silent connection after about
/// `header_timeout`, and it waits another `header_timeout` before it ends, so a flood that
/// goes on stays in sight well within this.
const QUIET_TIMEOUTS: u32 = 6;
/// `defer_accept = "auto"` under load: with at least this many connections accepted in a
/// second, deferral goes on when a quarter of them or more came before their request (each
/// then costs a `recvfrom` that finds nothing, an `epoll_ctl` and a wake-up more: wrk at
/// c = 10 and 50 with `Connection: close` had 77–90 % of them so, against 0.5 % for one
/// client at a time), and stays on while accepts come in batches (two or more per drain of
/// the queue: the server is busy, so it has no wake-up to overlap).
const BUSY_ACCEPTS: usize = 64;
/// Deferral taken on for load lasts this long after the load was last seen, unless a second
/// of connections accepted one at a time (each drain of the queue finding one) ends it.
const BUSY_HOLD: Duration = Duration::from_secs(10);

pub struct Server {
    poll: Poll,
    listeners: Vec<TcpListener>,
    conns: Slab<Conn>,
    cx: Ctx,
    ready: Vec<usize>,
    /// Connections held back by a rate limit, by wake-up time.
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Paused connections by the verification job they wait for: (slab key, connection id),
    /// the id telling a reused key apart.
    waiters: HashMap<u64, Vec<(usize, u64)>>,
    last_throttle_update: Instant,
    signals: SignalFd,
    accept_paused_until: Option<Instant>,
    /// A descriptor kept in reserve: on EMFILE it is closed so one pending connection can
    /// be accepted and closed, instead of leaving clients hanging in the queue.
    spare: Option<File>,
    shutdown_deadline: Option<Instant>,
    next_tick: Instant,
    /// When running out of descriptors was last reported, and how often it happened since.
    emfile_logged: Option<Instant>,
    emfile_count: u64,
    reloader: Option<Reloader>,
    /// Client addresses whose connection ended before its first byte: when, and the server
    /// address it had come to.
    ghosts: HashMap<SocketAddr, (Instant, SocketAddr)>,
    /// Open connections that had received nothing when accepted, by client address (some
    /// entries are stale: the connection since got bytes, or closed; checked when used).
    empty_open: HashMap<SocketAddr, usize>,
    /// Which listeners expect a PROXY protocol header (`[server] proxy_protocol`), by index.
    proxy_listeners: Vec<bool>,
    deferral: Deferral,
    /// Listeners from this index on speak TLS (`[tls] listen`, bound after the plain ones).
    #[cfg(feature = "tls")]
    tls_from: usize,
    /// The TLS configuration new TLS connections get (replaced on reload).
    #[cfg(feature = "tls")]
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// SIGUSR2 starts the new binary (ferrohttpd mode, the process started).
    upgrade: Option<Box<crate::upgrade::Upgrade>>,
    /// What each listener is for (socket-activated, or the configured address it serves).
    roles: Vec<Role>,
    /// HTTP/3: the QUIC endpoint (`[http3] enabled`).
    #[cfg(feature = "http3")]
    quic: Option<Box<crate::quic::Quic>>,
}

/// `defer_accept = "auto"`: TCP_DEFER_ACCEPT on the listeners while silent connections come
/// (`Server::adapt_deferral`, once a second). Off, the server's wake-up for a connection
/// overlaps the client's write of its request (one client at a time: 13.0–13.3k against
/// 11.9–12.1k requests/s); on, a connection that sends nothing costs no descriptor and no
/// wake-up. Changing it on a listening socket applies to the handshakes completed after.
struct Deferral {
    /// The listeners it switches, by index: with `"auto"`, those that came without
    /// TCP_DEFER_ACCEPT of their own (a socket from systemd with `DeferAcceptSec=` keeps it).
    managed: Vec<usize>,
    on: bool,
    /// Connections closed with nothing received since the last sweep.
    ended_silent: usize,
    /// Since the last sweep: connections accepted, of them those that had sent nothing yet,
    /// and drains of a listener's queue that accepted any.
    accepted: usize,
    early: usize,
    drains: usize,
    /// When those counts started (the last sweep).
    counted_since: Instant,
    /// The last sweep that saw `SILENT_THRESHOLD` silent connections or more.
    last_flood: Option<Instant>,
    /// The last sweep that saw load (`BUSY_ACCEPTS`).
    last_busy: Option<Instant>,
    /// The error log has said that silent connections came (and not yet that they stopped).
    flood_noted: bool,
}

/// Listening sockets passed by systemd socket activation (`LISTEN_PID`/`LISTEN_FDS`,
/// descriptors from 3 on), if any. The variables are removed so children don't see them.
pub fn activated_listeners() -> Result<Option<Vec<StdListener>>, StartError> {
    let pid_ok = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<i32>().ok());
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let (true, Some(n)) = (pid_ok, count) else { return Ok(None) };
    let mut out = Vec::new();
    for fd in 3..3 + n.max(0) {
        let l = crate::sys::adopt_listener(fd).map_err(|e| StartError(format!("socket activation: {e}")))?;
        out.push(l);
    }
    Ok(Some(out))
}

/// Wraps std listeners (from socket activation) for the event loop.
pub fn from_std(listeners: &[StdListener]) -> Result<Vec<TcpListener>, StartError> {
    listeners
        .iter()
        .map(|l| l.try_clone().map(TcpListener::from_std).map_err(|e| StartError(format!("listener: {e}"))))
        .collect()
}

/// Re-reads the configuration (for SIGHUP): the same command line, parsed again.
pub type Reloader = std::rc::Rc<dyn Fn() -> Result<Config, String>>;

/// Binds every `listen` address. With several workers each binds its own socket with
/// `SO_REUSEPORT`, and the kernel spreads connections over them.
pub fn bind_all(cfg: &Config) -> Result<Vec<TcpListener>, StartError> {
    Ok(bind_all_std(cfg)?.into_iter().map(TcpListener::from_std).collect())
}

/// [`bind_all`], as std listeners (to hand over to a worker process): the plain addresses,
/// then the TLS ones (the server tells them apart by that order).
pub fn bind_all_std(cfg: &Config) -> Result<Vec<StdListener>, StartError> {
    let mut all = bind_std(cfg, &cfg.listen)?;
    all.append(&mut bind_tls_std(cfg)?);
    Ok(all)
}

/// One listening socket for `addr`, as [`bind_all_std`] binds them.
pub fn bind_one_std(cfg: &Config, addr: SocketAddr) -> Result<StdListener, String> {
    bind_std(cfg, &[addr]).map(|mut v| v.remove(0)).map_err(|e| e.0)
}

/// The `[tls] listen` sockets alone (beside socket-activated plain ones).
pub fn bind_tls_std(cfg: &Config) -> Result<Vec<StdListener>, StartError> {
    bind_std(cfg, &cfg.tls.listen)
}

fn bind_std(cfg: &Config, addrs: &[SocketAddr]) -> Result<Vec<StdListener>, StartError> {
    let reuse_port = cfg.workers > 1;
    // "auto" starts without: `Deferral` turns it on when silent connections come.
    let defer = if cfg.defer_accept == DeferAccept::Always { cfg.defer_accept_secs() } else { 0 };
    addrs
        .iter()
        .map(|&addr| {
            bind(addr, cfg.backlog, reuse_port, defer).map_err(|e| StartError(format!("cannot listen on {addr}: {e}")))
        })
        .collect()
}

/// Which of the bound listeners expect a PROXY protocol header: those whose address is in
/// `[server] proxy_protocol` (by the address actually bound, so socket-activated listeners
/// are matched too). An entry that names no listener is a start error, not a silent no-op.
fn proxy_listeners(cfg: &Config, bound: &[TcpListener]) -> Result<Vec<bool>, StartError> {
    let addrs: Vec<Option<SocketAddr>> = bound.iter().map(|l| l.local_addr().ok()).collect();
    if let Some(a) = cfg.proxy_protocol.iter().find(|a| !addrs.contains(&Some(**a))) {
        return Err(StartError(format!(
            "server.proxy_protocol: {a} is not an address the server listens on (listen or tls.listen)"
        )));
    }
    Ok(addrs.iter().map(|a| a.is_some_and(|a| cfg.proxy_protocol.contains(&a))).collect())
}

/// Whether `defer_accept = "auto"` switches this listener: every one the server bound, and
/// a socket-activated one that came without TCP_DEFER_ACCEPT (`DeferAcceptSec=` keeps it).
fn managed_deferral(role: Option<&Role>, l: &TcpListener) -> bool {
    role != Some(&Role::Activated) || sys::defer_accept(l.as_raw_fd()).is_ok_and(|s| s == 0)
}

fn bind(addr: SocketAddr, backlog: u32, reuse_port: bool, defer_secs: u32) -> io::Result<StdListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking().cloexec(), None)?;
    sock.set_reuse_address(true)?;
    if reuse_port {
        sock.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        // "[::]" and "0.0.0.0" can then both be listed, each for its own family.
        sock.set_only_v6(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY: responses go out whole (one sendmsg), so
    // Nagle would only delay the last segment of each.
    sock.set_nodelay(true)?;
    if defer_secs > 0 {
        sys::set_defer_accept(sock.as_raw_fd(), defer_secs)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(StdListener::from(sock))
}

impl Server {
    /// Takes the bound listeners (`roles` says what each is for), opens the root and the
    /// logs, and prepares the loop.
    pub fn new(cfg: Config, bound: Vec<TcpListener>, roles: Vec<Role>) -> Result<Server, StartError> {
        sys::ignore_sigpipe();
        let nofile = sys::raise_nofile_limit().ok();
        let derived = Derived::new(&cfg)?;
        #[cfg(feature = "tls")]
        let tls_from = bound.len().saturating_sub(cfg.tls.listen.len());
        #[cfg(feature = "tls")]
        let (tls, tls_warnings) = match crate::tls::server_config(&cfg, None).map_err(StartError)? {
            Some((c, w)) => (Some(c), w),
            None => (None, Vec::new()),
        };
        #[cfg(feature = "tls")]
        let https_port = bound.get(tls_from).and_then(|l| l.local_addr().ok()).map_or(443, |a| a.port());
        let poll = Poll::new().map_err(|e| StartError(format!("epoll: {e}")))?;
        #[cfg(feature = "http3")]
        let quic = {
            let tls_addrs: Vec<SocketAddr> = bound[tls_from..].iter().filter_map(|l| l.local_addr().ok()).collect();
            let q = crate::quic::Quic::bind(&cfg, tls.as_deref(), &tls_addrs).map_err(StartError)?;
            let mut q = q.map(Box::new);
            if let Some(q) = &mut q {
                q.register(poll.registry(), QUIC_BASE).map_err(|e| StartError(format!("epoll: {e}")))?;
            }
            q
        };
        let proxy_listeners = proxy_listeners(&cfg, &bound)?;
        let mut listeners = Vec::new();
        let mut managed = Vec::new();
        for (i, mut l) in bound.into_iter().enumerate() {
            if cfg.defer_accept == DeferAccept::Auto && managed_deferral(roles.get(i), &l) {
                managed.push(i);
                // Off to start with (a socket from an upgraded process may have it on).
                let _ = sys::set_defer_accept(l.as_raw_fd(), 0);
            }
            poll.registry()
                .register(&mut l, Token(i), Interest::READABLE)
                .map_err(|e| StartError(format!("epoll: {e}")))?;
            listeners.push(l);
        }
        let signals =
            SignalFd::new(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH])
                .map_err(|e| StartError(format!("signalfd: {e}")))?;
        poll.registry()
            .register(&mut SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&signals)), SIGNAL_TOKEN, Interest::READABLE)
            .map_err(|e| StartError(format!("epoll: {e}")))?;

        // One waker per `Poll`: shared by the password verifier and the compressor.
        let waker = std::sync::Arc::new(
            Waker::new(poll.registry(), WAKE_TOKEN).map_err(|e| StartError(format!("epoll: {e}")))?,
        );
        let mut cx = Ctx::new(cfg, derived, waker);
        let next_tick = cx.clock.now + TICK;
        #[cfg(feature = "http3")]
        {
            cx.alt_svc_port = quic.as_ref().and_then(|q| q.local_addrs().first().map(SocketAddr::port));
            cx.render_alt_svc();
        }
        #[cfg(feature = "tls")]
        {
            cx.https_port = https_port;
            for w in tls_warnings {
                cx.errors.log(cx.clock.log_date(), format_args!("warning: {w}"));
            }
        }
        if let Some(n) = nofile {
            let want = cx.cfg.max_connections as u64 + 64;
            if n < want {
                cx.errors.log(
                    cx.clock.log_date(),
                    format_args!(
                        "the descriptor limit ({n}) is below max_connections ({}); connections past it will be refused",
                        cx.cfg.max_connections
                    ),
                );
            }
        }
        Ok(Server {
            poll,
            listeners,
            conns: Slab::new(),
            cx,
            ready: Vec::new(),
            timers: BinaryHeap::new(),
            waiters: HashMap::new(),
            last_throttle_update: Instant::now(),
            signals,
            accept_paused_until: None,
            spare: File::open("/dev/null").ok(),
            shutdown_deadline: None,
            next_tick,
            emfile_logged: None,
            emfile_count: 0,
            reloader: None,
            ghosts: HashMap::new(),
            empty_open: HashMap::new(),
            proxy_listeners,
            deferral: Deferral {
                managed,
                on: false,
                ended_silent: 0,
                accepted: 0,
                early: 0,
                drains: 0,
                counted_since: next_tick,
                last_flood: None,
                last_busy: None,
                flood_noted: false,
            },
            #[cfg(feature = "tls")]
            tls_from,
            #[cfg(feature = "tls")]
            tls,
            upgrade: None,
            roles,
            #[cfg(feature = "http3")]
            quic,
        })
    }

    /// Lets SIGUSR2 upgrade the binary through `u` (ferrohttpd mode, the process started).
    pub fn set_upgrade(&mut self, u: crate::upgrade::Upgrade) {
        self.upgrade = Some(Box::new(u));
    }

    /// Lets SIGHUP reload the configuration through `f`.
    pub fn set_reloader(&mut self, f: Reloader) {
        self.reloader = Some(f);
    }

    /// The bound addresses (with the real port when 0 was asked for).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    pub fn root(&self) -> &std::path::Path {
        self.cx.root.path()
    }

    /// Runs until a graceful shutdown completes.
    pub fn run(mut self) -> io::Result<()> {
        // First, so that the event buffer below takes heap pages start-up gave back.
        crate::sys::release_startup_memory();
        let mut events = Events::with_capacity(1024);
        #[cfg(feature = "acme")]
        if let Some(Err(e)) = self.cx.acme.as_mut().map(crate::acme::Acme::start) {
            self.cx.error(format_args!("{e}"));
        }
        loop {
            let timeout = self.poll_timeout();
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            self.cx.clock.tick();
            for ev in events.iter() {
                match ev.token() {
                    SIGNAL_TOKEN => self.on_signals(),
                    UPGRADE_TOKEN => self.on_upgrade_ready(),
                    WAKE_TOKEN => {
                        self.on_verified();
                        #[cfg(feature = "compression")]
                        self.cx.ondemand.finish();
                        #[cfg(feature = "acme")]
                        self.on_acme();
                    }
                    Token(t) if t < self.listeners.len() => self.accept(t),
                    #[cfg(feature = "http3")]
                    Token(t)
                        if self.quic.as_ref().is_some_and(|q| (QUIC_BASE..QUIC_BASE + q.sockets()).contains(&t)) =>
                    {
                        let (r, w) = (ev.is_readable() || ev.is_error(), ev.is_writable());
                        self.with_quic(|q, cx| q.on_socket(t - QUIC_BASE, r, w, cx));
                    }
                    Token(t) if t >= CONN_BASE => {
                        let key = t - CONN_BASE;
                        if let Some(c) = self.conns.get_mut(key) {
                            let r = ev.is_readable() || ev.is_error();
                            let w = ev.is_writable() || ev.is_write_closed() || ev.is_error();
                            c.ready(r, w, ev.is_read_closed());
                            self.dispatch(key);
                        }
                    }
                    Token(_) => {}
                }
            }
            for key in std::mem::take(&mut self.ready) {
                if let Some(c) = self.conns.get_mut(key) {
                    c.queued = false;
                    self.dispatch(key);
                }
            }
            #[cfg(feature = "http3")]
            if self.quic.as_ref().is_some_and(|q| q.has_more()) {
                self.with_quic(|q, cx| q.read_more(cx));
            }
            let now = self.cx.clock.now;
            while let Some(&Reverse((t, key))) = self.timers.peek() {
                if t > now {
                    break;
                }
                self.timers.pop();
                #[cfg(feature = "http3")]
                if key == QUIC_TIMER {
                    self.with_quic(|q, cx| q.on_timer(t, cx));
                    continue;
                }
                if self.conns.contains(key) {
                    self.dispatch(key);
                }
            }
            if now >= self.last_throttle_update + THROTTLE_TIME {
                self.cx.throttles.update(now.saturating_duration_since(self.last_throttle_update));
                self.last_throttle_update = now;
            }
            if now >= self.next_tick {
                self.next_tick = now + TICK;
                self.sweep(now);
            }
            if let Some(line) = self.upgrade.as_mut().and_then(|u| u.on_timeout(now)) {
                self.cx.error(format_args!("{line}"));
            }
            self.cx.access.flush_due(now);
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                for i in 0..self.listeners.len() {
                    self.accept(i);
                }
            }
            if let Some(deadline) = self.shutdown_deadline {
                if (self.conns.is_empty() && self.quic_idle()) || now >= deadline {
                    // Transfers still going are cut: each is logged with the bytes it sent.
                    let left: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
                    for key in left {
                        self.close(key);
                    }
                    #[cfg(feature = "http3")]
                    self.with_quic(|q, cx| q.close_all(cx));
                    self.cx.access.flush();
                    return Ok(());
                }
            }
        }
    }

    fn poll_timeout(&self) -> Option<Duration> {
        #[cfg(feature = "http3")]
        if self.quic.as_ref().is_some_and(|q| q.has_more()) {
            return Some(Duration::ZERO);
        }
        if !self.ready.is_empty() {
            return Some(Duration::ZERO);
        }
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if !self.conns.is_empty() {
            consider(Some(self.next_tick));
        }
        consider(self.cx.access.deadline());
        consider(self.timers.peek().map(|Reverse((t, _))| *t));
        consider(self.accept_paused_until);
        consider(self.shutdown_deadline);
        consider(self.upgrade.as_ref().and_then(|u| u.deadline()));
        // Round up so the wake-up is never a hair early. From the turn's time, not a second
        // clock read per turn: it is earlier than now, so the wait errs long by the turn's
        // own work (microseconds), never short.
        next.map(|t| t.saturating_duration_since(self.cx.clock.now) + Duration::from_millis(1))
    }

    fn accept(&mut self, i: usize) {
        if self.accept_paused_until.is_some() || self.shutdown_deadline.is_some() {
            return;
        }
        let mut accepted = 0;
        loop {
            let Some(listener) = self.listeners.get(i) else {
                return;
            };
            match listener.accept() {
                Ok((sock, addr)) => {
                    let ip = addr.ip().to_canonical();
                    // Behind a PROXY header the client is not known yet: it is counted then.
                    let proxied = self.proxy_listeners.get(i).copied().unwrap_or(false);
                    if self.conns.len() >= self.cx.cfg.max_connections || (!proxied && !self.cx.admit_ip(ip)) {
                        // Full: close at once so the queue drains and the client knows.
                        self.cx.counters.refused += 1;
                        drop(sock);
                        continue;
                    }
                    self.cx.counters.accepted += 1;
                    let conn = Conn::new(sock, ip, &self.cx);
                    #[cfg(feature = "tls")]
                    let conn = match (&self.tls, i >= self.tls_from) {
                        (Some(config), true) => match crate::tls::TlsState::new(config) {
                            Ok(t) => conn.with_tls(t, &self.cx),
                            Err(e) => {
                                self.cx.error(format_args!("tls: {e}"));
                                continue;
                            }
                        },
                        _ => conn,
                    };
                    let conn = if proxied { conn.expect_proxy_header(&self.cx) } else { conn };
                    let entry = self.conns.vacant_entry();
                    let key = entry.key();
                    entry.insert(conn);
                    // The request usually arrives with (or right after) the handshake: serve
                    // it now. The socket joins the epoll set only if the connection has to
                    // wait (`dispatch`), so a request answered at once with
                    // `Connection: close` costs no epoll_ctl at all.
                    self.dispatch(key);
                    self.sort_out_ghosts(key, addr);
                    accepted += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if accepted > 0 {
                        self.deferral.accepted += accepted;
                        self.deferral.drains += 1;
                    }
                    return;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        self.out_of_descriptors(i, &e);
                        return;
                    }
                    Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO | libc::EPERM) => {}
                    _ => {
                        let addr = self.listeners[i].local_addr().ok();
                        self.cx.error(format_args!("accept on {addr:?}: {e}"));
                        self.accept_paused_until = Some(self.cx.clock.now + ACCEPT_PAUSE);
                        return;
                    }
                },
            }
        }
    }

    /// Two connections from one client address and port to one server address and port: the
    /// one that has received nothing is a ghost, and is reset at once. A client cannot have two
    /// connections with the same four addresses, so when the server holds two, the empty one
    /// is dead. (It can have two from one port to two of the server's addresses or ports at
    /// once: Linux shares a client's ports between destinations. Keyed by the client's address
    /// alone, a connection to the TLS listener still waiting for its ClientHello was reset
    /// when the same port connected to the plain one.) The server's side is looked up only
    /// when the client's matches.
    ///
    /// After a burst that overflows the listen queues (deferred accept: SYN-queue entries,
    /// SYN cookies and a full accept queue at once), the kernel can hand over two sockets for
    /// one client address and port, with different initial sequence numbers: one takes the
    /// client's FIN (it reads 0 and is closed at once), the other is an established socket
    /// that never sees another segment — the client's side is in TIME-WAIT for the first one,
    /// answers whatever the ghost sends with ACKs that fit nothing, and never resets it.
    /// Nothing from the kernel ever ends the ghost: it waited out `header_timeout` and then
    /// sat in FIN-WAIT-1. The ghost may come second (then the first is in `ghosts`, ended
    /// empty within the last minute) or first (then it is in `empty_open`). Connections
    /// that bring their request with the handshake, as deferred accept makes all of them
    /// normally, cost one `is_empty` test each here.
    fn sort_out_ghosts(&mut self, key: usize, addr: SocketAddr) {
        if !self.empty_open.is_empty() {
            if let Some(old) = self.empty_open.remove(&addr) {
                let here = self.conns.get_mut(key).and_then(|c| c.socket().local_addr().ok());
                let dead = old != key
                    && here.is_some()
                    && self.conns.get_mut(old).is_some_and(|c| {
                        let s = c.socket();
                        s.peer_addr().ok() == Some(addr) && s.local_addr().ok() == here && c.received_nothing(false)
                    });
                if dead {
                    self.reset_ghost(old);
                }
            }
        }
        if !self.conns.get(key).is_some_and(|c| c.received_nothing(false)) {
            return;
        }
        // Accepted before its request (for `adapt_deferral`).
        self.deferral.early += 1;
        // Without deferral a connection often comes before its request (and a load
        // generator's next run reuses the ports of connections it closed empty): only a
        // deferring listener makes an empty one suspect.
        let ghost = match self.ghosts.get(&addr) {
            Some(&(_, server)) if self.cx.deferring => {
                self.conns.get_mut(key).is_some_and(|c| c.socket().local_addr().ok() == Some(server))
            }
            _ => false,
        };
        if ghost {
            self.reset_ghost(key);
        } else if self.empty_open.len() < GHOSTS_MAX {
            self.empty_open.insert(addr, key);
        }
    }

    /// Closes a ghost with a reset, not a FIN the client's side would never acknowledge.
    fn reset_ghost(&mut self, key: usize) {
        if let Some(c) = self.conns.get_mut(key) {
            sys::abort_on_close(c.socket().as_raw_fd());
            self.cx.counters.refused += 1;
            self.close(key);
        }
    }

    /// Rebuilds the per-IP counts from the connections open now (after a reload changed the
    /// limit: from 0 nothing was counted, and every open connection must count against the
    /// new limit, or closing it would later take a slot from a newer one).
    fn recount_per_ip(&mut self) {
        self.cx.per_ip.clear();
        if self.cx.cfg.max_connections_per_ip == 0 {
            return;
        }
        for ip in self.conns.iter().filter_map(|(_, c)| c.counted_ip()) {
            *self.cx.per_ip.entry(ip).or_insert(0) += 1;
        }
    }

    fn release_ip(&mut self, ip: IpAddr) {
        if self.cx.cfg.max_connections_per_ip == 0 {
            return;
        }
        if let Some(n) = self.cx.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.cx.per_ip.remove(&ip);
            }
        }
    }

    /// EMFILE and friends: shed one waiting client with the spare descriptor, then pause
    /// accepting briefly. Never a busy loop, never an exit.
    fn out_of_descriptors(&mut self, i: usize, e: &io::Error) {
        if self.spare.take().is_some() {
            if let Ok((sock, _)) = self.listeners[i].accept() {
                drop(sock);
            }
            self.spare = File::open("/dev/null").ok();
        }
        // Said once a minute at most, with how often it happened meanwhile.
        self.emfile_count += 1;
        let now = self.cx.clock.now;
        if self.emfile_logged.is_none_or(|t| now.saturating_duration_since(t) >= EMFILE_LOG_EVERY) {
            self.cx.error(format_args!(
                "accept: {e} with {} connections open ({} times since the last report); pausing accepts for {} ms each time",
                self.conns.len(),
                self.emfile_count,
                ACCEPT_PAUSE.as_millis()
            ));
            self.emfile_logged = Some(now);
            self.emfile_count = 0;
        }
        self.accept_paused_until = Some(now + ACCEPT_PAUSE);
    }

    /// Drives one connection, containing any panic to that connection.
    fn dispatch(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let cx = &mut self.cx;
        let outcome = catch_unwind(AssertUnwindSafe(|| conn.drive(cx)));
        if matches!(outcome, Ok(Drive::Wait | Drive::Sleep(_) | Drive::Yield | Drive::Pause(_))) && !conn.registered {
            // Registering reports readiness that is already there, so nothing that arrived
            // since the last read is missed (edge-triggered: EPOLL_CTL_ADD checks the state).
            let token = Token(CONN_BASE + key);
            match self.poll.registry().register(conn.socket(), token, Interest::READABLE | Interest::WRITABLE) {
                Ok(()) => conn.registered = true,
                Err(e) => {
                    self.cx.error(format_args!("epoll register: {e}"));
                    self.close(key);
                    return;
                }
            }
        }
        match outcome {
            Ok(Drive::Wait) => {}
            Ok(Drive::Sleep(t)) => self.timers.push(Reverse((t, key))),
            Ok(Drive::Pause(job)) => {
                // An HTTP/2 connection may have several streams waiting, on different jobs.
                for job in std::iter::once(job).chain(conn.more_jobs()) {
                    self.waiters.entry(job).or_default().push((key, conn.id()));
                }
            }
            Ok(Drive::Yield) => {
                if !conn.queued {
                    conn.queued = true;
                    self.ready.push(key);
                }
            }
            Ok(Drive::Close) => self.close(key),
            Err(_) => {
                let peer = conn.peer;
                self.cx.error(format_args!("internal error while serving {peer}; connection closed"));
                self.close(key);
            }
        }
    }

    /// The helper thread finished verifications: each outcome is remembered, then the
    /// connections waiting for it are resumed and driven (one job at a time, so an outcome
    /// is still remembered when its waiters look for it).
    fn on_verified(&mut self) {
        while let Some(job) = self.cx.auth.finish() {
            #[cfg(feature = "http3")]
            self.with_quic(|q, cx| q.resume(job, cx));
            for (key, id) in self.waiters.remove(&job).unwrap_or_default() {
                if let Some(c) = self.conns.get_mut(key).filter(|c| c.id() == id) {
                    c.resume();
                    self.dispatch(key);
                }
            }
        }
    }

    fn close(&mut self, key: usize) {
        if self.conns.contains(key) {
            let mut conn = self.conns.remove(key);
            let ended_empty = conn.received_nothing(true);
            if ended_empty && self.ghosts.len() < GHOSTS_MAX {
                // Ended by the client before its first byte: remembered for `sort_out_ghosts`.
                if let (Ok(a), Ok(server)) = (conn.socket().peer_addr(), conn.socket().local_addr()) {
                    self.ghosts.insert(a, (self.cx.clock.now, server));
                }
            }
            // Silent: closed by the server while still empty (its header timeout), or ended
            // by the client after holding a descriptor for nothing for `SILENT_AFTER`. One
            // that connects and closes at once (wrk stopping, with its next connections just
            // opened) cost an accept, not a descriptor, and is no flood.
            let now = self.cx.clock.now;
            if conn.received_nothing(false) || conn.silent_for(now, true).is_some_and(|t| t >= SILENT_AFTER) {
                self.deferral.ended_silent += 1;
            }
            conn.release(&mut self.cx);
            if let Some(ip) = conn.counted_ip() {
                self.release_ip(ip);
            }
            // Dropping the stream closes it, which also removes it from the epoll set.
        }
    }

    /// Closes every connection whose deadline has passed, and counts connection states.
    fn sweep(&mut self, now: Instant) {
        let mut states = ConnStates::default();
        let mut silent = std::mem::take(&mut self.deferral.ended_silent);
        for (_, c) in self.conns.iter() {
            silent += usize::from(c.silent_for(now, false).is_some_and(|t| t >= SILENT_AFTER));
            match c.state() {
                ConnState::Idle => states.idle += 1,
                ConnState::Reading => states.reading += 1,
                ConnState::Writing => states.writing += 1,
                ConnState::Closing => states.closing += 1,
            }
        }
        self.cx.conn_states = states;
        self.adapt_deferral(now, silent);
        self.ghosts.retain(|_, (t, _)| now.saturating_duration_since(*t) < GHOST_MEMORY);
        let conns = &self.conns;
        self.empty_open.retain(|_, k| conns.get(*k).is_some_and(|c| c.received_nothing(false)));
        let cx = &self.cx;
        let expired: Vec<usize> = self.conns.iter().filter(|(_, c)| c.expired(now, cx)).map(|(k, _)| k).collect();
        for key in expired {
            if self.conns.get(key).is_some_and(Conn::awaiting_proxy) {
                self.cx.counters.proxy_errors += 1;
            }
            if let Some(c) = self.conns.get_mut(key) {
                c.expire(&mut self.cx);
            }
            self.close(key);
        }
    }

    /// `defer_accept = "auto"`: deferral on while silent connections come (this sweep saw
    /// `silent` at or above the threshold; off after `QUIET_TIMEOUTS` header timeouts below
    /// it), or while the load makes it pay (`BUSY_ACCEPTS`; off `BUSY_HOLD` after). A switch
    /// for silent connections is one line in the error log; every switch on is counted on
    /// the status page. (Connections already accepted stay until their `header_timeout`.)
    fn adapt_deferral(&mut self, now: Instant, silent: usize) {
        let d = &mut self.deferral;
        let (accepted, early, drains) =
            (std::mem::take(&mut d.accepted), std::mem::take(&mut d.early), std::mem::take(&mut d.drains));
        if d.managed.is_empty() {
            return;
        }
        let flood = silent >= SILENT_THRESHOLD;
        if flood {
            d.last_flood = Some(now);
        }
        // Off, connections that come before their request show the load; on, the kernel
        // hands over only complete ones, and batches show it. Counts that span an idle
        // stretch without sweeps are no measure of a second.
        let second = now.saturating_duration_since(std::mem::replace(&mut d.counted_since, now)) <= 2 * TICK;
        let busy =
            second && accepted >= BUSY_ACCEPTS && if d.on { accepted >= 2 * drains } else { early * 4 >= accepted };
        if busy || (!second && d.last_busy.is_some()) {
            // (After an idle stretch, the hold starts again: the load that comes next shows
            // itself in the following second.)
            d.last_busy = Some(now);
        } else if d.on && second && accepted >= SILENT_THRESHOLD && accepted < 2 * drains {
            // Connections one at a time: the server waits for each, and deferral only
            // takes away the overlap.
            d.last_busy = None;
        }
        let quiet = self.cx.cfg.header_timeout * QUIET_TIMEOUTS;
        let within = |t: Option<Instant>, span: Duration| t.is_some_and(|t| now.saturating_duration_since(t) < span);
        let flooded = within(d.last_flood, quiet);
        let on = flooded || within(d.last_busy, BUSY_HOLD);
        if flooded && !d.flood_noted {
            d.flood_noted = true;
            self.cx.errors.log(
                self.cx.clock.log_date(),
                format_args!(
                    "notice: {silent} connections silent in the last second: accepting only connections that have \
                     sent data (TCP_DEFER_ACCEPT) until none come for {} s",
                    quiet.as_secs()
                ),
            );
        } else if !on && d.flood_noted {
            d.flood_noted = false;
            self.cx.errors.log(
                self.cx.clock.log_date(),
                format_args!(
                    "notice: no silent connections for {} s: accepting connections at once again",
                    quiet.as_secs()
                ),
            );
        }
        if on == d.on {
            return;
        }
        let secs = if on { self.cx.cfg.defer_accept_secs() } else { 0 };
        let mut failed = None;
        for &i in &d.managed {
            if let Some(l) = self.listeners.get(i) {
                if let Err(e) = sys::set_defer_accept(l.as_raw_fd(), secs) {
                    failed = Some(e);
                }
            }
        }
        d.on = on;
        self.cx.deferring = on;
        if on {
            self.cx.counters.defer_switches += 1;
        }
        if let Some(e) = failed {
            self.cx.error(format_args!("TCP_DEFER_ACCEPT: {e}"));
        }
    }

    fn on_signals(&mut self) {
        while let Some(sig) = self.signals.read() {
            if self.cx.cfg.thttpd.enabled {
                self.on_thttpd_signal(sig);
                continue;
            }
            match sig {
                libc::SIGTERM | libc::SIGINT => {
                    if self.shutdown_deadline.is_some() {
                        // Asked twice: stop now.
                        self.shutdown_deadline = Some(self.cx.clock.now);
                    } else {
                        self.begin_shutdown();
                    }
                }
                libc::SIGHUP => {
                    self.reopen_logs();
                    self.reload();
                    crate::sys::release_startup_memory();
                }
                libc::SIGUSR1 => self.reopen_logs(),
                libc::SIGUSR2 => self.upgrade_binary(),
                // From the parent of workers whose new binary serves (`workers`): end as
                // after an upgrade.
                libc::SIGWINCH if self.shutdown_deadline.is_none() => {
                    self.log_stats();
                    self.wind_down(Some(crate::upgrade::IDLE_GRACE));
                }
                _ => {}
            }
        }
    }

    /// SIGUSR2 in ferrohttpd mode: starts the new binary with the listening sockets
    /// (`upgrade`). A process that cannot upgrade (a worker) logs its statistics instead.
    fn upgrade_binary(&mut self) {
        if self.shutdown_deadline.is_some() {
            return;
        }
        let Some(u) = self.upgrade.as_mut() else { return self.log_stats() };
        match u.start_with(&self.listeners, &self.roles, self.poll.registry(), UPGRADE_TOKEN, self.cx.clock.now) {
            Ok(line) => self.cx.error(format_args!("{line}")),
            Err(e) => self.cx.error(format_args!("upgrade failed, still serving: {e}")),
        }
    }

    /// The new process's ready pipe: once it serves, this one logs its statistics and ends
    /// as on SIGTERM; if it failed, this one keeps serving.
    fn on_upgrade_ready(&mut self) {
        let Some(u) = self.upgrade.as_mut() else { return };
        match u.on_ready() {
            crate::upgrade::Progress::Waiting => {}
            crate::upgrade::Progress::Serving(pid) => {
                self.log_stats();
                self.cx.error(format_args!(
                    "upgrade: process {pid} serves; this one stops accepting and exits once its responses are sent"
                ));
                // Already ending (SIGTERM came meanwhile): keep that deadline.
                if self.shutdown_deadline.is_none() {
                    self.wind_down(Some(crate::upgrade::IDLE_GRACE));
                }
            }
            crate::upgrade::Progress::Failed(why) => {
                self.cx.error(format_args!("upgrade failed, still serving: {why}"))
            }
        }
    }

    /// thttpd's meanings: HUP reopens the log, USR1 stops accepting and exits once the
    /// transfers in flight are done, USR2 logs statistics, INT and TERM exit at once.
    fn on_thttpd_signal(&mut self, sig: libc::c_int) {
        match sig {
            libc::SIGHUP => self.reopen_logs(),
            libc::SIGUSR1 if self.shutdown_deadline.is_none() => {
                self.begin_shutdown();
                // No time limit: thttpd waits for every transfer.
                self.shutdown_deadline = Some(self.cx.clock.now + Duration::from_secs(365 * 86_400));
            }
            libc::SIGUSR2 => self.log_stats(),
            libc::SIGTERM | libc::SIGINT => {
                self.begin_shutdown();
            }
            _ => {}
        }
    }

    /// One line of counters in the error log (USR2).
    fn log_stats(&mut self) {
        let c = &self.cx.counters;
        let line = format!(
            "stats: {} connections open, {} accepted, {} requests, {} bytes sent, responses 2xx {} 3xx {} 4xx {} 5xx {}, cache {} entries {} hits {} misses",
            self.conns.len(),
            c.accepted,
            c.requests,
            c.bytes,
            c.classes[2],
            c.classes[3],
            c.classes[4],
            c.classes[5],
            self.cx.cache.len(),
            self.cx.cache.stats.hits,
            self.cx.cache.stats.misses
        );
        self.cx.error(format_args!("{line}"));
    }

    fn reopen_logs(&mut self) {
        if let Err(e) = self.cx.access.reopen() {
            self.cx.error(format_args!("reopening the access log: {e}"));
        }
        if let Err(e) = self.cx.errors.reopen() {
            eprintln!("ferrohttpd: reopening the error log: {e}");
        }
    }

    /// Loads the files of `[cache] preload` into the cache. Called once the process runs as
    /// the user it serves as (after `-u`), and again after a reload: a file opened as root
    /// would stay readable through the cache although the serving user may not open it.
    pub fn preload(&mut self) {
        let cx = &mut self.cx;
        for dir in cx.cfg.cache_preload.clone() {
            let opts = ResolveOptions {
                symlinks: cx.cfg.symlinks,
                dotfiles: cx.cfg.dotfiles,
                index: &cx.cfg.index,
                site_depth: 0,
            };
            let n = cx.cache.preload(&cx.root, &dir, &opts, &cx.mime, cx.clock.now, cx.clock.unix_secs());
            if n == 0 {
                cx.errors.log(cx.clock.log_date(), format_args!("cache.preload: no files loaded from {dir}"));
            }
        }
    }

    /// What the ACME thread said: its log lines, and a new certificate, which new
    /// handshakes get from here on (the TLS configuration is rebuilt as on reload).
    #[cfg(feature = "acme")]
    fn on_acme(&mut self) {
        let Some(acme) = self.cx.acme.as_mut() else { return };
        let (logs, installed) = acme.take_events();
        for l in logs {
            self.cx.error(format_args!("{l}"));
        }
        if installed {
            let previous = self.tls.as_deref().map(|sc| (&self.cx.cfg, sc));
            match crate::tls::server_config(&self.cx.cfg, previous) {
                Ok(built) => {
                    let (tls, warnings) = built.map_or((None, Vec::new()), |(c, w)| (Some(c), w));
                    self.tls = tls;
                    for w in warnings {
                        self.cx.error(format_args!("warning: {w}"));
                    }
                }
                Err(e) => self.cx.error(format_args!("acme: the new certificate cannot be served: {e}")),
            }
        }
    }

    /// Re-reads the configuration; a configuration that fails to load or to apply is
    /// reported and the running one stays in force.
    fn reload(&mut self) {
        let Some(f) = self.reloader.clone() else { return };
        let result = f().and_then(|new| self.apply(new));
        match result {
            Ok(()) => {
                self.cx.error(format_args!("configuration reloaded"));
                self.preload();
                // HTTP/2 connections drain: GOAWAY, their streams finish, they close.
                let drain: Vec<usize> = self.conns.iter_mut().filter_map(|(k, c)| c.go_away().then_some(k)).collect();
                for key in drain {
                    self.dispatch(key);
                }
            }
            Err(e) => self.cx.error(format_args!("configuration reload failed, still serving the previous one: {e}")),
        }
    }

    fn apply(&mut self, mut new: Config) -> Result<(), String> {
        if new.workers > 1 && (new.listen != self.cx.cfg.listen || new.tls.listen != self.cx.cfg.tls.listen) {
            // Each worker accepts on its set of the parent's sockets (`workers`).
            self.cx.error(format_args!(
                "with workers > 1, listen addresses change with an upgrade (SIGUSR2), not a reload; keeping the current ones"
            ));
            new.listen = self.cx.cfg.listen.clone();
            new.tls.listen = self.cx.cfg.tls.listen.clone();
        }
        if new.workers != self.cx.cfg.workers {
            self.cx.error(format_args!("the number of workers cannot change without a restart"));
            new.workers = self.cx.cfg.workers;
        }
        if new.proxy_protocol != self.cx.cfg.proxy_protocol {
            self.cx
                .error(format_args!("server.proxy_protocol cannot change without a restart; keeping the current one"));
            new.proxy_protocol = self.cx.cfg.proxy_protocol.clone();
        }
        #[cfg(feature = "http3")]
        if (new.http3.enabled, &new.http3.listen) != (self.cx.cfg.http3.enabled, &self.cx.cfg.http3.listen) {
            self.cx.error(format_args!(
                "http3.enabled and http3.listen cannot change without a restart; keeping the current ones"
            ));
            new.http3.enabled = self.cx.cfg.http3.enabled;
            new.http3.listen = self.cx.cfg.http3.listen.clone();
        }
        if new.acme != self.cx.cfg.acme {
            self.cx.error(format_args!("[acme] cannot change without a restart; keeping the current settings"));
            new.acme = self.cx.cfg.acme.clone();
        }
        // Certificates are read again: a renewed one serves new connections, while those in
        // flight finish with the one they started with. One that fails keeps the old.
        #[cfg(feature = "tls")]
        if new.tls.ticket_lifetime != self.cx.cfg.tls.ticket_lifetime && new.tls.ticket_key_file.is_none() {
            // Every worker must agree on the periods of the generated ticket keys.
            self.cx.error(format_args!(
                "tls.ticket_lifetime cannot change without a restart when the ticket keys are generated; keeping {} s",
                self.cx.cfg.tls.ticket_lifetime.as_secs()
            ));
            new.tls.ticket_lifetime = self.cx.cfg.tls.ticket_lifetime;
        }
        #[cfg(feature = "tls")]
        let previous = self.tls.as_deref().map(|sc| (&self.cx.cfg, sc));
        #[cfg(feature = "tls")]
        let (tls, tls_warnings) = match crate::tls::server_config(&new, previous)? {
            Some((c, w)) => (Some(c), w),
            None => (None, Vec::new()),
        };
        let derived = Derived::new(&new).map_err(|e| e.0)?;
        // The listen addresses last: once they change, nothing else can fail.
        if new.listen != self.cx.cfg.listen || new.tls.listen != self.cx.cfg.tls.listen {
            self.relisten(&new)?;
        }
        #[cfg(feature = "tls")]
        {
            self.tls = tls;
            for w in tls_warnings {
                self.cx.error(format_args!("warning: {w}"));
            }
        }
        // New HTTP/3 connections get the new certificates and `[http3]` settings.
        #[cfg(feature = "http3")]
        if let (Some(q), Some(t)) = (&mut self.quic, &self.tls) {
            if let Err(e) = q.reconfigure(&new, t) {
                self.cx.error(format_args!("{e}; HTTP/3 keeps the previous configuration"));
            }
        }
        if self.cx.reconfigure(new, derived) {
            self.recount_per_ip();
        }
        Ok(())
    }

    /// SIGHUP with other listen addresses: the kept ones keep their socket (and its queue),
    /// the new ones are bound, the removed ones closed. A bind that fails changes nothing.
    fn relisten(&mut self, new: &Config) -> Result<(), String> {
        let (bound, roles) = crate::upgrade::relisten(new, &self.listeners, &self.roles, |a| bind_one_std(new, a))?;
        let mut fresh: Vec<TcpListener> = bound.into_iter().map(TcpListener::from_std).collect();
        let proxy = proxy_listeners(new, &fresh).map_err(|e| e.0)?;
        let registry = self.poll.registry();
        for mut l in self.listeners.drain(..) {
            let _ = registry.deregister(&mut l);
        }
        for (i, l) in fresh.iter_mut().enumerate() {
            if let Err(e) = registry.register(l, Token(i), Interest::READABLE) {
                self.cx.error(format_args!("epoll: {e}: a listener is not served"));
            }
        }
        let addrs: Vec<String> = fresh.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.to_string()).collect();
        self.listeners = fresh;
        self.proxy_listeners = proxy;
        // Socket-activated listeners come first and stay as they were; every other one is
        // the server's to switch.
        let was_managed = std::mem::take(&mut self.deferral.managed);
        for (i, l) in self.listeners.iter().enumerate() {
            let managed = roles.get(i) != Some(&Role::Activated) || was_managed.contains(&i);
            if new.defer_accept == DeferAccept::Auto && managed {
                self.deferral.managed.push(i);
                let secs = if self.deferral.on { new.defer_accept_secs() } else { 0 };
                let _ = sys::set_defer_accept(l.as_raw_fd(), secs);
            }
        }
        #[cfg(feature = "tls")]
        {
            self.tls_from = roles.iter().filter(|r| !matches!(r, Role::Tls(_))).count();
            self.cx.https_port =
                self.listeners.get(self.tls_from).and_then(|l| l.local_addr().ok()).map_or(443, |a| a.port());
        }
        self.roles = roles;
        self.cx.error(format_args!("listening on {}", addrs.join(" ")));
        Ok(())
    }

    /// Stops accepting, closes idle connections, and lets responses in flight finish
    /// within `shutdown_timeout`.
    fn begin_shutdown(&mut self) {
        self.wind_down(None);
    }

    /// [`Self::begin_shutdown`]; after an upgrade, idle keep-alive connections get
    /// `idle_grace` in which a request that comes is still answered (with `Connection:
    /// close`) instead of racing the close; those idle throughout are closed then.
    fn wind_down(&mut self, idle_grace: Option<Duration>) {
        self.shutdown_deadline = Some(self.cx.clock.now + self.cx.cfg.shutdown_timeout);
        for mut l in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        // HTTP/3: GOAWAY on every connection; idle ones close at once.
        #[cfg(feature = "http3")]
        self.with_quic(|q, cx| q.go_away(cx));
        let idle: Vec<usize> = self.conns.iter().filter(|(_, c)| c.is_idle()).map(|(k, _)| k).collect();
        for key in idle {
            match (idle_grace, self.conns.get_mut(key)) {
                (Some(grace), Some(c)) => c.deadline = c.deadline.min(self.cx.clock.now + grace),
                _ => self.close(key),
            }
        }
        let mut drive = Vec::new();
        for (key, c) in self.conns.iter_mut() {
            if c.stop_keepalive() {
                drive.push(key);
            }
        }
        // HTTP/2 connections: their GOAWAY goes out now, and an idle one closes.
        for key in drive {
            self.dispatch(key);
        }
    }
}

/// The hooks of the QUIC endpoint (`quic`): its sockets' events, its timer, verifications
/// done, graceful ends.
impl Server {
    /// Runs `f` on the QUIC endpoint, if any, then puts its next deadline in the timer heap.
    #[cfg(feature = "http3")]
    fn with_quic(&mut self, f: impl FnOnce(&mut crate::quic::Quic, &mut Ctx)) {
        let Some(q) = &mut self.quic else { return };
        f(q, &mut self.cx);
        if let Some(t) = q.rearm(self.cx.clock.now) {
            self.timers.push(Reverse((t, QUIC_TIMER)));
        }
    }

    /// No HTTP/3 connection is open (a graceful end can complete).
    fn quic_idle(&self) -> bool {
        #[cfg(feature = "http3")]
        if self.quic.as_ref().is_some_and(|q| q.connections() > 0) {
            return false;
        }
        true
    }
}
