//! thttpd's command line and its `-C` config-file format, parsed into [`Settings`].
//!
//! The parser follows thttpd 2.29's `parse_args()` and `read_config()`:
//!
//! - Flags are processed **left to right**. `-C file` reads the config file at that point, so
//!   a flag before it is overridden by the file and a flag after it overrides the file.
//! - `-V` stops at once with [`Parsed::Version`] (thttpd prints its version and exits there,
//!   whatever follows). `--help` gives [`Parsed::Help`].
//! - An unknown flag, a flag missing its value, or a stray non-flag argument is an
//!   [`ArgError`] with `usage: true`: the caller prints [`USAGE`] and exits with status 1.
//! - `-r` / `chroot` also turn the symlink check off and `-nor` / `nochroot` turn it back on,
//!   as thttpd does (a later `-s`/`-nos` still wins).
//!
//! The config file is whitespace-separated words, several per line, `#` to end of line is a
//! comment, each word `keyword` or `keyword=value`, keywords case-insensitive. An unknown
//! keyword, a value given to a keyword that takes none, or a missing (or empty) value is an
//! error naming the word, the file and the line.
//!
//! Differences from thttpd, all in the direction of refusing nonsense instead of guessing:
//! numbers (`-p`, `-M`, `cgilimit`) must be valid decimal integers in range (thttpd's `atoi`
//! turns garbage into 0); `--version` is accepted beside `-V`; the pre-2.26 keywords
//! `symlink(s)` / `nosymlink(s)` are accepted as aliases of `symlinkcheck` / `nosymlinkcheck`
//! (old Debian config files use them).
//!
//! A `-C` file whose name ends in `.toml` is ferrohttpd's own TOML config: it is not read
//! here, its path is recorded in [`Settings::toml_config`] and the caller loads it as the base
//! that every thttpd flag (before or after `-C`) overrides.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

/// Everything thttpd's flags and config file can set. `None` = not given: the caller applies
/// the defaults (thttpd mode: port 80, dir ".", syslog, daemonise, user "nobody"; ferrohttpd
/// mode: its own).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Settings {
    /// `-p` / `port`.
    pub port: Option<u16>,
    /// `-d` / `dir`.
    pub dir: Option<PathBuf>,
    /// `-r`, `-nor` / `chroot`, `nochroot`.
    pub chroot: Option<bool>,
    /// `-dd` / `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `-s`, `-nos` / `symlinkcheck`, `nosymlinkcheck` (also set by the chroot flags).
    pub symlink_check: Option<bool>,
    /// `-v`, `-nov` / `vhost`, `novhost`.
    pub vhost: Option<bool>,
    /// `-g`, `-nog` / `globalpasswd`, `noglobalpasswd`.
    pub global_passwd: Option<bool>,
    /// `-u` / `user`.
    pub user: Option<String>,
    /// `-c` / `cgipat`. ferrohttpd serves static files only: the caller refuses to start.
    pub cgi_pattern: Option<String>,
    /// `cgilimit` (no flag). Recorded only; meaningless without CGI.
    pub cgi_limit: Option<u32>,
    /// `-t` / `throttles`.
    pub throttles: Option<PathBuf>,
    /// `-h` / `host`: address or host name to bind.
    pub host: Option<String>,
    /// `-l` / `logfile`: a path, `-` for stdout, `/dev/null` for none.
    pub logfile: Option<PathBuf>,
    /// `-i` / `pidfile`.
    pub pidfile: Option<PathBuf>,
    /// `-T` / `charset`.
    pub charset: Option<String>,
    /// `-P` / `p3p`.
    pub p3p: Option<String>,
    /// `-M` / `max_age`, in seconds.
    pub max_age: Option<u32>,
    /// `-D` / `debug`: stay in the foreground.
    pub debug: Option<bool>,
    /// `urlpat` (no flag): URLs that need a local referrer.
    pub url_pattern: Option<String>,
    /// `localpat` (no flag): which referrer hosts count as local.
    pub local_pattern: Option<String>,
    /// `noemptyreferrers` / `noemptyreferers` (no flag).
    pub no_empty_referrers: Option<bool>,
    /// A `-C` file ending in `.toml`: ferrohttpd's TOML config, loaded by the caller as the
    /// base that the thttpd settings above override.
    pub toml_config: Option<PathBuf>,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // built once at start-up and consumed at once
