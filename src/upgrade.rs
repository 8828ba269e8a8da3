//! Upgrading the binary in place (`SIGUSR2` in ferrohttpd mode), as nginx does: no
//! connection is refused or cut.
//!
//! The old process starts the binary found at the path it was itself started from (resolved
//! to an absolute path at start-up, so a package upgrade that replaced the file is picked
//! up), with the same arguments, and hands it every listening socket as an inherited
//! descriptor, described in `FERROHTTPD_UPGRADE_FDS` (`FD:a` for a socket-activated one,
//! `FD:p:ADDR` and `FD:t:ADDR` for a plain or TLS one bound for the configured `ADDR`,
//! `FD:uN:ADDR` for HTTP/3's UDP socket number N, whose steering state goes in
//! `FERROHTTPD_UPGRADE_QUIC`: `quic::steer`, which also switches new HTTP/3 connections to
//! the new process when it says it serves). The
//! new process re-reads its configuration, keeps the inherited sockets it still listens on
//! (matched by the configured address, or by the bound one), binds the new ones, closes the
//! rest, and once its listeners are registered writes one byte to the pipe named by
//! `FERROHTTPD_UPGRADE_READY`. Only then does the old process stop accepting and end as on
//! `SIGTERM`: the sockets stay open in the new process, so connections waiting in their
//! queues are accepted there, and none is refused in between.
//!
//! A new process that exits, closes the pipe, or says nothing within [`READY_TIMEOUT`]
//! changes nothing: the old one logs why and keeps serving. The generated TLS session-ticket
//! secret goes over a second pipe (`FERROHTTPD_UPGRADE_TICKETS`), written before the new
//! process starts and read once by it: it is never on disk, and no other descriptor of the
//! old process is inherited (everything is opened close-on-exec; the handed-over ones are
//! made inheritable in the child only, between fork and exec).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::config::Config;

/// The handed-over listening sockets.
pub const ENV_FDS: &str = "FERROHTTPD_UPGRADE_FDS";
/// The pipe the new process writes one byte to once it serves.
pub const ENV_READY: &str = "FERROHTTPD_UPGRADE_READY";
/// The pipe the generated TLS ticket secret is read from.
pub const ENV_TICKETS: &str = "FERROHTTPD_UPGRADE_TICKETS";
/// The state that goes with the handed-over HTTP/3 sockets (`quic::steer`).
pub const ENV_QUIC: &str = "FERROHTTPD_UPGRADE_QUIC";
/// How long the old process waits for the new one to say it serves.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// After the new process serves, how long the old one still answers a request on an idle
/// keep-alive connection (with `Connection: close`) before closing it.
pub const IDLE_GRACE: Duration = Duration::from_secs(1);

/// What a listening socket is for, as handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Passed by systemd socket activation (plain; the configuration's `listen` is ignored).
    Activated,
    /// Bound for this `listen` address (as configured: the port may be 0).
    Plain(SocketAddr),
    /// Bound for this `[tls] listen` address.
    Tls(SocketAddr),
    /// An HTTP/3 UDP socket bound for this address (its set is its number in the reuseport
    /// group, `quic::steer`).
    Quic(SocketAddr),
}

/// A listening socket to hand over: its descriptor, its role, and the worker whose set it
/// belongs to (`workers = N` binds a set per worker; 0 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handed {
    pub fd: RawFd,
    pub role: Role,
    pub set: usize,
}

impl Handed {
    /// `FD:KIND[SET][:ADDR]`: `a` socket-activated, `p` plain, `t` TLS, `u` HTTP/3's UDP;
    /// the set if not 0.
    fn encode(self) -> String {
        let set = if self.set == 0 { String::new() } else { self.set.to_string() };
        let fd = self.fd;
        match self.role {
            Role::Activated => format!("{fd}:a{set}"),
            Role::Plain(a) => format!("{fd}:p{set}:{a}"),
            Role::Tls(a) => format!("{fd}:t{set}:{a}"),
            Role::Quic(a) => format!("{fd}:u{set}:{a}"),
        }
    }

