//! Integration-test harness: runs the real `ferrohttpd` binary on `127.0.0.1:0`, each server
//! with its own temporary document root, and talks to it over raw sockets.
//!
//! Invariants: every socket operation has a timeout, every loop is bounded, all traffic goes
//! to 127.0.0.1, and a server is killed (and reaped) when its `Server` is dropped. A server
//! that exits on its own while a test is running makes that test fail.
#![allow(dead_code)]

pub mod chromium;
#[cfg(feature = "http2")]
pub mod h2;
pub mod json;
pub mod proto;

use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_ferrohttpd");
/// Timeout for every socket read and write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a server may take to print its `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a CLI invocation that should exit by itself may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Fixture files. Layout of a server's temp dir:
//
//   <dir>/secret.txt                 SECRET (next to the root: must never be served)
//   <dir>/outside/secret.txt         SECRET
//   <dir>/access.log                 access log (standard config)
//   <dir>/ferrohttpd.toml            config (standard config)
//   <dir>/root/                      the document root, see `make_fixture`
// ---------------------------------------------------------------------------------------------

pub const FILE_TXT: &[u8] = b"hello, world\n";
/// 2020-01-02 03:04:05 UTC, the mtime given to `/file.txt`.
pub const FILE_TXT_MTIME: u64 = 1_577_934_245;
pub const FILE_TXT_LAST_MODIFIED: &str = "Thu, 02 Jan 2020 03:04:05 GMT";
pub const INDEX_HTML: &[u8] = b"<!doctype html>\n<title>root index</title>\n";
pub const STYLE_CSS: &[u8] = b"body { color: #333; }\n";
pub const IMAGE_PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR not really a png\xff\xfe";
pub const DATA_XYZ: &[u8] = b"\0\x01\x02\x03 unknown extension\n";
pub const APP_JS: &[u8] = b"console.log(\"hi\");\n";
pub const DATA_JSON: &[u8] = b"{\"ok\":true}\n";
pub const THING_FOO: &[u8] = b"foo file\n";
pub const THING_BAR: &[u8] = b"bar file\n";
pub const DIR_INDEX: &[u8] = b"<p>dir index</p>\n";
pub const DIR_FILE: &[u8] = b"file in dir\n";
pub const HOME_HTML: &[u8] = b"<p>home.html</p>\n";
pub const NOINDEX_FILE: &[u8] = b"no index here\n";
pub const DOT_SECRET: &[u8] = b"dot secret\n";
pub const GIT_CONFIG: &[u8] = b"[core]\n\tbare = false\n";
pub const DIR_HIDDEN: &[u8] = b"hidden in dir\n";
pub const WELL_KNOWN: &[u8] = b"well known\n";
pub const SECRET: &[u8] = b"TOPSECRET-outside-the-root\n";
pub const SECRET_MARKER: &[u8] = b"TOPSECRET";
/// Number of `/pN.txt` files.
pub const PAGES: usize = 10;

/// Body of `/p{i}.txt`: distinct content and length per page.
pub fn page(i: usize) -> Vec<u8> {
    format!("page {i}\n").repeat(i + 1).into_bytes()
}

/// Builds the standard document root under `dir` and returns its path.
///
/// ```text
/// root/index.html file.txt style.css image.png data.xyz app.js data.json thing.foo thing.bar
/// root/p0.txt .. p9.txt
/// root/dir/index.html dir/file.txt dir/.hidden dir/link-up.txt -> ../file.txt
/// root/noindex/file.txt
/// root/home/home.html
/// root/.secret root/.git/config root/.well-known/x.txt
/// root/link-rel.txt -> file.txt            root/link-abs.txt -> <root>/file.txt
/// root/link-out.txt -> ../secret.txt       root/link-out-abs.txt -> <dir>/secret.txt
/// root/link-dir-in -> dir                  root/link-dir-out -> ../outside
/// ```
pub fn make_fixture(dir: &Path) -> PathBuf {
    let root = dir.join("root");
    let w = |rel: &str, data: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
    };
    fs::create_dir_all(&root).unwrap();
    w("index.html", INDEX_HTML);
    w("file.txt", FILE_TXT);
    fs::File::options()
        .write(true)
        .open(root.join("file.txt"))
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(FILE_TXT_MTIME))
        .unwrap();
    w("style.css", STYLE_CSS);
    w("image.png", IMAGE_PNG);
    w("data.xyz", DATA_XYZ);
    w("app.js", APP_JS);
    w("data.json", DATA_JSON);
    w("thing.foo", THING_FOO);
    w("thing.bar", THING_BAR);
    for i in 0..PAGES {
        w(&format!("p{i}.txt"), &page(i));
    }
    w("dir/index.html", DIR_INDEX);
    w("dir/file.txt", DIR_FILE);
    w("dir/.hidden", DIR_HIDDEN);
    w("noindex/file.txt", NOINDEX_FILE);
    w("home/home.html", HOME_HTML);
    w(".secret", DOT_SECRET);
    w(".git/config", GIT_CONFIG);
    w(".well-known/x.txt", WELL_KNOWN);

    fs::write(dir.join("secret.txt"), SECRET).unwrap();
    fs::create_dir_all(dir.join("outside")).unwrap();
    fs::write(dir.join("outside/secret.txt"), SECRET).unwrap();

    symlink("file.txt", root.join("link-rel.txt")).unwrap();
    symlink(root.join("file.txt"), root.join("link-abs.txt")).unwrap();
    symlink("../file.txt", root.join("dir/link-up.txt")).unwrap();
    symlink("../secret.txt", root.join("link-out.txt")).unwrap();
    symlink(dir.join("secret.txt"), root.join("link-out-abs.txt")).unwrap();
    symlink("dir", root.join("link-dir-in")).unwrap();
    symlink("../outside", root.join("link-dir-out")).unwrap();
    root
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn pseudo_random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

