//! Issue 39: upgrading the binary in place with SIGUSR2. The server runs from a copy of the
//! binary in its temp dir; the test replaces that file (as a package upgrade does) and
//! signals the process, under load from real clients on real sockets.
mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{
    alive, make_fixture, pseudo_random_bytes, render_config, signal, spawn_listening, wait_executable, BIN, IO_TIMEOUT,
};
use tempfile::TempDir;

/// The files the load clients fetch, with their bodies.
const FILES: usize = 8;
/// The large download that spans the upgrade.
const BIG: usize = 48 << 20;

/// A server started from its own copy of the binary, with a pid file and an error log.
struct Upgradable {
    dir: TempDir,
    child: Child,
    addr: SocketAddr,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Upgradable {
    fn start(extra: &str, setup: impl FnOnce(&Path, &Path)) -> Upgradable {
        Upgradable::start_env(extra, setup, &[])
    }

    /// [`Upgradable::start`] with environment variables for the server.
    fn start_env(extra: &str, setup: impl FnOnce(&Path, &Path), env: &[(&str, &Path)]) -> Upgradable {
        let dir = TempDir::new().unwrap();
        let d = dir.path();
        let root = make_fixture(d);
        setup(d, &root);
        install(BIN, &d.join("bin/ferrohttpd"));
        let cfg =
            format!("pid_file = \"{{dir}}/pid\"\n{extra}\n[log]\nerror = \"{{dir}}/error.log\"\naccess = \"off\"\n");
        fs::write(d.join("ferrohttpd.toml"), render_config(d, &root, &cfg)).unwrap();
        let mut cmd = Command::new(d.join("bin/ferrohttpd"));
        cmd.args(["--config", "ferrohttpd.toml"]).current_dir(d);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let s = spawn_listening(cmd);
        let srv = Upgradable { dir, child: s.child, addr: s.addr, stdout: s.stdout, stderr: s.stderr };
        let deadline = Instant::now() + Duration::from_secs(5);
        while srv.pid_file().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(srv.pid_file(), Some(srv.child.id()));
        srv
    }

    /// The first address of the start-up lines that `parse` reads and `want` accepts.
    fn listening(&self, parse: fn(&str) -> Option<SocketAddr>, want: fn(&SocketAddr) -> bool) -> SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let out = String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned();
            if let Some(a) = out.lines().filter_map(parse).find(want) {
                return a;
            }
            assert!(Instant::now() < deadline, "no such listener: {out}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn pid_file(&self) -> Option<u32> {
        fs::read_to_string(self.dir().join("pid")).ok()?.trim().parse().ok()
    }

    fn error_log(&self) -> String {
        fs::read_to_string(self.dir().join("error.log")).unwrap_or_default()
    }

    /// Waits for the pid file to name another process than `old`.
    fn wait_new_pid(&self, old: u32, limit: Duration) -> Option<u32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(p) = self.pid_file().filter(|&p| p != old) {
                return Some(p);
            }
            thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Upgradable {
    fn drop(&mut self) {
        // The new process is no child of the test: stop it by the pid its file names.
        if let Some(p) = self.pid_file().filter(|&p| p != self.child.id()) {
            signal(p, "KILL");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies `from` to `to` through a temporary name and a rename, as a package manager
/// replaces a binary (the running process keeps the old inode).
fn install(from: &str, to: &Path) {
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    let tmp = to.with_extension("new");
    fs::copy(from, &tmp).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, to).unwrap();
    wait_executable(to);
}

fn write_script(to: &Path, text: &str) {
    let tmp = to.with_extension("new");
    fs::write(&tmp, text).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, to).unwrap();
    wait_executable(to);
}

fn body(i: usize) -> Vec<u8> {
    pseudo_random_bytes(1000 + i * 7919, i as u64 + 1)
}

fn make_files(root: &Path) {
    for i in 0..FILES {
        fs::write(root.join(format!("u{i}.bin")), body(i)).unwrap();
    }
    fs::write(root.join("big.bin"), pseudo_random_bytes(BIG, 99)).unwrap();
}

/// How a request went.
#[derive(Debug)]
enum Outcome {
    Ok,
    /// A reused keep-alive connection was closed before any byte of the response: an
    /// idempotent request is retried on a new connection (RFC 9112 §9.3.1), as clients do.
    Retry,
    Failed(String),
}

/// Reads one response to a GET: the head, then a Content-Length body. Checks it is 200 and
/// exactly `want`; whether the server closes after it.
fn read_response(s: &mut impl Read, want: &[u8]) -> Result<bool, (usize, String)> {
    let mut buf = Vec::with_capacity(want.len() + 512);
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err((buf.len(), "closed in the head".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err((buf.len(), format!("head: {e}"))),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200 ") {
        return Err((buf.len(), format!("status: {}", head.lines().next().unwrap_or(""))));
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or((buf.len(), "no content-length".to_string()))?;
    while buf.len() < head_end + len {
        match s.read(&mut chunk) {
            Ok(0) => return Err((buf.len(), format!("closed at {} of {len} body bytes", buf.len() - head_end))),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err((buf.len(), format!("body: {e}"))),
        }
    }
    if buf.len() != head_end + len || buf[head_end..] != *want {
        return Err((buf.len(), "body differs".into()));
    }
    Ok(head.contains("\r\nconnection: close"))
}

fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    Ok(s)
}

/// A load client's connection: a plain socket, or TLS over one.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}
type Conn = Box<dyn Stream>;

/// Where the load clients connect: the plain listener, or the TLS one with a client
/// configuration per protocol (ALPN `http/1.1` or `h2`; each keeps the sessions the server
/// gives it, so a client's new connections resume, across the upgrade too).
#[derive(Clone)]
enum Dial {
    Plain(SocketAddr),
    #[cfg(feature = "tls")]
    Tls {
        addr: SocketAddr,
        h1: Arc<rustls::ClientConfig>,
        h2: Arc<rustls::ClientConfig>,
    },
}

impl Dial {
    /// The TLS listener of a server with the certificate [`common::proto::make_localhost_cert`]
    /// wrote into `dir`.
    #[cfg(feature = "tls")]
    fn tls(addr: SocketAddr, dir: &Path) -> Dial {
        use common::proto::tls::client_config;
        let cert = dir.join("localhost.crt");
        Dial::Tls { addr, h1: client_config(&cert, b"http/1.1").unwrap(), h2: client_config(&cert, b"h2").unwrap() }
    }

    fn is_tls(&self) -> bool {
        !matches!(self, Dial::Plain(_))
    }

    /// A new connection for HTTP/1.1, or for HTTP/2 (`h2`: prior knowledge on the plain
    /// listener, ALPN `h2` on the TLS one); over TLS, the handshake done.
    fn open(&self, h2: bool) -> Result<Conn, String> {
        match self {
            Dial::Plain(addr) => {
                let s = connect(*addr)?;
                if h2 {
                    s.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
                }
                Ok(Box::new(s))
            }
            #[cfg(feature = "tls")]
            Dial::Tls { addr, h1, h2: h2_cfg } => {
                let s = connect(*addr)?;
                s.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
                Ok(Box::new(common::proto::tls::handshake(if h2 { h2_cfg } else { h1 }, s)?))
            }
        }
    }
}

/// One GET of file `i` on `conn` (opened if `None`); the connection is kept for the next
/// request unless `keep` is false or the server closes it. Plain and TLS alike: a reused
/// connection closed before any byte of the response is a retry, anything else a failure.
fn get(dial: &Dial, conn: &mut Option<Conn>, i: usize, keep: bool) -> Outcome {
    let reused = conn.is_some();
    let mut s = match conn.take() {
        Some(s) => s,
        None => match dial.open(false) {
            Ok(s) => s,
            Err(e) => return Outcome::Failed(e),
        },
    };
    let req = format!("GET /u{i}.bin HTTP/1.1\r\nHost: t\r\n{}\r\n", if keep { "" } else { "Connection: close\r\n" });
    if let Err(e) = s.write_all(req.as_bytes()) {
        return if reused { Outcome::Retry } else { Outcome::Failed(format!("write: {e}")) };
    }
    match read_response(&mut s, &body(i)) {
        Ok(closing) => {
            if keep && !closing {
                *conn = Some(s);
            }
            Outcome::Ok
        }
        Err((0, _)) if reused => Outcome::Retry,
        Err((n, e)) => Outcome::Failed(format!("{e} ({n} bytes read, reused {reused})")),
    }
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    retries: AtomicU64,
    /// HTTP/2 requests sent past a GOAWAY's last stream (or refused), sent again.
    h2_retries: AtomicU64,
    /// HTTP/2 requests answered, and GOAWAY frames seen.
    h2_requests: AtomicU64,
    h2_goaways: AtomicU64,
    /// Requests answered over TLS (HTTP/1.1 and HTTP/2).
    tls_requests: AtomicU64,
    /// Keep-alive connections the server closed after a response (`Connection: close`):
    /// plain, TLS.
    closed: [AtomicU64; 2],
    failures: Mutex<Vec<String>>,
}

/// Load clients until `stop`: `keepalive` HTTP/1.1 clients reusing their connection,
/// `fresh` ones opening one per request, and (with HTTP/2) `h2` HTTP/2 clients.
fn load(
    dial: &Dial,
    keepalive: usize,
    fresh: usize,
    h2: usize,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Vec<thread::JoinHandle<()>> {
    let h1 = load_h1(dial, keepalive, fresh, stop.clone(), counts.clone());
    #[cfg(not(feature = "http2"))]
    let _ = h2;
    #[cfg(feature = "http2")]
    let h1 = h1
        .into_iter()
        .chain((0..h2).map(|c| {
            let (dial, stop, counts) = (dial.clone(), stop.clone(), counts.clone());
            thread::spawn(move || h2_client(&dial, c, &stop, &counts))
        }))
        .collect();
    h1
}

/// The HTTP/1.1 clients of [`load`].
fn load_h1(
    dial: &Dial,
    keepalive: usize,
    fresh: usize,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Vec<thread::JoinHandle<()>> {
    (0..keepalive + fresh)
        .map(|c| {
            let (dial, stop, counts) = (dial.clone(), stop.clone(), counts.clone());
            let keep = c < keepalive;
            thread::spawn(move || {
                let mut conn = None;
                let mut n = c;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let i = n % FILES;
                    let mut outcome = get(&dial, &mut conn, i, keep);
                    if let Outcome::Retry = outcome {
                        counts.retries.fetch_add(1, Ordering::Relaxed);
                        outcome = get(&dial, &mut conn, i, keep);
                    }
                    match outcome {
                        Outcome::Ok => {
                            let tls = dial.is_tls();
                            counts.tls_requests.fetch_add(u64::from(tls), Ordering::Relaxed);
                            if keep && conn.is_none() {
                                counts.closed[usize::from(tls)].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Outcome::Retry => counts.failures.lock().unwrap().push("closed twice before a response".into()),
                        Outcome::Failed(e) => {
                            counts.failures.lock().unwrap().push(e);
                            conn = None;
                        }
                    }
                    counts.requests.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// Whether the file at `/proc/PID/exe` is the one now at the binary's path (the old process
/// runs a replaced, deleted inode).
fn runs_deleted_binary(pid: u32) -> bool {
    fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p.to_string_lossy().ends_with(" (deleted)"))
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn issue39_upgrade_under_load_drops_nothing_and_a_large_download_completes() {
    upgrade_under_load(1);
}

/// With workers, each new worker accepts from the sockets of the old worker it replaces.
#[test]
fn issue39_upgrade_with_two_workers_drops_nothing() {
    upgrade_under_load(2);
}

/// The TLS load clients: keep-alive and new-connection HTTP/1.1, and HTTP/2.
#[cfg(feature = "tls")]
const TLS_CLIENTS: (usize, usize, usize) = (6, 3, 2);

/// The upgrade under load with `workers`: 16 keep-alive and 4 new-connection HTTP/1.1 clients
/// and 4 h2c ones on the plain listener, and [`TLS_CLIENTS`] on the TLS one.
fn upgrade_under_load(workers: usize) {
    // With workers every set of sockets binds the same port: it is chosen here.
    let port = |workers| if workers == 1 { 0 } else { common::free_port() };
    let extra = if workers == 1 {
        String::new()
    } else {
        format!("workers = {workers}\nlisten = [\"127.0.0.1:{}\"]\n", port(workers))
    };
    #[cfg(feature = "tls")]
    let extra = format!(
        "{extra}[tls]\nlisten = [\"127.0.0.1:{}\"]\ncert = \"{{dir}}/localhost.crt\"\nkey = \"{{dir}}/localhost.key\"\n",
        port(workers)
    );
    let mut srv = Upgradable::start(&extra, |_dir, root| {
        #[cfg(feature = "tls")]
        common::proto::make_localhost_cert(_dir);
        make_files(root);
    });
    let addr = srv.addr;
    let old = srv.child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut clients = load(&Dial::Plain(addr), 16, 4, 4, stop.clone(), counts.clone());
    #[cfg(feature = "tls")]
    {
        let tls = Dial::tls(srv.listening(common::parse_listening_tls, |_| true), srv.dir());
        let (keepalive, fresh, h2) = TLS_CLIENTS;
        clients.extend(load(&tls, keepalive, fresh, h2, stop.clone(), counts.clone()));
    }

    // The large download, read slowly, started before the upgrade.
    let mut big = connect(addr).unwrap();
    big.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let progress = Arc::new(AtomicU64::new(0));
    let read_so_far = progress.clone();
    let download = thread::spawn(move || {
        let mut got = Vec::with_capacity(BIG + 512);
        let mut chunk = vec![0u8; 256 << 10];
        let start = Instant::now();
        while got.len() < BIG + 200 {
            match big.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    got.extend_from_slice(&chunk[..n]);
                    read_so_far.store(got.len() as u64, Ordering::Relaxed);
                }
                Err(e) => panic!("large download: {e} after {} bytes", got.len()),
            }
            // About 2 s for the whole body: it spans the upgrade.
            thread::sleep(Duration::from_millis(8));
            if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                if got.len() >= p + 4 + BIG {
                    break;
                }
            }
        }
        (got, start.elapsed())
    });

    thread::sleep(Duration::from_millis(700));
    install(BIN, &srv.dir().join("bin/ferrohttpd"));
    assert!(runs_deleted_binary(old), "the old process should run the replaced file");
    let before = counts.requests.load(Ordering::Relaxed);
    let tls_before = counts.tls_requests.load(Ordering::Relaxed);
    signal(old, "USR2");
    let new = srv.wait_new_pid(old, Duration::from_secs(20)).expect("a new process writes the pid file");
    assert!(alive(new), "the new process runs");
    assert!(!runs_deleted_binary(new), "the new process runs the file now at the path, not the old inode");
    let status = wait_exit(&mut srv.child, Duration::from_secs(20)).expect("the old process exits");
    let read_at_exit = progress.load(Ordering::Relaxed);
    assert!(status.success(), "old process: {status}");
    let at_exit = counts.requests.load(Ordering::Relaxed);
    let tls_at_exit = counts.tls_requests.load(Ordering::Relaxed);
    thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let (got, took) = download.join().unwrap();
    let total = counts.requests.load(Ordering::Relaxed);
    let tls_total = counts.tls_requests.load(Ordering::Relaxed);
    let failures = counts.failures.lock().unwrap().clone();
    eprintln!(
        "upgrade under load (workers = {workers}): {total} requests ({} before the signal, {} after the old process exited), {} failed, {} keep-alive retries, HTTP/2: {} requests, {} GOAWAY frames, {} streams past a GOAWAY sent again; over TLS {tls_total} requests ({tls_before} before, {} after); keep-alive connections closed after a response: {} plain, {} TLS; large download {} bytes in {took:?}",
        before,
        total - at_exit,
        failures.len(),
        counts.retries.load(Ordering::Relaxed),
        counts.h2_requests.load(Ordering::Relaxed),
        counts.h2_goaways.load(Ordering::Relaxed),
        counts.h2_retries.load(Ordering::Relaxed),
        tls_total - tls_at_exit,
        counts.closed[0].load(Ordering::Relaxed),
        counts.closed[1].load(Ordering::Relaxed),
        got.len()
    );
    assert!(failures.is_empty(), "{} failed requests: {:?}", failures.len(), &failures[..failures.len().min(10)]);
    // Idle keep-alive connections are answered through the grace, not closed under a
    // request in flight: no client had to retry.
    assert_eq!(counts.retries.load(Ordering::Relaxed), 0, "requests raced the close of an idle connection");
    assert!(before > 50 && total - at_exit > 50, "too little load: {before} before, {} after", total - at_exit);
    // Every keep-alive connection to the old process ended with a response saying
    // `Connection: close` (none was closed under a request: 0 retries above).
    assert!(counts.closed[0].load(Ordering::Relaxed) >= 16, "the plain keep-alive connections were closed gracefully");
    #[cfg(feature = "http2")]
    {
        #[cfg(feature = "tls")]
        let h2_clients = 4 + TLS_CLIENTS.2 as u64;
        #[cfg(not(feature = "tls"))]
        let h2_clients = 4;
        assert!(
            counts.h2_requests.load(Ordering::Relaxed) > 50 && counts.h2_goaways.load(Ordering::Relaxed) >= h2_clients,
            "the HTTP/2 clients ran and each saw the old process's GOAWAY"
        );
    }
    // The TLS clients were served by both processes: the new one took over the TLS socket,
    // and each keep-alive connection to the old one ended with `Connection: close`.
    #[cfg(feature = "tls")]
    {
        assert!(
            tls_before > 20 && tls_total - tls_at_exit > 20,
            "too little TLS load: {tls_before} before, {} after",
            tls_total - tls_at_exit
        );
        assert!(
            counts.closed[1].load(Ordering::Relaxed) >= TLS_CLIENTS.0 as u64,
            "the TLS keep-alive connections were closed gracefully"
        );
    }
    // The download, served by the old process to its end, byte for byte.
    let p = got.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    assert!(got.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&got[..p]));
    assert_eq!(got.len() - p, BIG, "the whole body");
    assert!(got[p..] == pseudo_random_bytes(BIG, 99)[..], "the body is exact");
    // The old process stayed until the kernel had taken the rest of the body (a few MB of
    // socket buffers at most): it did not leave at the signal.
    assert!(read_at_exit >= BIG as u64 / 2, "the old process exited with {read_at_exit} of {BIG} bytes read");
    if workers == 1 {
        let log = srv.error_log();
        assert!(log.contains(&format!("upgrade: process {new} serves")), "{log}");
        assert!(log.contains("stats: "), "the old process logs its statistics as it hands over: {log}");
        assert!(!log.contains("upgrade failed"), "{log}");
    } else {
        let err = String::from_utf8_lossy(&srv.stderr.lock().unwrap()).into_owned();
        assert!(err.contains(&format!("upgrade: process {new} serves")), "{err}");
        assert!(common::children_of(new).len() == 2, "the new parent runs two workers");
    }
    assert_eq!(srv.pid_file(), Some(new), "the old process leaves the new one's pid file");
}

/// Sends USR2 and waits for the failure line; the old process keeps serving, the pid file
/// is unchanged, and exactly one line says why.
fn upgrade_fails(srv: &mut Upgradable, why: &str) {
    let old = srv.child.id();
    let before = srv.error_log().matches("upgrade failed").count();
    signal(old, "USR2");
    let deadline = Instant::now() + Duration::from_secs(20);
    while srv.error_log().matches("upgrade failed").count() == before && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    // Time for a second line, if there were one.
    thread::sleep(Duration::from_millis(200));
    let log = srv.error_log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("upgrade failed")).collect();
    assert_eq!(lines.len(), before + 1, "one line says why: {log}");
    assert!(lines[before].contains(why), "{log}");
    assert!(srv.child.try_wait().unwrap().is_none(), "the old process keeps running");
    assert_eq!(srv.pid_file(), Some(old));
    for i in 0..FILES {
        let mut conn = None;
        assert!(matches!(get(&Dial::Plain(srv.addr), &mut conn, i, false), Outcome::Ok), "the old process serves");
    }
}

#[test]
fn issue39_a_broken_binary_or_configuration_leaves_the_old_process_serving() {
    let mut srv = Upgradable::start("", |_, root| make_files(root));
    let exe = srv.dir().join("bin/ferrohttpd");
    write_script(&exe, "#!/bin/sh\nexit 1\n");
    upgrade_fails(&mut srv, "exited (exit status: 1) before serving");

    fs::remove_file(&exe).unwrap();
    upgrade_fails(&mut srv, "cannot start");

    // The real binary, with a configuration that no longer loads.
    install(BIN, &exe);
    let cfg = srv.dir().join("ferrohttpd.toml");
    let good = fs::read_to_string(&cfg).unwrap();
    fs::write(&cfg, format!("{good}\n[server]\nbogus = 1\n")).unwrap();
    upgrade_fails(&mut srv, "exited (exit status: 1) before serving");

    // Fixed again: the upgrade goes through.
    fs::write(&cfg, good).unwrap();
    let old = srv.child.id();
    signal(old, "USR2");
    let new = srv.wait_new_pid(old, Duration::from_secs(20)).expect("the upgrade succeeds once fixed");
    assert!(wait_exit(&mut srv.child, Duration::from_secs(20)).is_some_and(|s| s.success()));
    let mut conn = None;
    assert!(matches!(get(&Dial::Plain(srv.addr), &mut conn, 0, false), Outcome::Ok));
    assert!(alive(new));
}

/// The listen addresses in the new configuration: a kept one keeps its socket (and its
/// port 0's port), a new one is bound, a removed one is closed.
#[test]
fn issue39_the_new_process_keeps_binds_and_closes_listeners_by_its_configuration() {
    let mut srv = Upgradable::start("listen = [\"127.0.0.1:0\", \"[::1]:0\"]", |_, root| make_files(root));
    let v6 = srv.listening(common::parse_listening, SocketAddr::is_ipv6);
    let extra = common::free_port();
    let cfg = srv.dir().join("ferrohttpd.toml");
    let text = fs::read_to_string(&cfg).unwrap();
    let changed = text.replace(
        "listen = [\"127.0.0.1:0\", \"[::1]:0\"]",
        &format!("listen = [\"127.0.0.1:0\", \"127.0.0.1:{extra}\"]"),
    );
    assert_ne!(text, changed);
    fs::write(&cfg, changed).unwrap();
    let old = srv.child.id();
    signal(old, "USR2");
    srv.wait_new_pid(old, Duration::from_secs(20)).expect("upgraded");
    assert!(wait_exit(&mut srv.child, Duration::from_secs(20)).is_some());
    let mut conn = None;
    assert!(matches!(get(&Dial::Plain(srv.addr), &mut conn, 1, false), Outcome::Ok), "the kept port-0 address");
    let added: SocketAddr = format!("127.0.0.1:{extra}").parse().unwrap();
    assert!(matches!(get(&Dial::Plain(added), &mut conn, 2, false), Outcome::Ok), "the added address");
    assert!(TcpStream::connect_timeout(&v6, IO_TIMEOUT).is_err(), "the removed address refuses");
}

/// Sanity of the harness: the copy really is started from the temp dir.
#[test]
fn issue39_the_server_runs_from_its_copy() {
    let srv = Upgradable::start("", |_, _| {});
    let exe: PathBuf = fs::read_link(format!("/proc/{}/exe", srv.child.id())).unwrap();
    assert!(exe.starts_with(fs::canonicalize(srv.dir()).unwrap()), "{}", exe.display());
}

/// One `openssl s_client` GET over TLS 1.3 with `sess` (`-sess_out`/`-sess_in` FILE): whether
/// the session was resumed, and the output.
#[cfg(feature = "tls")]
fn tls_get(addr: SocketAddr, sess: &[&str]) -> (bool, String) {
    use std::process::Stdio;
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-ign_eof", "-tls1_3", "-servername", "localhost"])
        .args(sess)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"GET /u0.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    drop(stdin);
    let mut out = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    if wait_exit(&mut child, Duration::from_secs(10)).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let text = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    (text.lines().any(|l| l.starts_with("Reused, ")), text)
}

#[cfg(feature = "tls")]
#[test]
fn issue39_a_tls_session_ticket_from_before_the_upgrade_resumes_after_it() {
    let tls = "[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{dir}/localhost.crt\"\nkey = \"{dir}/localhost.key\"\n";
    let mut srv = Upgradable::start(tls, |dir, root| {
        common::proto::make_localhost_cert(dir);
        make_files(root);
    });
    let addr = srv.listening(common::parse_listening_tls, |_| true);
    let sess = srv.dir().join("session.pem");
    let sess = sess.to_str().unwrap();
    let (reused, text) = tls_get(addr, &["-sess_out", sess]);
    assert!(!reused && text.contains("HTTP/1.1 200 "), "{text}");
    let (reused, text) = tls_get(addr, &["-sess_in", sess]);
    assert!(reused, "resumes before the upgrade: {text}");

    let old = srv.child.id();
    signal(old, "USR2");
    let new = srv.wait_new_pid(old, Duration::from_secs(20)).expect("upgraded");
    assert!(wait_exit(&mut srv.child, Duration::from_secs(20)).is_some_and(|s| s.success()));
    let (reused, text) = tls_get(addr, &["-sess_in", sess]);
    assert!(text.contains("HTTP/1.1 200 "), "the new process serves TLS on the same socket: {text}");
    assert!(reused, "the ticket issued by process {old} resumes with process {new}: {text}");
}

/// A connection that becomes HTTP/2 only after the old process began to wind down (its TLS
/// handshake, or its h2c preface, still on the way when the new process took over) gets the
/// graceful GOAWAY like the others: its first stream is answered, then it closes, and the
/// old process exits. Before, its session started without one and served every request the
/// client sent until `shutdown_timeout` cut it in the middle of a response (the load test's
/// `Broken pipe after 32768 bytes (GOAWAY seen: false)`, 1 run in 5 with `workers = 2`).
#[cfg(all(feature = "tls", feature = "http2"))]
#[test]
fn issue39_a_connection_that_turns_http2_during_the_wind_down_gets_goaway() {
    use common::h2::{frame, get_block, PREFACE};
    let tls = "shutdown_timeout = \"30s\"\n[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{dir}/localhost.crt\"\nkey = \"{dir}/localhost.key\"\n";
    let mut srv = Upgradable::start(tls, |dir, root| {
        common::proto::make_localhost_cert(dir);
        make_files(root);
    });
    let tls_addr = srv.listening(common::parse_listening_tls, |_| true);
    // TLS: the handshake as far as the client's Finished, which is held back; the server's
    // flight shows the old process has the connection.
    let cfg = common::proto::tls::client_config(&srv.dir().join("localhost.crt"), b"h2").unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls =
        rustls::StreamOwned::new(rustls::ClientConnection::new(cfg, name).unwrap(), connect(tls_addr).unwrap());
    while tls.conn.is_handshaking() {
        if tls.conn.wants_write() {
            tls.conn.write_tls(&mut tls.sock).unwrap();
        } else {
            assert!(tls.conn.read_tls(&mut tls.sock).unwrap() > 0, "the server closed in the handshake");
            tls.conn.process_new_packets().unwrap();
        }
    }
    // h2c: the first bytes of the preface, not enough to tell HTTP/2 yet.
    let mut plain = connect(srv.addr).unwrap();
    plain.write_all(&PREFACE[..4]).unwrap();
    thread::sleep(Duration::from_millis(200));

    let old = srv.child.id();
    install(BIN, &srv.dir().join("bin/ferrohttpd"));
    signal(old, "USR2");
    let new = srv.wait_new_pid(old, Duration::from_secs(20)).expect("upgraded");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !srv.error_log().contains(&format!("upgrade: process {new} serves")) {
        assert!(Instant::now() < deadline, "the old process does not wind down: {}", srv.error_log());
        thread::sleep(Duration::from_millis(5));
    }
    // Within the second an idle connection is given: the handshake completes (the Finished
    // goes out with the first write), the preface ends, and each asks for a file.
    let hello = |rest: &[u8]| [rest, &frame(4, 0, 0, &[]), &frame(1, 0x5, 1, &get_block("/u1.bin", &[]))].concat();
    tls.write_all(&hello(PREFACE)).unwrap();
    plain.write_all(&hello(&PREFACE[4..])).unwrap();
    for (what, mut s) in [("h2 over TLS", &mut tls as &mut dyn Stream), ("h2c", &mut plain)] {
        // The frames until the connection ends: GOAWAY, stream 1 answered in full, GOAWAY
        // again (the PING is not acknowledged: a second later), then the end.
        let (mut goaway, mut first_goaway_before_end, mut status, mut got) = (0, false, 0u16, Vec::new());
        let mut dec = ferrohttpd::h2::hpack::Decoder::new(4096);
        loop {
            match h2_frame(&mut s) {
                Ok((7, _, 0, _)) => {
                    goaway += 1;
                    first_goaway_before_end |= got.len() < body(1).len();
                }
                Ok((1, _, 1, p)) => {
                    let _ = dec.decode(&p, 1 << 20, |k, v, _| {
                        if k == b":status" {
                            status = std::str::from_utf8(v).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
                        }
                        Ok::<(), ()>(())
                    });
                }
                Ok((0, _, 1, p)) => got.extend_from_slice(&p),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => panic!("{what}: {e} after {} bytes of stream 1 and {goaway} GOAWAY frames", got.len()),
            }
        }
        assert!(status == 200 && got == body(1), "{what}: stream 1 answered in full: {status}, {} bytes", got.len());
        assert!(first_goaway_before_end && goaway == 2, "{what}: the two GOAWAY frames of a graceful end ({goaway})");
    }
    // The server lingers until the client has closed too.
    drop((tls, plain));
    let status = wait_exit(&mut srv.child, Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "the old process exits once its connections have ended: {status:?}");
}

/// SIGHUP with other listen addresses: the added one serves, the removed one refuses, and
/// the kept one never refused a connection, under load through the reload.
#[test]
fn issue39_sighup_adds_and_removes_listen_addresses_and_the_kept_one_never_refuses() {
    let (kept, removed, added) = (common::free_port(), common::free_port(), common::free_port());
    let listen = |a: u16, b: u16| format!("listen = [\"127.0.0.1:{a}\", \"127.0.0.1:{b}\"]");
    let mut srv = Upgradable::start(&listen(kept, removed), |_, root| make_files(root));
    let kept_addr: SocketAddr = format!("127.0.0.1:{kept}").parse().unwrap();
    let removed_addr: SocketAddr = format!("127.0.0.1:{removed}").parse().unwrap();
    let added_addr: SocketAddr = format!("127.0.0.1:{added}").parse().unwrap();
    let mut conn = None;
    assert!(matches!(get(&Dial::Plain(removed_addr), &mut conn, 0, false), Outcome::Ok));

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let clients = load(&Dial::Plain(kept_addr), 4, 4, 4, stop.clone(), counts.clone());
    thread::sleep(Duration::from_millis(300));
    let cfg = srv.dir().join("ferrohttpd.toml");
    let text = fs::read_to_string(&cfg).unwrap();
    fs::write(&cfg, text.replace(&listen(kept, removed), &listen(kept, added))).unwrap();
    signal(srv.child.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !srv.error_log().contains("configuration reloaded") && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let log = srv.error_log();
    assert!(log.contains("configuration reloaded"), "{log}");
    let failures = counts.failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "the kept address failed: {failures:?}");
    assert!(counts.requests.load(Ordering::Relaxed) > 20);
    assert!(
        matches!(get(&Dial::Plain(added_addr), &mut conn, 1, false), Outcome::Ok),
        "the added address serves: {log}"
    );
    assert!(TcpStream::connect_timeout(&removed_addr, IO_TIMEOUT).is_err(), "the removed address refuses");
    assert!(srv.child.try_wait().unwrap().is_none());
}

/// A listen address that cannot be bound fails the reload and changes nothing.
#[test]
fn issue39_sighup_with_an_address_that_cannot_be_bound_changes_nothing() {
    let mut srv = Upgradable::start("", |_, root| make_files(root));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = srv.dir().join("ferrohttpd.toml");
    let text = fs::read_to_string(&cfg).unwrap();
    let busy = format!("listen = [\"127.0.0.1:0\", \"{}\"]", taken.local_addr().unwrap());
    fs::write(&cfg, text.replace("listen = [\"127.0.0.1:0\"]", &busy)).unwrap();
    signal(srv.child.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !srv.error_log().contains("reload failed") && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let log = srv.error_log();
    assert!(log.contains("reload failed") && log.contains("cannot listen on"), "{log}");
    let mut conn = None;
    assert!(matches!(get(&Dial::Plain(srv.addr), &mut conn, 0, false), Outcome::Ok), "the old address still serves");
    assert!(srv.child.try_wait().unwrap().is_none());
}

/// Under systemd (`NotifyAccess=all`), the new process reports itself as the main process:
/// `MAINPID=` on the notification socket, before the old one exits.
#[test]
fn issue39_the_new_process_tells_systemd_its_pid() {
    use std::os::unix::net::UnixDatagram;
    let sock_dir = TempDir::new().unwrap();
    let path = sock_dir.path().join("notify");
    let notify = UnixDatagram::bind(&path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut srv = Upgradable::start_env("", |_, _| {}, &[("NOTIFY_SOCKET", &path)]);
    let old = srv.child.id();
    signal(old, "USR2");
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("a notification");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    let new = srv.wait_new_pid(old, Duration::from_secs(20)).expect("upgraded");
    assert_eq!(msg, format!("MAINPID={new}\n"));
    assert!(wait_exit(&mut srv.child, Duration::from_secs(20)).is_some());
}

/// An HTTP/2 frame read whole: type, flags, stream, payload.
#[cfg(feature = "http2")]
fn h2_frame(s: &mut impl Read) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    Ok((head[3], head[4], id, payload))
}

/// An HTTP/2 connection (h2c, or h2 over TLS): preface, SETTINGS (a 16 MiB stream window)
/// and the connection window opened as far.
#[cfg(feature = "http2")]
fn h2_open(dial: &Dial) -> Result<Conn, String> {
    use common::h2::{frame, PREFACE};
    let mut s = dial.open(true)?;
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(4, 0, 0, &[0, 4, 1, 0, 0, 0]));
    hello.extend(frame(8, 0, 0, &(16u32 << 20).to_be_bytes()));
    s.write_all(&hello).map_err(|e| format!("h2 preface: {e}"))?;
    Ok(s)
}

/// One HTTP/2 client: GETs one at a time on its connection. GOAWAY is followed: a stream it
/// covers completes, one past it is sent again on a new connection (RFC 9113 §6.8), and the
/// connection is replaced once it closes.
#[cfg(feature = "http2")]
fn h2_client(dial: &Dial, c: usize, stop: &AtomicBool, counts: &Counts) {
    use common::h2::{frame, get_block};
    // The connection, its HPACK decoder, the next stream, whether GOAWAY was seen, and when
    // it was opened (a failure says how long it had lived: one cut by the old process's
    // `shutdown_timeout` had lived that long).
    type H2Conn = (Conn, ferrohttpd::h2::hpack::Decoder, u32, bool, Instant);
    let mut conn: Option<H2Conn> = None;
    let mut n = c;
    let fail = |e: String| counts.failures.lock().unwrap().push(format!("h2: {e}"));
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let i = n % FILES;
        if conn.as_ref().is_none_or(|c| c.3) {
            conn = match h2_open(dial) {
                Ok(s) => Some((s, ferrohttpd::h2::hpack::Decoder::new(4096), 1, false, Instant::now())),
                Err(e) => {
                    fail(e);
                    continue;
                }
            };
        }
        let Some((s, dec, next_id, going_away, opened)) = conn.as_mut() else { continue };
        let id = *next_id;
        *next_id += 2;
        if let Err(e) = s.write_all(&frame(1, 0x5, id, &get_block(&format!("/u{i}.bin"), &[]))) {
            fail(format!("write: {e}"));
            conn = None;
            continue;
        }
        let (mut status, mut got, mut done, mut again) = (0u16, Vec::new(), false, false);
        while !done {
            match h2_frame(s) {
                Ok((7, _, 0, p)) if p.len() >= 8 => {
                    *going_away = true;
                    counts.h2_goaways.fetch_add(1, Ordering::Relaxed);
                    if u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff < id {
                        again = true;
                        break;
                    }
                }
                Ok((1, flags, sid, p)) if sid == id => {
                    let _ = dec.decode(&p, 1 << 20, |k, v, _| {
                        if k == b":status" {
                            status = std::str::from_utf8(v).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
                        }
                        Ok::<(), ()>(())
                    });
                    done = flags & 1 != 0;
                }
                Ok((0, flags, sid, p)) if sid == id => {
                    if !p.is_empty() {
                        let _ = s.write_all(&frame(8, 0, 0, &(p.len() as u32).to_be_bytes()));
                    }
                    got.extend_from_slice(&p);
                    done = flags & 1 != 0;
                }
                Ok((3, _, sid, _)) if sid == id => {
                    again = true;
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    fail(format!(
                        "stream {id}: {e} after {} bytes (GOAWAY seen: {going_away}; {}, open for {:?})",
                        got.len(),
                        if dial.is_tls() { "TLS" } else { "h2c" },
                        opened.elapsed()
                    ));
                    break;
                }
            }
        }
        if again {
            counts.h2_retries.fetch_add(1, Ordering::Relaxed);
            conn = None;
            continue;
        }
        if done && (status != 200 || got != body(i)) {
            fail(format!("stream {id}: status {status}, {} bytes", got.len()));
        }
        counts.h2_requests.fetch_add(u64::from(done), Ordering::Relaxed);
        if dial.is_tls() {
            counts.tls_requests.fetch_add(u64::from(done), Ordering::Relaxed);
        }
        if !done {
            conn = None;
        }
        counts.requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// The HTTP/3 tests' big file: 1 MiB at once, then 512 KiB/s (`limit_rate`).
#[cfg(feature = "http3")]
const H3_BIG: usize = 5 << 20;

#[cfg(feature = "http3")]
fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

/// One HTTP/3 GET of `path` on `port` (tests/h3client.py), on a thread: its JSON result.
#[cfg(feature = "http3")]
fn h3_get(port: u16, path: &str) -> thread::JoinHandle<String> {
    let path = path.to_string();
    thread::spawn(move || {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3client.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["127.0.0.1", &port.to_string(), "localhost"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let req = format!(r#"[{{"method":"GET","path":"{path}","authority":"localhost"}}]"#);
        child.stdin.take().unwrap().write_all(req.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

/// The pid in the status page, read over a new HTTP/3 connection (tests/h3client.py
/// --session): the process that serves new connections.
#[cfg(feature = "http3")]
fn h3_status_pid(port: u16) -> Option<u32> {
    use std::io::BufRead;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3client.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["--session", "127.0.0.1", &port.to_string(), "localhost"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"method\":\"GET\",\"path\":\"/.status?json\",\"authority\":\"localhost\"}\n").unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (connected, reply) = (lines.next(), lines.next());
    drop(stdin);
    let _ = child.wait();
    let (connected, reply) = (connected?.ok()?, reply?.ok()?);
    assert!(connected.contains("\"connected\""), "{connected}");
    let hex = reply.split("\"body_hex\": \"").nth(1)?.split('"').next()?;
    let body: Vec<u8> =
        (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect();
    let body = String::from_utf8_lossy(&body).into_owned();
    body.split("\"pid\":").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// tests/h3migrate.py: 4 connections, each moving to a new source port in the middle of its
/// first transfer of `/mig.bin` (512 KiB); every transfer must finish byte-exact.
#[cfg(feature = "http3")]
fn h3_migrate(port: u16) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3migrate.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["127.0.0.1", &port.to_string(), "localhost", "/mig.bin", "4", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let want = sha256(&pseudo_random_bytes(512 << 10, 36));
    // 4 connections × 2 transfers, each byte-exact; the first of each moved port.
    assert_eq!(text.matches(&want).count(), 8, "{text}");
    assert_eq!(text.matches("\"status\": 200").count(), 8, "{text}");
    assert_eq!(text.matches("\"moved_at\": null").count(), 4, "{text}");
}

/// Issue 35: a binary upgrade (SIGUSR2) hands HTTP/3's UDP sockets over with the steering
/// key; the new process takes the other half of them (`quic::steer`). An HTTP/3 transfer of
/// the old process, under way through the upgrade, finishes byte-exact (its packets keep
/// reaching the old worker, by connection ID); new connections are served by the new
/// process (its pid on the status page), steered (the log says so; clients that change
/// port mid-transfer finish); a second upgrade while the first process still finishes its
/// transfer is refused, and one after it has exited works.
#[cfg(feature = "http3")]
fn http3_survives_upgrades(workers: usize) {
    if !common::have_aioquic("the HTTP/3 upgrade tests are") {
        return;
    }
    let (plain, tls) = (common::free_port(), common::free_port());
    let mut srv = Upgradable::start(
        &format!(
            "workers = {workers}\nlisten = [\"127.0.0.1:{plain}\"]\n[tls]\nlisten = [\"127.0.0.1:{tls}\"]\n\
             cert = \"{{dir}}/localhost.crt\"\nkey = \"{{dir}}/localhost.key\"\n[http3]\nenabled = true\n\
             [status]\nenabled = true\n[http]\nlimit_rate = \"512KiB/s\"\nlimit_rate_after = 1048576\n"
        ),
        |dir, root| {
            common::proto::make_localhost_cert(dir);
            make_files(root);
            fs::write(root.join("h3big.bin"), pseudo_random_bytes(H3_BIG, 35)).unwrap();
            fs::write(root.join("mig.bin"), pseudo_random_bytes(512 << 10, 36)).unwrap();
        },
    );
    let stderr = |srv: &Upgradable| String::from_utf8_lossy(&srv.stderr.lock().unwrap()).into_owned();
    // The processes that serve for `pid`: its workers, or itself.
    let servers = |pid: u32| {
        if workers == 1 {
            return vec![pid];
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = common::children_of(pid);
            if c.len() >= workers {
                return c;
            }
            assert!(Instant::now() < deadline, "the workers of {pid} did not start");
            thread::sleep(Duration::from_millis(20));
        }
    };
    let wait_log = |srv: &Upgradable, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !(stderr(srv) + &srv.error_log()).contains(what) {
            assert!(Instant::now() < deadline, "no {what:?} in {}{}", stderr(srv), srv.error_log());
            thread::sleep(Duration::from_millis(20));
        }
    };
    let old = srv.child.id();
    let first = servers(old);
    assert!(first.contains(&h3_status_pid(tls).expect("status")), "{}", stderr(&srv));
    // The transfer: 1 MiB at once, then 4 at 512 KiB/s (8 s), through the upgrade.
    let transfer = h3_get(tls, "/h3big.bin");
    thread::sleep(Duration::from_millis(1500));
    signal(old, "USR2");
    let new = srv.wait_new_pid(old, Duration::from_secs(10)).expect("a new process");
    wait_log(&srv, &format!("upgrade: process {new} serves"));
    wait_log(&srv, "http3: new connections come to this process");
    // Not while the old process still drains the half a next one would take.
    assert!(alive(old), "the old process left before its transfer ended: {}", stderr(&srv));
    signal(new, "USR2");
    wait_log(&srv, &format!("process {old}, upgraded from, still finishes its HTTP/3 connections"));
    let second = servers(new);
    for _ in 0..3 {
        let pid = h3_status_pid(tls).expect("status");
        assert!(second.contains(&pid), "served by {pid}, not by {second:?} of {new}: {}", stderr(&srv));
    }
    h3_migrate(tls);
    let got = transfer.join().unwrap();
    assert!(got.contains("\"status\": 200"), "{got} {}", stderr(&srv));
    assert!(got.contains(&sha256(&pseudo_random_bytes(H3_BIG, 35))), "{got} {}", stderr(&srv));
    // The old process leaves once its transfer is done; then a second upgrade goes through.
    assert!(wait_exit(&mut srv.child, Duration::from_secs(15)).is_some(), "the old process did not exit");
    signal(new, "USR2");
    let third = srv.wait_new_pid(new, Duration::from_secs(10)).expect("a third process");
    wait_log(&srv, &format!("upgrade: process {third} serves"));
    let third_servers = servers(third);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !third_servers.contains(&h3_status_pid(tls).expect("status")) {
        assert!(Instant::now() < deadline, "the third process does not serve: {}", stderr(&srv));
        thread::sleep(Duration::from_millis(50));
    }
    h3_migrate(tls);
    let err = stderr(&srv);
    assert!(!err.contains("not steered"), "{err}");
    assert_eq!(err.matches("http3: new connections come to this process").count(), 2, "{err}");
    // The test's Drop stops the process the pid file names (the third); the second one too.
    signal(new, "KILL");
}

#[cfg(feature = "http3")]
#[test]
fn http3_survives_an_upgrade_single_process() {
    http3_survives_upgrades(1);
}

#[cfg(feature = "http3")]
#[test]
fn http3_survives_an_upgrade_with_workers() {
    http3_survives_upgrades(2);
}

/// An upgrade keeps the HTTP/3 addresses (`quic::steer`): a configuration that changes them
/// makes the new process fail, saying why, and the old one serves on, over HTTP/3 too.
#[cfg(feature = "http3")]
#[test]
fn http3_an_upgrade_that_changes_the_http3_addresses_fails_and_the_old_process_serves_on() {
    if !common::have_aioquic("the HTTP/3 upgrade tests are") {
        return;
    }
    let (tls, udp, other) = (common::free_port(), common::free_port(), common::free_port());
    let base = format!(
        "[tls]\nlisten = [\"127.0.0.1:{tls}\"]\ncert = \"{{dir}}/localhost.crt\"\nkey = \"{{dir}}/localhost.key\"\n\
         [http3]\nenabled = true\n"
    );
    let mut srv = Upgradable::start(&format!("{base}listen = [\"127.0.0.1:{udp}\"]\n"), |dir, root| {
        common::proto::make_localhost_cert(dir);
        make_files(root);
    });
    assert!(h3_get(udp, "/u1.bin").join().unwrap().contains("\"status\": 200"));
    let cfg = srv.dir().join("ferrohttpd.toml");
    let text = fs::read_to_string(&cfg).unwrap();
    fs::write(&cfg, text.replace(&format!("127.0.0.1:{udp}"), &format!("127.0.0.1:{other}"))).unwrap();
    upgrade_fails(&mut srv, "exited (exit status: 1) before serving");
    let err = String::from_utf8_lossy(&srv.stderr.lock().unwrap()).into_owned();
    assert!(err.contains(&format!("a binary upgrade keeps the HTTP/3 addresses (127.0.0.1:{other}")), "{err}");
    let got = h3_get(udp, "/u1.bin").join().unwrap();
    assert!(got.contains("\"status\": 200") && got.contains(&sha256(&body(1))), "{got}");
}
