//! The HTTP client the ACME protocol runs over: one blocking HTTP/1.1 request per
//! connection (`Connection: close`) over rustls, on the ACME thread. RFC 8555 needs little:
//! GET and POST with small JSON bodies to one host, `Replay-Nonce`, `Location`, `Link` and
//! `Retry-After` back. Blocking is right here: the thread does nothing else, and a
//! current-thread runtime has no other task to starve.
//!
//! The roots: the system's bundle (the first of the usual places, or `SSL_CERT_FILE`), and
//! `[acme] ca_roots` for a private CA. Every read and write has a timeout; a response is
//! at most [`MAX_RESPONSE`] bytes. The `Retry-After` of a 429 or 503 is kept for the
//! scheduler ([`Client::retry_after`]): instant-acme turns those answers into errors.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body::Body as _;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// The largest response taken (a certificate chain is a few kB; a directory less).
const MAX_RESPONSE: usize = 1 << 20;
/// Connecting, and each read or write, must finish within this.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Where distributions keep the system's roots, tried in order.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

#[derive(Clone)]
pub struct Client {
    tls: Arc<rustls::ClientConfig>,
    /// The latest `Retry-After` of a 429 or 503 answer, taken by the scheduler.
    retry_after: Arc<Mutex<Option<SystemTime>>>,
}

impl Client {
    /// A client trusting the system's roots and those in `extra` (PEM). Errors name the
    /// file; no root at all is an error.
    pub fn new(extra: Option<&Path>) -> Result<Client, String> {
        let mut roots = rustls::RootCertStore::empty();
        let system = std::env::var_os("SSL_CERT_FILE")
            .map(std::path::PathBuf::from)
            .into_iter()
            .chain(SYSTEM_BUNDLES.iter().map(std::path::PathBuf::from))
            .find(|p| p.is_file());
        if let Some(p) = system {
            if let Ok(certs) = CertificateDer::pem_file_iter(&p) {
                roots.add_parsable_certificates(certs.filter_map(Result::ok));
            }
        }
        if let Some(p) = extra {
            let certs = CertificateDer::pem_file_iter(p)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("acme.ca_roots {}: {e}", p.display()))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("acme.ca_roots {}: no usable PEM certificate", p.display()));
            }
        }
        if roots.is_empty() {
            return Err(format!(
                "acme: no trusted roots (none of {} exists; set acme.ca_roots)",
                SYSTEM_BUNDLES.join(", ")
            ));
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("acme: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Client { tls: Arc::new(tls), retry_after: Arc::new(Mutex::new(None)) })
    }

    /// The handle the scheduler reads `Retry-After` through.
    pub fn retry_after(&self) -> Arc<Mutex<Option<SystemTime>>> {
        Arc::clone(&self.retry_after)
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>>;

impl HttpClient for Client {
    fn request(&self, req: http::Request<BodyWrapper<Bytes>>) -> Answer {
        let tls = Arc::clone(&self.tls);
        let retry_after = Arc::clone(&self.retry_after);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let mut body = std::pin::pin!(body);
            let mut data = Vec::new();
            while let Some(Ok(frame)) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                if let Ok(d) = frame.into_data() {
                    data.extend_from_slice(&d);
                }
            }
            let body = data;
            let rsp = exchange(&tls, &parts, &body).map_err(|e| Error::Other(e.into()))?;
            if matches!(rsp.status().as_u16(), 429 | 503) {
                let when = rsp.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok());
                if let Ok(mut slot) = retry_after.lock() {
                    *slot = when.and_then(parse_retry_after);
                }
            }
            Ok(BytesResponse::from(rsp.map(BodyWrapper::from)))
        })
    }
}

/// `Retry-After` (RFC 9110 §10.2.3): seconds, or an HTTP date.
pub fn parse_retry_after(v: &str) -> Option<SystemTime> {
    match v.trim().parse::<u64>() {
        Ok(secs) => SystemTime::now().checked_add(Duration::from_secs(secs)),
        Err(_) => httpdate::parse_http_date(v.trim()).ok(),
    }
}

