//! One client for every protocol and transport the build has, so a table of HTTP semantics
//! cases runs the same over each (`tests/semantics.rs`): HTTP/1.1 over a raw socket, h2c with
//! prior knowledge, both over TLS (rustls, ALPN `http/1.1` or `h2`), and HTTP/3 over QUIC
//! (with the `http3` feature: one aioquic client process per connection, `tests/h3client.py
//! --session`, fed one request at a time).
//!
//! Every answer comes back as a [`Response`] with the field names lowercased (HTTP/2 sends
//! them so; HTTP/1.1 names are case-insensitive), so the checks read the same for every row.
//! What the protocols must do differently by their specs is in [`Proto::check_framing`], not
//! in the cases.

use std::fmt::Write as _;
use std::io::{Read, Write};
#[cfg(feature = "tls")]
use std::path::Path;
#[cfg(feature = "tls")]
use std::process::Command;

#[cfg(feature = "http2")]
use super::h2;
use super::{try_read_response, Builder, Response, Server, FILE_TXT};

/// A protocol and transport the tests speak to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 on the plain listener.
    H1,
    /// HTTP/2 with prior knowledge on the plain listener (RFC 9113 §3.3).
    #[cfg(feature = "http2")]
    H2c,
    /// HTTP/1.1 over TLS, ALPN `http/1.1`.
    #[cfg(feature = "tls")]
    H1Tls,
    /// HTTP/2 over TLS, ALPN `h2`.
    #[cfg(all(feature = "tls", feature = "http2"))]
    H2Tls,
    /// HTTP/3 over QUIC, on the UDP port of the TLS listener (`[http3] enabled`).
    #[cfg(feature = "http3")]
    H3,
}

/// Every row this build can run: the protocols its cargo features have (HTTP/3 only where
/// its client, Python's aioquic, is installed; see [`h3::available`]).
pub fn rows() -> Vec<Proto> {
    #[allow(unused_mut)]
    let mut rows = vec![
        Proto::H1,
        #[cfg(feature = "http2")]
        Proto::H2c,
        #[cfg(feature = "tls")]
        Proto::H1Tls,
        #[cfg(all(feature = "tls", feature = "http2"))]
        Proto::H2Tls,
    ];
    #[cfg(feature = "http3")]
    if h3::available() {
        rows.push(Proto::H3);
    }
    rows
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::H1 => "HTTP/1.1",
            #[cfg(feature = "http2")]
            Proto::H2c => "h2c",
            #[cfg(feature = "tls")]
            Proto::H1Tls => "HTTP/1.1 over TLS",
            #[cfg(all(feature = "tls", feature = "http2"))]
            Proto::H2Tls => "h2 over TLS",
            #[cfg(feature = "http3")]
            Proto::H3 => "HTTP/3",
        }
    }

    pub fn is_h2(self) -> bool {
        match self {
            Proto::H1 => false,
            #[cfg(feature = "http2")]
            Proto::H2c => true,
            #[cfg(feature = "tls")]
            Proto::H1Tls => false,
            #[cfg(all(feature = "tls", feature = "http2"))]
            Proto::H2Tls => true,
            #[cfg(feature = "http3")]
            Proto::H3 => false,
        }
    }

    /// The version of a protocol whose heads are fields only (no status text, lowercase
    /// names): HTTP/2 and HTTP/3; `None` for HTTP/1.1.
    fn fields_only(self) -> Option<&'static str> {
        match self {
            #[cfg(feature = "http3")]
            Proto::H3 => Some("HTTP/3"),
            _ if self.is_h2() => Some("HTTP/2"),
            _ => None,
        }
    }

    /// What each protocol's framing must look like, whatever the case (`raw_names`: the field
    /// names as received, before lowercasing):
    /// - HTTP/1.1 (RFC 9112 §4): `HTTP/1.1 NNN reason`, with the standard reason phrase.
    /// - HTTP/2 (RFC 9113 §8.2.2, §8.3.2) and HTTP/3 (RFC 9114 §4.2, §4.3.2): no status
    ///   text; lowercase names; none of the connection-specific fields (`Connection`,
    ///   `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`).
    pub fn check_framing(self, r: &Response, raw_names: &[String]) -> Result<(), String> {
        if let Some(version) = self.fields_only() {
            if r.version != version || !r.reason.is_empty() {
                return Err(format!("expected an {version} head with no reason phrase:\n{}", r.describe()));
            }
            if let Some(n) = raw_names.iter().find(|n| **n != n.to_ascii_lowercase()) {
                return Err(format!("{version} field name {n:?} is not lowercase (RFC 9113 §8.2.1, RFC 9114 §4.2)"));
            }
            for n in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
                if r.header(n).is_some() {
                    return Err(format!(
                        "connection-specific field {n} over {version} (RFC 9113 §8.2.2, RFC 9114 §4.2):\n{}",
                        r.describe()
                    ));
                }
            }
        } else {
            let want = reason_phrase(r.status);
            if r.version != "HTTP/1.1" || r.reason != want {
                return Err(format!("expected the status line `HTTP/1.1 {} {want}`:\n{}", r.status, r.describe()));
            }
        }
        Ok(())
    }
}