pub enum Parsed {
    /// Serve with these settings.
    Run(Settings),
    /// `-V` (or `--version`): print the version and exit 0.
    Version,
    /// `--help`: print the usage and exit 0.
    Help,
}

/// A command-line or config-file error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    /// What went wrong, naming the flag or word (and the file and line for config files).
    pub message: String,
    /// Print [`USAGE`] after the message (exit status 1 either way).
    pub usage: bool,
}

impl ArgError {
    fn usage(message: String) -> ArgError {
        ArgError { message, usage: true }
    }

    fn plain(message: String) -> ArgError {
        ArgError { message, usage: false }
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ArgError {}

/// thttpd's usage line, printed (to stderr) for an unknown flag or a missing value.
pub const USAGE: &str = "usage:  thttpd [-C configfile] [-p port] [-d dir] [-r|-nor] [-dd data_dir] [-s|-nos] [-v|-nov] [-g|-nog] [-u user] [-c cgipat] [-t throttles] [-h host] [-l logfile] [-i pidfile] [-T charset] [-P P3P] [-M maxage] [-V] [-D]\n";

/// One setting, shared by the flags and the config-file keywords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Debug,
    Port,
    Dir,
    Chroot(bool),
    DataDir,
    SymlinkCheck(bool),
    Vhost(bool),
    GlobalPasswd(bool),
    User,
    CgiPat,
    CgiLimit,
    UrlPat,
    NoEmptyReferrers,
    LocalPat,
    Throttles,
    Host,
    Logfile,
    Pidfile,
    Charset,
    P3p,
    MaxAge,
}

impl Key {
    fn takes_value(self) -> bool {
        !matches!(
            self,
            Key::Debug
                | Key::Chroot(_)
                | Key::SymlinkCheck(_)
                | Key::Vhost(_)
                | Key::GlobalPasswd(_)
                | Key::NoEmptyReferrers
        )
    }

    fn from_flag(flag: &str) -> Option<Key> {
        Some(match flag {
            "-p" => Key::Port,
            "-d" => Key::Dir,
            "-r" => Key::Chroot(true),
            "-nor" => Key::Chroot(false),
            "-dd" => Key::DataDir,
            "-s" => Key::SymlinkCheck(true),
            "-nos" => Key::SymlinkCheck(false),
            "-v" => Key::Vhost(true),
            "-nov" => Key::Vhost(false),
            "-g" => Key::GlobalPasswd(true),
            "-nog" => Key::GlobalPasswd(false),
            "-u" => Key::User,
            "-c" => Key::CgiPat,
            "-t" => Key::Throttles,
            "-h" => Key::Host,
            "-l" => Key::Logfile,
            "-i" => Key::Pidfile,
            "-T" => Key::Charset,
            "-P" => Key::P3p,
            "-M" => Key::MaxAge,
            "-D" => Key::Debug,
            _ => return None,
        })
    }

