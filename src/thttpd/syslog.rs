//! A minimal syslog client: thttpd's default log destination.
//!
//! Each message is one datagram on the local syslog socket (`/dev/log`), in the local
//! (RFC 3164-style) form without a timestamp — the syslog daemon adds its own:
//! `<PRI>tag[pid]: message`, with facility LOG_DAEMON as thttpd uses. The tag is `thttpd` or
//! `ferrohttpd`, as given; the pid is read per message, so it is right after daemonising.
//!
//! - Connect with [`Syslog::connect`] **before chroot** (thttpd opens the log with
//!   `LOG_NDELAY` for this reason): inside the chroot `/dev/log` is usually not reachable.
//! - The socket is non-blocking: when the syslog daemon is not keeping up, a message is
//!   dropped (and counted, [`Syslog::dropped`]) rather than stalling the event loop.
//! - After a send error (the daemon restarted, the socket went away) the client reconnects
//!   once and retries; if that fails the message is dropped and the error returned.
//! - Messages are truncated to [`MAX_MESSAGE`] bytes; CR, LF and NUL become spaces so one
//!   message is one log line.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// The local syslog socket.
pub const DEFAULT_PATH: &str = "/dev/log";

/// Longest datagram sent (header included); longer messages are cut.
pub const MAX_MESSAGE: usize = 8192;

/// LOG_DAEMON (3 << 3).
pub const LOG_DAEMON: u8 = 3 << 3;

/// Syslog severities (RFC 5424 numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// LOG_EMERG
    Emerg = 0,
    /// LOG_ALERT
    Alert = 1,
    /// LOG_CRIT
    Crit = 2,
    /// LOG_ERR
    Err = 3,
    /// LOG_WARNING
    Warning = 4,
    /// LOG_NOTICE
    Notice = 5,
    /// LOG_INFO: access-log lines.
    Info = 6,
    /// LOG_DEBUG
    Debug = 7,
}

/// A connection to the local syslog daemon.
#[derive(Debug)]
pub struct Syslog {
    tag: String,
    path: PathBuf,
    facility: u8,
    sock: Option<UnixDatagram>,
    dropped: u64,
    buf: Vec<u8>,
}

impl Syslog {
    /// A client for `/dev/log` with this tag (`"thttpd"` or `"ferrohttpd"`), facility
    /// LOG_DAEMON. Not connected yet: call [`connect`](Self::connect) before chroot; otherwise
    /// the first message connects.
    pub fn new(tag: &str) -> Syslog {
        Syslog::with_path(tag, DEFAULT_PATH)
    }

    /// As [`new`](Self::new), with another socket path (tests, unusual systems).
    pub fn with_path(tag: &str, path: impl AsRef<Path>) -> Syslog {
        Syslog {
            tag: tag.to_string(),
            path: path.as_ref().to_path_buf(),
            facility: LOG_DAEMON,
            sock: None,
            dropped: 0,
            buf: Vec::new(),
        }
    }

    /// Connects (or reconnects) to the socket.
    pub fn connect(&mut self) -> io::Result<()> {
        self.sock = None;
        let sock = UnixDatagram::unbound()?;
        sock.connect(&self.path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?;
        sock.set_nonblocking(true)?;
        self.sock = Some(sock);
        Ok(())
    }

    /// True if a socket is open.
    pub fn is_connected(&self) -> bool {
        self.sock.is_some()
    }

    /// Messages dropped because the daemon was not keeping up or could not be reached.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Sends an access-log line at LOG_INFO.
    pub fn info(&mut self, msg: &str) -> io::Result<()> {
        self.log(Severity::Info, msg)
    }

    /// Sends one message. A full socket buffer drops the message and returns `Ok` (counted in
    /// [`dropped`](Self::dropped)); other errors reconnect once and retry, then drop the
    /// message and return the error.
    pub fn log(&mut self, severity: Severity, msg: &str) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        format_message(&mut buf, self.facility, severity, &self.tag, std::process::id(), msg);
        let result = self.send(&buf);
        self.buf = buf;
        result
    }

    fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        let mut reconnected = false;
        if self.sock.is_none() {
            if let Err(e) = self.connect() {
                self.dropped += 1;
                return Err(e);
            }
            reconnected = true;
        }
        loop {
            let Some(sock) = &self.sock else {
                self.dropped += 1;
                return Err(io::Error::from(io::ErrorKind::NotConnected));
            };
            match sock.send(datagram) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.dropped += 1;
                    return Ok(());
                }
                Err(e) => {
                    if reconnected {
                        self.sock = None;
                        self.dropped += 1;
                        return Err(e);
                    }
                    reconnected = true;
                    if let Err(e) = self.connect() {
                        self.dropped += 1;
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// Formats `<PRI>tag[pid]: msg` into `buf` (cleared first), cleaning and truncating `msg`.
fn format_message(buf: &mut Vec<u8>, facility: u8, severity: Severity, tag: &str, pid: u32, msg: &str) {
    use std::io::Write;
    buf.clear();
    let pri = u32::from(facility) | severity as u32;
    // Writing into a Vec cannot fail.
    let _ = write!(buf, "<{pri}>{tag}[{pid}]: ");
    let room = MAX_MESSAGE.saturating_sub(buf.len());
    let mut end = msg.len().min(room);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    buf.extend(msg.as_bytes()[..end].iter().map(|&b| if matches!(b, b'\r' | b'\n' | 0) { b' ' } else { b }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> (tempfile::TempDir, PathBuf, UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        (dir, path, sock)
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = vec![0; 65536];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn format() {
        let mut buf = Vec::new();
        format_message(&mut buf, LOG_DAEMON, Severity::Info, "thttpd", 42, "hello");
        assert_eq!(buf, b"<30>thttpd[42]: hello");
        format_message(&mut buf, LOG_DAEMON, Severity::Crit, "ferrohttpd", 7, "a\r\nb\0c");
        assert_eq!(buf, b"<26>ferrohttpd[7]: a  b c");
        let long = "é".repeat(MAX_MESSAGE);
        format_message(&mut buf, LOG_DAEMON, Severity::Notice, "t", 1, &long);
        assert!(buf.len() <= MAX_MESSAGE && buf.len() > MAX_MESSAGE - 2);
        assert!(std::str::from_utf8(&buf).is_ok());
    }

    #[test]
    fn sends_datagrams() {
        let (_dir, path, server) = server();
        let mut log = Syslog::with_path("thttpd", &path);
        log.connect().unwrap();
        log.info("127.0.0.1 - - \"GET / HTTP/1.1\" 200 5").unwrap();
        assert_eq!(
            recv(&server),
            format!("<30>thttpd[{}]: 127.0.0.1 - - \"GET / HTTP/1.1\" 200 5", std::process::id())
        );
        log.log(Severity::Warning, "careful").unwrap();
        assert!(recv(&server).starts_with("<28>thttpd["));
    }

    #[test]
    fn connects_lazily_and_reconnects() {
        let (dir, path, server) = server();
        let mut log = Syslog::with_path("ferrohttpd", &path);
        assert!(!log.is_connected());
        log.info("one").unwrap();
        assert!(recv(&server).ends_with(": one"));
        // The daemon restarts: a new socket at the same path.
        drop(server);
        std::fs::remove_file(&path).unwrap();
        let server = UnixDatagram::bind(&path).unwrap();
        server.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        log.info("two").unwrap();
        assert!(recv(&server).ends_with(": two"));
        // The daemon is gone for good: an error, and the message counted as dropped.
        drop(server);
        std::fs::remove_file(&path).unwrap();
        assert!(log.info("three").is_err());
        assert_eq!(log.dropped(), 1);
        drop(dir);
    }

    #[test]
    fn full_socket_drops_instead_of_blocking() {
        let (_dir, path, _server) = server();
        let mut log = Syslog::with_path("t", &path);
        let msg = "x".repeat(4000);
        let start = std::time::Instant::now();
        for _ in 0..10_000 {
            log.info(&msg).unwrap();
            if log.dropped() > 0 {
                break;
            }
        }
        assert!(log.dropped() > 0, "the receive queue never filled");
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn missing_socket_is_an_error_naming_it() {
        let mut log = Syslog::with_path("t", "/nonexistent/dev/log");
        let e = log.connect().unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dev/log"), "{e}");
        assert!(log.info("x").is_err());
    }
}
