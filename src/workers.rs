//! `workers = N`: a parent process that runs N event-loop processes.
//!
//! Each worker is a complete single-loop server with its own listening sockets (bound with
//! `SO_REUSEPORT`, so the kernel spreads connections over them), its own cache and its own
//! log descriptors; workers share nothing but the page cache. The parent binds a set of
//! sockets per worker and keeps them all: worker i accepts on set i, and whatever replaces
//! it (a worker restarted after it died, or the new binary's worker i after an upgrade)
//! accepts from the very same sockets, so no connection waiting in a queue is lost. The
//! parent supervises: it forwards TERM, INT, HUP and USR1 to the workers, restarts a worker
//! that dies (after a pause if it died right after starting, so a crash loop cannot spin),
//! and exits once every worker has exited after a shutdown.
//!
//! SIGUSR2 (ferrohttpd mode) upgrades the binary (`upgrade`): the parent hands every set to
//! the new parent, which starts its workers on them and says it serves once each of them
//! has; the old parent then sends its workers SIGWINCH (stop accepting, finish, end) and
//! exits after them.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::config::Config;
use std::net::TcpListener as StdListener;

use crate::ctx::{self, StartError};
use crate::server::{self, Reloader, Server};
use crate::sys::SignalFd;
use crate::upgrade::{self, Handed, Inherited, Progress, Role, Upgrade};

/// A worker that lived shorter than this is restarted only after the same pause.
const MIN_LIFETIME: Duration = Duration::from_secs(1);

/// Listening sockets the caller already has.
pub enum Listeners {
    /// From systemd socket activation (with the TLS ones bound beside them): shared by
    /// every worker.
    Activated(Vec<StdListener>),
    /// A set per worker, bound with SO_REUSEPORT (or inherited from an upgraded parent).
    Sets(Vec<Vec<StdListener>>),
}

impl Listeners {
    /// Worker i's listeners.
    fn set(&self, i: usize) -> &[StdListener] {
        match self {
            Listeners::Activated(l) => l,
            Listeners::Sets(sets) => sets.get(i).map_or(&[], Vec::as_slice),
        }
    }

    /// Every socket, to hand over in an upgrade.
    fn handed(&self, roles: &[Role]) -> Vec<Handed> {
        let sets: &[Vec<StdListener>] = match self {
            Listeners::Activated(l) => std::slice::from_ref(l),
            Listeners::Sets(sets) => sets,
        };
        let mut out = Vec::new();
        for (set, ls) in sets.iter().enumerate() {
            for (l, &role) in ls.iter().zip(roles) {
                out.push(Handed { fd: l.as_raw_fd(), role, set });
            }
        }
        out
    }
}

struct Slot {
    pid: Option<libc::pid_t>,
    started: Instant,
    restart_at: Option<Instant>,
}

/// What the parent needs besides its configuration: its listeners and their roles, the
/// reloader, SIGUSR2's upgrade, and what an upgrading parent handed over (told once every
/// worker serves).
pub struct Parent {
    pub listeners: Listeners,
    pub roles: Vec<Role>,
    pub reloader: Reloader,
    pub upgrade: Option<Upgrade>,
    pub inherited: Option<Inherited>,
}

/// Runs the parent until every worker has exited after a TERM or INT (or after an upgrade).
/// Returns the exit status for `main`.
pub fn run(cfg: Config, parent: Parent) -> Result<u8, StartError> {
    let Parent { listeners, roles, reloader, mut upgrade, mut inherited } = parent;
    ctx::open_resources(&cfg)?;
    let udp = udp_sets(&cfg)?;
    let signals =
        SignalFd::new(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGCHLD])
            .map_err(|e| StartError(format!("signalfd: {e}")))?;
    // Each worker writes a byte here once it serves.
    let (mut started_r, started_w) = upgrade::pipe().map_err(|e| StartError(format!("pipe: {e}")))?;
    set_nonblocking(started_r.as_raw_fd());
    let mut serving = 0usize;

    let mut slots: Vec<Slot> = (0..cfg.workers)
        .map(|_| Slot { pid: None, started: Instant::now(), restart_at: Some(Instant::now()) })
        .collect();
    let mut stopping = false;
    loop {
        // The generated session-ticket secret: made before the first fork, so every worker
        // (and every replacement) derives the same keys, and moved on with the periods so
        // this process never holds an expired one (`tls::tickets`).
        #[cfg(feature = "tls")]
        if !cfg.tls.listen.is_empty() {
            crate::tls::tickets::prepare(cfg.tls.ticket_lifetime).map_err(StartError)?;
        }
        let now = Instant::now();
        if !stopping {
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.pid.is_some() || slot.restart_at.is_none_or(|t| t > now) {
                    continue;
                }
                slot.pid = Some(spawn(&cfg, listeners.set(i), &roles, &reloader, started_w.as_raw_fd(), udp, i)?);
                slot.started = now;
                slot.restart_at = None;
            }
        }
        if stopping && slots.iter().all(|s| s.pid.is_none()) {
            return Ok(0);
        }
        let next = slots.iter().filter_map(|s| s.restart_at).chain(upgrade.as_ref().and_then(Upgrade::deadline)).min();
        let timeout_ms = next.map_or(1000, |t| t.saturating_duration_since(now).as_millis().clamp(1, 1000) as i32);
        let mut pfds =
            [signals.as_raw_fd(), started_r.as_raw_fd(), upgrade.as_ref().and_then(Upgrade::ready_fd).unwrap_or(-1)]
                .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        // SAFETY: `pfds` is a valid pollfd array of its length for the duration of the call
        // (a negative fd is ignored by poll).
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = started_r.read(&mut buf) {
            serving += n;
        }
        // An upgrading parent stops accepting once every worker of this one serves.
        if serving >= cfg.workers as usize {
            if let Some(mut i) = inherited.take() {
                i.announce();
            }
        }
        if let Some(u) = upgrade.as_mut() {
            if pfds[2].revents != 0 {
                match u.on_ready() {
                    Progress::Waiting => {}
                    Progress::Serving(pid) => {
                        eprintln!(
                            "ferrohttpd: upgrade: process {pid} serves; the workers stop accepting and this parent exits after them"
                        );
                        stopping = true;
                        forward(&slots, libc::SIGWINCH);
                    }
                    Progress::Failed(why) => eprintln!("ferrohttpd: upgrade failed, still serving: {why}"),
                }
            }
            if let Some(line) = u.on_timeout(Instant::now()) {
                eprintln!("ferrohttpd: {line}");
            }
        }
        while let Some(sig) = signals.read() {
            match sig {
                libc::SIGCHLD => {}
                libc::SIGTERM | libc::SIGINT => {
                    stopping = true;
                    forward(&slots, sig);
                }
                // In thttpd mode USR1 means "finish and exit": don't restart the workers.
                libc::SIGUSR1 if cfg.thttpd.enabled => {
                    stopping = true;
                    forward(&slots, sig);
                }
                libc::SIGUSR2 if !stopping && upgrade.is_some() => {
                    if let Some(u) = upgrade.as_mut() {
                        match u.start(&listeners.handed(&roles), Instant::now()) {
                            Ok(line) => eprintln!("ferrohttpd: {line}"),
                            Err(e) => eprintln!("ferrohttpd: upgrade failed, still serving: {e}"),
                        }
                    }
                }
                other => forward(&slots, other),
            }
        }
        reap(&mut slots, stopping);
    }
}