/// Sends one request and reads its response, on a connection of its own.
fn exchange(
    tls: &Arc<rustls::ClientConfig>,
    parts: &http::request::Parts,
    body: &[u8],
) -> Result<http::Response<Vec<u8>>, String> {
    let uri = &parts.uri;
    if uri.scheme_str() != Some("https") {
        return Err(format!("{uri}: only https URLs are used"));
    }
    let host = uri.host().ok_or_else(|| format!("{uri}: no host"))?;
    let port = uri.port_u16().unwrap_or(443);
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    // An IP literal in brackets is not a server name; without them it is.
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
        .map_err(|e| format!("{host}: {e}"))?;
    let conn = rustls::ClientConnection::new(Arc::clone(tls), name).map_err(|e| format!("{host}: {e}"))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);

    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = format!("{} {target} HTTP/1.1\r\nHost: {}\r\n", parts.method, host_field(host, port));
    head.push_str(concat!("User-Agent: ferrohttpd/", env!("CARGO_PKG_VERSION"), "\r\nConnection: close\r\n"));
    for (name, value) in &parts.headers {
        if let Ok(v) = value.to_str() {
            head.push_str(&format!("{name}: {v}\r\n"));
        }
    }
    if !body.is_empty() || parts.method == http::Method::POST {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    s.write_all(&out).and_then(|()| s.flush()).map_err(|e| format!("{host}: {e}"))?;

    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_RESPONSE {
                    return Err(format!("{host}: response over {MAX_RESPONSE} bytes"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A peer that closes without close_notify: the framing below tells whether the
            // response is whole.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(format!("{host}: {e}")),
        }
    }
    parse_response(&buf).map_err(|e| format!("{host}: {e}"))
}

fn host_field(host: &str, port: u16) -> String {
    if port == 443 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

/// A whole HTTP/1.1 response: head, then a body framed by chunked coding, Content-Length,
/// or the end of the connection.
pub fn parse_response(buf: &[u8]) -> Result<http::Response<Vec<u8>>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("truncated response head".into()),
        Err(e) => return Err(format!("bad response: {e}")),
    };
    let mut b = http::Response::builder().status(r.code.unwrap_or(0));
    let (mut chunked, mut length) = (false, None);
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
        } else if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<usize>().ok());
        }
        b = b.header(h.name, h.value);
    }
    let rest = &buf[len..];
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        rest.get(..n).ok_or("truncated response body")?.to_vec()
    } else {
        rest.to_vec()
    };
    b.body(body).map_err(|e| format!("bad response: {e}"))
}

/// Decodes a chunked body (RFC 9112 §7.1); trailers are ignored.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").ok_or("truncated chunk size")?;
        let line = std::str::from_utf8(&rest[..line_end]).map_err(|_| "bad chunk size")?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| format!("bad chunk size {size:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let data = rest.get(..size).ok_or("truncated chunk")?;
        out.extend_from_slice(data);
        rest = rest.get(size..).and_then(|r| r.strip_prefix(b"\r\n")).ok_or("chunk without its CRLF")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_by_every_framing() {
        let r = parse_response(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nLocation: /o/1\r\n\r\n{}extra").unwrap();
        assert_eq!((r.status().as_u16(), r.body().as_slice()), (201, &b"{}"[..]));
        assert_eq!(r.headers()["location"], "/o/1");
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body().as_slice(), b"abcde");
        let r = parse_response(b"HTTP/1.1 200 OK\r\n\r\nto the end").unwrap();
        assert_eq!(r.body().as_slice(), b"to the end");
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX",
            b"HTTP/1.1 200 OK\r\n",
            b"garbage",
        ] {
            assert!(parse_response(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = SystemTime::now();
        let t = parse_retry_after(" 120 ").unwrap();
        assert!(t >= now + Duration::from_secs(119) && t <= now + Duration::from_secs(130));
        let t = parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(), 784_111_777);
        assert_eq!(parse_retry_after("soon"), None);
    }
}
