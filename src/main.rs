//! The `ferrohttpd` binary (also run as `thttpd`): command line -> configuration -> server.
//! Errors are printed once and mapped to exit status 1.
//!
//! Start-up follows thttpd's order: the configuration and throttle file are read (by the
//! command-line parser), the user to switch to is looked up while `/etc/passwd` is reachable,
//! the sockets are bound, the process daemonises (thttpd without `-D`), the pid file is
//! written (before chroot, as thttpd does, so `-i /var/run/thttpd.pid` works with `-r`), the
//! process chroots into the served directory (`-r`), the server opens the document root and
//! the logs, root is dropped (`-u`, `nobody` by default as thttpd), and the loop runs.
//!
//! The logs under chroot: a log file inside the chroot tree is opened by its path inside the
//! tree, so SIGHUP can reopen it after rotation. A log file outside the tree (Debian's
//! `logfile=/var/log/thttpd.log` with `chroot`) is opened before chroot and kept on the
//! standard output (the access log) or standard error (the error log), which the daemon does
//! not otherwise use; as with thttpd, it cannot be reopened then, and a warning says so.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::OsString;
use std::io::Write;
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

use ferrohttpd::config::cli::{self, Command, Launch, Mode};
use ferrohttpd::config::Config;
use ferrohttpd::ctx::{self, StartError};
use ferrohttpd::log::LogTarget;
use ferrohttpd::server::{self, Server};
use ferrohttpd::thttpd::privs;
use ferrohttpd::thttpd::syslog::{Severity, Syslog};
use ferrohttpd::upgrade::{self, Inherited, Launcher, Upgrade};
use ferrohttpd::workers;