    fn from_keyword(word: &str) -> Option<Key> {
        Some(match word.to_ascii_lowercase().as_str() {
            "debug" => Key::Debug,
            "port" => Key::Port,
            "dir" => Key::Dir,
            "chroot" => Key::Chroot(true),
            "nochroot" => Key::Chroot(false),
            "data_dir" => Key::DataDir,
            "symlinkcheck" | "symlink" | "symlinks" => Key::SymlinkCheck(true),
            "nosymlinkcheck" | "nosymlink" | "nosymlinks" => Key::SymlinkCheck(false),
            "user" => Key::User,
            "cgipat" => Key::CgiPat,
            "cgilimit" => Key::CgiLimit,
            "urlpat" => Key::UrlPat,
            "noemptyreferrers" | "noemptyreferers" => Key::NoEmptyReferrers,
            "localpat" => Key::LocalPat,
            "throttles" => Key::Throttles,
            "host" => Key::Host,
            "logfile" => Key::Logfile,
            "vhost" => Key::Vhost(true),
            "novhost" => Key::Vhost(false),
            "globalpasswd" => Key::GlobalPasswd(true),
            "noglobalpasswd" => Key::GlobalPasswd(false),
            "pidfile" => Key::Pidfile,
            "charset" => Key::Charset,
            "p3p" => Key::P3p,
            "max_age" => Key::MaxAge,
            _ => return None,
        })
    }
}

/// Applies one setting. `value` is present exactly when `key.takes_value()`. The error
/// message names `name` (the flag or keyword as written).
fn apply(s: &mut Settings, key: Key, name: &str, value: Option<&OsStr>) -> Result<(), String> {
    let path = || value.map(PathBuf::from);
    let text = || -> Result<Option<String>, String> {
        match value {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|t| Some(t.to_string()))
                .ok_or_else(|| format!("value of {name} is not valid UTF-8: '{}'", v.to_string_lossy())),
        }
    };
    fn number<T: std::str::FromStr>(name: &str, v: Option<String>) -> Result<Option<T>, String> {
        match v {
            None => Ok(None),
            Some(t) => t
                .parse::<T>()
                .map(Some)
                .map_err(|_| format!("bad value for {name}: '{t}' (expected a non-negative integer in range)")),
        }
    }
    match key {
        Key::Debug => s.debug = Some(true),
        Key::Port => s.port = number(name, text()?)?,
        Key::Dir => s.dir = path(),
        Key::Chroot(on) => {
            // thttpd: chroot makes the symlink check moot, so -r turns it off and -nor on.
            s.chroot = Some(on);
            s.symlink_check = Some(!on);
        }
        Key::DataDir => s.data_dir = path(),
        Key::SymlinkCheck(on) => s.symlink_check = Some(on),
        Key::Vhost(on) => s.vhost = Some(on),
        Key::GlobalPasswd(on) => s.global_passwd = Some(on),
        Key::User => s.user = text()?,
        Key::CgiPat => s.cgi_pattern = text()?,
        Key::CgiLimit => s.cgi_limit = number(name, text()?)?,
        Key::UrlPat => s.url_pattern = text()?,
        Key::NoEmptyReferrers => s.no_empty_referrers = Some(true),
        Key::LocalPat => s.local_pattern = text()?,
        Key::Throttles => s.throttles = path(),
        Key::Host => s.host = text()?,
        Key::Logfile => s.logfile = path(),
        Key::Pidfile => s.pidfile = path(),
        Key::Charset => s.charset = text()?,
        Key::P3p => s.p3p = text()?,
        Key::MaxAge => s.max_age = number(name, text()?)?,
    }
    Ok(())
}

/// Parses thttpd flags left to right. `args` are the arguments **after** argv\[0\]
/// (`std::env::args_os().skip(1)`).
///
/// `-C file` reads the config file at that point (a `.toml` file is only recorded, see
/// [`Settings::toml_config`]). Unknown flag, missing value or stray argument →
/// `ArgError { usage: true }`; a bad value or an unreadable/invalid config file →
/// `ArgError { usage: false }`.
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Parsed, ArgError> {
    let mut s = Settings::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.to_str() else {
            return Err(ArgError::usage(format!("unknown option '{}'", arg.to_string_lossy())));
        };
        match flag {
            "-V" | "--version" => return Ok(Parsed::Version),
            "--help" => return Ok(Parsed::Help),
            "-C" => {
                let file = PathBuf::from(next_value(&mut it, flag)?);
                if file.extension().is_some_and(|e| e == "toml") {
                    s.toml_config = Some(file);
                } else {
                    parse_config_file(&file, &mut s)?;
                }
            }
            _ => match Key::from_flag(flag) {
                Some(key) => {
                    let value = if key.takes_value() { Some(next_value(&mut it, flag)?) } else { None };
                    apply(&mut s, key, flag, value.as_deref()).map_err(ArgError::plain)?;
                }
                None if flag.starts_with('-') => {
                    return Err(ArgError::usage(format!("unknown option '{flag}'")));
                }
                None => return Err(ArgError::usage(format!("unexpected argument '{flag}'"))),
            },
        }
    }
    Ok(Parsed::Run(s))
}