/// The reason phrases of RFC 9110 §15 for the statuses the tables expect.
fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        _ => "?",
    }
}

/// The `[tls]` section that gives a server a TLS listener with the `localhost` certificate
/// [`make_localhost_cert`] writes into its temp dir (empty without the `tls` feature), and
/// with the `http3` feature HTTP/3 on its port.
pub fn tls_section() -> &'static str {
    if cfg!(feature = "http3") {
        "\n[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{dir}/localhost.crt\"\nkey = \"{dir}/localhost.key\"\n\
         [http3]\nenabled = true\n"
    } else if cfg!(feature = "tls") {
        "\n[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{dir}/localhost.crt\"\nkey = \"{dir}/localhost.key\"\n"
    } else {
        ""
    }
}

/// A builder for a server every row can reach: `builder` plus, with the `tls` feature, the
/// certificate (the caller puts [`tls_section`] in its config).
pub fn for_every_row(builder: Builder) -> Builder {
    #[cfg(feature = "tls")]
    let builder = builder.setup(|dir, _| make_localhost_cert(dir));
    builder
}

/// A self-signed EC P-256 certificate for `localhost`: `dir/localhost.{crt,key}`.
#[cfg(feature = "tls")]
pub fn make_localhost_cert(dir: &Path) {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-days", "30"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(dir.join("localhost.key"))
        .arg("-out")
        .arg(dir.join("localhost.crt"))
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
}

/// One request over `proto` on a fresh connection: `method path` with `fields` (plus `Host` or
/// `:authority` = localhost). The response has lowercased field names and has passed
/// [`Proto::check_framing`]; the connection was then checked to be consistent with it (see
/// [`Client::finish`]).
pub fn fetch(
    srv: &Server,
    proto: Proto,
    method: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> Result<Response, String> {
    let mut c = Client::new(srv, proto);
    let r = c.fetch(method, path, fields)?;
    c.finish()?;
    Ok(r)
}

/// Requests over one protocol, on one connection for as long as the server keeps it: each
/// response must be framed exactly, or the next one would not parse (a body after a 304 or a
/// HEAD, a `Content-Length` that disagrees with what was sent). A failed exchange drops the
/// connection; the next request opens another.
pub struct Client<'a> {
    srv: &'a Server,
    proto: Proto,
    conn: Option<Conn>,
    /// A connection could not be made: the server is gone or does not speak the protocol;
    /// the next requests fail at once with this (not each after its own timeout).
    unreachable: Option<String>,
}

/// A byte stream: a socket or a TLS session over one.
trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

struct Conn {
    wire: Wire,
    /// How many exchanges the connection has carried.
    served: usize,
}

/// What a connection speaks.
enum Wire {
    H1(Box<dyn Io>),
    #[cfg(feature = "http2")]
    H2(Box<dyn Io>, H2Conn),
    #[cfg(feature = "http3")]
    H3(h3::Session),
}

impl<'a> Client<'a> {
    pub fn new(srv: &'a Server, proto: Proto) -> Self {
        Client { srv, proto, conn: None, unreachable: None }
    }