/// `main`'s frame stays under the event loop for the life of the process, so the work before
/// the loop is done in callees that are not inlined: [`command`], and under [`run`],
/// [`prepare`] and [`open_server`].
fn main() -> ExitCode {
    ferrohttpd::sys::note_main_stack();
    let (cmd, mode) = match command() {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cmd {
        // A reader that stops early (`--version | head -n1`) is no error: no panic on EPIPE.
        Command::Help => {
            let _ = std::io::Write::write_all(&mut std::io::stdout(), cli::usage(mode).as_bytes());
            ExitCode::SUCCESS
        }
        Command::Version => {
            let _ = writeln!(std::io::stdout(), "{}", cli::version(mode));
            ExitCode::SUCCESS
        }
        Command::Compress(job) => compress(job),
        Command::CheckConfig(launch) => check(*launch),
        Command::Run(launch) => run(launch),
    }
}

/// The command line, parsed (with the configuration it names).
#[inline(never)]
fn command() -> Result<(Command, Mode), ExitCode> {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let mode = Mode::from_argv0(&argv0);
    match cli::parse_as(mode, std::env::args_os().skip(1)) {
        Ok(c) => Ok((c, mode)),
        Err(e) => {
            eprintln!("{}: {}", cli::program_name(mode), e.message);
            if e.usage {
                eprint!("{}", cli::usage(mode));
            }
            Err(ExitCode::from(1))
        }
    }
}

/// `ferrohttpd compress DIR …` (arguments already checked): the precompressor, in this
/// binary with the `compression` feature (whose encoders on-demand compression links anyway).
#[cfg(feature = "compression")]
#[inline(never)]
fn compress(job: cli::CompressJob) -> ExitCode {
    let cli::CompressJob { dir, options } = job;
    match ferrohttpd::compress::compress_dir(&dir, &options) {
        Ok(report) => {
            println!("{}: {report}", dir.display());
            if report.errors == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("ferrohttpd compress: {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}

#[cfg(not(feature = "compression"))]
fn compress(_: cli::CompressJob) -> ExitCode {
    eprintln!("ferrohttpd compress: this ferrohttpd was built without the `compression` feature");
    ExitCode::from(1)
}

/// Reports fatal errors: on stderr, and once the process is a daemon (stderr is /dev/null),
/// to syslog as thttpd does.
struct Reporter {
    name: &'static str,
    syslog: Option<Syslog>,
}

impl Reporter {
    /// Becomes a daemon (thttpd without -D); from then on, fatal errors also go to syslog.
    fn daemonize(&mut self, cfg: &Config) -> Result<(), ExitCode> {
        privs::daemonize(cfg.access_log == LogTarget::Std).map_err(|e| self.fail(e))?;
        let mut s = Syslog::new(self.name);
        let _ = s.connect();
        self.syslog = Some(s);
        Ok(())
    }

    fn fail(&mut self, e: impl std::fmt::Display) -> ExitCode {
        let msg = e.to_string();
        eprintln!("{}: {msg}", self.name);
        if let Some(s) = &mut self.syslog {
            let _ = s.log(Severity::Err, &msg);
        }
        ExitCode::from(1)
    }

    fn warn(&mut self, msg: &str) {
        eprintln!("{}: warning: {msg}", self.name);
        if let Some(s) = &mut self.syslog {
            let _ = s.log(Severity::Warning, msg);
        }
    }
}

fn describe_log(t: &LogTarget) -> String {
    match t {
        LogTarget::Std => "stdout".into(),
        LogTarget::Off => "off".into(),
        LogTarget::File(p) => p.display().to_string(),
        LogTarget::Syslog => "syslog".into(),
    }
}

/// `--check-config`: everything a start would check: the document root, the logs, the user to
/// switch to, and the listen addresses ([`check_listen`]).
#[inline(never)]
fn check(launch: Launch) -> ExitCode {
    let Launch { config: cfg, mode, warnings } = launch;
    let mut r = Reporter { name: cli::program_name(mode), syslog: None };
    for w in &warnings {
        r.warn(w);
    }
    let root = match ctx::check_resources(&cfg) {
        Ok((root, warnings)) => {
            warnings.iter().for_each(|w| r.warn(w));
            root
        }
        Err(e) => return r.fail(e),
    };
    #[cfg(feature = "tls")]
    match ferrohttpd::tls::server_config(&cfg, None) {
        Ok(Some((_, tls_warnings))) => tls_warnings.iter().for_each(|w| r.warn(w)),
        Ok(None) => {}
        Err(e) => return r.fail(e),
    }
    #[cfg(feature = "acme")]
    if let Err(e) = ferrohttpd::acme::prepare_state_dir(&cfg.acme, None) {
        return r.fail(e);
    }
    if let Some(dd) = cfg.thttpd.data_dir.as_ref().filter(|_| cfg.thttpd.chroot) {
        let inside = root.join(dd.strip_prefix("/").unwrap_or(dd));
        if !inside.is_dir() {
            return r.fail(format_args!(
                "data directory {} is not a directory inside {}",
                dd.display(),
                root.display()
            ));
        }
    }
    if cfg.thttpd.chroot {
        // The same warnings a start would give (log outside the tree, no /dev/log inside).
        plan_log(&cfg.access_log, &root, libc::STDOUT_FILENO, "logfile", &mut r);
        plan_log(&cfg.error_log, &root, libc::STDERR_FILENO, "error log", &mut r);
    }
    let switch_user = cfg.thttpd.user.as_deref().filter(|_| privs::is_root());
    if let Some(user) = switch_user {
        if let Err(e) = privs::lookup_user(user) {
            return r.fail(e);
        }
    }
    let unbound = match check_listen(&cfg, &mut r) {
        Ok(u) => u,
        Err(e) => return r.fail(e),
    };
    let src = cfg.source.as_ref().map_or("built-in defaults".to_string(), |p| p.display().to_string());
    let mut listen: Vec<String> = cfg.listen.iter().map(SocketAddr::to_string).collect();
    listen.extend(cfg.tls.listen.iter().map(|a| format!("https://{a}")));
    let mut line = format!(
        "configuration OK ({src}): root {}; listen {}; access log {}",
        root.display(),
        listen.join(" "),
        describe_log(&cfg.access_log)
    );
    for (what, addrs) in [("in use", &unbound.in_use), ("not bound (no privilege)", &unbound.denied)] {
        if !addrs.is_empty() {
            let list: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
            line.push_str(&format!("; {what}: {}", list.join(" ")));
        }
    }
    if cfg.thttpd.chroot {
        line.push_str("; chroot");
    }
    if let Some(user) = switch_user {
        line.push_str(&format!("; user {user}"));
    }
    if cfg.thttpd.daemonize {
        line.push_str("; daemon");
    }
    println!("{line}");
    ExitCode::SUCCESS
}

/// The listen addresses `--check-config` could not bind, and not for an error.
#[derive(Default)]
struct Unbound {
    /// Held by another socket: this server running, or systemd's socket.
    in_use: Vec<SocketAddr>,
    /// Below port 1024, and this process may not bind those.
    denied: Vec<SocketAddr>,
}

/// `--check-config`'s bind test, nginx -t's rule: each listen address is bound (not listened
/// on) and let go at once. An address already in use is no error — it is what a check finds
/// while this server runs, or under socket activation where systemd holds the port — but a
/// note says so. Nor is a port below 1024 that this process may not bind: the check is meant
/// to be run as the service's user, and the packaged unit gives the server the capability
/// (a warning says so). Any other failure (an address this machine does not have) is the
/// error a start would meet. `[::]` on a machine without IPv6 is a warning, as at start.
fn check_listen(cfg: &Config, r: &mut Reporter) -> Result<Unbound, String> {
    use socket2::{Domain, Socket, Type};
    let probe = |addr: SocketAddr| -> std::io::Result<()> {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), None)?;
        s.set_reuse_address(true)?;
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        s.bind(&addr.into())
    };
    let has_v4 = cfg.listen.iter().chain(&cfg.tls.listen).any(SocketAddr::is_ipv4);
    let mut out = Unbound::default();
    for (key, addrs) in [("server.listen", &cfg.listen), ("tls.listen", &cfg.tls.listen)] {
        for &addr in addrs.iter() {
            let e = match probe(addr) {
                Ok(()) => continue,
                Err(e) => e,
            };
            if e.raw_os_error() == Some(libc::EADDRINUSE) {
                eprintln!(
                    "{}: note: {key} {addr}: address already in use (by this server running, or by \
                     a systemd socket?): a start needs it free or handed over; the check goes on",
                    r.name
                );
                out.in_use.push(addr);
            } else if e.raw_os_error() == Some(libc::EACCES) && addr.port() < 1024 {
                r.warn(&format!(
                    "{key} {addr}: not bound: this user may not bind ports below 1024 ({e}); \
                     a start needs root or CAP_NET_BIND_SERVICE (the packaged unit has it)"
                ));
                out.denied.push(addr);
            } else if addr.is_ipv6() && addr.ip().is_unspecified() && has_v4 && !ipv6_available() {
                r.warn(&format!(
                    "{key} {addr}: IPv6 is not available on this machine ({e}); a start listens on IPv4 only"
                ));
            } else {
                return Err(format!("{key}: cannot listen on {addr}: {e}"));
            }
        }
    }
    Ok(out)
}

/// The start-up lines; the last `tls` addresses are the `[tls] listen` ones.
fn print_addrs(root: &Path, addrs: &[SocketAddr], tls: usize) {
    println!("ferrohttpd {} serving {}", env!("CARGO_PKG_VERSION"), root.display());
    let tls_from = addrs.len().saturating_sub(tls);
    for (i, a) in addrs.iter().enumerate() {
        let scheme = if i >= tls_from { "https" } else { "http" };
        if a.ip().is_unspecified() {
            let local = if a.is_ipv6() { "[::1]" } else { "127.0.0.1" };
            println!("listening on {scheme}://{a}/ (all addresses; try {scheme}://{local}:{}/)", a.port());
        } else {
            println!("listening on {scheme}://{a}/");
        }
    }
    let _ = std::io::stdout().flush();
}

/// True if an IPv6 socket can be made and bound on this machine.
fn ipv6_available() -> bool {
    use socket2::{Domain, Socket, Type};
    let probe = || -> std::io::Result<()> {
        let s = Socket::new(Domain::IPV6, Type::STREAM, None)?;
        s.set_only_v6(true)?;
        s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)).into())
    };
    probe().is_ok()
}