fn next_value(it: &mut impl Iterator<Item = OsString>, flag: &str) -> Result<OsString, ArgError> {
    it.next().ok_or_else(|| ArgError::usage(format!("option '{flag}' requires a value")))
}

/// Reads a thttpd config file and applies it onto `s`. Errors name the file (and the line
/// and word for content errors).
pub fn parse_config_file(path: &Path, s: &mut Settings) -> Result<(), ArgError> {
    let bytes =
        super::privs::read_config_file(path).map_err(|e| ArgError::plain(format!("{}: {e}", path.display())))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ArgError::plain(format!("{}: config file is not valid UTF-8", path.display())))?;
    parse_config_text(&text, &path.display().to_string(), s)
}

/// Parses thttpd config-file text (see the module docs) and applies it onto `s`. `origin`
/// names the source in error messages (`origin: line N: …`, as the TOML errors say it).
pub fn parse_config_text(text: &str, origin: &str, s: &mut Settings) -> Result<(), ArgError> {
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = line.split('#').next().unwrap_or("");
        for word in line.split([' ', '\t', '\r', '\n']).filter(|w| !w.is_empty()) {
            let (name, value) = match word.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (word, None),
            };
            let err = |msg: String| ArgError::plain(format!("{origin}: line {line_no}: {msg}"));
            let key = Key::from_keyword(name).ok_or_else(|| err(format!("unknown config option '{name}'")))?;
            match (key.takes_value(), value) {
                (true, None) | (true, Some("")) => return Err(err(format!("value required for {name} option"))),
                (false, Some(_)) => return Err(err(format!("no value required for {name} option"))),
                _ => {}
            }
            apply(s, key, name, value.map(OsStr::new)).map_err(err)?;
        }
    }
    Ok(())
}