// ---------------------------------------------------------------------------------------------
// Config rendering
// ---------------------------------------------------------------------------------------------

/// Renders the standard test config, with `extra` merged in. `extra` is TOML-ish lines with
/// optional `[section]` headers (lines before any header belong to `[server]`); a key in
/// `extra` replaces the same key of the standard config. `{dir}` and `{root}` are replaced by
/// the temp dir and the document root.
pub fn render_config(dir: &Path, root: &Path, extra: &str) -> String {
    let mut sections: Vec<(String, Vec<(String, String)>)> = vec![
        (
            "server".into(),
            vec![
                ("listen".into(), r#"listen = ["127.0.0.1:0"]"#.into()),
                ("root".into(), format!("root = {:?}", root)),
            ],
        ),
        ("http".into(), vec![]),
        (
            "log".into(),
            vec![
                ("access".into(), format!("access = {:?}", dir.join("access.log"))),
                ("error".into(), r#"error = "-""#.into()),
            ],
        ),
        ("mime".into(), vec![]),
    ];
    let extra = substitute(extra, dir, root);
    let mut cur = "server".to_string();
    for line in extra.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t.starts_with('[') && t.ends_with(']') {
            cur = t[1..t.len() - 1].trim().to_string();
            if !sections.iter().any(|(n, _)| *n == cur) {
                sections.push((cur.clone(), vec![]));
            }
            continue;
        }
        let key = t.split('=').next().unwrap_or("").trim().to_string();
        let sec = &mut sections.iter_mut().find(|(n, _)| *n == cur).unwrap().1;
        match sec.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = t.to_string(),
            None => sec.push((key, t.to_string())),
        }
    }
    let mut out = String::new();
    for (name, lines) in sections {
        let _ = writeln!(out, "[{name}]");
        for (_, l) in lines {
            let _ = writeln!(out, "{l}");
        }
        out.push('\n');
    }
    out
}

