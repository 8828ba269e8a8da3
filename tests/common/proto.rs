//! One client for every protocol and transport the build has, so a table of HTTP semantics
//! cases runs the same over each (`tests/semantics.rs`): HTTP/1.1 over a raw socket, h2c with
//! prior knowledge, and both over TLS (rustls, ALPN `http/1.1` or `h2`). A later protocol
//! (HTTP/3) is one more [`Proto`] variant, one more arm in [`fetch`], one more entry in
//! [`rows`].
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
}

/// Every row this build can run: the protocols its cargo features have.
pub fn rows() -> Vec<Proto> {
    vec![
        Proto::H1,
        #[cfg(feature = "http2")]
        Proto::H2c,
        #[cfg(feature = "tls")]
        Proto::H1Tls,
        #[cfg(all(feature = "tls", feature = "http2"))]
        Proto::H2Tls,
    ]
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
        }
    }

    /// What each protocol's framing must look like, whatever the case (`raw_names`: the field
    /// names as received, before lowercasing):
    /// - HTTP/1.1 (RFC 9112 §4): `HTTP/1.1 NNN reason`, with the standard reason phrase.
    /// - HTTP/2 (RFC 9113 §8.2.2, §8.3.2): no status text; lowercase names; none of the
    ///   connection-specific fields (`Connection`, `Keep-Alive`, `Proxy-Connection`,
    ///   `Transfer-Encoding`, `Upgrade`).
    pub fn check_framing(self, r: &Response, raw_names: &[String]) -> Result<(), String> {
        if self.is_h2() {
            if r.version != "HTTP/2" || !r.reason.is_empty() {
                return Err(format!("expected an HTTP/2 head with no reason phrase:\n{}", r.describe()));
            }
            if let Some(n) = raw_names.iter().find(|n| **n != n.to_ascii_lowercase()) {
                return Err(format!("HTTP/2 field name {n:?} is not lowercase (RFC 9113 §8.2.1)"));
            }
            for n in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
                if r.header(n).is_some() {
                    return Err(format!(
                        "connection-specific field {n} over HTTP/2 (RFC 9113 §8.2.2):\n{}",
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
/// [`make_localhost_cert`] writes into its temp dir (empty without the `tls` feature).
pub fn tls_section() -> &'static str {
    if cfg!(feature = "tls") {
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
/// [`Proto::check_framing`]. Over HTTP/1.1 the request is kept alive and the connection is
/// then checked to be consistent with the response (closed if it said `close`, else a
/// follow-up request on it works): a body of the wrong length shows there.
pub fn fetch(
    srv: &Server,
    proto: Proto,
    method: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> Result<Response, String> {
    let what = |e: String| format!("{} {method} {path}: {e}", proto.name());
    let (r, raw_names) = match proto {
        Proto::H1 => h1(&mut srv.connect(), method, path, fields),
        #[cfg(feature = "http2")]
        Proto::H2c => h2(&mut srv.connect(), method, path, fields),
        #[cfg(feature = "tls")]
        Proto::H1Tls => h1(&mut tls::connect(srv, b"http/1.1").map_err(what)?, method, path, fields),
        #[cfg(all(feature = "tls", feature = "http2"))]
        Proto::H2Tls => h2(&mut tls::connect(srv, b"h2").map_err(what)?, method, path, fields),
    }
    .map_err(what)?;
    proto.check_framing(&r, &raw_names).map_err(what)?;
    Ok(r)
}

fn lowercased(mut r: Response) -> (Response, Vec<String>) {
    let raw = r.headers.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &mut r.headers {
        n.make_ascii_lowercase();
    }
    (r, raw)
}

fn h1<S: Read + Write>(
    s: &mut S,
    method: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> Result<(Response, Vec<String>), String> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in fields {
        let _ = write!(req, "{k}: {v}\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).map_err(|e| format!("write: {e}"))?;
    s.flush().map_err(|e| format!("flush: {e}"))?;
    let r = try_read_response(s, method == "HEAD").map_err(|e| format!("no valid response: {e}"))?;
    // The same connection: closed if the response said so, else it serves the next request.
    if r.closes() {
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) | Err(_) => {}
            Ok(n) => return Err(format!("{n} bytes after a `Connection: close` response:\n{}", r.describe())),
        }
    } else {
        s.write_all(b"GET /file.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .and_then(|()| s.flush())
            .map_err(|e| format!("connection not reusable (write): {e}"))?;
        let next = try_read_response(s, false).map_err(|e| format!("connection not reusable (read): {e}"))?;
        if next.status != 200 || next.body != FILE_TXT {
            return Err(format!("follow-up request on the same connection failed:\n{}", next.describe()));
        }
    }
    Ok(lowercased(r))
}

/// HTTP/2 on `s`: the preface, SETTINGS with the largest initial window (and the connection
/// window opened as far), one request on stream 1 with END_STREAM, frames read until the
/// stream ends. The response head is decoded with the crate's own HPACK decoder.
#[cfg(feature = "http2")]
fn h2<S: Read + Write>(
    s: &mut S,
    method: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> Result<(Response, Vec<String>), String> {
    use h2::{
        frame, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, WINDOW_UPDATE,
    };
    const MAX_WINDOW: u32 = (1 << 31) - 1;
    let mut out = h2::PREFACE.to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 2^31 - 1: the body never waits for a WINDOW_UPDATE.
    let mut settings = vec![0, 4];
    settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
    out.extend(frame(SETTINGS, 0, 0, &settings));
    out.extend(frame(WINDOW_UPDATE, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes()));
    out.extend(frame(SETTINGS, 1, 0, b""));
    let mut block = Vec::new();
    let mut pseudo = vec![(":method", method), (":scheme", "http"), (":authority", "localhost"), (":path", path)];
    let lower: Vec<(String, &str)> = fields.iter().map(|(n, v)| (n.to_ascii_lowercase(), *v)).collect();
    pseudo.extend(lower.iter().map(|(n, v)| (n.as_str(), *v)));
    for (n, v) in pseudo {
        // A literal field without indexing, new name (RFC 7541 §6.2.2), no Huffman.
        block.push(0);
        hpack_string(&mut block, n.as_bytes());
        hpack_string(&mut block, v.as_bytes());
    }
    out.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
    s.write_all(&out).map_err(|e| format!("write: {e}"))?;
    s.flush().map_err(|e| format!("flush: {e}"))?;

    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut head_block = Vec::new();
    let mut head_done = false;
    let mut body = Vec::new();
    // Bounded: a 5 GiB response is not in any table; 1 GiB of frames is plenty.
    while buf.len() + body.len() < 1 << 30 {
        if buf.len() >= 9 {
            let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() >= 9 + len {
                let (kind, flags) = (buf[3], buf[4]);
                let id = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                let payload: Vec<u8> = buf.drain(..9 + len).skip(9).collect();
                match (kind, id) {
                    (GOAWAY, _) | (RST_STREAM, 1) => {
                        return Err(format!("frame {kind} {payload:?} instead of a response"));
                    }
                    (HEADERS, 1) | (CONTINUATION, 1) => {
                        if head_done {
                            return Err("trailers or a second head on stream 1".into());
                        }
                        head_block.extend_from_slice(&payload);
                        head_done = flags & END_HEADERS != 0;
                    }
                    (DATA, 1) => {
                        if !head_done {
                            return Err("DATA before the head".into());
                        }
                        body.extend_from_slice(&payload);
                    }
                    (_, 0) => {}
                    _ => return Err(format!("unexpected frame {kind} on stream {id}")),
                }
                if id == 1 && flags & END_STREAM != 0 {
                    break;
                }
                continue;
            }
        }
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("EOF before the stream ended".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut status = None;
    let mut headers = Vec::new();
    let mut raw = Vec::new();
    ferrohttpd::h2::hpack::Decoder::new(4096)
        .decode(&head_block, 1 << 20, |n, v, _| {
            let (n, v) = (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned());
            if n == ":status" {
                status = v.parse::<u16>().ok();
            } else {
                raw.push(n.clone());
                headers.push((n, v));
            }
            Ok::<(), ()>(())
        })
        .map_err(|e| format!("undecodable head {head_block:?}: {e:?}"))?;
    let status = status.ok_or("no :status")?;
    let r = Response {
        status_line: format!("HTTP/2 {status}"),
        version: "HTTP/2".into(),
        status,
        reason: String::new(),
        headers,
        body,
    };
    Ok((r, raw))
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
mod tls {
    use std::sync::Arc;

    use super::Server;

    pub type Stream = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

    /// A TLS connection to the server's TLS listener, trusting its `localhost` certificate,
    /// offering `alpn`; the handshake done and the protocol checked.
    pub fn connect(srv: &Server, alpn: &[u8]) -> Result<Stream, String> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_file_iter(srv.dir().join("localhost.crt"))
            .map_err(|e| format!("the test certificate: {e}"))?
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
        let name = rustls::pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let conn = rustls::ClientConnection::new(Arc::new(cfg), name).map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, super::super::connect(srv.tls_addr()));
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock).map_err(|e| format!("TLS handshake: {e}"))?;
        }
        if s.conn.alpn_protocol() != Some(alpn) {
            return Err(format!("ALPN {:?}, offered {:?}", s.conn.alpn_protocol(), alpn));
        }
        Ok(s)
    }
}
