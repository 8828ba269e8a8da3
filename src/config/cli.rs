//! The command line, in two personalities chosen by the program name (argv\[0\]):
//!
//! - **`ferrohttpd`**: the long options `--config FILE` (TOML), `--check-config`, `--help`,
//!   `--version`, the subcommand `compress DIR …`, and every thttpd flag, which overrides the
//!   configuration file. Defaults are ferrohttpd's own.
//! - **`thttpd`** (a symlink or copy named so): the same flags with thttpd 2.29's defaults —
//!   port 80 on every IPv4 and IPv6 address, the current directory, the access log to
//!   syslog, daemonising unless `-D`, user `nobody` when started as root, `.htpasswd`
//!   checking, thttpd's permission rules and directory listings.
//!
//! In both, the long options are taken out first (a value of a flag that takes one is never
//! mistaken for one), and the rest is parsed left to right by [`crate::thttpd::args`]. A `-C`
//! file ending in `.toml` (or `--config`) is ferrohttpd's TOML: it becomes the base, and every
//! flag overrides it; with a TOML base, thttpd mode keeps the file's listen addresses, root
//! and logs unless flags change them.
//!
//! Relative paths follow thttpd: `-d`, `-l` and `-t` are relative to the working directory
//! the server was started in; `-i` and `-dd` to the served directory (thttpd has already
//! changed into it when it uses them); with `-r`, `-dd` is a path inside the chroot tree.
//!
//! `-c` (CGI) is refused: ferrohttpd serves static files only, and serving a script's source
//! as a static file would be worse than not starting.

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use super::{Config, ConfigError};
use crate::fs::resolve::{DotfilePolicy, SymlinkPolicy};
use crate::http::encoding::Encoding;
use crate::log::LogTarget;
use crate::thttpd::args::{self, Parsed, Settings};

/// ferrohttpd's usage text (`--help`, and after a command-line error).
pub const USAGE: &str = "\
usage: ferrohttpd [DIR] [--port N] [--listen ADDR]... [--domain NAME]... [--email ADDR]
                  [--config FILE] [thttpd flags...]
       ferrohttpd --check-config [--config FILE] [...]
       ferrohttpd compress DIR [--min-size N] [--encodings br,zstd,gzip] [-v]

Serves the files under DIR over HTTP/1.1 and HTTP/2, plain or HTTPS (rustls), compressing
text on demand; `--version` lists which of these optional parts this build has.

  ferrohttpd .                       serve this directory on port 8080
  ferrohttpd --port 8000 site        serve ./site on port 8000
  ferrohttpd --domain example.org .  HTTPS for example.org (port 443), certificate by ACME
  ferrohttpd --config site.toml      everything else: see ferrohttpd.toml(5)

options:
  DIR              the directory to serve (default: the configuration's root, else ./www)
  --root DIR       the same, as an option
  --port N         listen on port N (on every listen address)
  --listen ADDR    listen on ADDR: HOST:PORT, [IPv6]:PORT, or :PORT for every address;
                   repeatable, replaces the configuration's listen addresses
  --domain NAME    get and renew a certificate for NAME by ACME (Let's Encrypt unless
                   [acme] directory says otherwise); repeatable. Unless given otherwise,
                   listens on port 80 (HTTP-01 and a redirect to HTTPS) and 443 (HTTPS)
  --email ADDR     the ACME account's contact address (optional)
  --config FILE    read this TOML configuration (default: built-in defaults)
  --check-config   validate the configuration and the files it names, bind and release
                   each listen address (one in use, as by this server running, is only
                   a note), print a summary and exit
  --help           print this help and exit
  --version, -V    print the version and this build's features (tls, http2, compression,
                   acme)