/// True if argv\[0\]'s file name is `thttpd` (a symlink or copy named so).
pub fn invoked_as_thttpd(argv0: &OsStr) -> bool {
    Path::new(argv0).file_name().is_some_and(|n| n == "thttpd")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn run(args: &[&str]) -> Result<Parsed, ArgError> {
        parse_args(args.iter().map(OsString::from))
    }

    fn settings(args: &[&str]) -> Settings {
        match run(args) {
            Ok(Parsed::Run(s)) => s,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    fn conf(text: &str) -> Result<Settings, ArgError> {
        let mut s = Settings::default();
        parse_config_text(text, "test.conf", &mut s).map(|()| s)
    }

    fn conf_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn no_arguments_is_all_defaults() {
        assert_eq!(settings(&[]), Settings::default());
    }

    #[test]
    fn every_flag() {
        let s = settings(&[
            "-p",
            "8080",
            "-d",
            "/srv/www",
            "-dd",
            "/data",
            "-u",
            "www-data",
            "-c",
            "**.cgi",
            "-t",
            "/etc/throttle.conf",
            "-h",
            "127.0.0.1",
            "-l",
            "/var/log/thttpd.log",
            "-i",
            "/run/thttpd.pid",
            "-T",
            "iso-8859-1",
            "-P",
            "CP=\"NOI\"",
            "-M",
            "3600",
            "-D",
            "-v",
            "-g",
            "-r",
        ]);
        let want = Settings {
            port: Some(8080),
            dir: Some("/srv/www".into()),
            chroot: Some(true),
            data_dir: Some("/data".into()),
            symlink_check: Some(false),
            vhost: Some(true),
            global_passwd: Some(true),
            user: Some("www-data".into()),
            cgi_pattern: Some("**.cgi".into()),
            throttles: Some("/etc/throttle.conf".into()),
            host: Some("127.0.0.1".into()),
            logfile: Some("/var/log/thttpd.log".into()),
            pidfile: Some("/run/thttpd.pid".into()),
            charset: Some("iso-8859-1".into()),
            p3p: Some("CP=\"NOI\"".into()),
            max_age: Some(3600),
            debug: Some(true),
            ..Settings::default()
        };
        assert_eq!(s, want);
    }

    #[test]
    fn negative_flags() {
        let s = settings(&["-r", "-nor", "-v", "-nov", "-g", "-nog", "-nos"]);
        assert_eq!(s.chroot, Some(false));
        assert_eq!(s.vhost, Some(false));
        assert_eq!(s.global_passwd, Some(false));
        assert_eq!(s.symlink_check, Some(false));
        assert_eq!(settings(&["-nos", "-s"]).symlink_check, Some(true));
        // -nor turns the symlink check back on, as thttpd does.
        assert_eq!(settings(&["-nos", "-nor"]).symlink_check, Some(true));
        // A symlink flag after -r wins.
        let s = settings(&["-r", "-s"]);
        assert_eq!((s.chroot, s.symlink_check), (Some(true), Some(true)));
    }

    #[test]
    fn later_flags_override_earlier() {
        assert_eq!(settings(&["-p", "1", "-p", "2"]).port, Some(2));
        assert_eq!(settings(&["-l", "-", "-l", "/dev/null"]).logfile, Some("/dev/null".into()));
    }

    #[test]
    fn config_file_applies_at_its_position() {
        let f = conf_file("port=81 dir=/from/conf\nuser=conf\n");
        let path = f.path().to_str().unwrap();
        let s = settings(&["-p", "80", "-u", "flag", "-C", path, "-d", "/from/flag"]);
        assert_eq!(s.port, Some(81), "-C after -p overrides it");
        assert_eq!(s.user, Some("conf".into()));
        assert_eq!(s.dir, Some("/from/flag".into()), "-d after -C overrides the file");
    }

    #[test]
    fn toml_config_is_recorded_not_read() {
        let s = settings(&["-C", "/nonexistent/ferrohttpd.toml", "-p", "8000"]);
        assert_eq!(s.toml_config, Some("/nonexistent/ferrohttpd.toml".into()));
        assert_eq!(s.port, Some(8000));
    }

    #[test]
    fn missing_config_file_names_it() {
        let e = run(&["-C", "/nonexistent/thttpd.conf"]).unwrap_err();
        assert!(!e.usage);
        assert!(e.message.contains("/nonexistent/thttpd.conf"), "{e}");
    }

    #[test]
    fn version_and_help() {
        assert_eq!(run(&["-V"]), Ok(Parsed::Version));
        // thttpd exits at -V, even before a bad flag.
        assert_eq!(run(&["-p", "80", "-V", "-bogus"]), Ok(Parsed::Version));
        assert_eq!(run(&["--version"]), Ok(Parsed::Version));
        assert_eq!(run(&["--help"]), Ok(Parsed::Help));
    }

    #[test]
    fn unknown_flag_is_a_usage_error() {
        let e = run(&["-x"]).unwrap_err();
        assert!(e.usage);
        assert!(e.message.contains("'-x'"), "{e}");
        assert!(run(&["--port", "80"]).unwrap_err().usage);
        assert!(run(&["-pp"]).unwrap_err().usage);
        let e = run(&["stray"]).unwrap_err();
        assert!(e.usage && e.message.contains("stray"), "{e}");
    }

    #[test]
    fn missing_value_is_a_usage_error() {
        for flag in ["-C", "-p", "-d", "-dd", "-u", "-c", "-t", "-h", "-l", "-i", "-T", "-P", "-M"] {
            let e = run(&["-D", flag]).unwrap_err();
            assert!(e.usage, "{flag}");
            assert!(e.message.contains(flag), "{e}");
        }
    }

    #[test]
    fn bad_numbers_are_errors() {
        for args in [&["-p", "http"][..], &["-p", "65536"], &["-p", "-1"], &["-M", "-1"], &["-M", "1x"]] {
            let e = run(args).unwrap_err();
            assert!(!e.usage, "{args:?}");
            assert!(e.message.contains(args[0]) && e.message.contains(args[1]), "{e}");
        }
        assert_eq!(settings(&["-p", "0"]).port, Some(0));
        assert_eq!(settings(&["-p", "65535"]).port, Some(65535));
    }

    #[test]
    fn cgi_pattern_is_captured() {
        assert_eq!(settings(&["-c", "/cgi-bin/*"]).cgi_pattern, Some("/cgi-bin/*".into()));
        assert_eq!(conf("cgipat=**.cgi|**.pl").unwrap().cgi_pattern, Some("**.cgi|**.pl".into()));
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_are_kept() {
        use std::os::unix::ffi::OsStringExt;
        let dir = OsString::from_vec(b"/srv/\xff".to_vec());
        let s = match parse_args([OsString::from("-d"), dir.clone()]) {
            Ok(Parsed::Run(s)) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(s.dir, Some(PathBuf::from(dir.clone())));
        let e = parse_args([OsString::from("-u"), dir]).unwrap_err();
        assert!(e.message.contains("-u"), "{e}");
    }

    #[test]
    fn every_keyword() {
        let s = conf(
            "debug port=8081 dir=/www chroot data_dir=/data nosymlinkcheck user=u cgipat=*.cgi cgilimit=3 \
             urlpat=**.jpg noemptyreferrers localpat=*.example.com throttles=/t host=::1 logfile=/l vhost \
             globalpasswd pidfile=/p charset=utf-8 p3p=CP max_age=60",
        )
        .unwrap();
        let want = Settings {
            port: Some(8081),
            dir: Some("/www".into()),
            chroot: Some(true),
            data_dir: Some("/data".into()),
            symlink_check: Some(false),
            vhost: Some(true),
            global_passwd: Some(true),
            user: Some("u".into()),
            cgi_pattern: Some("*.cgi".into()),
            cgi_limit: Some(3),
            throttles: Some("/t".into()),
            host: Some("::1".into()),
            logfile: Some("/l".into()),
            pidfile: Some("/p".into()),
            charset: Some("utf-8".into()),
            p3p: Some("CP".into()),
            max_age: Some(60),
            debug: Some(true),
            url_pattern: Some("**.jpg".into()),
            local_pattern: Some("*.example.com".into()),
            no_empty_referrers: Some(true),
            toml_config: None,
        };
        assert_eq!(s, want);
        let s = conf("nochroot symlinkcheck novhost noglobalpasswd noemptyreferers").unwrap();
        assert_eq!(
            (s.chroot, s.symlink_check, s.vhost, s.global_passwd, s.no_empty_referrers),
            (Some(false), Some(true), Some(false), Some(false), Some(true))
        );
        let s = conf("chroot symlink").unwrap();
        assert_eq!(s.symlink_check, Some(true));
        assert_eq!(conf("NOSYMLINKS").unwrap().symlink_check, Some(false));
    }

    #[test]
    fn keywords_are_case_insensitive_and_values_are_not() {
        let s = conf("PORT=8000 Dir=/Var/WWW User=WWW VHost").unwrap();
        assert_eq!(s.port, Some(8000));
        assert_eq!(s.dir, Some("/Var/WWW".into()));
        assert_eq!(s.user, Some("WWW".into()));
        assert_eq!(s.vhost, Some(true));
    }

    #[test]
    fn comments_and_whitespace() {
        let s = conf("# a comment line\n\n   port=90\t# trailing comment user=nope\r\n\tdir=/x#y\n").unwrap();
        assert_eq!(s.port, Some(90));
        assert_eq!(s.user, None);
        assert_eq!(s.dir, Some("/x".into()), "# starts a comment even inside a word, as in thttpd");
    }

    #[test]
    fn later_keywords_override_earlier() {
        assert_eq!(conf("port=1\nport=2").unwrap().port, Some(2));
        let s = conf("chroot nochroot").unwrap();
        assert_eq!(s.chroot, Some(false));
    }

    #[test]
    fn config_errors_name_the_word_and_line() {
        let e = conf("port=80\nfrobnicate\n").unwrap_err();
        assert_eq!(e.message, "test.conf: line 2: unknown config option 'frobnicate'");
        assert!(!e.usage);
        let e = conf("port").unwrap_err();
        assert_eq!(e.message, "test.conf: line 1: value required for port option");
        let e = conf("dir=").unwrap_err();
        assert_eq!(e.message, "test.conf: line 1: value required for dir option");
        let e = conf("\n\nchroot=yes").unwrap_err();
        assert_eq!(e.message, "test.conf: line 3: no value required for chroot option");
        let e = conf("debug=").unwrap_err();
        assert!(e.message.contains("no value required for debug"), "{e}");
        let e = conf("max_age=soon").unwrap_err();
        assert!(e.message.contains("max_age") && e.message.contains("soon"), "{e}");
        let e = conf("=80").unwrap_err();
        assert!(e.message.contains("unknown config option ''"), "{e}");
    }

    #[test]
    fn config_error_through_flags_names_the_file() {
        let f = conf_file("dir=/var/www\nbogus=1\n");
        let path = f.path().to_str().unwrap().to_string();
        let e = run(&["-C", &path]).unwrap_err();
        assert_eq!(e.message, format!("{path}: line 2: unknown config option 'bogus'"));
    }

    #[test]
    fn typical_debian_setup() {
        // /etc/thttpd/thttpd.conf as Debian ships it (comments trimmed), and its init script's flags.
        let f = conf_file(
            "# BEWARE : No empty lines are allowed!\n\
             # This section overrides defaults\n\
             dir=/var/www\n\
             chroot\n\
             user=www-data # comment\n\
             logfile=/var/log/thttpd.log\n\
             throttles=/etc/thttpd/throttle.conf\n\
             # This section _documents_ defaults in effect\n\
             # port=80\n\
             # nosymlink         # default = !chroot\n\
             # novhost\n\
             # nocgipat\n\
             # nothrottles\n\
             # host=0.0.0.0\n\
             # charset=iso-8859-1\n",
        );
        let path = f.path().to_str().unwrap();
        let s = settings(&["-C", path, "-i", "/var/run/thttpd.pid"]);
        let want = Settings {
            dir: Some("/var/www".into()),
            chroot: Some(true),
            symlink_check: Some(false),
            user: Some("www-data".into()),
            logfile: Some("/var/log/thttpd.log".into()),
            throttles: Some("/etc/thttpd/throttle.conf".into()),
            pidfile: Some("/var/run/thttpd.pid".into()),
            ..Settings::default()
        };
        assert_eq!(s, want);
    }

    #[test]
    fn typical_init_script_flags() {
        // Flag sets seen in thttpd init scripts and units.
        let s = settings(&["-D", "-C", "/dev/null", "-p", "80", "-d", "/var/www", "-u", "nobody", "-l", "-"]);
        assert_eq!(s.debug, Some(true));
        assert_eq!(s.port, Some(80));
        assert_eq!(s.logfile, Some("-".into()));
        let s = settings(&[
            "-r",
            "-d",
            "/home/httpd/html",
            "-u",
            "httpd",
            "-l",
            "/var/log/thttpd.log",
            "-i",
            "/var/run/thttpd.pid",
        ]);
        assert_eq!(s.chroot, Some(true));
        assert_eq!(s.pidfile, Some("/var/run/thttpd.pid".into()));
    }

    #[test]
    fn argv0_name() {
        assert!(invoked_as_thttpd(OsStr::new("thttpd")));
        assert!(invoked_as_thttpd(OsStr::new("/usr/sbin/thttpd")));
        assert!(invoked_as_thttpd(OsStr::new("./thttpd")));
        assert!(!invoked_as_thttpd(OsStr::new("/usr/bin/ferrohttpd")));
        assert!(!invoked_as_thttpd(OsStr::new("thttpd2")));
        assert!(!invoked_as_thttpd(OsStr::new("")));
    }

    #[test]
    fn usage_line_is_thttpds() {
        assert!(USAGE.starts_with("usage:  thttpd [-C configfile] [-p port]"));
        assert!(USAGE.ends_with("[-V] [-D]\n"));
    }
}