/// Binds every listen address. When that fails and the machine has no IPv6 at all, the
/// `[::]` addresses (thttpd's "all addresses") are dropped with a warning and IPv4 alone is
/// tried again.
fn bind_listeners(cfg: &mut Config, r: &mut Reporter) -> Result<Vec<mio::net::TcpListener>, StartError> {
    match server::bind_all(cfg) {
        Ok(l) => Ok(l),
        Err(e) => {
            let any_v6 = cfg.listen.iter().any(|a| a.is_ipv6() && a.ip().is_unspecified());
            let any_v4 = cfg.listen.iter().any(SocketAddr::is_ipv4);
            if any_v6 && any_v4 && !ipv6_available() {
                r.warn(&format!("IPv6 is not available on this machine ({e}); listening on IPv4 only"));
                cfg.listen.retain(SocketAddr::is_ipv4);
                cfg.tls.listen.retain(SocketAddr::is_ipv4);
                server::bind_all(cfg)
            } else {
                Err(e)
            }
        }
    }
}

/// What to do with a log file when chrooting.
enum LogPlan {
    /// Not a file, or no chroot: nothing.
    Keep,
    /// Inside the tree: use this path from inside the chroot.
    Inside(PathBuf),
    /// Outside the tree: open it before chroot and keep it on this descriptor.
    Outside(PathBuf, i32),
}

