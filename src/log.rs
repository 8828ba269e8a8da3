//! The access log and the error log.
//!
//! Access records are formatted into a per-connection line when the response starts (the
//! request is still in the read buffer then) and completed with the number of body bytes
//! actually sent when it ends. Completed lines collect in one buffer that is written out at
//! least once a second, when it grows large, on reopen and at exit. With the access log
//! off, none of this runs. Error lines are written at once.

use std::fs::File;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::thttpd::privs;
use crate::thttpd::syslog::Syslog;

/// Where the access or error log goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output (access log) or standard error (error log): `"-"`.
    Std,
    /// No log at all: `"off"` (or thttpd's `/dev/null`).
    Off,
    /// Append to this file.
    File(PathBuf),
    /// syslog (LOG_DAEMON, LOG_INFO), as thttpd logs by default; the line has no date.
    Syslog,
}

/// The access log's line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Apache/nginx Combined Log Format.
    Combined,
    /// Common Log Format (Combined without referrer and user agent).
    Common,
    /// One JSON object per line.
    Json,
}

/// The program name in syslog lines.
const SYSLOG_TAG: &str = "ferrohttpd";

/// Syslog connections made before a chroot, taken by the logs opened after it.
static PRECONNECTED: std::sync::Mutex<Vec<Syslog>> = std::sync::Mutex::new(Vec::new());

/// Connects `count` syslog clients now (before chroot hides /dev/log); the next logs opened
/// with the syslog target use them.
pub fn preconnect_syslog(count: usize) {
    if let Ok(mut pool) = PRECONNECTED.lock() {
        for _ in 0..count {
            let mut s = Syslog::new(SYSLOG_TAG);
            if s.connect().is_ok() {
                pool.push(s);
            }
        }
    }
}

/// Flush the access buffer once it holds this much.
const FLUSH_BYTES: usize = 64 * 1024;
/// ... or once its oldest line is this old.
const FLUSH_AFTER: Duration = Duration::from_secs(1);
/// Longest request-target, referrer or user agent copied into a record.
const MAX_FIELD: usize = 2048;

enum Sink {
    Stdout,
    Stderr,
    File(File),
    Syslog(Syslog),
}

impl Sink {
    fn open(target: &LogTarget, std: Sink) -> io::Result<Option<Sink>> {
        Ok(match target {
            LogTarget::Off => None,
            LogTarget::Std => Some(std),
            LogTarget::File(p) => Some(Sink::File(open_append(p)?)),
            LogTarget::Syslog => {
                let pre = PRECONNECTED.lock().ok().and_then(|mut v| v.pop());
                let s = pre.unwrap_or_else(|| {
                    let mut s = Syslog::new(SYSLOG_TAG);
                    // Not fatal: the client reconnects on the next message (syslogd may
                    // start later).
                    let _ = s.connect();
                    s
                });
                Some(Sink::Syslog(s))
            }
        })
    }

    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut o = io::stdout().lock();
                o.write_all(b)?;
                o.flush()
            }
            Sink::Stderr => io::stderr().lock().write_all(b),
            Sink::File(f) => f.write_all(b),
            Sink::Syslog(s) => {
                for line in b.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
                    s.info(&String::from_utf8_lossy(line))?;
                }
                Ok(())
            }
        }
    }
}

/// Opens (or creates) a log file for appending. The server may still be root here (start-up,
/// or a reopen when it never switched users) in a directory the service user can write, so
/// the file is opened by [`privs::open_for_writing`]: no symbolic link is followed, and only
/// a regular file with one link is used.
fn open_append(p: &Path) -> io::Result<File> {
    privs::open_for_writing(p, true, 0o666)
        .map(|o| o.file)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open log file {}: {e}", p.display())))
}

/// The `minor` of a [`RequestLine`] that came over HTTP/2: logged as `HTTP/2.0`.
pub const HTTP2: u8 = 20;
/// The `minor` of a [`RequestLine`] that came over HTTP/3: logged as `HTTP/3.0` (as nginx's
/// `$server_protocol`).
pub const HTTP3: u8 = 30;

/// The protocol of a request line, as logged.
fn version(minor: u8) -> &'static [u8] {
    match minor {
        0 => b"HTTP/1.0",
        HTTP2 => b"HTTP/2.0",
        HTTP3 => b"HTTP/3.0",
        _ => b"HTTP/1.1",
    }
}

/// What a record says about the request line.
pub enum RequestLine<'a> {
    /// A parsed request: method, target and minor version (HTTP/1.`minor`, [`HTTP2`] or [`HTTP3`]).
    Parsed { method: &'a str, target: &'a str, minor: u8 },
    /// Bytes that did not parse as a request line (logged escaped, possibly empty).
    Raw(&'a [u8]),
}