    fn open(&self) -> Result<Conn, String> {
        #[cfg(feature = "http2")]
        let h2 = |mut io: Box<dyn Io>| H2Conn::start(&mut io).map(|h2| Wire::H2(io, h2));
        let wire = match self.proto {
            Proto::H1 => Wire::H1(Box::new(self.srv.connect())),
            #[cfg(feature = "http2")]
            Proto::H2c => h2(Box::new(self.srv.connect()))?,
            #[cfg(feature = "tls")]
            Proto::H1Tls => Wire::H1(Box::new(tls::connect(self.srv, b"http/1.1")?)),
            #[cfg(all(feature = "tls", feature = "http2"))]
            Proto::H2Tls => h2(Box::new(tls::connect(self.srv, b"h2")?))?,
            #[cfg(feature = "http3")]
            Proto::H3 => Wire::H3(h3::Session::start(self.srv)?),
        };
        Ok(Conn { wire, served: 0 })
    }

    /// One request; see [`fetch`].
    pub fn fetch(&mut self, method: &str, path: &str, fields: &[(&str, &str)]) -> Result<Response, String> {
        let what = |e: String| format!("{} {method} {path}: {e}", self.proto.name());
        if let Some(e) = &self.unreachable {
            return Err(what(format!("not tried: an earlier connection could not be made: {e}")));
        }
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => self.open().map_err(|e| {
                self.unreachable = Some(e.clone());
                what(e)
            })?,
        };
        let res = match &mut conn.wire {
            Wire::H1(io) => h1(io, method, path, fields),
            #[cfg(feature = "http2")]
            Wire::H2(io, h2) => h2.exchange(io, method, path, fields).map(|r| (r, true)),
            #[cfg(feature = "http3")]
            Wire::H3(s) => s.exchange(method, path, fields).map(|r| (r, true)),
        };
        let (r, keep) = res.map_err(|e| {
            if conn.served > 0 {
                what(format!("{e}\n  (on a connection that carried {} earlier exchange(s))", conn.served))
            } else {
                what(e)
            }
        })?;
        let (r, raw_names) = lowercased(r);
        self.proto.check_framing(&r, &raw_names).map_err(what)?;
        if keep {
            conn.served += 1;
            self.conn = Some(conn);
        }
        Ok(r)
    }

    /// The connection, if the server kept it, still serves a request: nothing was left over
    /// from the last response.
    pub fn finish(mut self) -> Result<(), String> {
        if self.conn.is_none() {
            return Ok(());
        }
        let r = self.fetch("GET", "/file.txt", &[]).map_err(|e| format!("the connection is not reusable: {e}"))?;
        if r.status != 200 || r.body != FILE_TXT {
            return Err(format!("a follow-up request on the same connection failed:\n{}", r.describe()));
        }
        Ok(())
    }
}

fn lowercased(mut r: Response) -> (Response, Vec<String>) {
    let raw = r.headers.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &mut r.headers {
        n.make_ascii_lowercase();
    }
    (r, raw)
}

/// One HTTP/1.1 exchange; the response and whether the connection stays open (if it said
/// `Connection: close`, the server must have closed it).
fn h1(s: &mut dyn Io, method: &str, path: &str, fields: &[(&str, &str)]) -> Result<(Response, bool), String> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in fields {
        let _ = write!(req, "{k}: {v}\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).map_err(|e| format!("write: {e}"))?;
    s.flush().map_err(|e| format!("flush: {e}"))?;
    let r = try_read_response(s, method == "HEAD").map_err(|e| format!("no valid response: {e}"))?;
    if !r.closes() {
        return Ok((r, true));
    }
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) | Err(_) => Ok((r, false)),
        Ok(n) => Err(format!("{n} bytes after a `Connection: close` response:\n{}", r.describe())),
    }
}

/// An HTTP/2 connection's client state: the next stream, the HPACK decoder (the server's
/// encoder refers to its dynamic table across responses), bytes read past the last frame.
#[cfg(feature = "http2")]
struct H2Conn {
    next: u32,
    dec: ferrohttpd::h2::hpack::Decoder,
    buf: Vec<u8>,
}