thttpd-compatible flags, processed left to right (they override the configuration file):
  -C FILE          thttpd config file (a FILE ending in .toml is read as --config)
  -p PORT          port to listen on (for every listen address)
  -d DIR           document root
  -r | -nor        chroot into the document root after binding / don't
  -dd DIR          document root inside the chroot (relative to -d without -r)
  -s | -nos        refuse symlinks leading out of the root / follow every symlink
  -v | -nov        virtual hosting: the Host header selects a subdirectory / don't
  -g | -nog        the root's .htpasswd protects everything / don't
  -u USER          switch to this user after binding, when started as root
  -t FILE          thttpd throttle file
  -h HOST          address or host name to bind to
  -l LOGFILE       access log file; '-' for stdout, '/dev/null' for none
  -i PIDFILE       write the process id to this file
  -T CHARSET       charset of text/* responses
  -P P3P           P3P header added to every response
  -M SECONDS       Cache-Control max-age (and Expires) on every file response
  -D               stay in the foreground (ferrohttpd always does)
  -c PATTERN       CGI: not supported, ferrohttpd refuses to start

compress: write precompressed siblings (x.br, x.zst, x.gz) beside the compressible files
  under DIR; --min-size N skips smaller files (default 256), --encodings picks the codings,
  -v lists each file written.

Invoked as `thttpd` (a symlink or copy of this binary named so), it takes thttpd 2.29's
command line with thttpd's defaults.
";

/// thttpd's version string, as `thttpd -V` prints it, with ours.
pub fn thttpd_version() -> String {
    format!("thttpd/2.29 (ferrohttpd {})", env!("CARGO_PKG_VERSION"))
}

/// The name used for the server's own messages.
pub fn program_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Ferrohttpd => "ferrohttpd",
        Mode::Thttpd => "thttpd",
    }
}

/// The usage text of a personality.
pub fn usage(mode: Mode) -> &'static str {
    match mode {
        Mode::Ferrohttpd => USAGE,
        Mode::Thttpd => args::USAGE,
    }
}

/// The optional parts (cargo features) and whether this binary has each.
pub const FEATURES: [(&str, bool); 4] = [
    ("tls", cfg!(feature = "tls")),
    ("http2", cfg!(feature = "http2")),
    ("compression", cfg!(feature = "compression")),
    ("acme", cfg!(feature = "acme")),
];

/// What `--version` prints: as ferrohttpd, the version and a second line with the cargo
/// features, each `+name` (built in) or `-name` (left out); as thttpd, thttpd's one line.
pub fn version(mode: Mode) -> String {
    match mode {
        Mode::Ferrohttpd => {
            let features: Vec<String> =
                FEATURES.iter().map(|(name, on)| format!("{}{name}", if *on { '+' } else { '-' })).collect();
            format!("ferrohttpd {}\nfeatures: {}", env!("CARGO_PKG_VERSION"), features.join(" "))
        }
        Mode::Thttpd => thttpd_version(),
    }
}

/// Which command line (and defaults) the binary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Invoked as anything but `thttpd`.
    Ferrohttpd,
    /// Invoked as `thttpd`: a drop-in for thttpd 2.29.
    Thttpd,
}

impl Mode {
    /// The personality for a program name (argv\[0\]).
    pub fn from_argv0(argv0: &OsStr) -> Mode {
        if args::invoked_as_thttpd(argv0) {
            Mode::Thttpd
        } else {
            Mode::Ferrohttpd
        }
    }
}

/// A configuration ready to run, with what `main` needs besides it.
#[derive(Debug)]
pub struct Launch {
    pub config: Config,
    pub mode: Mode,
    /// Non-fatal problems (throttle-file lines that did not parse), for `main` to print.
    pub warnings: Vec<String>,
}

/// What `main` should do.
#[derive(Debug)]
pub enum Command {
    Run(Box<Launch>),
    CheckConfig(Box<Launch>),
    Help,
    Version,
    /// `ferrohttpd compress DIR …` (feature `compression`).
    Compress(CompressJob),
}

/// What `ferrohttpd compress` does (`ferrohttpd::compress::compress_dir`).
#[derive(Debug, Clone)]
pub struct CompressOptions {
    /// Files smaller than this are left alone (default 256 bytes).
    pub min_size: u64,
    /// Siblings to write (default brotli, zstd, gzip).
    pub encodings: Vec<Encoding>,
    /// Report each sibling written on stdout.
    pub verbose: bool,
}

impl Default for CompressOptions {
    fn default() -> CompressOptions {
        CompressOptions { min_size: 256, encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip], verbose: false }
    }
}

/// What `compress DIR …` asks for.
#[derive(Debug)]
pub struct CompressJob {
    pub dir: PathBuf,
    pub options: CompressOptions,
}

/// A command-line error; `usage` says whether to print the usage text after the message.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub usage: bool,
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> CliError {
        CliError { message: e.0, usage: false }
    }
}

impl From<args::ArgError> for CliError {
    fn from(e: args::ArgError) -> CliError {
        CliError { message: e.message, usage: e.usage }
    }
}

fn usage_err(message: String) -> CliError {
    CliError { message, usage: true }
}

fn plain_err(message: String) -> CliError {
    CliError { message, usage: false }
}

/// The message for a CGI pattern, which ferrohttpd refuses.
pub const CGI_REFUSED: &str = "ferrohttpd serves static files only; CGI (-c PATTERN) is not supported";

/// thttpd's index file names (without `index.cgi`: no CGI here).
const THTTPD_INDEX: &[&str] = &["index.html", "index.htm", "index.xhtml", "index.xht", "Default.htm"];

/// thttpd's default port.
const THTTPD_PORT: u16 = 80;

/// Parses the arguments (without the program name) as `ferrohttpd`.
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, CliError> {
    parse_as(Mode::Ferrohttpd, args)
}

/// Parses the arguments (without the program name) in the given personality.
pub fn parse_as<I: IntoIterator<Item = OsString>>(mode: Mode, args: I) -> Result<Command, CliError> {
    let args: Vec<OsString> = args.into_iter().collect();
    if mode == Mode::Ferrohttpd && args.first().is_some_and(|a| a == "compress") {
        return Ok(match parse_compress(&args[1..])? {
            Some(job) => Command::Compress(job),
            None => Command::Help,
        });
    }

    // Take the long options out; hand the rest, in order, to thttpd's parser. As ferrohttpd,
    // `--root DIR` and a bare `DIR` become `-d DIR` and `--port N` becomes `-p N` in place (so
    // the left-to-right order with the thttpd flags holds); the `--listen` addresses replace
    // the configuration's before the flags apply. As thttpd, none of these exist.
    let ours = mode == Mode::Ferrohttpd;
    let mut config: Option<PathBuf> = None;
    let mut check = false;
    let mut listen: Vec<String> = Vec::new();
    let mut acme = AcmeArgs::default();
    let mut positional: Option<OsString> = None;
    let mut rest: Vec<OsString> = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(a) = arg.to_str() else {
            if ours {
                set_positional(&mut positional, &arg)?;
                rest.extend(["-d".into(), arg]);
            } else {
                rest.push(arg);
            }
            continue;
        };
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(OsString::from(v))),
            _ => (a, None),
        };
        let mut value = |name: &str| -> Result<OsString, CliError> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it.next().ok_or_else(|| usage_err(format!("{name} needs a value"))),
            }
        };
        match name {
            "--help" => return Ok(Command::Help),
            "--version" => return Ok(Command::Version),
            "--check-config" => check = true,
            "--config" => config = Some(value(name)?.into()),
            "--port" if ours => rest.extend(["-p".into(), value(name)?]),
            "--root" if ours => rest.extend(["-d".into(), value(name)?]),
            "--listen" if ours => {
                let v = value(name)?;
                listen.push(v.to_str().ok_or_else(|| usage_err(format!("--listen {v:?}: not text")))?.to_string());
            }
            "--domain" if ours => {
                let v = value(name)?;
                let d = v.to_str().ok_or_else(|| usage_err(format!("--domain {v:?}: not text")))?;
                let d = super::raw::acme_name(d).map_err(|e| plain_err(format!("--domain {e}")))?;
                if !acme.domains.contains(&d) {
                    acme.domains.push(d);
                }
            }
            "--email" if ours => {
                let v = value(name)?;
                let e = v.to_str().filter(|e| super::raw::acme_email_ok(e));
                acme.email = Some(e.ok_or_else(|| plain_err(format!("--email {v:?}: not an e-mail address")))?.into());
            }
            _ if takes_value(a) => {
                rest.push(arg);
                if let Some(v) = it.next() {
                    rest.push(v);
                }
            }
            _ if ours && !a.starts_with('-') => {
                set_positional(&mut positional, &arg)?;
                rest.extend(["-d".into(), arg]);
            }
            _ => rest.push(arg),
        }
    }

    let settings = match args::parse_args(rest)? {
        Parsed::Version => return Ok(Command::Version),
        Parsed::Help => return Ok(Command::Help),
        Parsed::Run(s) => s,
    };
    let listen = listen.iter().map(|a| parse_listen_arg(a)).collect::<Result<Vec<_>, _>>()?;
    let launch = build(mode, settings, config, listen.concat(), acme)?;
    Ok(if check { Command::CheckConfig(Box::new(launch)) } else { Command::Run(Box::new(launch)) })
}

/// Records the one directory given without a flag (`ferrohttpd DIR`).
fn set_positional(seen: &mut Option<OsString>, arg: &OsStr) -> Result<(), CliError> {
    if let Some(first) = seen {
        return Err(usage_err(format!(
            "one directory to serve, not two ({} and {})",
            Path::new(first).display(),
            Path::new(arg).display()
        )));
    }
    *seen = Some(arg.to_os_string());
    Ok(())
}

/// A `--listen` value: `HOST:PORT`, `[IPv6]:PORT`, or `:PORT` / `PORT` for every IPv4 and
/// IPv6 address (as thttpd's default, and `[::]` is dropped with a warning on a machine
/// without IPv6).
fn parse_listen_arg(a: &str) -> Result<Vec<SocketAddr>, CliError> {
    let port = a.strip_prefix(':').unwrap_or(a);
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 =
            port.parse().map_err(|_| plain_err(format!("--listen {a}: {port} is not a port number (0 to 65535)")))?;
        return Ok(vec![
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
        ]);
    }
    let mut addrs = super::raw::parse_listen(a).map_err(|e| plain_err(format!("--listen {a}: {e}")))?;
    addrs.sort();
    addrs.dedup();
    Ok(addrs)
}

/// The thttpd flags that take a value (their value is passed through untouched).
fn takes_value(flag: &str) -> bool {
    matches!(flag, "-C" | "-p" | "-d" | "-dd" | "-u" | "-c" | "-t" | "-h" | "-l" | "-i" | "-T" | "-P" | "-M")
}

/// `--domain NAME`... and `--email ADDR`: the one-line way to automatic HTTPS.
#[derive(Default)]
struct AcmeArgs {
    /// Checked and lowercased as `[acme] domains` are, each once.
    domains: Vec<String>,
    email: Option<String>,
}

/// Builds the configuration from thttpd settings and an optional TOML base.
fn build(
    mode: Mode,
    s: Settings,
    config: Option<PathBuf>,
    listen: Vec<SocketAddr>,
    acme: AcmeArgs,
) -> Result<Launch, CliError> {
    if s.cgi_pattern.is_some() {
        return Err(plain_err(CGI_REFUSED.into()));
    }
    let toml = match (config, s.toml_config.clone()) {
        (Some(a), Some(b)) if a != b => {
            return Err(usage_err(format!(
                "two TOML configurations given ({} and {}); give one",
                a.display(),
                b.display()
            )))
        }
        (Some(a), _) => Some(a),
        (None, b) => b,
    };
    let with_acme = !acme.domains.is_empty() || acme.email.is_some();
    let mut cfg = match &toml {
        // The file alone may lack what `--domain` completes (`[tls] listen` without a
        // certificate): it is checked once the command line has applied, below.
        Some(path) if with_acme => Config::load_base(path)?,
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    // The listen addresses that were given, before the defaults fill in.
    let listen_given = toml.is_some() || !listen.is_empty() || s.port.is_some() || s.host.is_some();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    if !listen.is_empty() {
        cfg.listen = listen;
    }
    let mut warnings = Vec::new();
    apply(mode, &s, toml.is_some(), &cwd, &mut cfg, &mut warnings)?;
    if with_acme {
        apply_acme(acme, listen_given, &mut cfg);
    }
    if mode == Mode::Ferrohttpd && cfg.root == Path::new(super::DEFAULT_ROOT) && !cwd.join(&cfg.root).is_dir() {
        return Err(plain_err(format!(
            "nothing to serve: no ./{} in {}; give the directory to serve (`ferrohttpd DIR`, e.g. `ferrohttpd .`) or a configuration with a root (`--config FILE`)",
            super::DEFAULT_ROOT,
            cwd.display()
        )));
    }
    cfg.check()?;
    Ok(Launch { config: cfg, mode, warnings })
}

/// Applies `--domain` and `--email`. Each name joins `[acme] domains`, `--email` replaces
/// `[acme] email`. As Caddy does for a site with a name, a `--domain` also sets up what
/// serving it takes, where nothing else says: the plain listeners become port 80 on every
/// address (HTTP-01, and the redirect) unless a configuration file, `--listen`, `--port`,
/// `-p` or `-h` gave them; the TLS listeners become port 443 on every address, with
/// `redirect_http` on, unless the configuration has its own `[tls] listen` (whose
/// `redirect_http` then stands as written).
fn apply_acme(acme: AcmeArgs, listen_given: bool, cfg: &mut Config) {
    if let Some(e) = acme.email {
        cfg.acme.email = Some(e);
    }
    if acme.domains.is_empty() {
        return;
    }
    for d in acme.domains {
        if !cfg.acme.domains.contains(&d) {
            cfg.acme.domains.push(d);
        }
    }
    let every = |port: u16| {
        vec![SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)), SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))]
    };
    if !listen_given {
        cfg.listen = every(80);
    }
    if cfg.tls.listen.is_empty() {
        cfg.tls.listen = every(443);
        cfg.tls.redirect_http = true;
    }
}

/// `base.join(p)`, or `p` when absolute (as `Path::join` does; named for clarity).
fn relative_to(base: &Path, p: &Path) -> PathBuf {
    base.join(p)
}

/// Applies thttpd settings onto `cfg`. `has_base`: `cfg` came from a TOML file, whose
/// values then stand in for thttpd's defaults.
fn apply(
    mode: Mode,
    s: &Settings,
    has_base: bool,
    cwd: &Path,
    cfg: &mut Config,
    warnings: &mut Vec<String>,
) -> Result<(), CliError> {
    let thttpd = mode == Mode::Thttpd;

    // thttpd's defaults, unless a TOML file is the base.
    if thttpd && !has_base {
        cfg.root = cwd.to_path_buf();
        cfg.access_log = LogTarget::Syslog;
        cfg.dotfiles = DotfilePolicy::Allow;
        cfg.symlinks = SymlinkPolicy::WithinRoot;
        cfg.listing = true;
        cfg.index = THTTPD_INDEX.iter().map(|s| s.to_string()).collect();
        // thttpd never compresses; a TOML base file can turn it on.
        cfg.compression.on_demand = false;
    }

    // The served directory: everything relative to it is resolved against it.
    if let Some(dir) = &s.dir {
        cfg.root = relative_to(cwd, dir);
    }
    let dir = relative_to(cwd, &cfg.root);

    // Listen addresses.
    if let Some(host) = &s.host {
        let port = s.port.unwrap_or_else(|| {
            if thttpd && !has_base {
                THTTPD_PORT
            } else {
                cfg.listen.first().map_or(THTTPD_PORT, SocketAddr::port)
            }
        });
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        cfg.listen = match literal.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let mut addrs = super::raw::parse_listen(&format!("{host}:{port}"))
                    .map_err(|e| plain_err(format!("-h {host}: {e}")))?;
                addrs.sort();
                addrs.dedup();
                addrs
            }
        };
    } else if thttpd && !has_base {
        let port = s.port.unwrap_or(THTTPD_PORT);
        cfg.listen =
            vec![SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)), SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))];
    } else if let Some(port) = s.port {
        for a in &mut cfg.listen {
            a.set_port(port);
        }
        cfg.listen.dedup();
    }

    // chroot and the data directory.
    if let Some(on) = s.chroot {
        cfg.thttpd.chroot = on;
    }
    if let Some(dd) = &s.data_dir {
        if cfg.thttpd.chroot {
            // A path inside the chroot tree; main resolves it after chroot().
            cfg.thttpd.data_dir = Some(dd.clone());
        } else {
            cfg.root = relative_to(&dir, dd);
            cfg.thttpd.data_dir = None;
        }
    }
    match s.symlink_check {
        Some(true) => cfg.symlinks = SymlinkPolicy::WithinRoot,
        Some(false) => cfg.symlinks = SymlinkPolicy::Follow,
        None => {}
    }

    // Access log.
    if let Some(log) = &s.logfile {
        cfg.access_log = match log.to_str() {
            Some("-") => LogTarget::Std,
            Some("/dev/null") => LogTarget::Off,
            _ => LogTarget::File(relative_to(cwd, log)),
        };
    }

    // Throttles: read now, as thttpd does (before changing directory).
    if let Some(file) = &s.throttles {
        let path = relative_to(cwd, file);
        let text = crate::thttpd::privs::read_config_file(&path)
            .and_then(|b| String::from_utf8(b).map_err(|_| std::io::Error::other("not valid UTF-8")))
            .map_err(|e| plain_err(format!("throttles file {}: {e}", path.display())))?;
        let (rules, bad) = crate::access::throttle::parse_throttles(&text);
        for (line, content) in bad {
            warnings.push(format!(
                "{}: line {line}: unparsable throttle line, ignored: {}",
                path.display(),
                content.trim()
            ));
        }
        cfg.throttles = rules;
    }

    if let Some(pid) = &s.pidfile {
        // thttpd writes it after changing into the served directory.
        let base = if thttpd { dir.as_path() } else { cwd };
        cfg.pid_file = Some(relative_to(base, pid));
    }
    if let Some(charset) = &s.charset {
        cfg.charset = charset.clone();
    }
    if let Some(p3p) = &s.p3p {
        cfg.thttpd.p3p = Some(p3p.clone());
    }
    if let Some(max_age) = s.max_age {
        cfg.max_age = Some(max_age);
    }
    if let Some(on) = s.vhost {
        cfg.thttpd.vhost_dirs = on;
    }
    if let Some(on) = s.global_passwd {
        cfg.thttpd.global_passwd = on;
        if on {
            cfg.thttpd.htpasswd = true;
        }
    }
    if let Some(p) = &s.url_pattern {
        cfg.thttpd.url_pattern = Some(p.clone());
    }
    if let Some(p) = &s.local_pattern {
        cfg.thttpd.local_pattern = Some(p.clone());
    }
    if let Some(on) = s.no_empty_referrers {
        cfg.thttpd.no_empty_referrers = on;
    }
    if let Some(user) = &s.user {
        cfg.thttpd.user = Some(user.clone());
    }

    if thttpd {
        cfg.thttpd.enabled = true;
        cfg.thttpd.htpasswd = true;
        cfg.thttpd.daemonize = s.debug != Some(true);
        if cfg.thttpd.user.is_none() {
            cfg.thttpd.user = Some("nobody".into());
        }
        if !has_base {
            // thttpd reports its problems to syslog; in the foreground, on stderr.
            cfg.error_log = if cfg.thttpd.daemonize { LogTarget::Syslog } else { LogTarget::Std };
        }
    }
    Ok(())
}

/// `compress DIR [--min-size N] [--encodings br,zstd,gzip] [-v]`, the arguments after
/// `compress`; `None` for `--help`.
pub fn parse_compress(args: &[OsString]) -> Result<Option<CompressJob>, CliError> {
    let mut options = CompressOptions::default();
    let mut dir: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(a) = arg.to_str() else {
            if dir.is_some() {
                return Err(usage_err(format!("compress: unexpected argument {arg:?}")));
            }
            dir = Some(PathBuf::from(arg));
            continue;
        };
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a, None),
        };
        let mut value = |name: &str| -> Result<String, CliError> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it
                    .next()
                    .and_then(|v| v.to_str())
                    .map(str::to_string)
                    .ok_or_else(|| usage_err(format!("compress: {name} needs a value"))),
            }
        };
        match name {
            "--min-size" => {
                let v = value(name)?;
                options.min_size =
                    v.parse().map_err(|_| usage_err(format!("compress: --min-size: '{v}' is not a byte count")))?;
            }
            "--encodings" => {
                let v = value(name)?;
                let mut encodings = Vec::new();
                for token in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                    let e = Encoding::from_config(token).ok_or_else(|| {
                        usage_err(format!("compress: unknown encoding '{token}' (expected br, zstd or gzip)"))
                    })?;
                    encodings.push(e);
                }
                if encodings.is_empty() {
                    return Err(usage_err("compress: --encodings needs at least one of br, zstd, gzip".into()));
                }
                options.encodings = encodings;
            }
            "-v" | "--verbose" => options.verbose = true,
            "--help" => return Ok(None),
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(usage_err(format!("compress: unknown option {a}")));
            }
            _ => {
                if dir.is_some() {
                    return Err(usage_err(format!("compress: unexpected argument '{a}' (one directory only)")));
                }
                dir = Some(PathBuf::from(a));
            }
        }
    }
    let dir = dir.ok_or_else(|| usage_err("compress: which directory? (ferrohttpd compress DIR)".into()))?;
    Ok(Some(CompressJob { dir, options }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn launch(mode: Mode, args: &[&str]) -> Result<Launch, CliError> {
        match parse_as(mode, args.iter().map(OsString::from))? {
            Command::Run(l) | Command::CheckConfig(l) => Ok(*l),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn run(args: &[&str]) -> Result<Config, CliError> {
        launch(Mode::Ferrohttpd, args).map(|l| l.config)
    }

    fn thttpd(args: &[&str]) -> Result<Config, CliError> {
        launch(Mode::Thttpd, args).map(|l| l.config)
    }

    fn cwd() -> PathBuf {
        std::env::current_dir().unwrap()
    }

    #[test]
    fn thttpd_flags_override() {
        let c = run(&["-p", "9000", "-d", "/srv", "-l", "/dev/null", "-D"]).unwrap();
        assert_eq!(c.listen, vec!["0.0.0.0:9000".parse().unwrap()]);
        assert_eq!(c.root, PathBuf::from("/srv"));
        assert_eq!(c.access_log, LogTarget::Off);
        assert!(!c.thttpd.enabled && !c.thttpd.daemonize);
        let c = run(&["-h", "127.0.0.1", "-p", "81", "-l", "-"]).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:81".parse().unwrap()]);
        assert_eq!(c.access_log, LogTarget::Std);
        let c = run(&["-h", "::1"]).unwrap();
        assert_eq!(c.listen, vec!["[::1]:8080".parse().unwrap()]);
        let c = run(&["-l", "x.log"]).unwrap();
        assert_eq!(c.access_log, LogTarget::File(cwd().join("x.log")));
    }

    #[test]
    fn every_flag_in_ferrohttpd_mode() {
        let c = run(&[
            "-r",
            "-dd",
            "data",
            "-nos",
            "-v",
            "-g",
            "-u",
            "www",
            "-h",
            "127.0.0.1",
            "-p",
            "0",
            "-i",
            "/run/x.pid",
            "-T",
            "iso-8859-1",
            "-P",
            "CP=\"x\"",
            "-M",
            "60",
            "-D",
        ])
        .unwrap();
        assert!(c.thttpd.chroot);
        assert_eq!(c.thttpd.data_dir, Some(PathBuf::from("data")));
        assert_eq!(c.symlinks, SymlinkPolicy::Follow);
        assert!(c.thttpd.vhost_dirs && c.thttpd.global_passwd && c.thttpd.htpasswd);
        assert_eq!(c.thttpd.user.as_deref(), Some("www"));
        assert_eq!(c.pid_file, Some(PathBuf::from("/run/x.pid")));
        assert_eq!(c.charset, "iso-8859-1");
        assert_eq!(c.thttpd.p3p.as_deref(), Some("CP=\"x\""));
        assert_eq!(c.max_age, Some(60));
        assert!(!c.thttpd.enabled, "ferrohttpd mode keeps its own behaviour");
        assert_eq!(c.dotfiles, DotfilePolicy::Deny);
    }

    #[test]
    fn thttpd_defaults() {
        let c = thttpd(&[]).unwrap();
        assert_eq!(c.listen, vec!["0.0.0.0:80".parse().unwrap(), "[::]:80".parse().unwrap()]);
        assert_eq!(c.root, cwd());
        assert_eq!(c.access_log, LogTarget::Syslog);
        assert_eq!(c.error_log, LogTarget::Syslog);
        assert!(c.thttpd.enabled && c.thttpd.htpasswd && c.thttpd.daemonize);
        assert_eq!(c.thttpd.user.as_deref(), Some("nobody"));
        assert_eq!(c.dotfiles, DotfilePolicy::Allow);
        assert_eq!(c.symlinks, SymlinkPolicy::WithinRoot);
        assert!(c.listing);
        assert!(!c.compression.on_demand, "thttpd never compresses");
        let c = thttpd(&["-D", "-p", "8000"]).unwrap();
        assert!(!c.thttpd.daemonize);
        assert_eq!(c.error_log, LogTarget::Std);
        assert_eq!(c.listen, vec!["0.0.0.0:8000".parse().unwrap(), "[::]:8000".parse().unwrap()]);
        let c = thttpd(&["-h", "127.0.0.1"]).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:80".parse().unwrap()]);
        let c = thttpd(&["-r"]).unwrap();
        assert!(c.thttpd.chroot);
        assert_eq!(c.symlinks, SymlinkPolicy::Follow);
        let c = thttpd(&["-nos"]).unwrap();
        assert_eq!(c.symlinks, SymlinkPolicy::Follow);
    }

    #[test]
    fn thttpd_relative_paths() {
        let c = thttpd(&["-d", "/srv/www", "-dd", "data", "-i", "run/t.pid", "-l", "t.log"]).unwrap();
        assert_eq!(c.root, PathBuf::from("/srv/www/data"));
        assert_eq!(c.thttpd.data_dir, None);
        assert_eq!(c.pid_file, Some(PathBuf::from("/srv/www/run/t.pid")));
        assert_eq!(c.access_log, LogTarget::File(cwd().join("t.log")));
        let c = thttpd(&["-d", "/srv/www", "-r", "-dd", "/data"]).unwrap();
        assert_eq!(c.root, PathBuf::from("/srv/www"));
        assert_eq!(c.thttpd.data_dir, Some(PathBuf::from("/data")));
    }

    #[test]
    fn cgi_is_refused() {
        let e = thttpd(&["-c", "**.cgi"]).unwrap_err();
        assert!(!e.usage);
        assert!(e.message.contains("static files only") && e.message.contains("CGI"), "{}", e.message);
        assert!(run(&["-c", "cgi-bin/*"]).is_err());
    }

    #[test]
    fn throttle_file_is_read_and_bad_lines_warned() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"# c\n**.jpg 50000\nnonsense\n** 2000-100000\n").unwrap();
        let l = launch(Mode::Thttpd, &["-t", f.path().to_str().unwrap()]).unwrap();
        assert_eq!(l.config.throttles.len(), 2);
        assert_eq!(l.warnings.len(), 1);
        assert!(l.warnings[0].contains(": line 3: ") && l.warnings[0].contains("nonsense"), "{:?}", l.warnings);
        let e = thttpd(&["-t", "/nonexistent/throttles"]).unwrap_err();
        assert!(e.message.contains("/nonexistent/throttles"), "{}", e.message);
    }

    #[test]
    fn long_options_do_not_eat_flag_values() {
        // `-l --check-config` logs to a file named "--check-config"; it is not the option.
        let c = parse_as(Mode::Thttpd, ["-l", "--check-config"].map(OsString::from)).unwrap();
        assert!(matches!(c, Command::Run(_)));
    }

    #[test]
    fn toml_base_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("x.toml");
        std::fs::write(&toml, "[server]\nlisten = [\"127.0.0.1:9999\"]\nroot = \"/srv/base\"\n").unwrap();
        let t = toml.to_str().unwrap();
        let c = thttpd(&["-C", t, "-p", "81"]).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:81".parse().unwrap()]);
        assert_eq!(c.root, PathBuf::from("/srv/base"));
        assert!(c.thttpd.enabled);
        let c = run(&["--config", t, "-d", "/srv/other"]).unwrap();
        assert_eq!(c.root, PathBuf::from("/srv/other"));
        let other = dir.path().join("y.toml");
        std::fs::write(&other, "").unwrap();
        assert!(run(&["--config", t, "-C", other.to_str().unwrap()]).unwrap_err().usage);
    }

    #[cfg(feature = "acme")]
    #[test]
    fn domain_and_email() {
        let every = |p: u16| vec![SocketAddr::from(([0, 0, 0, 0], p)), SocketAddr::from((Ipv6Addr::UNSPECIFIED, p))];
        // Alone: ports 80 and 443 on every address, the redirect on, state_dir by default.
        let c =
            run(&["src", "--domain", "Example.org.", "--domain=www.example.org", "--domain", "example.org"]).unwrap();
        assert_eq!(c.acme.domains, ["example.org", "www.example.org"]);
        assert_eq!((c.listen, c.tls.listen.clone(), c.tls.redirect_http), (every(80), every(443), true));
        assert_eq!((c.acme.email, c.acme.state_dir), (None, crate::config::AcmeSettings::default().state_dir));
        // The plain addresses given stay; the TLS ones still default.
        let c = run(&["src", "--domain", "a.org", "--email", "me@a.org", "--listen", "127.0.0.1:8000"]).unwrap();
        assert_eq!((c.listen, c.tls.listen), (vec!["127.0.0.1:8000".parse().unwrap()], every(443)));
        assert_eq!(c.acme.email.as_deref(), Some("me@a.org"));
        assert_eq!(run(&["src", "--domain", "a.org", "-p", "81"]).unwrap().listen, vec!["0.0.0.0:81".parse().unwrap()]);
        // A configuration with [tls] listen (and no certificate: --domain completes it)
        // keeps its listeners and its redirect_http; its names and the flag's are joined.
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("x.toml");
        std::fs::write(&toml, "[tls]\nlisten = [\"127.0.0.1:8443\"]\n[acme]\nemail = \"a@b.c\"\n").unwrap();
        let t = toml.to_str().unwrap();
        let c = run(&["--config", t, "src", "--domain", "b.org"]).unwrap();
        assert_eq!(
            (c.listen, c.tls.listen, c.tls.redirect_http),
            (vec!["0.0.0.0:8080".parse().unwrap()], vec!["127.0.0.1:8443".parse().unwrap()], false)
        );
        assert_eq!((c.acme.domains, c.acme.email.as_deref()), (vec!["b.org".to_string()], Some("a@b.c")));
        let e = run(&["--config", t, "src"]).unwrap_err().message;
        assert!(e.contains("x.toml: tls.cert and tls.key: a default certificate is needed"), "{e}");
        // Bad values name the flag.
        for (args, want) in [
            (&["--domain", "*.a.org"][..], "--domain \"*.a.org\": wildcards"),
            (&["--domain", "10.0.0.1"], "--domain \"10.0.0.1\" is not a host name"),
            (&["--domain", "a b"], "is not a host name"),
            (&["--domain", "a.org", "--email", "nobody"], "--email \"nobody\": not an e-mail address"),
        ] {
            let e = run(&[&["src"][..], args].concat()).unwrap_err().message;
            assert!(e.contains(want), "{args:?}: {e}");
        }
        assert!(run(&["src", "--domain"]).unwrap_err().usage);
        // Not thttpd's.
        assert!(thttpd(&["--domain", "a.org"]).is_err());
    }

    #[test]
    fn bad_arguments() {
        assert!(run(&["-x"]).unwrap_err().usage);
        assert!(run(&["-p"]).unwrap_err().usage);
        assert!(run(&["-p", "70000"]).is_err());
        assert!(!run(&["--config", "/nonexistent/x.toml"]).unwrap_err().usage);
        assert!(matches!(parse(["--help".into()]), Ok(Command::Help)));
        assert!(matches!(parse(["-V".into()]), Ok(Command::Version)));
        assert!(matches!(parse_as(Mode::Thttpd, ["-V".into()]), Ok(Command::Version)));
        assert!(matches!(parse(["--check-config".into()]), Ok(Command::CheckConfig(_))));
        assert!(thttpd(&["stray"]).unwrap_err().usage);
    }

    #[test]
    fn serve_a_folder_with_a_port_or_addresses() {
        let c = run(&["src", "--port", "8000"]).unwrap();
        assert_eq!(c.root, cwd().join("src"));
        assert_eq!(c.listen, vec!["0.0.0.0:8000".parse().unwrap()]);
        let c = run(&["--root=src", "--listen", "127.0.0.1:9001", "--listen=[::1]:9002"]).unwrap();
        assert_eq!(c.root, cwd().join("src"));
        assert_eq!(c.listen, vec!["127.0.0.1:9001".parse().unwrap(), "[::1]:9002".parse().unwrap()]);
        let c = run(&["--listen", ":81", "-p", "82"]).unwrap();
        assert_eq!(c.listen, vec!["0.0.0.0:82".parse().unwrap(), "[::]:82".parse().unwrap()]);
        let c = run(&["--listen", "8001", "--port", "8002", "--listen", "127.0.0.1:1"]).unwrap();
        assert_eq!(c.listen.len(), 3);
        assert!(c.listen.iter().all(|a| a.port() == 8002), "--port sets every address's port: {:?}", c.listen);
        // Flags stay left to right: a later -d wins over the bare directory.
        assert_eq!(run(&["src", "-d", "/srv"]).unwrap().root, PathBuf::from("/srv"));
        // Flag values are never taken for the directory.
        assert_eq!(run(&["-l", "x.log", "-p", "1"]).unwrap().root, PathBuf::from(super::super::DEFAULT_ROOT));
        assert!(run(&["a", "b"]).unwrap_err().usage);
        assert!(run(&["--port"]).unwrap_err().usage);
        assert!(run(&["--listen", ":70000"]).is_err());
        assert!(run(&["--listen", "nonsense"]).is_err());
        // As thttpd, thttpd's command line only.
        assert!(thttpd(&["src"]).unwrap_err().usage);
        assert!(thttpd(&["--port", "80"]).unwrap_err().usage);
        assert!(thttpd(&["--listen", ":80"]).unwrap_err().usage);
    }

    #[test]
    fn compress_subcommand() {
        let c = parse(["compress", "site", "--min-size", "10", "--encodings", "gzip,br", "-v"].map(OsString::from));
        match c {
            Ok(Command::Compress(CompressJob { dir, options })) => {
                assert_eq!(dir, PathBuf::from("site"));
                assert_eq!(options.min_size, 10);
                assert_eq!(options.encodings, vec![Encoding::Gzip, Encoding::Br]);
                assert!(options.verbose);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(["compress", "--min-size=5", "d"].map(OsString::from)),
            Ok(Command::Compress(CompressJob { options: CompressOptions { min_size: 5, .. }, .. }))
        ));
        assert!(matches!(parse(["compress", "--help"].map(OsString::from)), Ok(Command::Help)));
        assert!(parse(["compress".into()]).unwrap_err().usage);
        assert!(parse(["compress", "d", "--encodings", "lzma"].map(OsString::from)).unwrap_err().usage);
        assert!(parse(["compress", "a", "b"].map(OsString::from)).unwrap_err().usage);
        // As thttpd there is no subcommand: "compress" is a stray argument.
        assert!(parse_as(Mode::Thttpd, ["compress".into()]).unwrap_err().usage);
    }

    #[test]
    fn version_names_every_feature() {
        let v = version(Mode::Ferrohttpd);
        let mut lines = v.lines();
        assert_eq!(lines.next(), Some(concat!("ferrohttpd ", env!("CARGO_PKG_VERSION"))));
        let features = lines.next().unwrap();
        assert_eq!(features.contains("+tls"), cfg!(feature = "tls"), "{features}");
        assert_eq!(features.contains("-http2"), !cfg!(feature = "http2"), "{features}");
        assert_eq!(features.contains("+compression"), cfg!(feature = "compression"), "{features}");
        assert_eq!(features.contains("+acme"), cfg!(feature = "acme"), "{features}");
        assert_eq!(version(Mode::Thttpd).lines().count(), 1, "thttpd -V is thttpd's one line");
    }

    #[test]
    fn mode_from_argv0() {
        assert_eq!(Mode::from_argv0(OsStr::new("/usr/sbin/thttpd")), Mode::Thttpd);
        assert_eq!(Mode::from_argv0(OsStr::new("ferrohttpd")), Mode::Ferrohttpd);
        assert!(thttpd_version().starts_with("thttpd/2.29 (ferrohttpd "));
    }
}