/// The parts of a record known when a response starts.
pub struct Record<'a> {
    pub client: IpAddr,
    pub time: &'a str,
    pub line: RequestLine<'a>,
    pub status: u16,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    /// The user authenticated with Basic auth, if any.
    pub user: Option<&'a str>,
    /// In virtual-host mode, the host, logged as a `/host` prefix of the URL (as thttpd does).
    pub vhost: Option<&'a str>,
    /// The connection's TLS protocol and cipher (JSON format only); None for plain HTTP.
    pub tls: Option<TlsInfo>,
}

/// What the access log says about a TLS connection.
#[derive(Clone, Copy, Debug)]
pub struct TlsInfo {
    /// `TLSv1.3` or `TLSv1.2`.
    pub version: &'static str,
    /// The suite as rustls names it (`TLS13_AES_128_GCM_SHA256`,
    /// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`); logged by its IANA name.
    pub cipher: &'static str,
}

/// A record waiting for its byte count: `line[..split]` goes before it, the rest after.
#[derive(Default)]
pub struct Pending {
    line: Vec<u8>,
    split: usize,
    /// Where the three digits of the status are, for an ending that changes it (499).
    status_at: usize,
}

impl Pending {
    /// Writes `status` (three digits) over the one the record was begun with: a request
    /// that ended before its response started is logged 499, as nginx does.
    pub fn set_status(&mut self, status: u16) {
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(status).as_bytes();
        if let Some(at) = self.line.get_mut(self.status_at..self.status_at + digits.len()) {
            at.copy_from_slice(digits);
        }
    }
}

pub struct AccessLog {
    target: LogTarget,
    /// Lines go to syslog: no date in them.
    syslog: bool,
    format: LogFormat,
    /// thttpd's record: an absent or empty referrer or user agent is written `""`, not `"-"`.
    thttpd: bool,
    sink: Option<Sink>,
    buf: Vec<u8>,
    oldest: Option<Instant>,
}

impl AccessLog {
    /// Opens the access log. `thttpd`: write the record as thttpd's `make_log_entry` does.
    pub fn open(target: &LogTarget, format: LogFormat, thttpd: bool) -> io::Result<AccessLog> {
        Ok(AccessLog {
            syslog: *target == LogTarget::Syslog,
            target: target.clone(),
            format,
            thttpd,
            sink: Sink::open(target, Sink::Stdout)?,
            buf: Vec::new(),
            oldest: None,
        })
    }

    /// False when the log is off: callers skip formatting entirely.
    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Formats everything but the byte count into `p`.
    pub fn begin(&self, p: &mut Pending, r: &Record<'_>) {
        let out = &mut p.line;
        out.clear();
        match self.format {
            LogFormat::Combined | LogFormat::Common => {
                let _ = write!(out, "{}", r.client);
                out.extend_from_slice(b" - ");
                match r.user {
                    Some(u) if !u.is_empty() => escape_clf(out, clip(u.as_bytes())),
                    _ => out.push(b'-'),
                }
                if self.syslog {
                    // syslog stamps its own time.
                    out.extend_from_slice(b" \"");
                } else {
                    out.extend_from_slice(b" [");
                    out.extend_from_slice(r.time.as_bytes());
                    out.extend_from_slice(b"] \"");
                }
                match r.line {
                    RequestLine::Parsed { method, target, minor } => {
                        escape_clf(out, method.as_bytes());
                        out.push(b' ');
                        if let Some(h) = r.vhost {
                            out.push(b'/');
                            escape_clf(out, clip(h.as_bytes()));
                        }
                        escape_clf(out, clip(target.as_bytes()));
                        out.push(b' ');
                        out.extend_from_slice(version(minor));
                    }
                    RequestLine::Raw(b) => escape_clf(out, clip(b)),
                }
                out.extend_from_slice(b"\" ");
                p.status_at = out.len();
                out.extend_from_slice(itoa::Buffer::new().format(r.status).as_bytes());
                out.push(b' ');
                p.split = out.len();
                if self.format == LogFormat::Combined {
                    for v in [r.referer, r.user_agent] {
                        out.extend_from_slice(b" \"");
                        match v {
                            Some(v) if !v.is_empty() => escape_clf(out, clip(v)),
                            // thttpd starts both fields as "" and prints them as they are.
                            _ if self.thttpd => {}
                            _ => out.push(b'-'),
                        }
                        out.push(b'"');
                    }
                }
                out.push(b'\n');
            }
            LogFormat::Json => {
                out.extend_from_slice(b"{\"time\":\"");
                escape_json(out, r.time.as_bytes());
                out.extend_from_slice(b"\",\"remote\":\"");
                let _ = write!(out, "{}", r.client);
                out.extend_from_slice(b"\",");
                match r.line {
                    RequestLine::Parsed { method, target, minor } => {
                        out.extend_from_slice(b"\"method\":\"");
                        escape_json(out, method.as_bytes());
                        out.extend_from_slice(b"\",\"uri\":\"");
                        escape_json(out, clip(target.as_bytes()));
                        out.extend_from_slice(b"\",\"protocol\":\"");
                        out.extend_from_slice(version(minor));
                        out.extend_from_slice(b"\",");
                    }
                    RequestLine::Raw(b) => {
                        out.extend_from_slice(b"\"request\":\"");
                        escape_json(out, clip(b));
                        out.extend_from_slice(b"\",");
                    }
                }
                if let Some(t) = r.tls {
                    out.extend_from_slice(b"\"tls_version\":\"");
                    out.extend_from_slice(t.version.as_bytes());
                    out.extend_from_slice(b"\",\"tls_cipher\":\"");
                    // rustls's TLS 1.3 names carry a `TLS13_` the IANA registry does not.
                    match t.cipher.strip_prefix("TLS13_") {
                        Some(rest) => {
                            out.extend_from_slice(b"TLS_");
                            out.extend_from_slice(rest.as_bytes());
                        }
                        None => out.extend_from_slice(t.cipher.as_bytes()),
                    }
                    out.extend_from_slice(b"\",");
                }
                out.extend_from_slice(b"\"status\":");
                p.status_at = out.len();
                out.extend_from_slice(itoa::Buffer::new().format(r.status).as_bytes());
                out.extend_from_slice(b",\"bytes\":");
                p.split = out.len();
                for (k, v) in [(&b",\"referer\":"[..], r.referer), (b",\"user_agent\":", r.user_agent)] {
                    out.extend_from_slice(k);
                    match v {
                        Some(v) => {
                            out.push(b'"');
                            escape_json(out, clip(v));
                            out.push(b'"');
                        }
                        None => out.extend_from_slice(b"null"),
                    }
                }
                out.extend_from_slice(b"}\n");
            }
        }
    }