#[cfg(feature = "http2")]
impl H2Conn {
    /// The preface, SETTINGS with the largest initial window (and the connection window opened
    /// as far: no body ever waits for a WINDOW_UPDATE), and the ACK of the server's SETTINGS.
    fn start(s: &mut dyn Io) -> Result<Self, String> {
        use h2::{frame, SETTINGS, WINDOW_UPDATE};
        const MAX_WINDOW: u32 = (1 << 31) - 1;
        let mut out = h2::PREFACE.to_vec();
        let mut settings = vec![0, 4];
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        out.extend(frame(SETTINGS, 0, 0, &settings));
        out.extend(frame(WINDOW_UPDATE, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes()));
        out.extend(frame(SETTINGS, 1, 0, b""));
        s.write_all(&out).and_then(|()| s.flush()).map_err(|e| format!("write: {e}"))?;
        Ok(H2Conn { next: 1, dec: ferrohttpd::h2::hpack::Decoder::new(4096), buf: Vec::new() })
    }

    /// One request on the next stream, with END_STREAM; frames read until that stream ends.
    /// A frame on any other stream is an error: the previous responses have ended.
    fn exchange(
        &mut self,
        s: &mut dyn Io,
        method: &str,
        path: &str,
        fields: &[(&str, &str)],
    ) -> Result<Response, String> {
        use h2::{frame, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM};
        let sid = self.next;
        self.next += 2;
        let mut block = Vec::new();
        let lower: Vec<(String, &str)> = fields.iter().map(|(n, v)| (n.to_ascii_lowercase(), *v)).collect();
        let pseudo = [(":method", method), (":scheme", "http"), (":authority", "localhost"), (":path", path)];
        for (n, v) in pseudo.into_iter().chain(lower.iter().map(|(n, v)| (n.as_str(), *v))) {
            // A literal field without indexing, new name (RFC 7541 §6.2.2), no Huffman.
            block.push(0);
            hpack_string(&mut block, n.as_bytes());
            hpack_string(&mut block, v.as_bytes());
        }
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, sid, &block))
            .and_then(|()| s.flush())
            .map_err(|e| format!("write: {e}"))?;

        let mut chunk = vec![0u8; 1 << 16];
        let mut head_block = Vec::new();
        let mut head_done = false;
        let mut body = Vec::new();
        // Bounded: no table case has a body near 1 GiB.
        while body.len() < 1 << 30 {
            let buf = &mut self.buf;
            if buf.len() >= 9 {
                let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
                if buf.len() >= 9 + len {
                    let (kind, flags) = (buf[3], buf[4]);
                    let id = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                    let payload: Vec<u8> = buf.drain(..9 + len).skip(9).collect();
                    match kind {
                        GOAWAY | RST_STREAM if id == 0 || id == sid => {
                            return Err(format!("frame {kind} {payload:?} instead of a response"));
                        }
                        _ if id == 0 => continue,
                        _ if id != sid => return Err(format!("frame {kind} on stream {id}, which had ended")),
                        HEADERS | CONTINUATION if !head_done => {
                            head_block.extend_from_slice(&payload);
                            head_done = flags & END_HEADERS != 0;
                        }
                        DATA if head_done => body.extend_from_slice(&payload),
                        _ => return Err(format!("frame {kind} out of place on stream {sid}")),
                    }
                    if flags & END_STREAM != 0 {
                        return self.response(&head_block, body);
                    }
                    continue;
                }
            }
            let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("EOF before the stream ended".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Err("a response body over 1 GiB".into())
    }

    fn response(&mut self, head_block: &[u8], body: Vec<u8>) -> Result<Response, String> {
        let mut status = None;
        let mut headers = Vec::new();
        self.dec
            .decode(head_block, 1 << 20, |n, v, _| {
                let (n, v) = (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned());
                if n == ":status" {
                    status = v.parse::<u16>().ok();
                } else {
                    headers.push((n, v));
                }
                Ok::<(), ()>(())
            })
            .map_err(|e| format!("undecodable head {head_block:?}: {e:?}"))?;
        let status = status.ok_or("no :status")?;
        Ok(Response {
            status_line: format!("HTTP/2 {status}"),
            version: "HTTP/2".into(),
            status,
            reason: String::new(),
            headers,
            body,
        })
    }
}

#[cfg(feature = "http2")]
fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    // A 7-bit prefix integer (RFC 7541 §5.1), Huffman bit clear.
    let mut n = s.len();
    if n < 127 {
        out.push(n as u8);
    } else {
        out.push(127);
        n -= 127;
        while n >= 128 {
            out.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        out.push(n as u8);
    }
    out.extend_from_slice(s);
}

