//! The command line: ferrohttpd's own long options and the thttpd-compatible flags, which
//! override the configuration file.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use super::{Config, ConfigError, LogTarget};

pub const USAGE: &str = "\
usage: ferrohttpd [--config FILE] [--check-config] [-p PORT] [-d DIR] [-h HOST] [-l LOGFILE] [-D] [-V]

Serves the files under a directory over HTTP/1.1.

options:
  --config FILE    read this TOML configuration (default: built-in defaults, serving ./www)
  --check-config   validate the configuration, print a summary and exit
  --help           print this help and exit
  --version, -V    print the version and exit

thttpd-compatible flags (they override the configuration file):
  -p PORT          port to listen on (for every listen address)
  -d DIR           document root
  -h HOST          address or host name to bind to
  -l LOGFILE       access log file; '-' for stdout, '/dev/null' for none
  -D               stay in the foreground (ferrohttpd always does)
";

/// What `main` should do.
#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    CheckConfig(Box<Config>),
    Help,
    Version,
}

/// A command-line error; `usage` says whether to print the usage line after the message.
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

fn usage_err(message: String) -> CliError {
    CliError { message, usage: true }
}

#[derive(Default)]
struct Overrides {
    port: Option<u16>,
    dir: Option<PathBuf>,
    host: Option<String>,
    logfile: Option<PathBuf>,
}

/// Parses the arguments (without the program name).
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, CliError> {
    let mut args = args.into_iter();
    let mut config: Option<PathBuf> = None;
    let mut check = false;
    let mut ov = Overrides::default();

    while let Some(arg) = args.next() {
        let Some(a) = arg.to_str() else {
            return Err(usage_err(format!("unrecognised argument {arg:?}")));
        };
        let mut value = |name: &str| -> Result<OsString, CliError> {
            args.next().ok_or_else(|| usage_err(format!("{name} needs a value")))
        };
        match a {
            "--help" => return Ok(Command::Help),
            "--version" | "-V" => return Ok(Command::Version),
            "--check-config" => check = true,
            "--config" | "-C" => config = Some(value(a)?.into()),
            "-p" => {
                let v = value(a)?;
                let port = v.to_str().and_then(|s| s.parse::<u16>().ok());
                ov.port = Some(port.ok_or_else(|| usage_err(format!("-p: {v:?} is not a port number")))?);
            }
            "-d" => ov.dir = Some(value(a)?.into()),
            "-h" => {
                let v = value(a)?;
                ov.host = Some(v.into_string().map_err(|v| usage_err(format!("-h: {v:?} is not a host name")))?);
            }
            "-l" => ov.logfile = Some(value(a)?.into()),
            "-D" => {}
            _ => {
                if let Some(path) = a.strip_prefix("--config=") {
                    config = Some(path.into());
                } else {
                    return Err(usage_err(format!("unknown option {a}")));
                }
            }
        }
    }

    let mut cfg = match &config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    apply_overrides(&mut cfg, ov)?;
    cfg.check()?;
    Ok(if check { Command::CheckConfig(Box::new(cfg)) } else { Command::Run(Box::new(cfg)) })
}

fn apply_overrides(cfg: &mut Config, ov: Overrides) -> Result<(), CliError> {
    if let Some(dir) = ov.dir {
        cfg.root = dir;
    }
    if let Some(log) = ov.logfile {
        cfg.access_log = match log.to_str() {
            Some("-") => LogTarget::Std,
            Some("/dev/null") => LogTarget::Off,
            _ => LogTarget::File(log),
        };
    }
    let port = ov.port.unwrap_or_else(|| cfg.listen.first().map_or(8080, SocketAddr::port));
    if let Some(host) = ov.host {
        cfg.listen = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let spec = format!("{host}:{port}");
                super::raw::parse_listen(&spec).map_err(|e| CliError { message: format!("-h: {e}"), usage: false })?
            }
        };
    } else if ov.port.is_some() {
        for a in &mut cfg.listen {
            a.set_port(port);
        }
        cfg.listen.dedup();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, CliError> {
        match parse(args.iter().map(OsString::from))? {
            Command::Run(c) | Command::CheckConfig(c) => Ok(*c),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn thttpd_flags_override() {
        let c = run(&["-p", "9000", "-d", "/srv", "-l", "/dev/null", "-D"]).unwrap();
        assert_eq!(c.listen, vec!["0.0.0.0:9000".parse().unwrap()]);
        assert_eq!(c.root, PathBuf::from("/srv"));
        assert_eq!(c.access_log, LogTarget::Off);
        let c = run(&["-h", "127.0.0.1", "-p", "81", "-l", "-"]).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:81".parse().unwrap()]);
        assert_eq!(c.access_log, LogTarget::Std);
        let c = run(&["-h", "::1"]).unwrap();
        assert_eq!(c.listen, vec!["[::1]:8080".parse().unwrap()]);
        let c = run(&["-l", "x.log"]).unwrap();
        assert_eq!(c.access_log, LogTarget::File("x.log".into()));
    }

    #[test]
    fn bad_arguments() {
        assert!(run(&["-x"]).unwrap_err().usage);
        assert!(run(&["-p"]).unwrap_err().usage);
        assert!(run(&["-p", "70000"]).unwrap_err().usage);
        assert!(!run(&["--config", "/nonexistent/x.toml"]).unwrap_err().usage);
        assert!(matches!(parse(["--help".into()]), Ok(Command::Help)));
        assert!(matches!(parse(["-V".into()]), Ok(Command::Version)));
        assert!(matches!(parse(["--check-config".into()]), Ok(Command::CheckConfig(_))));
    }
}