    fn decode(item: &str) -> Option<Handed> {
        let mut parts = item.splitn(3, ':');
        let fd: RawFd = parts.next()?.parse().ok().filter(|&fd| fd > 2)?;
        let kind = parts.next()?;
        let (k, set) = kind.split_at_checked(1)?;
        let set: usize = if set.is_empty() { 0 } else { set.parse().ok().filter(|&n| n > 0)? };
        let role = match (k, parts.next()) {
            ("a", None) => Role::Activated,
            ("p", Some(a)) => Role::Plain(a.parse().ok()?),
            ("t", Some(a)) => Role::Tls(a.parse().ok()?),
            ("u", Some(a)) => Role::Quic(a.parse().ok()?),
            _ => return None,
        };
        Some(Handed { fd, role, set })
    }
}

/// The roles of the listeners a start-up made, in the server's order: the socket-activated
/// ones (`activated` of them) or else the `listen` addresses, then the `[tls] listen` ones.
pub fn roles(cfg: &Config, activated: Option<usize>) -> Vec<Role> {
    let mut out: Vec<Role> = match activated {
        Some(n) => vec![Role::Activated; n],
        None => cfg.listen.iter().map(|&a| Role::Plain(a)).collect(),
    };
    out.extend(cfg.tls.listen.iter().map(|&a| Role::Tls(a)));
    out
}