#[cfg(feature = "tls")]
pub mod tls {
    use std::net::TcpStream;
    use std::path::Path;
    use std::sync::Arc;

    use super::Server;

    pub type Stream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

    /// A TLS connection to the server's TLS listener, trusting its `localhost` certificate,
    /// offering `alpn`; the handshake done and the protocol checked.
    pub fn connect(srv: &Server, alpn: &[u8]) -> Result<Stream, String> {
        let cfg = client_config(&srv.dir().join("localhost.crt"), alpn)?;
        handshake(&cfg, super::super::connect(srv.tls_addr()))
    }

    /// A client configuration trusting the certificate in the PEM file `cert` (as
    /// `localhost`), offering `alpn` only. It keeps the sessions the server gives it, so the
    /// connections made with one configuration resume.
    pub fn client_config(cert: &Path, alpn: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in
            rustls::pki_types::CertificateDer::pem_file_iter(cert).map_err(|e| format!("the test certificate: {e}"))?
        {
            roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(cfg))
    }

    /// TLS over `sock` for `localhost` with `cfg`: the handshake done and the protocol the
    /// configuration offers checked.
    pub fn handshake(cfg: &Arc<rustls::ClientConfig>, sock: TcpStream) -> Result<Stream, String> {
        let name = rustls::pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let conn = rustls::ClientConnection::new(cfg.clone(), name).map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, sock);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock).map_err(|e| format!("TLS handshake: {e}"))?;
        }
        let alpn = cfg.alpn_protocols.first().map(Vec::as_slice);
        if s.conn.alpn_protocol() != alpn {
            return Err(format!("ALPN {:?}, offered {:?}", s.conn.alpn_protocol(), alpn));
        }
        Ok(s)
    }
}

/// The HTTP/3 row's client: `tests/h3client.py --session` (Python's aioquic), one process
/// per QUIC connection, one request at a time over its stdin, one response per line of its
/// stdout.
#[cfg(feature = "http3")]
pub mod h3 {
    use std::collections::HashMap;
    use std::fmt::Write as _;
    use std::io::{BufRead, BufReader, Write};
    use std::path::Path;
    use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
    use std::sync::OnceLock;
    use std::thread;
    use std::time::{Duration, Instant};

    use super::super::json::{parse_json, Json};
    use super::{Response, Server};

    /// Whether python3 with aioquic is here (asked once per test binary). Without it the
    /// HTTP/3 row is left out, saying so; in CI (`CI` set, `.ci/run` installs it) that is a
    /// failure.
    pub fn available() -> bool {
        static HAVE: OnceLock<bool> = OnceLock::new();
        *HAVE.get_or_init(|| super::super::have_aioquic("the HTTP/3 row is"))
    }

    /// One QUIC connection to the server's TLS port (UDP), SNI `localhost`.
    pub struct Session {
        child: Child,
        stdin: Option<ChildStdin>,
        stdout: BufReader<ChildStdout>,
    }