/// The canonical form of a path that may not exist yet (its directory must).
fn canonical_file_path(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(p) {
        return Some(c);
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(parent).ok()?.join(p.file_name()?))
}

fn plan_log(target: &LogTarget, chroot_root: &Path, fd: i32, what: &str, r: &mut Reporter) -> LogPlan {
    let LogTarget::File(p) = target else {
        if *target == LogTarget::Syslog && !chroot_root.join("dev/log").exists() {
            r.warn(&format!(
                "the {what} goes to syslog, and {}/dev/log does not exist inside the chroot tree: \
                 the connection made before chroot is used, and is lost if syslogd restarts",
                chroot_root.display()
            ));
        }
        return LogPlan::Keep;
    };
    match canonical_file_path(p) {
        Some(c) => match c.strip_prefix(chroot_root) {
            Ok(rel) => LogPlan::Inside(Path::new("/").join(rel)),
            Err(_) => {
                r.warn(&format!(
                    "{what} {} is not within the chroot tree, you will not be able to re-open it",
                    p.display()
                ));
                LogPlan::Outside(p.clone(), fd)
            }
        },
        // Its directory does not exist: let the server report the failure to open it.
        None => LogPlan::Keep,
    }
}

/// Opens a log file outside the chroot tree onto `fd` (stdout or stderr); the target becomes
/// that standard stream.
fn apply_outside_log(path: &Path, fd: i32, owner: Option<(u32, u32)>) -> Result<(), String> {
    let privs::Opened { file: f, created } = privs::open_for_writing(path, true, 0o666)
        .map_err(|e| format!("cannot open log file {}: {e}", path.display()))?;
    if let Some((uid, gid)) = owner.filter(|_| created) {
        let _ = std::os::unix::fs::fchown(&f, Some(uid), Some(gid));
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: both descriptors are open; dup2 atomically replaces `fd` with a copy of the
    // file's descriptor, which `f` keeps owning (and closes when dropped).
    if unsafe { libc::dup2(f.as_raw_fd(), fd) } == -1 {
        return Err(format!("redirecting the log {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// When the server will drop root: create the log file now and give it to the user, as
/// thttpd does, so that reopening it after rotation keeps working. Unlike thttpd, only a file
/// created here is given away: one already there stays whose it is (a link planted at the
/// path would otherwise hand root's file to the user), and what cannot be opened safely is
/// left for the server's own open to report.
fn give_log_to(target: &LogTarget, uid: u32, gid: u32) {
    if let LogTarget::File(p) = target {
        if let Ok(privs::Opened { file, created: true }) = privs::open_for_writing(p, true, 0o666) {
            let _ = std::os::unix::fs::fchown(&file, Some(uid), Some(gid));
        }
    }
}

/// Everything `serve` needs, prepared by [`prepare`].
struct Serve {
    cfg: Config,
    listeners: Vec<mio::net::TcpListener>,
    access_plan: LogPlan,
    error_plan: LogPlan,
    owner: Option<(u32, u32)>,
    switch_to: Option<(String, u32, u32)>,
    r: Reporter,
    announced: bool,
    reloader: Option<server::Reloader>,
    /// SIGUSR2's upgrade (ferrohttpd mode), and what an upgrading parent handed over.
    upgrade: Option<Upgrade>,
    inherited: Option<Inherited>,
    roles: Vec<upgrade::Role>,
}

/// What `run_workers` needs: the configuration, socket-activated listeners, the reloader,
/// the upgrade, what an upgrading parent handed over.
struct Workers {
    cfg: Config,
    activated: Option<Vec<std::net::TcpListener>>,
    reloader: Option<server::Reloader>,
    r: Reporter,
    upgrade: Option<Upgrade>,
    inherited: Option<Inherited>,
}

/// What [`prepare`] leads to.
enum Next {
    Exit(ExitCode),
    Workers(Box<Workers>),
    Serve(Box<Serve>, Option<PathBuf>),
}

/// Runs the server. The start-up steps run in [`prepare`] and [`open_server`], which are
/// not inlined: their stack frames (tens of kB, with the configuration and everything
/// inlined into them) are gone before the event loop starts, instead of sitting under it,
/// touched and resident, for the life of the process.
fn run(launch: Box<Launch>) -> ExitCode {
    match prepare(launch) {
        Next::Exit(code) => code,
        Next::Workers(w) => run_workers(*w),
        Next::Serve(mut s, pid_file) => {
            let code = serve(&mut s);
            if let Some(p) = pid_file.filter(|_| !s.cfg.thttpd.chroot) {
                remove_pid_file(&p);
            }
            code
        }
    }
}

/// Removes the pid file unless it names another process (the new one, after an upgrade).
fn remove_pid_file(p: &Path) {
    let ours =
        std::fs::read_to_string(p).is_ok_and(|s| s.trim().parse::<u32>().is_ok_and(|pid| pid == std::process::id()));
    if ours {
        let _ = std::fs::remove_file(p);
    }
}

#[inline(never)]
fn prepare(launch: Box<Launch>) -> Next {
    match prepare_inner(launch) {
        Ok(next) => next,
        Err(code) => Next::Exit(code),
    }
}

fn prepare_inner(launch: Box<Launch>) -> Result<Next, ExitCode> {
    let Launch { config: mut cfg, mode, warnings } = *launch;
    let mut r = Reporter { name: cli::program_name(mode), syslog: None };
    for w in &warnings {
        r.warn(w);
    }
    let activated = match server::activated_listeners() {
        Ok(a) => a,
        Err(e) => return Err(r.fail(e)),
    };
    // Sockets from an upgrading parent (SIGUSR2), and the path to start a new binary from,
    // resolved now.
    let mut inherited = match upgrade::inherited() {
        Ok(i) => i,
        Err(e) => return Err(r.fail(format_args!("upgrade: {e}"))),
    };
    let launcher = if mode == Mode::Ferrohttpd { Launcher::from_process() } else { None };

    // The user to become, looked up while /etc/passwd is reachable (before chroot). Only root
    // switches users, as in thttpd.
    let switch_to = match cfg.thttpd.user.clone().filter(|_| privs::is_root()) {
        Some(name) => match privs::lookup_user(&name) {
            Ok((uid, gid)) => Some((name, uid, gid)),
            Err(e) => return Err(r.fail(e)),
        },
        None => None,
    };
    // The ACME state directory, made and given to the service user while still root.
    #[cfg(feature = "acme")]
    if let Err(e) = ferrohttpd::acme::prepare_state_dir(&cfg.acme, switch_to.as_ref().map(|&(_, u, g)| (u, g))) {
        return Err(r.fail(e));
    }
    if cfg.workers > 1 && (cfg.thttpd.chroot || switch_to.is_some()) {
        return Err(r.fail(
            "workers > 1 cannot be combined with chroot (-r) or a user switch (-u, or running as root in thttpd mode); \
             use workers = 1",
        ));
    }

    // SIGHUP re-reads the configuration exactly as it was given: same arguments. thttpd mode
    // only reopens the logs on SIGHUP, and a chrooted server could not read its files again.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let reloader: Option<server::Reloader> = if mode == Mode::Ferrohttpd && !cfg.thttpd.chroot {
        Some(Rc::new(move || match cli::parse_as(mode, args.clone()) {
            Ok(Command::Run(l)) => {
                for w in &l.warnings {
                    eprintln!("ferrohttpd: warning: {w}");
                }
                Ok(l.config)
            }
            Ok(_) => Err("the command line no longer describes a server".into()),
            Err(e) => Err(e.message),
        }))
    } else {
        None
    };

    if cfg.workers > 1 {
        let upgrade = launcher.filter(|_| reloader.is_some()).map(|l| Upgrade::new(l, cfg.pid_file.clone()));
        return Ok(Next::Workers(Box::new(Workers { cfg, activated, reloader, r, upgrade, inherited })));
    }

    let listeners = match (inherited.as_mut(), &activated) {
        (Some(inh), _) => inh
            .take_listeners(&cfg, |a| server::bind_one_std(&cfg, a))
            .map(|(l, roles)| (l.into_iter().map(mio::net::TcpListener::from_std).collect(), roles))
            .map_err(StartError),
        // Socket activation passes plain listeners; TLS ones are bound here, after them.
        (None, Some(l)) => server::from_std(l).and_then(|mut l| {
            l.extend(server::bind_tls_std(&cfg)?.into_iter().map(mio::net::TcpListener::from_std));
            Ok((l, upgrade::roles(&cfg, activated.as_ref().map(Vec::len))))
        }),
        (None, None) => bind_listeners(&mut cfg, &mut r).map(|l| (l, upgrade::roles(&cfg, None))),
    };
    let (listeners, roles) = match listeners {
        Ok(l) => l,
        Err(e) => return Err(r.fail(e)),
    };
    // Only the process started upgrades, and only where it can read its binary and
    // configuration again (not under chroot).
    let upgrade = launcher.filter(|_| reloader.is_some()).map(|l| Upgrade::new(l, cfg.pid_file.clone()));
    let addrs: Vec<SocketAddr> = listeners.iter().filter_map(|l| l.local_addr().ok()).collect();
    let root_before = std::fs::canonicalize(&cfg.root).unwrap_or_else(|_| cfg.root.clone());

    if mode == Mode::Thttpd && privs::is_root() && !cfg.thttpd.chroot {
        eprintln!("{}: started as root without requesting chroot(), warning only", r.name);
    }

    // Decide what happens to the logs under chroot while stderr still reaches someone.
    let (access_plan, error_plan) = if cfg.thttpd.chroot {
        if !root_before.is_dir() {
            return Err(r.fail(format_args!("chroot: {} is not a directory", cfg.root.display())));
        }
        (
            plan_log(&cfg.access_log, &root_before, libc::STDOUT_FILENO, "logfile", &mut r),
            plan_log(&cfg.error_log, &root_before, libc::STDERR_FILENO, "error log", &mut r),
        )
    } else {
        (LogPlan::Keep, LogPlan::Keep)
    };
    let stdout_taken = matches!(access_plan, LogPlan::Outside(..));

    // The `listening on` lines: before forking, or before stdout is given to a log, else
    // once the server is ready (after the user switch).
    let mut announced = false;
    if cfg.thttpd.daemonize || stdout_taken {
        if !cfg.root.is_dir() {
            return Err(r.fail(format_args!("server.root: document root {}: not a directory", cfg.root.display())));
        }
        print_addrs(&root_before, &addrs, cfg.tls.listen.len());
        announced = true;
    }

    if cfg.thttpd.daemonize {
        r.daemonize(&cfg)?;
    }

    if mode == Mode::Thttpd {
        // thttpd works from the served directory (so the root must not be relative to the
        // old one).
        cfg.root = root_before.clone();
        if let Err(e) = std::env::set_current_dir(&cfg.root) {
            return Err(r.fail(format_args!("chdir {}: {e}", cfg.root.display())));
        }
    }

    // The pid file, with the daemon's pid, before chroot (its path is outside the tree).
    let pid_file = cfg.pid_file.clone();
    if let Some(p) = &pid_file {
        if let Err(e) = privs::write_pidfile(p) {
            return Err(r.fail(e));
        }
    }
    let owner = switch_to.as_ref().map(|&(_, uid, gid)| (uid, gid));
    let s = Serve {
        cfg,
        listeners,
        access_plan,
        error_plan,
        owner,
        switch_to,
        r,
        announced,
        reloader,
        upgrade,
        inherited,
        roles,
    };
    Ok(Next::Serve(Box::new(s), pid_file))
}

/// Opens the server ([`open_server`]) and runs its event loop.
fn serve(s: &mut Serve) -> ExitCode {
    let server = match open_server(s) {
        Ok(server) => server,
        Err(code) => return code,
    };
    // The listeners are registered: an upgrading parent may stop accepting now.
    if let Some(i) = s.inherited.as_mut() {
        i.announce();
    }
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => s.r.fail(format_args!("event loop failed: {e}")),
    }
}

/// chroot, open the server, drop root.
#[inline(never)]
fn open_server(s: &mut Serve) -> Result<Server, ExitCode> {
    let Serve {
        cfg, listeners, access_plan, error_plan, owner, switch_to, r, announced, reloader, upgrade, roles, ..
    } = s;
    let (owner, announced, switch_to) = (*owner, *announced, switch_to.as_ref());
    let listeners = std::mem::take(listeners);
    let access_plan = std::mem::replace(access_plan, LogPlan::Keep);
    let error_plan = std::mem::replace(error_plan, LogPlan::Keep);
    if cfg.thttpd.chroot {
        for (plan, target) in [(access_plan, &mut cfg.access_log), (error_plan, &mut cfg.error_log)] {
            match plan {
                LogPlan::Keep => {}
                LogPlan::Inside(p) => *target = LogTarget::File(p),
                LogPlan::Outside(p, fd) => {
                    if let Err(e) = apply_outside_log(&p, fd, owner) {
                        return Err(r.fail(e));
                    }
                    *target = LogTarget::Std;
                }
            }
        }
        // /dev/log is usually outside the tree: connect to syslog while it is in reach.
        let syslogs = [&cfg.access_log, &cfg.error_log].iter().filter(|t| ***t == LogTarget::Syslog).count();
        ferrohttpd::log::preconnect_syslog(syslogs);
        if let Err(e) = privs::chroot(&cfg.root) {
            return Err(r.fail(e));
        }
        cfg.root = match cfg.thttpd.data_dir.take() {
            Some(dd) => Path::new("/").join(dd),
            None => PathBuf::from("/"),
        };
        // The server works from its root (relative .htpasswd lookups, as thttpd).
        if let Err(e) = std::env::set_current_dir(&cfg.root) {
            return Err(r.fail(format_args!("chdir {}: {e}", cfg.root.display())));
        }
    }
    if let Some((uid, gid)) = owner {
        give_log_to(&cfg.access_log, uid, gid);
        give_log_to(&cfg.error_log, uid, gid);
    }
    let mut server = match Server::new(cfg.clone(), listeners, std::mem::take(roles)) {
        Ok(s) => s,
        Err(e) => return Err(r.fail(e)),
    };
    if let Some((name, uid, gid)) = switch_to {
        if let Err(e) = privs::switch_user(name, *uid, *gid) {
            return Err(r.fail(e));
        }
    }
    server.preload();
    if let Some(f) = reloader.take() {
        server.set_reloader(f);
    }
    if let Some(u) = upgrade.take() {
        server.set_upgrade(u);
    }
    if !announced {
        print_addrs(server.root(), &server.local_addrs(), cfg.tls.listen.len());
    }
    Ok(server)
}

fn run_workers(w: Workers) -> ExitCode {
    let Workers { cfg, activated, reloader, mut r, upgrade, mut inherited } = w;
    if activated.is_none() && inherited.is_none() && cfg.listen.iter().any(|a| a.port() == 0) {
        return r.fail("port 0 cannot be shared by several workers; give a port or set workers = 1");
    }
    let root = std::fs::canonicalize(&cfg.root).unwrap_or_else(|_| cfg.root.clone());
    let n = cfg.workers as usize;
    // Bind before printing: the port is open once "listening" is said. A set of sockets per
    // worker (`workers`), or the inherited sets after an upgrade.
    let bound = match (inherited.as_mut(), activated) {
        (Some(inh), _) => {
            inh.take_sets(&cfg, n, |a| server::bind_one_std(&cfg, a)).map_err(StartError).map(|(mut sets, roles)| {
                if roles.contains(&upgrade::Role::Activated) {
                    (workers::Listeners::Activated(sets.remove(0)), roles)
                } else {
                    (workers::Listeners::Sets(sets), roles)
                }
            })
        }
        (None, Some(mut l)) => server::bind_tls_std(&cfg).map(|tls| {
            let roles = upgrade::roles(&cfg, Some(l.len()));
            l.extend(tls);
            (workers::Listeners::Activated(l), roles)
        }),
        (None, None) => (0..n)
            .map(|_| server::bind_all_std(&cfg))
            .collect::<Result<Vec<_>, _>>()
            .map(|sets| (workers::Listeners::Sets(sets), upgrade::roles(&cfg, None))),
    };
    let (listeners, roles) = match bound {
        Ok(b) => b,
        Err(e) => return r.fail(e),
    };
    let addrs: Vec<SocketAddr> = match &listeners {
        workers::Listeners::Activated(l) => l.iter().filter_map(|l| l.local_addr().ok()).collect(),
        workers::Listeners::Sets(sets) => {
            sets.first().map(|l| l.iter().filter_map(|l| l.local_addr().ok()).collect()).unwrap_or_default()
        }
    };
    print_addrs(&root, &addrs, cfg.tls.listen.len());
    if cfg.thttpd.daemonize {
        if let Err(e) = r.daemonize(&cfg) {
            return e;
        }
    }
    let pid_file = cfg.pid_file.clone();
    if let Some(p) = &pid_file {
        if let Err(e) = privs::write_pidfile(p) {
            return r.fail(e);
        }
    }
    let reloader: server::Reloader =
        reloader.unwrap_or_else(|| Rc::new(|| Err("reloading is not available in this mode".to_string())));
    let parent = workers::Parent { listeners, roles, reloader, upgrade, inherited };
    let code = match workers::run(cfg, parent) {
        Ok(code) => ExitCode::from(code),
        Err(e) => r.fail(e),
    };
    if let Some(p) = pid_file {
        remove_pid_file(&p);
    }
    code
}