/// The path the process was started from, made absolute now (a relative one against the
/// current directory, a bare name through `PATH`), without resolving symbolic links: a
/// package that replaces the file, or moves a link to a new version, is picked up.
pub fn resolve_exe(argv0: &OsStr) -> Option<PathBuf> {
    let p = Path::new(argv0);
    let cwd = std::env::current_dir().ok()?;
    if argv0.is_empty() {
        return None;
    }
    if p.components().count() > 1 || p.is_absolute() {
        return Some(cwd.join(p.components().filter(|c| *c != std::path::Component::CurDir).collect::<PathBuf>()));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| cwd.join(d).join(p)).find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How to start the new binary: the same program path, `argv[0]`, arguments and directory.
pub struct Launcher {
    exe: PathBuf,
    arg0: OsString,
    args: Vec<OsString>,
    dir: PathBuf,
}

impl Launcher {
    /// This process's own command line, resolved now (before anything changes directory).
    pub fn from_process() -> Option<Launcher> {
        let mut argv = std::env::args_os();
        let arg0 = argv.next()?;
        let exe = resolve_exe(&arg0)?;
        Some(Launcher { exe, arg0, args: argv.collect(), dir: std::env::current_dir().ok()? })
    }
}

/// The old process's side: how to start the new binary, which sockets it gets, and the
/// start in progress.
pub struct Upgrade {
    launcher: Launcher,
    pending: Option<Pending>,
    /// The pid file, written again when a new process fails: it may have written its pid
    /// there, and removed the file as it exited.
    pid_file: Option<PathBuf>,
}

/// A new process started and not yet serving.
struct Pending {
    child: Child,
    ready: File,
    deadline: Instant,
}

/// What the ready pipe said.
pub enum Progress {
    /// Nothing yet (a spurious wake-up).
    Waiting,
    /// The new process (this pid) serves: stop accepting and end.
    Serving(u32),
    /// It will not serve; keep serving and log this.
    Failed(String),
}

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> io::Result<(File, File)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are new and owned by nothing else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own; no memory effects.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

impl Upgrade {
    pub fn new(launcher: Launcher, pid_file: Option<PathBuf>) -> Upgrade {
        Upgrade { launcher, pending: None, pid_file }
    }

    /// The pid file names this process again (a new one that failed may have taken it).
    fn reclaim_pid_file(&self) -> String {
        match self.pid_file.as_deref().map(crate::thttpd::privs::write_pidfile) {
            Some(Err(e)) => format!("; {e}"),
            _ => String::new(),
        }
    }

    /// When to give up waiting for the new process.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.deadline)
    }

    /// The new process's ready pipe while it starts: the caller watches it for
    /// [`Self::on_ready`]. It is closed (and so leaves any epoll set) once the start is over.
    pub fn ready_fd(&self) -> Option<RawFd> {
        self.pending.as_ref().map(|p| p.ready.as_raw_fd())
    }

    /// [`Self::start`] with a single process's listeners (set 0), watching the ready pipe
    /// in `registry` under `token`.
    pub fn start_with(
        &mut self,
        listeners: &[TcpListener],
        roles: &[Role],
        registry: &Registry,
        token: Token,
        now: Instant,
    ) -> Result<String, String> {
        let handed: Vec<Handed> =
            listeners.iter().zip(roles).map(|(l, &role)| Handed { fd: l.as_raw_fd(), role, set: 0 }).collect();
        let line = self.start(&handed, now)?;
        if let Some(fd) = self.ready_fd() {
            if let Err(e) = registry.register(&mut SourceFd(&fd), token, Interest::READABLE) {
                if let Some(mut p) = self.pending.take() {
                    p.abandon();
                }
                return Err(format!("epoll: {e}"));
            }
        }
        Ok(line)
    }

    /// Starts the new binary with the `listeners` handed over. Returns the line to log.
    pub fn start(&mut self, listeners: &[Handed], now: Instant) -> Result<String, String> {
        if let Some(p) = &self.pending {
            return Err(format!("an upgrade is already under way (process {})", p.child.id()));
        }
        let (udp, quic) = quic_sockets()?;
        let listeners: Vec<Handed> = listeners.iter().copied().chain(udp).collect();
        let fds: Vec<RawFd> = listeners.iter().map(|h| h.fd).collect();
        let described: Vec<String> = listeners.iter().map(|h| h.encode()).collect();
        let (ready_r, ready_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
        let mut keep = fds.clone();
        keep.push(ready_w.as_raw_fd());
        let mut cmd = Command::new(&self.launcher.exe);
        cmd.arg0(&self.launcher.arg0)
            .args(&self.launcher.args)
            .current_dir(&self.launcher.dir)
            .env(ENV_FDS, described.join(" "))
            .env(ENV_READY, ready_w.as_raw_fd().to_string());
        if let Some(state) = quic {
            cmd.env(ENV_QUIC, state);
        }
        // The secret's pipe: written and its write end closed before the fork, so the new
        // process reads it to the end, and nothing else ever holds it.
        let secret = tickets_pipe().map_err(|e| format!("pipe: {e}"))?;
        if let Some(r) = &secret {
            keep.push(r.as_raw_fd());
            cmd.env(ENV_TICKETS, r.as_raw_fd().to_string());
        }
        // SAFETY: the closure runs in the child between fork and exec; it only calls fcntl,
        // which is async-signal-safe, and reads `keep`, which is not modified.
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &keep {
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", self.launcher.exe.display()))?;
        drop(ready_w);
        drop(secret);
        set_nonblocking(ready_r.as_raw_fd());
        let pid = child.id();
        self.pending = Some(Pending { child, ready: ready_r, deadline: now + READY_TIMEOUT });
        Ok(format!("upgrade: started {} as process {pid}; serving until it is ready", self.launcher.exe.display()))
    }

    /// Reads the ready pipe (it is readable).
    pub fn on_ready(&mut self) -> Progress {
        let Some(p) = self.pending.as_mut() else { return Progress::Waiting };
        let mut byte = [0u8; 1];
        let outcome = match p.ready.read(&mut byte) {
            Ok(1) => Progress::Serving(p.child.id()),
            Ok(_) => Progress::Failed(p.exit_reason()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                return Progress::Waiting
            }
            Err(e) => Progress::Failed(format!("reading its ready pipe: {e}")),
        };
        if let Some(mut p) = self.pending.take() {
            if let Progress::Failed(why) = outcome {
                p.abandon();
                return Progress::Failed(why + &self.reclaim_pid_file());
            }
        }
        outcome
    }

    /// Gives up on a new process that did not report in time. Returns the line to log.
    pub fn on_timeout(&mut self, now: Instant) -> Option<String> {
        if self.pending.as_ref().is_none_or(|p| now < p.deadline) {
            return None;
        }
        let mut p = self.pending.take()?;
        let pid = p.child.id();
        p.abandon();
        Some(format!(
            "upgrade failed, still serving: process {pid} did not report serving within {} s; it was stopped{}",
            READY_TIMEOUT.as_secs(),
            self.reclaim_pid_file()
        ))
    }
}

impl Pending {
    /// Why the new process will not serve: its exit status, once it has exited (it closed
    /// the pipe, so it is exiting; waited for a moment at most).
    fn exit_reason(&mut self) -> String {
        let pid = self.child.id();
        for _ in 0..200 {
            match self.child.try_wait() {
                Ok(Some(status)) => return format!("process {pid} exited ({status}) before serving"),
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return format!("process {pid}: {e}"),
            }
        }
        format!("process {pid} closed its ready pipe without serving")
    }

    /// Stops the new process if it still runs, and collects it.
    fn abandon(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// This process's HTTP/3 sockets, to hand over with the state that goes with them, or why
/// not now (`quic::steer::handed`).
#[cfg(feature = "http3")]
fn quic_sockets() -> Result<(Vec<Handed>, Option<String>), String> {
    let (socks, state) = crate::quic::steer::handed()?;
    Ok((socks.into_iter().map(|(fd, set, a)| Handed { fd, role: Role::Quic(a), set }).collect(), state))
}

#[cfg(not(feature = "http3"))]
fn quic_sockets() -> Result<(Vec<Handed>, Option<String>), String> {
    Ok((Vec::new(), None))
}

/// Keeps the handed-over HTTP/3 sockets for `quic::steer::prepare`, with their state;
/// without the feature, or without the state, they are closed.
#[cfg(feature = "http3")]
fn keep_quic(socks: Vec<(usize, SocketAddr, std::net::UdpSocket)>, state: Option<String>) {
    if let Some(state) = state.filter(|_| !socks.is_empty()) {
        crate::quic::steer::stash(socks, state);
    }
}

#[cfg(not(feature = "http3"))]
fn keep_quic(_: Vec<(usize, SocketAddr, std::net::UdpSocket)>, _: Option<String>) {}

/// The pipe carrying the generated ticket secret, if this process has one.
#[cfg(feature = "tls")]
fn tickets_pipe() -> io::Result<Option<File>> {
    let Some(secret) = crate::tls::tickets::export() else { return Ok(None) };
    let (r, mut w) = pipe()?;
    // 48 bytes into an empty pipe: never blocks.
    w.write_all(&secret)?;
    Ok(Some(r))
}

#[cfg(not(feature = "tls"))]
fn tickets_pipe() -> io::Result<Option<File>> {
    Ok(None)
}

/// The new process's side: what the old one handed over.
pub struct Inherited {
    /// The sockets, with their set and role.
    listeners: Vec<(usize, Role, StdListener)>,
    ready: Option<File>,
}

/// Takes an inherited descriptor named by `var`, if the variable is set; the variable is
/// removed (children must not see it).
fn take_fd(var: &str) -> Result<Option<File>, String> {
    let Some(v) = std::env::var_os(var) else { return Ok(None) };
    std::env::remove_var(var);
    let fd: RawFd =
        v.to_str().and_then(|s| s.parse().ok()).filter(|&fd| fd > 2).ok_or(format!("{var}: not a descriptor"))?;
    // SAFETY: fcntl on any integer is harmless; it tells whether the descriptor is open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(format!("{var}: descriptor {fd} is not open"));
    }
    // SAFETY: the old process handed this descriptor to us alone (the variable names it and
    // is now removed); it is open, checked above, and nothing else in this process owns it.
    Ok(Some(unsafe { File::from_raw_fd(fd) }))
}

/// What an upgrading parent handed over, if this process was started by one. Reads the
/// ticket secret (and closes its pipe) at once.
pub fn inherited() -> Result<Option<Inherited>, String> {
    let ready = take_fd(ENV_READY)?;
    let secret = take_fd(ENV_TICKETS)?;
    let quic = std::env::var_os(ENV_QUIC).and_then(|v| v.into_string().ok());
    std::env::remove_var(ENV_QUIC);
    let Some(list) = std::env::var_os(ENV_FDS) else { return Ok(None) };
    std::env::remove_var(ENV_FDS);
    let list = list.to_str().ok_or(format!("{ENV_FDS}: not text"))?.to_string();
    let mut listeners = Vec::new();
    let mut udp = Vec::new();
    for item in list.split_whitespace() {
        let Handed { fd, role, set } = Handed::decode(item).ok_or(format!("{ENV_FDS}: bad entry {item:?}"))?;
        if let Role::Quic(a) = role {
            udp.push((set, a, crate::sys::adopt_udp(fd).map_err(|e| format!("{ENV_FDS}: {e}"))?));
            continue;
        }
        let l = crate::sys::adopt_listener(fd).map_err(|e| format!("{ENV_FDS}: {e}"))?;
        listeners.push((set, role, l));
    }
    keep_quic(udp, quic);
    if let Some(mut f) = secret {
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(|e| format!("{ENV_TICKETS}: {e}"))?;
        import_tickets(&buf)?;
    }
    Ok(Some(Inherited { listeners, ready }))
}

#[cfg(feature = "tls")]
fn import_tickets(secret: &[u8]) -> Result<(), String> {
    crate::tls::tickets::import(secret)
}

#[cfg(not(feature = "tls"))]
fn import_tickets(_: &[u8]) -> Result<(), String> {
    Ok(())
}

/// Takes `addr` from the inherited sockets: the one bound for the same configured address
/// and kind, or else the one bound to it.
fn take_one(pool: &mut Vec<(Role, StdListener)>, want: Role, addr: SocketAddr) -> Option<StdListener> {
    let i = pool.iter().position(|(r, _)| *r == want).or_else(|| {
        pool.iter()
            .position(|(r, l)| *r != Role::Activated && addr.port() != 0 && l.local_addr().is_ok_and(|a| a == addr))
    })?;
    Some(pool.remove(i).1)
}

/// The listeners for `cfg`, in the server's order, with their roles: those of `pool` it
/// still listens on, new ones bound by `bind` for the rest. Socket-activated ones stay the
/// plain listeners whatever `listen` says. What is left of `pool` is closed (dropped).
fn assign(
    cfg: &Config,
    mut pool: Vec<(Role, StdListener)>,
    bind: impl Fn(SocketAddr) -> Result<StdListener, String>,
) -> Result<(Vec<StdListener>, Vec<Role>), String> {
    let mut out = Vec::new();
    let mut roles = Vec::new();
    if pool.iter().any(|(r, _)| *r == Role::Activated) {
        let (activated, rest): (Vec<_>, Vec<_>) = pool.into_iter().partition(|(r, _)| *r == Role::Activated);
        pool = rest;
        for (_, l) in activated {
            out.push(l);
            roles.push(Role::Activated);
        }
    } else {
        for &a in &cfg.listen {
            out.push(match take_one(&mut pool, Role::Plain(a), a) {
                Some(l) => l,
                None => bind(a)?,
            });
            roles.push(Role::Plain(a));
        }
    }
    for &a in &cfg.tls.listen {
        out.push(match take_one(&mut pool, Role::Tls(a), a) {
            Some(l) => l,
            None => bind(a)?,
        });
        roles.push(Role::Tls(a));
    }
    Ok((out, roles))
}

/// SIGHUP with other `listen` or `[tls] listen` addresses: the listeners for `cfg` (see
/// [`assign`]), the kept ones as duplicates of `current`'s sockets (so nothing changes
/// until the caller swaps the lists; a bind that fails leaves everything as it was).
pub fn relisten(
    cfg: &Config,
    current: &[TcpListener],
    roles: &[Role],
    bind: impl Fn(SocketAddr) -> Result<StdListener, String>,
) -> Result<(Vec<StdListener>, Vec<Role>), String> {
    let mut pool = Vec::new();
    for (l, &r) in current.iter().zip(roles) {
        let dup = socket2::SockRef::from(l).try_clone().map_err(|e| format!("dup: {e}"))?;
        pool.push((r, StdListener::from(dup)));
    }
    assign(cfg, pool, bind)
}

impl Inherited {
    /// The listeners for `cfg` from the inherited ones (see [`assign`]): a single process
    /// takes them from every set.
    pub fn take_listeners(
        &mut self,
        cfg: &Config,
        bind: impl Fn(SocketAddr) -> Result<StdListener, String>,
    ) -> Result<(Vec<StdListener>, Vec<Role>), String> {
        let pool = std::mem::take(&mut self.listeners).into_iter().map(|(_, r, l)| (r, l)).collect();
        assign(cfg, pool, bind)
    }

    /// `workers = n`: worker i's listeners from the inherited set i (see [`assign`]), so a
    /// worker accepts from the very sockets (and queues) the old worker i did. Sets past
    /// `n` are closed. Socket-activated listeners are shared by every worker: one set.
    pub fn take_sets(
        &mut self,
        cfg: &Config,
        n: usize,
        bind: impl Fn(SocketAddr) -> Result<StdListener, String>,
    ) -> Result<(Vec<Vec<StdListener>>, Vec<Role>), String> {
        let all = std::mem::take(&mut self.listeners);
        let activated = all.iter().any(|(_, r, _)| *r == Role::Activated);
        let mut pools: Vec<Vec<(Role, StdListener)>> = (0..n.max(1)).map(|_| Vec::new()).collect();
        for (set, r, l) in all {
            let i = if activated { 0 } else { set };
            if let Some(p) = pools.get_mut(i) {
                p.push((r, l));
            }
        }
        if activated {
            pools.truncate(1);
        }
        let mut sets = Vec::new();
        let mut roles = Vec::new();
        for pool in pools {
            let (set, r) = assign(cfg, pool, &bind)?;
            sets.push(set);
            roles = r;
        }
        Ok((sets, roles))
    }

    /// Tells the old process this one serves (once its listeners are registered): it then
    /// stops accepting. Also tells systemd the new main pid, when it listens.
    pub fn announce(&mut self) {
        // HTTP/3: new connections come to this process's sockets from now on.
        #[cfg(feature = "http3")]
        if let Some(line) = crate::quic::steer::switch() {
            eprintln!("ferrohttpd: {line}");
        }
        notify_systemd_mainpid();
        if let Some(mut f) = self.ready.take() {
            let _ = f.write_all(b"R");
        }
    }
}

/// `MAINPID=` to systemd's notification socket (`NotifyAccess=all` in the unit), so that
/// the service's main process is the new one once the old exits.
fn notify_systemd_mainpid() {
    use std::os::unix::net::UnixDatagram;
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sock) = UnixDatagram::unbound() else { return };
    let msg = format!("MAINPID={}\n", std::process::id());
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = sock.send_to_addr(msg.as_bytes(), &addr);
        }
    } else {
        let _ = sock.send_to(msg.as_bytes(), Path::new(&path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handed_sockets_round_trip() {
        for role in [
            Role::Activated,
            Role::Plain("127.0.0.1:0".parse().unwrap()),
            Role::Tls("[::1]:8443".parse().unwrap()),
            Role::Quic("0.0.0.0:443".parse().unwrap()),
        ] {
            for set in [0, 1, 12] {
                let h = Handed { fd: 7, role, set };
                assert_eq!(Handed::decode(&h.encode()), Some(h));
            }
        }
        for bad in [
            "",
            "7",
            "7:x",
            "2:a",
            "7:p",
            "7:p:nope",
            "7:a:1.2.3.4:5",
            "x:a",
            "7:a0",
            "7:px:1.2.3.4:5",
            "7::",
            "7:u",
            "7:u1",
        ] {
            assert_eq!(Handed::decode(bad), None, "{bad}");
        }
        assert_eq!(Handed::decode("7:p3:1.2.3.4:5").map(|h| h.set), Some(3));
    }

    #[test]
    fn exe_is_made_absolute() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(resolve_exe(OsStr::new("/usr/sbin/x")), Some(PathBuf::from("/usr/sbin/x")));
        assert_eq!(resolve_exe(OsStr::new("target/x")), Some(cwd.join("target/x")));
        assert_eq!(resolve_exe(OsStr::new("./x")), Some(cwd.join("x")));
        assert_eq!(resolve_exe(OsStr::new("")), None);
        assert!(resolve_exe(OsStr::new("sh")).is_some_and(|p| p.is_absolute()));
    }
}