    /// Completes a record with the body bytes sent and queues it for writing.
    pub fn finish(&mut self, p: &Pending, bytes: u64, now: Instant) {
        if self.sink.is_none() || p.line.is_empty() {
            return;
        }
        self.buf.extend_from_slice(&p.line[..p.split]);
        self.buf.extend_from_slice(itoa::Buffer::new().format(bytes).as_bytes());
        self.buf.extend_from_slice(&p.line[p.split..]);
        self.oldest.get_or_insert(now);
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// When the buffered lines must be written at the latest.
    pub fn deadline(&self) -> Option<Instant> {
        self.oldest.map(|t| t + FLUSH_AFTER)
    }

    /// Writes buffered lines if the oldest has waited long enough.
    pub fn flush_due(&mut self, now: Instant) {
        if self.deadline().is_some_and(|d| now >= d) {
            self.flush();
        }
    }

    /// Writes all buffered lines. A write error drops them (a full disk must not stop the
    /// server) and is reported once to stderr.
    pub fn flush(&mut self) {
        self.oldest = None;
        if self.buf.is_empty() {
            return;
        }
        if let Some(s) = &mut self.sink {
            if let Err(e) = s.write_all(&self.buf) {
                eprintln!("ferrohttpd: access log write failed: {e}");
            }
        }
        self.buf.clear();
    }

    /// Flushes, then reopens the log file (after rotation).
    pub fn reopen(&mut self) -> io::Result<()> {
        self.flush();
        // syslog needs no reopening (and after a chroot could not reconnect).
        if let LogTarget::File(_) = self.target {
            self.sink = Sink::open(&self.target, Sink::Stdout)?;
        }
        Ok(())
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The error log: one line per event, written immediately.
pub struct ErrorLog {
    target: LogTarget,
    sink: Option<Sink>,
}

impl ErrorLog {
    pub fn open(target: &LogTarget) -> io::Result<ErrorLog> {
        Ok(ErrorLog { target: target.clone(), sink: Sink::open(target, Sink::Stderr)? })
    }

    /// Writes `[time] message`.
    pub fn log(&mut self, time: &str, msg: std::fmt::Arguments<'_>) {
        let line = format!("[{time}] ferrohttpd: {msg}\n");
        if let Some(s) = &mut self.sink {
            if s.write_all(line.as_bytes()).is_err() {
                let _ = io::stderr().write_all(line.as_bytes());
            }
        }
    }

    pub fn reopen(&mut self) -> io::Result<()> {
        if let LogTarget::File(_) = self.target {
            self.sink = Sink::open(&self.target, Sink::Stderr)?;
        }
        Ok(())
    }
}

fn clip(b: &[u8]) -> &[u8] {
    &b[..b.len().min(MAX_FIELD)]
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Escapes like nginx: `"`, `\`, control bytes and bytes above 0x7e become `\xHH`, so a
/// record always stays one parseable line.
pub fn escape_clf(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(&[b'\\', b'x', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
}

/// Escapes for a JSON string; bytes outside printable ASCII become `\u00HH`, so the output
/// is valid JSON (and valid UTF-8) whatever the client sent.
pub fn escape_json(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(format: LogFormat, rl: RequestLine<'_>, ua: Option<&[u8]>) -> String {
        line_as(format, false, rl, ua)
    }

    fn line_as(format: LogFormat, thttpd: bool, rl: RequestLine<'_>, ua: Option<&[u8]>) -> String {
        line_with(format, thttpd, rl, ua, None)
    }

    /// The record, with its status rewritten to `status` before the byte count is added.
    fn line_with(
        format: LogFormat,
        thttpd: bool,
        rl: RequestLine<'_>,
        ua: Option<&[u8]>,
        status: Option<u16>,
    ) -> String {
        let log = AccessLog {
            target: LogTarget::Off,
            syslog: false,
            format,
            thttpd,
            sink: None,
            buf: Vec::new(),
            oldest: None,
        };
        let mut p = Pending::default();
        log.begin(
            &mut p,
            &Record {
                client: "127.0.0.1".parse().unwrap(),
                time: "06/Nov/1994:08:49:37 +0000",
                line: rl,
                status: 200,
                referer: None,
                user_agent: ua,
                user: None,
                vhost: None,
                tls: None,
            },
        );
        if let Some(status) = status {
            p.set_status(status);
        }
        let mut s = p.line[..p.split].to_vec();
        s.extend_from_slice(b"42");
        s.extend_from_slice(&p.line[p.split..]);
        String::from_utf8(s).unwrap()
    }

    #[test]
    fn status_is_rewritten_in_place_for_an_aborted_request() {
        let rl = || RequestLine::Parsed { method: "GET", target: "/200", minor: 1 };
        let l = line_with(LogFormat::Combined, false, rl(), Some(b"200"), Some(499));
        assert_eq!(l, "127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /200 HTTP/1.1\" 499 42 \"-\" \"200\"\n");
        let l = line_with(LogFormat::Json, false, rl(), None, Some(499));
        assert!(l.contains("\"uri\":\"/200\",\"protocol\":\"HTTP/1.1\",\"status\":499,\"bytes\":42,"), "{l}");
    }

    #[test]
    fn combined() {
        let l = line(
            LogFormat::Combined,
            RequestLine::Parsed { method: "GET", target: "/a\"b", minor: 1 },
            Some(b"curl/8\x01"),
        );
        assert_eq!(
            l,
            "127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a\\x22b HTTP/1.1\" 200 42 \"-\" \"curl/8\\x01\"\n"
        );
    }

    #[test]
    fn thttpd_writes_absent_fields_as_empty_quotes() {
        let get = || RequestLine::Parsed { method: "GET", target: "/", minor: 1 };
        let l = line_as(LogFormat::Combined, true, get(), None);
        assert!(l.ends_with("\" 200 42 \"\" \"\"\n"), "{l}");
        let l = line_as(LogFormat::Combined, true, get(), Some(b""));
        assert!(l.ends_with("\" 200 42 \"\" \"\"\n"), "{l}");
        let l = line_as(LogFormat::Combined, true, get(), Some(b"ua"));
        assert!(l.ends_with("\" 200 42 \"\" \"ua\"\n"), "{l}");
        // The ferrohttpd personality keeps the Combined Log Format's "-".
        let l = line_as(LogFormat::Combined, false, get(), None);
        assert!(l.ends_with("\" 200 42 \"-\" \"-\"\n"), "{l}");
    }

    #[test]
    fn common_and_raw() {
        let l = line(LogFormat::Common, RequestLine::Raw(b"\xffjunk"), None);
        assert_eq!(l, "127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"\\xFFjunk\" 200 42\n");
    }

    #[test]
    fn json() {
        let l = line(LogFormat::Json, RequestLine::Parsed { method: "GET", target: "/\\", minor: 0 }, Some(b"\"x\""));
        assert_eq!(
            l,
            "{\"time\":\"06/Nov/1994:08:49:37 +0000\",\"remote\":\"127.0.0.1\",\"method\":\"GET\",\"uri\":\"/\\\\\",\
             \"protocol\":\"HTTP/1.0\",\"status\":200,\"bytes\":42,\"referer\":null,\"user_agent\":\"\\\"x\\\"\"}\n"
        );
    }
}
