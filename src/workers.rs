//! `workers = N`: a parent process that runs N event-loop processes.
//!
//! Each worker is a complete single-loop server with its own listening sockets (bound with
//! `SO_REUSEPORT`, so the kernel spreads connections over them), its own cache and its own
//! log descriptors; workers share nothing but the page cache. The parent binds once to fail
//! early with a clear message, then only supervises: it forwards TERM, INT, HUP and USR1 to
//! the workers, restarts a worker that dies (after a pause if it died right after starting,
//! so a crash loop cannot spin), and exits once every worker has exited after a shutdown.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::config::Config;
use std::net::TcpListener as StdListener;

use crate::server::{self, Reloader, Server, StartError};
use crate::sys::SignalFd;
use crate::upgrade;

/// A worker that lived shorter than this is restarted only after the same pause.
const MIN_LIFETIME: Duration = Duration::from_secs(1);

/// Listening sockets the caller already has.
pub enum Listeners {
    /// From systemd socket activation: shared by every worker.
    Activated(Vec<StdListener>),
    /// Bound by the caller with SO_REUSEPORT: handed to the first worker.
    Bound(Vec<StdListener>),
}

#[derive(Clone, Copy)]
enum Inherit {
    Shared,
    Take,
    None,
}

struct Slot {
    pid: Option<libc::pid_t>,
    started: Instant,
    restart_at: Option<Instant>,
}

/// Runs the parent until every worker has exited after a TERM or INT. Returns the exit
/// status for `main`.
pub fn run(cfg: Config, listeners: Listeners, reloader: Reloader) -> Result<u8, StartError> {
    server::open_resources(&cfg)?;
    // Sockets bound by the caller (so the port is open before "listening" is printed) go to
    // the first worker; the others bind their own with SO_REUSEPORT. The parent keeps no
    // listening socket: one that nobody accepts on would still get its share of connections.
    let (shared, mut handoff) = match listeners {
        Listeners::Activated(v) => (Some(v), None),
        Listeners::Bound(v) => (None, Some(v)),
    };
    let signals =
        SignalFd::new(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGCHLD])
            .map_err(|e| StartError(format!("signalfd: {e}")))?;

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
                let inherit = if shared.is_some() {
                    Inherit::Shared
                } else if i == 0 {
                    Inherit::Take
                } else {
                    Inherit::None
                };
                slot.pid = Some(spawn(&cfg, shared.as_deref(), &mut handoff, inherit, &reloader)?);
                slot.started = now;
                slot.restart_at = None;
            }
            // Every worker has started once: the first one owns the caller's sockets now.
            handoff = None;
        }
        if stopping && slots.iter().all(|s| s.pid.is_none()) {
            return Ok(0);
        }
        let next = slots.iter().filter_map(|s| s.restart_at).min();
        let timeout_ms = next.map_or(1000, |t| t.saturating_duration_since(now).as_millis().clamp(1, 1000) as i32);
        let mut pfd = libc::pollfd { fd: signals.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfd` is a valid pollfd array of length 1 for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
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
                other => forward(&slots, other),
            }
        }
        reap(&mut slots, stopping);
    }
}

fn forward(slots: &[Slot], sig: libc::c_int) {
    for pid in slots.iter().filter_map(|s| s.pid) {
        // SAFETY: kill has no memory effects; `pid` is a child of this process.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Collects exited workers and schedules their restart.
fn reap(slots: &mut [Slot], stopping: bool) {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; WNOHANG makes the call non-blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        let Some(slot) = slots.iter_mut().find(|s| s.pid == Some(pid)) else { continue };
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

/// Forks a worker that binds its own listeners and runs the event loop.
fn spawn(
    cfg: &Config,
    shared: Option<&[StdListener]>,
    handoff: &mut Option<Vec<StdListener>>,
    inherit: Inherit,
    reloader: &Reloader,
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
    let taken = handoff.take();
    let listeners = match (inherit, shared, taken) {
        (Inherit::Shared, Some(l), _) => {
            server::from_std(l).map(|l| (upgrade::roles(cfg, Some(l.len().saturating_sub(cfg.tls.listen.len()))), l))
        }
        (Inherit::Take, _, Some(l)) => {
            Ok((upgrade::roles(cfg, None), l.into_iter().map(mio::net::TcpListener::from_std).collect()))
        }
        // Any sockets meant for another worker are closed here (dropped with `taken`).
        _ => server::bind_all(cfg).map(|l| (upgrade::roles(cfg, None), l)),
    };
    let code = match listeners.and_then(|(roles, l)| Server::new(cfg.clone(), l, roles)) {
        Ok(mut server) => {
            // Workers never switch user (refused with workers > 1): preload at once.
            server.preload();
            server.set_reloader(reloader.clone());
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