    impl Session {
        pub fn start(srv: &Server) -> Result<Self, String> {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3client.py");
            let mut child = Command::new("python3")
                .arg(script)
                .args(["--session", "127.0.0.1", &srv.tls_addr().port().to_string(), "localhost"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("python3: {e}"))?;
            let stdin = child.stdin.take();
            let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
            let mut s = Session { child, stdin, stdout };
            // The handshake (bounded by the client: 5 s).
            let v = s.answer().map_err(|e| format!("QUIC handshake: {e}"))?;
            if v.get("connected") != Some(&Json::Bool(true)) {
                return Err(format!("QUIC handshake: {v:?}"));
            }
            Ok(s)
        }

        /// The client's next line, an `error` line as an `Err`.
        fn answer(&mut self) -> Result<Json, String> {
            let mut line = String::new();
            self.stdout.read_line(&mut line).map_err(|e| format!("from the client: {e}"))?;
            if line.is_empty() {
                return Err("the client exited without an answer".into());
            }
            let v = parse_json(&line).map_err(|e| format!("{e}: {line}"))?;
            match v.get("error") {
                Some(e) => Err(format!("no response: {}", e.str().unwrap_or("?"))),
                None => Ok(v),
            }
        }

        /// One request on the next stream; its response with the field names as received.
        /// The client bounds each exchange (10 s) and answers every line.
        pub fn exchange(&mut self, method: &str, path: &str, fields: &[(&str, &str)]) -> Result<Response, String> {
            let mut req = format!(
                "{{\"method\":{},\"path\":{},\"authority\":\"localhost\",\"headers\":[",
                json_str(method),
                json_str(path)
            );
            for (i, (n, v)) in fields.iter().enumerate() {
                let _ = write!(req, "{}[{},{}]", if i > 0 { "," } else { "" }, json_str(n), json_str(v));
            }
            req.push_str("]}\n");
            let stdin = self.stdin.as_mut().ok_or("the client's stdin is closed")?;
            stdin.write_all(req.as_bytes()).and_then(|()| stdin.flush()).map_err(|e| format!("to the client: {e}"))?;
            let v = self.answer()?;
            if v.get("reset") == Some(&Json::Bool(true)) {
                return Err("the server reset the stream".into());
            }
            let status = v.num(&["status"])? as u16;
            let Some(Json::Arr(pairs)) = v.get("headers") else { return Err(format!("no headers: {v:?}")) };
            let mut headers = Vec::new();
            for p in pairs {
                let Json::Arr(nv) = p else { return Err(format!("bad field {p:?}")) };
                match (nv.first().and_then(Json::str), nv.get(1).and_then(Json::str)) {
                    (Some(n), Some(v)) => headers.push((n.to_string(), v.to_string())),
                    _ => return Err(format!("bad field {p:?}")),
                }
            }
            let body = unhex(v.get("body_hex").and_then(Json::str).ok_or("no body")?)?;
            Ok(Response {
                status_line: format!("HTTP/3 {status}"),
                version: "HTTP/3".into(),
                status,
                reason: String::new(),
                headers,
                body,
            })
        }
    }

    impl Drop for Session {
        /// Closing stdin ends the client (it closes the connection); bounded, then killed.
        fn drop(&mut self) {
            drop(self.stdin.take());
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// A server with a TLS listener (the `localhost` certificate) and HTTP/3 on its port;
    /// `extra` is appended to the configuration (tables after `[http3]`).
    pub fn server(extra: &str, setup: impl FnOnce(&Path, &Path) + 'static) -> Server {
        Server::builder()
            .setup(|dir, _| super::make_localhost_cert(dir))
            .setup(setup)
            .raw_config(&format!(
                "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{{root}}\"\n\
                 [log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n\
                 [status]\nenabled = true\n\
                 [tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{{dir}}/localhost.crt\"\nkey = \"{{dir}}/localhost.key\"\n\
                 [http3]\nenabled = true\n{extra}"
            ))
            .start()
    }

    /// The status page's QUIC counters: `http3_connections` by name, `http3_refused` as
    /// `refused.REASON`, `http3_packets` as `packets.NAME`, `http3_closed` as `closed.REASON`.
    pub fn status(srv: &Server) -> HashMap<String, u64> {
        let text = srv.get("/.status").body_text();
        let mut got = HashMap::new();
        for (line, prefix) in [
            ("http3_connections:", ""),
            ("http3_refused:", "refused."),
            ("http3_packets:", "packets."),
            ("http3_closed:", "closed."),
        ] {
            let l = text.lines().find_map(|l| l.strip_prefix(line)).unwrap_or_else(|| panic!("no {line} in {text}"));
            let words: Vec<&str> = l.split_whitespace().collect();
            for kv in words.chunks(2) {
                got.insert(format!("{prefix}{}", kv[0]), kv[1].parse().unwrap());
            }
        }
        got
    }

    /// Waits (≤ 10 s) until the status page's counter `key` satisfies `f`; the last counters.
    pub fn wait_status(srv: &Server, key: &str, f: impl Fn(u64) -> bool) -> HashMap<String, u64> {
        let mut st = status(srv);
        for _ in 0..100 {
            if f(st[key]) {
                break;
            }
            thread::sleep(Duration::from_millis(100));
            st = status(srv);
        }
        st
    }

    /// A JSON string literal.
    fn json_str(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    fn unhex(s: &str) -> Result<Vec<u8>, String> {
        let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8).ok_or_else(|| format!("not hex: {b}"));
        s.as_bytes().chunks(2).map(|p| Ok(digit(p[0])? << 4 | digit(*p.get(1).ok_or("odd hex")?)?)).collect()
    }
}