/// HTTP/3's UDP sockets, bound here for every worker (or taken over from an upgrading
/// parent) so that worker i's has its number in its reuseport group, whatever order the
/// workers start or restart in (`quic::steer`). `true`: there are some.
#[cfg(feature = "http3")]
fn udp_sets(cfg: &Config) -> Result<bool, StartError> {
    let addrs = if cfg.http3.listen.is_empty() { &cfg.tls.listen } else { &cfg.http3.listen };
    // A port 0 is each worker's own (the TLS listener's port, bound by the worker).
    if !cfg.http3.enabled || addrs.is_empty() || addrs.iter().any(|a| a.port() == 0) {
        return Ok(false);
    }
    if let Some(line) = crate::quic::steer::prepare(addrs, cfg.workers as usize).map_err(StartError)? {
        eprintln!("ferrohttpd: {line}");
    }
    Ok(true)
}

#[cfg(not(feature = "http3"))]
fn udp_sets(_: &Config) -> Result<bool, StartError> {
    Ok(false)
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

fn forward(slots: &[Slot], sig: libc::c_int) {
    for pid in slots.iter().filter_map(|s| s.pid) {
        // SAFETY: kill has no memory effects; `pid` is a child of this process.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Collects exited workers and schedules their restart. Only the workers: a new binary
/// started by an upgrade is collected by `upgrade`, which reports its status.
fn reap(slots: &mut [Slot], stopping: bool) {
    for slot in slots.iter_mut() {
        let Some(pid) = slot.pid else { continue };
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; WNOHANG makes the call non-blocking.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
            continue;
        }
        slot.pid = None;
        if stopping {
            continue;
        }
        let lived = slot.started.elapsed();
        eprintln!("ferrohttpd: worker {pid} exited ({}); restarting it", describe(status));
        slot.restart_at = Some(if lived < MIN_LIFETIME { Instant::now() + MIN_LIFETIME } else { Instant::now() });
    }
}

fn describe(status: libc::c_int) -> String {
    if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {}", libc::WEXITSTATUS(status))
    }
}

/// Forks worker `i`, which runs the event loop on `listeners` and its sockets of `udp`
/// (duplicates: the parent keeps them for the worker's replacement), and writes a byte to
/// `started` once it serves.
fn spawn(
    cfg: &Config,
    listeners: &[StdListener],
    roles: &[Role],
    reloader: &Reloader,
    started: RawFd,
    udp: bool,
    i: usize,
) -> Result<libc::pid_t, StartError> {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the parent is single-threaded, so the child starts from a consistent state
    // and may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(StartError(format!("fork: {}", io::Error::last_os_error())));
    }
    if pid > 0 {
        return Ok(pid);
    }
    // A worker must not outlive its parent (nothing would restart or stop it).
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process; getppid has no
    // preconditions.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    #[cfg(feature = "http3")]
    if let Err(e) = if udp { crate::quic::steer::adopt(i) } else { Ok(()) } {
        eprintln!("ferrohttpd: worker: http3 sockets: {e}");
        std::process::exit(1);
    }
    #[cfg(not(feature = "http3"))]
    let _ = (udp, i);
    let code = match server::from_std(listeners).and_then(|l| Server::new(cfg.clone(), l, roles.to_vec())) {
        Ok(mut server) => {
            // Workers never switch user (refused with workers > 1): preload at once.
            server.preload();
            server.set_reloader(reloader.clone());
            // SAFETY: `started` is the parent's pipe, open in this forked copy; writing to it
            // through a borrowed File that is never dropped leaves it open.
            let mut pipe =
                std::mem::ManuallyDrop::new(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(started) });
            let _ = pipe.write(&[1]);
            match server.run() {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("ferrohttpd: worker event loop failed: {e}");
                    1
                }
            }
        }
        Err(e) => {
            eprintln!("ferrohttpd: worker: {e}");
            1
        }
    };
    std::process::exit(code);
}