fn substitute(s: &str, dir: &Path, root: &Path) -> String {
    s.replace("{root}", root.to_str().unwrap()).replace("{dir}", dir.to_str().unwrap())
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

type Setup = Box<dyn FnOnce(&Path, &Path)>;

enum ConfigMode {
    Standard(String),
    Raw(String),
    Absent,
}

/// Configures and starts a server. `Server::start(extra)` is the short form.
pub struct Builder {
    config: ConfigMode,
    args: Vec<String>,
    setups: Vec<Setup>,
    cwd: Option<PathBuf>,
    unprivileged: bool,
    config_rel: String,
    wrapper: Vec<String>,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            config: ConfigMode::Standard(String::new()),
            args: vec![],
            setups: vec![],
            cwd: None,
            unprivileged: false,
            config_rel: "ferrohttpd.toml".to_string(),
            wrapper: vec![],
        }
    }

    /// Extra config merged into the standard one (see `render_config`).
    pub fn config(mut self, extra: &str) -> Self {
        self.config = ConfigMode::Standard(extra.to_string());
        self
    }

    /// A complete config file instead of the standard one (`{dir}`/`{root}` substituted),
    /// written to `<dir>/ferrohttpd.toml`.
    pub fn raw_config(mut self, text: &str) -> Self {
        self.config = ConfigMode::Raw(text.to_string());
        self
    }

    /// No `--config` argument at all.
    pub fn no_config(mut self) -> Self {
        self.config = ConfigMode::Absent;
        self
    }

    /// Extra command-line arguments (`{dir}`/`{root}` substituted), after `--config FILE`.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// Runs `f(dir, root)` after the fixture is built and before the server starts.
    pub fn setup(mut self, f: impl FnOnce(&Path, &Path) + 'static) -> Self {
        self.setups.push(Box::new(f));
        self
    }

    /// Where the config file is written, relative to the temp dir (default
    /// `ferrohttpd.toml`); its parent directories are created.
    pub fn config_file(mut self, rel: &str) -> Self {
        self.config_rel = rel.to_string();
        self
    }

    /// Runs the binary through a wrapper that execs it, e.g. `["prlimit", "--nofile=64", "--"]`
    /// (the wrapper must exec, so the PID stays the server's).
    pub fn wrap(mut self, prefix: &[&str]) -> Self {
        self.wrapper = prefix.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Working directory of the server process.
    pub fn cwd(mut self, p: impl Into<PathBuf>) -> Self {
        self.cwd = Some(p.into());
        self
    }

    fn prepare(self) -> (TempDir, PathBuf, Vec<String>, Option<PathBuf>) {
        let dir = TempDir::new().expect("temp dir");
        let d = dir.path().to_path_buf();
        let root = make_fixture(&d);
        if self.unprivileged {
            open_up_permissions(&d);
        }
        for f in self.setups {
            f(&d, &root);
        }
        let cfg_text = match &self.config {
            ConfigMode::Standard(extra) => Some(render_config(&d, &root, extra)),
            ConfigMode::Raw(text) => Some(substitute(text, &d, &root)),
            ConfigMode::Absent => None,
        };
        let mut args = vec![];
        if let Some(text) = cfg_text {
            let cfg = d.join(&self.config_rel);
            fs::create_dir_all(cfg.parent().unwrap()).unwrap();
            fs::write(&cfg, text).unwrap();
            args.push("--config".to_string());
            args.push(cfg.to_str().unwrap().to_string());
        }
        args.extend(self.args.iter().map(|a| substitute(a, &d, &root)));
        (dir, root, args, self.cwd)
    }

    pub fn start(self) -> Server {
        let wrapper = self.wrapper.clone();
        let (dir, root, args, cwd) = self.prepare();
        let mut cmd = match wrapper.split_first() {
            Some((prog, rest)) => {
                let mut c = Command::new(prog);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(&args);
        if let Some(c) = cwd {
            cmd.current_dir(c);
        }
        Server::launch(cmd, dir, root)
    }

    /// Starts the server as user `nobody` when the tests run as root (so that file mode bits
    /// are enforced); as the current user otherwise. `None` (with a note on stderr) when
    /// running as root and `setpriv` is unavailable.
    pub fn start_unprivileged(mut self) -> Option<Server> {
        self.unprivileged = true;
        let config_rel = self.config_rel.clone();
        let (dir, root, args, cwd) = self.prepare();
        let d = dir.path().to_path_buf();
        if fs::metadata(&d).unwrap().uid() != 0 {
            let mut cmd = Command::new(BIN);
            cmd.args(&args);
            return Some(Server::launch(cmd, dir, root));
        }
        let have_setpriv = Command::new("setpriv")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !have_setpriv {
            eprintln!("NOTE: running as root and setpriv is missing: skipping this test");
            return None;
        }
        // Make the temp dir reachable for nobody, and give it its own copy of the binary (the
        // build directory may sit under a directory nobody cannot enter).
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let bin = d.join("ferrohttpd-bin");
        fs::copy(BIN, &bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        wait_executable(&bin);
        let cfg = d.join(config_rel);
        if cfg.exists() {
            fs::set_permissions(&cfg, fs::Permissions::from_mode(0o644)).unwrap();
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&bin).args(&args);
        cmd.current_dir(cwd.unwrap_or_else(|| d.clone()));
        Some(Server::launch(cmd, dir, root))
    }
}

/// Recursively makes dirs 0755 and files 0644 (symlinks untouched), so an unprivileged
/// server can read the fixture whatever the umask.
pub fn open_up_permissions(p: &Path) {
    let md = fs::symlink_metadata(p).unwrap();
    if md.file_type().is_symlink() {
        return;
    }
    if md.is_dir() {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
        for e in fs::read_dir(p).unwrap() {
            open_up_permissions(&e.unwrap().path());
        }
    } else if md.is_file() {
        fs::set_permissions(p, fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// How a file body left the server, as /proc/PID/io tells it (`Server::body_path_since`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BodyPath {
    /// `sendfile`: counts in both `rchar` and `wchar`.
    Sendfile,
    /// `pread` into a buffer, then `sendmsg`: counts in `rchar` only.
    Staged,
}

/// A running server. Killed and reaped on drop.
pub struct Server {
    child: Child,
    addr: SocketAddr,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    root: PathBuf,
    exit_expected: bool,
    dir: TempDir,
}

/// A server process started by [`spawn_listening`].
pub struct Spawned {
    pub child: Child,
    pub addr: SocketAddr,
    pub stdout: Arc<Mutex<Vec<u8>>>,
    pub stderr: Arc<Mutex<Vec<u8>>>,
}

/// Spawns a server command, drains its stdout and stderr in background threads (so the pipes
/// never fill), and waits for its `listening on http://ADDR/` line.
pub fn spawn_listening(mut cmd: Command) -> Spawned {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ferrohttpd");
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<String>();
    {
        let out = child.stdout.take().unwrap();
        let buf = stdout.clone();
        thread::spawn(move || {
            let mut r = BufReader::new(out);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        buf.lock().unwrap().extend_from_slice(&line);
                        let _ = tx.send(String::from_utf8_lossy(&line).into_owned());
                    }
                }
            }
        });
    }
    drain_into(child.stderr.take().unwrap(), stderr.clone());

    let deadline = Instant::now() + START_TIMEOUT;
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(a) = parse_listening(&line) {
                    break a;
                }
            }
            Err(e) => {
                let timed_out = matches!(e, mpsc::RecvTimeoutError::Timeout);
                let _ = child.kill();
                let status = child.wait();
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "server did not print `listening on http://127.0.0.1:PORT/` ({}); \
                     exit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    if timed_out { "timed out" } else { "stdout closed" },
                    status,
                    String::from_utf8_lossy(&stdout.lock().unwrap()),
                    String::from_utf8_lossy(&stderr.lock().unwrap()),
                );
            }
        }
    };
    assert!(addr.ip().is_loopback(), "server listens on {addr}, expected 127.0.0.1");
    Spawned { child, addr, stdout, stderr }
}

pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    let rest = line.trim().strip_prefix("listening on http://")?;
    rest.strip_suffix('/')?.parse().ok()
}

/// The address of a `listening on https://ADDR/` line (a `[tls] listen` address).
pub fn parse_listening_tls(line: &str) -> Option<SocketAddr> {
    let rest = line.trim().strip_prefix("listening on https://")?;
    rest.strip_suffix('/')?.parse().ok()
}

fn drain_into(mut r: impl Read + Send + 'static, buf: Arc<Mutex<Vec<u8>>>) {
    thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
    });
}

impl Server {
    /// Starts a server with the standard fixture and config, plus `extra` config.
    pub fn start(extra: &str) -> Server {
        Builder::new().config(extra).start()
    }

    pub fn builder() -> Builder {
        Builder::new()
    }

    fn launch(cmd: Command, dir: TempDir, root: PathBuf) -> Server {
        let Spawned { child, addr, stdout, stderr } = spawn_listening(cmd);
        Server { child, addr, stdout, stderr, root, exit_expected: false, dir }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The temp dir (parent of the root).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn access_log_path(&self) -> PathBuf {
        self.dir.path().join("access.log")
    }

    pub fn connect(&self) -> TcpStream {
        connect(self.addr)
    }

    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// One request on a fresh connection; the response to it.
    pub fn exchange(&self, req: impl AsRef<[u8]>) -> Response {
        exchange(self.addr, req.as_ref())
    }

    /// `GET path HTTP/1.1` with `Connection: close` on a fresh connection.
    pub fn get(&self, path: &str) -> Response {
        self.exchange(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"))
    }

    /// Waits (up to 3 s) until the access log has at least `n` lines, then returns them all.
    pub fn wait_access_log(&self, n: usize) -> Vec<String> {
        wait_for_lines(&self.access_log_path(), n, Duration::from_secs(3))
    }

    /// The first `listening on https://` address (waits up to 5 s for the line: it follows
    /// the plain ones).
    pub fn tls_addr(&self) -> SocketAddr {
        let start = Instant::now();
        loop {
            if let Some(a) = self.stdout_text().lines().find_map(parse_listening_tls) {
                return a;
            }
            assert!(start.elapsed() < IO_TIMEOUT, "no `listening on https://` line:\n{}", self.stdout_text());
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every address printed in a `listening on` line so far.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.stdout_text().lines().filter_map(parse_listening).collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU time of the server so far, from /proc.
    pub fn cpu_time(&self) -> Duration {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        // Fields 14 and 15 of stat; `after` starts at field 3.
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        Duration::from_millis(ticks * 10)
    }

    /// A `kB` field of /proc/PID/status, e.g. `RssAnon`.
    pub fn status_kb(&self, field: &str) -> u64 {
        let st = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        st.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// A counter of /proc/PID/io: `rchar` (bytes read through file-like calls: `pread`
    /// counts, a `sendmsg` from a mapping does not) or `wchar` (written: `sendfile` counts, a
    /// `sendmsg` to a socket does not).
    pub fn io(&self, field: &str) -> u64 {
        let io = fs::read_to_string(format!("/proc/{}/io", self.pid())).expect("read /proc/PID/io");
        io.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(": "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/io"))
    }

    /// `rchar` and `wchar` (see `io`) now: the start of `body_path_since`'s interval.
    pub fn io_counts(&self) -> (u64, u64) {
        (self.io("rchar"), self.io("wchar"))
    }

    /// How the server sent a body of `len` bytes since `before` (from `io_counts`), or `None`
    /// when the counters fit neither way.
    pub fn body_path_since(&self, before: (u64, u64), len: u64) -> Option<BodyPath> {
        let (read, written) = self.io_counts();
        match (read - before.0 >= len, written - before.1) {
            (true, w) if w >= len => Some(BodyPath::Sendfile),
            (true, w) if w < len / 4 => Some(BodyPath::Staged),
            _ => None,
        }
    }

    /// Number of open file descriptors of the server.
    pub fn fd_count(&self) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    /// SIGKILLs the server process alone (not its children) and reaps it.
    pub fn kill_parent_only(&mut self) {
        self.exit_expected = true;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `limit` for the process to exit.
    pub fn terminate(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        self.exit_expected = true;
        signal(self.pid(), "TERM");
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `Some(status)` if the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let exited = self.child.try_wait().ok().flatten();
        // Worker processes (`workers = N`) die with the parent: kill them by PID too.
        let kids = if exited.is_none() { children_of(self.pid()) } else { vec![] };
        let _ = self.child.kill();
        let _ = self.child.wait();
        for k in kids {
            signal(k, "KILL");
        }
        if let Some(status) = exited {
            if !thread::panicking() && !self.exit_expected {
                thread::sleep(Duration::from_millis(50));
                panic!("the server exited during the test ({status})\n--- stderr ---\n{}", self.stderr_text());
            }
        }
    }
}

/// Sends a signal (`"TERM"`, `"KILL"`, ...) to one process by PID.
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).stderr(Stdio::null()).status();
}

/// PIDs of the live (non-zombie) children of `pid`, from /proc.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = vec![];
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let f: Vec<&str> = stat[close + 2..].split(' ').collect();
        if f.len() > 1 && f[0] != "Z" && f[1] == pid.to_string() {
            out.push(child);
        }
    }
    out.sort();
    out
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| st.rfind(')').map(|c| !st[c + 2..].starts_with('Z')).unwrap_or(false))
        .unwrap_or(false)
}

/// A port that was free a moment ago (for configs that cannot use port 0).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Reads the file at `path` until it has at least `n` lines or `limit` passes; returns the
/// lines present then (possibly fewer than `n`).
pub fn wait_for_lines(path: &Path, n: usize, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let text = fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() >= deadline {
            return lines;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// Client side
// ---------------------------------------------------------------------------------------------

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect to server");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Writes all of `bytes`; panics on error.
pub fn raw(s: &mut TcpStream, bytes: impl AsRef<[u8]>) {
    s.write_all(bytes.as_ref()).expect("write to server");
}

/// Writes all of `bytes`, ignoring errors (for requests the server may reject before it has
/// read them whole).
pub fn raw_lenient(s: &mut TcpStream, bytes: impl AsRef<[u8]>) {
    let _ = s.write_all(bytes.as_ref());
}

/// Printable form of some bytes, cut to 200 chars.
pub fn show(bytes: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(bytes).escape_debug().collect();
    if s.chars().count() > 200 {
        format!("{}... ({} bytes)", s.chars().take(200).collect::<String>(), bytes.len())
    } else {
        s
    }
}

#[derive(Clone)]
pub struct Response {
    pub status_line: String,
    pub version: String,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Response {
    /// First value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// All values of a header.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    /// Whether `Connection` has the `close` token.
    pub fn closes(&self) -> bool {
        self.header_has_token("Connection", "close")
    }

    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers_named(name).iter().flat_map(|v| v.split(',')).any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Status line, headers and the start of the body, for failure messages.
    pub fn describe(&self) -> String {
        let mut s = format!("{}\n", self.status_line);
        for (k, v) in &self.headers {
            let _ = writeln!(s, "  {k}: {v}");
        }
        let _ = write!(s, "  body ({} bytes): {}", self.body.len(), show(&self.body));
        s
    }

    /// Checks the headers every response must carry: `Date` (an IMF-fixdate within a minute
    /// of now), exactly one `Content-Length` equal to the body length (unless `head`, or the
    /// status has no body), `Server: ferrohttpd`.
    pub fn check_common(&self, head: bool) -> Result<(), String> {
        let date = self.headers_named("Date");
        if date.len() != 1 {
            return Err(format!("expected one Date header:\n{}", self.describe()));
        }
        match parse_http_date(date[0]) {
            Some(t) => {
                let now = unix_now() as i64;
                if (t as i64 - now).abs() > 60 {
                    return Err(format!("Date {:?} is not now", date[0]));
                }
            }
            None => return Err(format!("Date {:?} is not an IMF-fixdate", date[0])),
        }
        if self.headers_named("Server") != ["ferrohttpd"] {
            return Err(format!("expected one `Server: ferrohttpd`:\n{}", self.describe()));
        }
        if self.status != 204 && self.status != 304 && self.status / 100 != 1 {
            let cl = self.headers_named("Content-Length");
            if cl.len() != 1 {
                return Err(format!("expected one Content-Length header:\n{}", self.describe()));
            }
            if !head && cl[0] != self.body.len().to_string() {
                return Err(format!("Content-Length does not match the body:\n{}", self.describe()));
            }
        }
        Ok(())
    }

    /// Error responses: the common headers plus a small HTML body.
    pub fn check_error_body(&self) -> Result<(), String> {
        self.check_common(false)?;
        if self.header("Content-Type") != Some("text/html; charset=utf-8") {
            return Err(format!("expected `Content-Type: text/html; charset=utf-8` on an error:\n{}", self.describe()));
        }
        if self.body.is_empty() || !self.body.starts_with(b"<") {
            return Err(format!("expected a small HTML body on an error:\n{}", self.describe()));
        }
        Ok(())
    }
}

/// Reads one response. The head is read byte by byte so that nothing after this response is
/// consumed; the body is read according to `Content-Length` (nothing for HEAD, 1xx, 204, 304;
/// chunked decoding if the server uses it; else up to EOF).
pub fn try_read_response<S: Read + ?Sized>(s: &mut S, head_request: bool) -> io::Result<Response> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    loop {
        let n = read_byte(s, &mut b).map_err(|e| {
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "timed out waiting for the response after {} bytes of head: \"{}\"",
                        head.len(),
                        show(&head)
                    ),
                )
            } else {
                e
            }
        })?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("EOF after {} bytes of response head: \"{}\"", head.len(), show(&head)),
            ));
        }
        head.push(b[0]);
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
        if head.len() > 65536 {
            return Err(invalid("response head over 64 KiB"));
        }
    }
    let text = std::str::from_utf8(&head[..head.len() - 4])
        .map_err(|_| invalid(&format!("response head is not UTF-8: {}", show(&head))))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("").to_string();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_string();
    let code = parts.next().unwrap_or("");
    let reason = parts.next().unwrap_or("").to_string();
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(invalid(&format!("bad status line {status_line:?}")));
    }
    let status: u16 = code.parse().map_err(|_| invalid(&format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line.split_once(':').ok_or_else(|| invalid(&format!("bad header line {line:?}")))?;
        if k.is_empty() || k.ends_with(' ') || k.ends_with('\t') {
            return Err(invalid(&format!("bad header name in {line:?}")));
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    let mut r = Response { status_line, version, status, reason, headers, body: Vec::new() };
    if head_request || status / 100 == 1 || status == 204 || status == 304 {
        return Ok(r);
    }
    if let Some(cl) = r.header("Content-Length") {
        let n: usize = cl.parse().map_err(|_| invalid(&format!("bad Content-Length {cl:?}")))?;
        let mut body = vec![0u8; n];
        s.read_exact(&mut body)?;
        r.body = body;
    } else if r.header_has_token("Transfer-Encoding", "chunked") {
        r.body = read_chunked(s)?;
    } else {
        let mut body = Vec::new();
        s.read_to_end(&mut body)?;
        r.body = body;
    }
    Ok(r)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// One byte of a blocking read, retried when a signal interrupts it (EINTR), as
/// `read_exact` and `read_to_end` do.
fn read_byte<S: Read + ?Sized>(s: &mut S, b: &mut [u8; 1]) -> io::Result<usize> {
    loop {
        match s.read(b) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

fn read_line<S: Read + ?Sized>(s: &mut S) -> io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if read_byte(s, &mut b)? == 0 || line.len() > 4096 {
            return Err(invalid("bad chunked body"));
        }
        line.push(b[0]);
    }
    line.truncate(line.len() - 2);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

fn read_chunked<S: Read + ?Sized>(s: &mut S) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    for _ in 0..100_000 {
        let line = read_line(s)?;
        let size =
            usize::from_str_radix(line.split(';').next().unwrap().trim(), 16).map_err(|_| invalid("bad chunk size"))?;
        if size == 0 {
            while !read_line(s)?.is_empty() {}
            return Ok(body);
        }
        let start = body.len();
        body.resize(start + size, 0);
        s.read_exact(&mut body[start..])?;
        read_line(s)?;
    }
    Err(invalid("too many chunks"))
}

/// Reads one response to a GET-like request; panics with context on failure.
pub fn read_response(s: &mut TcpStream) -> Response {
    try_read_response(s, false).unwrap_or_else(|e| panic!("reading a response: {e}"))
}

/// Reads one response to a HEAD request (no body).
pub fn read_head_response(s: &mut TcpStream) -> Response {
    try_read_response(s, true).unwrap_or_else(|e| panic!("reading a HEAD response: {e}"))
}

/// Ok(elapsed) if the peer closes (EOF or reset) within `limit`; Err otherwise.
pub fn check_closed(s: &mut TcpStream, limit: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let res = s.read(&mut buf);
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    match res {
        Ok(0) => Ok(start.elapsed()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(start.elapsed()),
        Ok(n) => Err(format!("expected the connection to be closed, but read {n} more bytes: \"{}\"", show(&buf[..n]))),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            Err(format!("expected the connection to be closed, but it was still open after {limit:?}"))
        }
        Err(e) => Err(format!("unexpected read error while waiting for close: {e}")),
    }
}

/// Asserts the peer closes the connection (read returns 0 or ECONNRESET) within 5 s.
pub fn expect_closed(s: &mut TcpStream) {
    if let Err(e) = check_closed(s, IO_TIMEOUT) {
        panic!("{e}");
    }
}

/// One request on a fresh connection; the first response (panics if there is none).
pub fn exchange(addr: SocketAddr, req: &[u8]) -> Response {
    let mut s = connect(addr);
    raw_lenient(&mut s, req);
    let head = req.starts_with(b"HEAD ");
    try_read_response(&mut s, head).unwrap_or_else(|e| panic!("no response to \"{}\": {e}", show(req)))
}

/// Sends `req` on a fresh connection and checks the rejection: status `status`,
/// `Connection: close`, the common headers with an HTML body, and then EOF.
pub fn check_rejected(addr: SocketAddr, req: &[u8], status: u16) -> Result<(), String> {
    let mut s = connect(addr);
    raw_lenient(&mut s, req);
    let r = try_read_response(&mut s, false).map_err(|e| format!("no response: {e}"))?;
    if r.status != status {
        return Err(format!("expected status {status}, got:\n{}", r.describe()));
    }
    if !r.closes() {
        return Err(format!("expected `Connection: close`, got:\n{}", r.describe()));
    }
    r.check_error_body()?;
    check_closed(&mut s, IO_TIMEOUT)?;
    Ok(())
}

/// Collects the failures of a table of cases and panics once, listing all of them.
#[derive(Default)]
pub struct Failures(Vec<String>);

impl Failures {
    pub fn new() -> Self {
        Failures(Vec::new())
    }

    pub fn check(&mut self, what: &str, result: Result<(), String>) {
        if let Err(e) = result {
            self.0.push(format!("* {what}\n  {}", e.replace('\n', "\n  ")));
        }
    }

    pub fn finish(self) {
        if !self.0.is_empty() {
            panic!("{} case(s) failed:\n{}", self.0.len(), self.0.join("\n"));
        }
    }
}

/// Checks that a kept-alive connection still works: a GET of /file.txt gets 200 and its body.
pub fn check_still_open(s: &mut TcpStream) -> Result<(), String> {
    s.write_all(b"GET /file.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .map_err(|e| format!("connection not reusable (write): {e}"))?;
    let r = try_read_response(s, false).map_err(|e| format!("connection not reusable (read): {e}"))?;
    if r.status != 200 || r.body != FILE_TXT {
        return Err(format!("follow-up request on the same connection failed:\n{}", r.describe()));
    }
    Ok(())
}

/// After `r`: if it says `Connection: close` the connection must close; else it must still
/// serve requests.
pub fn check_connection_consistent(s: &mut TcpStream, r: &Response) -> Result<(), String> {
    if r.closes() {
        check_closed(s, IO_TIMEOUT).map(|_| ())
    } else {
        check_still_open(s)
    }
}

// ---------------------------------------------------------------------------------------------
// Dates
// ---------------------------------------------------------------------------------------------

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
pub const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = (z - era * 146_097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe as i64 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` for a Unix time.
pub fn format_http_date(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[((days + 4).rem_euclid(7)) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses an IMF-fixdate strictly (it must re-format to the same string).
pub fn parse_http_date(s: &str) -> Option<u64> {
    let f: Vec<&str> = s.split(' ').collect();
    if f.len() != 6 || f[5] != "GMT" {
        return None;
    }
    let d: u32 = f[1].parse().ok()?;
    let m = MONTHS.iter().position(|x| *x == f[2])? as u32 + 1;
    let y: i64 = f[3].parse().ok()?;
    let t: Vec<u64> = f[4].split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    if t.len() != 3 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    if days < 0 {
        return None;
    }
    let secs = days as u64 * 86400 + t[0] * 3600 + t[1] * 60 + t[2];
    (format_http_date(secs) == s).then_some(secs)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = (y - era * 400) as u64;
    let mp = if m > 2 { m - 3 } else { m + 9 } as u64;
    let doy = (153 * mp + 2) / 5 + d as u64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe as i64 - 719_468
}

// ---------------------------------------------------------------------------------------------
// Access log (combined format)
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct LogLine {
    pub host: String,
    pub ident: String,
    pub user: String,
    pub time: String,
    pub request: String,
    pub status: u16,
    pub bytes: String,
    pub referer: String,
    pub user_agent: String,
}

/// Reads a `"..."` field starting at `s[0] == '"'`; a `"` preceded by a backslash does not end
/// it. Returns (content, rest after the closing quote).
fn quoted(s: &str) -> Option<(&str, &str)> {
    let b = s.as_bytes();
    if b.first() != Some(&b'"') {
        return None;
    }
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some((&s[1..i], &s[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

/// Checks `dd/Mon/yyyy:HH:MM:SS +zzzz` and returns its Unix time.
pub fn parse_clf_time(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    if b.len() != 26 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[20] != b' ' {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u64> {
        let s = t.get(r)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let d = digits(0..2)? as u32;
    let m = MONTHS.iter().position(|x| *x == &t[3..6])? as u32 + 1;
    let y = digits(7..11)? as i64;
    let hh = digits(12..14)?;
    let mm = digits(15..17)?;
    let ss = digits(18..20)?;
    if b[14] != b':' || b[17] != b':' || !(b[21] == b'+' || b[21] == b'-') {
        return None;
    }
    let oh = digits(22..24)? as i64;
    let om = digits(24..26)? as i64;
    let off = (oh * 3600 + om * 60) * if b[21] == b'-' { -1 } else { 1 };
    let local = days_from_civil(y, m, d) * 86400 + (hh * 3600 + mm * 60 + ss) as i64;
    Some((local - off) as u64)
}

/// Parses one Combined Log Format line strictly.
pub fn parse_combined(line: &str) -> Result<LogLine, String> {
    let err = || format!("not a combined log line: {line:?}");
    let (host, rest) = line.split_once(' ').ok_or_else(err)?;
    let (ident, rest) = rest.split_once(' ').ok_or_else(err)?;
    let (user, rest) = rest.split_once(' ').ok_or_else(err)?;
    let rest = rest.strip_prefix('[').ok_or_else(err)?;
    let (time, rest) = rest.split_once(']').ok_or_else(err)?;
    let rest = rest.strip_prefix(' ').ok_or_else(err)?;
    let (request, rest) = quoted(rest).ok_or_else(err)?;
    let rest = rest.strip_prefix(' ').ok_or_else(err)?;
    let (status, rest) = rest.split_once(' ').ok_or_else(err)?;
    let (bytes, rest) = rest.split_once(' ').ok_or_else(err)?;
    let (referer, rest) = quoted(rest).ok_or_else(err)?;
    let rest = rest.strip_prefix(' ').ok_or_else(err)?;
    let (user_agent, rest) = quoted(rest).ok_or_else(err)?;
    if !rest.is_empty() {
        return Err(err());
    }
    if parse_clf_time(time).is_none() {
        return Err(format!("bad time field {time:?} in {line:?}"));
    }
    if status.len() != 3 || !status.bytes().all(|c| c.is_ascii_digit()) {
        return Err(err());
    }
    if !(bytes == "-" || bytes.bytes().all(|c| c.is_ascii_digit())) {
        return Err(err());
    }
    Ok(LogLine {
        host: host.into(),
        ident: ident.into(),
        user: user.into(),
        time: time.into(),
        request: request.into(),
        status: status.parse().unwrap(),
        bytes: bytes.into(),
        referer: referer.into(),
        user_agent: user_agent.into(),
    })
}

// ---------------------------------------------------------------------------------------------
// Running the binary (CLI) and curl
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct CliOutput {
    /// Exit code; `None` if killed by a signal or after the timeout.
    pub code: Option<i32>,
    pub timed_out: bool,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl CliOutput {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Runs a program to completion (killed after 10 s), collecting its output.
pub fn run_program(program: &str, args: &[&str], cwd: Option<&Path>) -> CliOutput {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(c) = cwd {
        cmd.current_dir(c);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let out = Arc::new(Mutex::new(Vec::new()));
    let err = Arc::new(Mutex::new(Vec::new()));
    let (o, e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let ho = {
        let out = out.clone();
        thread::spawn(move || {
            let mut o = o;
            let mut v = Vec::new();
            let _ = o.read_to_end(&mut v);
            out.lock().unwrap().extend_from_slice(&v);
        })
    };
    let he = {
        let err = err.clone();
        thread::spawn(move || {
            let mut e = e;
            let mut v = Vec::new();
            let _ = e.read_to_end(&mut v);
            err.lock().unwrap().extend_from_slice(&v);
        })
    };
    let deadline = Instant::now() + CLI_TIMEOUT;
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let _ = ho.join();
    let _ = he.join();
    let stdout = out.lock().unwrap().clone();
    let stderr = String::from_utf8_lossy(&err.lock().unwrap()).into_owned();
    CliOutput { code: status.and_then(|s| s.code()), timed_out, stdout, stderr }
}

/// Runs `ferrohttpd ARGS` to completion.
pub fn run_cli(args: &[&str], cwd: Option<&Path>) -> CliOutput {
    run_program(BIN, args, cwd)
}

/// Runs `curl -sS --max-time 5 ARGS`.
pub fn curl(args: &[&str]) -> CliOutput {
    let mut all = vec!["-sS", "--max-time", "5"];
    all.extend_from_slice(args);
    run_program("curl", &all, None)
}

/// Splits a curl `-D -` dump (head then body on stdout) into the last response's status,
/// headers and body.
pub fn split_curl_dump(out: &[u8]) -> Option<Response> {
    let mut rest = out;
    // Skip interim responses: take heads while the remainder starts with another head.
    loop {
        let end = rest.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&rest[..end]).ok()?;
        let body = &rest[end + 4..];
        if body.starts_with(b"HTTP/") && head.split(' ').nth(1) == Some("100") {
            rest = body;
            continue;
        }
        let mut lines = head.split("\r\n");
        let status_line = lines.next()?.to_string();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next()?.to_string();
        let status = parts.next()?.parse().ok()?;
        let reason = parts.next().unwrap_or("").to_string();
        let headers =
            lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect();
        return Some(Response { status_line, version, status, reason, headers, body: body.to_vec() });
    }
}

/// Polls `f` every 25 ms until it is true (then true) or `limit` has passed (then false).
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until `path` can be executed. While this test process wrote the file, another
/// thread (another test) may have forked a child that holds a copy of the write descriptor
/// until it execs; executing the file meanwhile fails with ETXTBSY ("Text file busy"), for
/// the test and for a server upgrading to it. Once one exec succeeds no copy is left (the
/// test's own descriptor is closed): the next ones cannot race.
pub fn wait_executable(path: &Path) {
    for _ in 0..500 {
        match Command::new(path).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => thread::sleep(Duration::from_millis(10)),
            _ => return,
        }
    }
    panic!("{} stays busy", path.display());
}

/// Whether python3 with aioquic (the HTTP/3 tests' client) is here. Without it the caller
/// skips `what`, saying so; in CI (`CI` set: `.ci/run` installs it) a missing one fails.
pub fn have_aioquic(what: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import aioquic"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "python3 with aioquic is required in CI (.ci/run installs it)");
        eprintln!("note: python3 with aioquic is not installed: {what} skipped (pip install aioquic)");
    }
    ok
}

/// The other client's request times during an attack (`protocol` names the suite, e.g.
/// "h2-attack"): printed with the server's peak memory, and checked, the slowest against
/// `latency` and the peak memory's growth since `hwm_before` (kB) against `memory_kb`.
pub fn check_other_client(
    protocol: &str,
    name: &str,
    srv: &Server,
    mut t: Vec<Duration>,
    hwm_before: u64,
    latency: Duration,
    memory_kb: u64,
) {
    assert!(!t.is_empty());
    t.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (median, p99, max) = (t[t.len() / 2], t[(t.len() * 99 / 100).min(t.len() - 1)], t[t.len() - 1]);
    let hwm = srv.status_kb("VmHWM");
    println!(
        "{protocol} {name:<24} other client: {} requests, median {:.2} ms, p99 {:.2} ms, max {:.2} ms; server VmHWM {} -> {} kB, VmRSS {} kB",
        t.len(),
        ms(median),
        ms(p99),
        ms(max),
        hwm_before,
        hwm,
        srv.status_kb("VmRSS"),
    );
    assert!(max < latency, "{name}: the other client waited {max:?}");
    assert!(hwm < hwm_before + memory_kb, "{name}: peak memory {hwm_before} -> {hwm} kB");
}
