//! HTTP/3 over QUIC (issue 35): the real binary with `[http3] enabled`, on UDP beside its TLS
//! listener (same port), against a small aioquic client (`tests/h3client.py`). Built only
//! with the `http3` feature; the tests skip, saying so, where Python's `aioquic` is missing
//! (and fail in CI, which installs it: `.ci/run`).
#![cfg(feature = "http3")]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::json::{self, Json};
use common::proto::h3::{server as h3_server, status as h3_status, wait_status as wait_h3_status};
use common::*;

/// What the client got for one request.
struct H3Response {
    status: u16,
    headers: Vec<(String, String)>,
    sha256: String,
    length: u64,
    reset: bool,
    /// With a linger: the error code the server closed the connection with.
    closed: Option<u64>,
    /// Which of the responses ended first (0), second...
    order: u64,
}

impl H3Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Whether the aioquic client can run here; in CI a missing one is a failure.
fn have_client() -> bool {
    have_aioquic("the HTTP/3 tests are")
}

/// One request: method, path, authority, extra fields.
type Req<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

/// A request field the client takes as an instruction, not sent: stop the stream
/// (STOP_SENDING H3_REQUEST_CANCELLED) once this many body bytes came.
const STOP_AFTER: &str = "x-test-stop-after";

/// Sends `reqs` (method, path, authority, extra fields) at once over one HTTP/3 connection
/// to the server's TLS port (UDP), with `sni`.
fn h3(srv: &Server, sni: &str, reqs: &[Req<'_>]) -> Result<Vec<H3Response>, String> {
    collect(spawn_client(srv, sni, reqs, None)?)
}

/// Starts the client on `reqs`; with `linger`, it then waits that long for the server to
/// close the connection.
fn spawn_client(srv: &Server, sni: &str, reqs: &[Req<'_>], linger: Option<u32>) -> Result<Child, String> {
    let mut spec = String::from("[");
    for (i, (method, path, authority, fields)) in reqs.iter().enumerate() {
        let stop = fields.iter().find(|(n, _)| *n == STOP_AFTER).map_or("null", |(_, v)| v);
        let fields: Vec<String> =
            fields.iter().filter(|(n, _)| *n != STOP_AFTER).map(|(n, v)| format!("[{n:?},{v:?}]")).collect();
        spec.push_str(&format!(
            "{}{{\"method\":{method:?},\"path\":{path:?},\"authority\":{authority:?},\"headers\":[{}],\"stop_after\":{stop}}}",
            if i > 0 { "," } else { "" },
            fields.join(",")
        ));
    }
    spec.push(']');
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3client.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["127.0.0.1", &srv.tls_addr().port().to_string(), sni])
        .args(linger.map(|l| l.to_string()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    child.stdin.take().ok_or("stdin")?.write_all(spec.as_bytes()).map_err(|e| e.to_string())?;
    Ok(child)
}

/// The client's results. It bounds itself (20 s).
fn collect(child: Child) -> Result<Vec<H3Response>, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("client failed: {text} {}", String::from_utf8_lossy(&out.stderr)));
    }
    let v = json::parse_json(&text).map_err(|e| format!("{e}: {text}"))?;
    let Json::Arr(list) = v else { return Err(format!("not a list: {text}")) };
    let num = |r: &Json, k: &str| r.num(&[k]).map(|n| n as u64);
    let mut got = Vec::new();
    for r in &list {
        let Some(Json::Arr(pairs)) = r.get("headers") else { return Err(format!("no headers: {text}")) };
        let headers = pairs
            .iter()
            .filter_map(|p| match p {
                Json::Arr(nv) => Some((nv.first()?.str()?.to_string(), nv.get(1)?.str()?.to_string())),
                _ => None,
            })
            .collect();
        got.push(H3Response {
            status: num(r, "status")? as u16,
            headers,
            sha256: r.get("body_hex_sha256").and_then(Json::str).ok_or("sha")?.to_string(),
            length: num(r, "length")?,
            reset: r.get("reset") == Some(&Json::Bool(true)),
            closed: r.num(&["closed"]).ok().map(|n| n as u64),
            order: num(r, "order")?,
        });
    }
    Ok(got)
}

fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

const SMALL: usize = 4096;
const BIG: usize = 3 * 1024 * 1024;
const HUGE: usize = 32 * 1024 * 1024;

fn write_bodies(root: &Path) {
    std::fs::write(root.join("small.bin"), pseudo_random_bytes(SMALL, 1)).unwrap();
    std::fs::write(root.join("big.bin"), pseudo_random_bytes(BIG, 2)).unwrap();
}

/// GET, HEAD, ranges, 304, 404 over HTTP/3, byte for byte, for 4 KiB, 3 MiB and 32 MiB,
/// the two large files both fd-backed (the default `max_file`, 64 KiB: read with `pread`)
/// and mapped (`max_file` above them); the server's own read count (`rchar`) tells which
/// path they took. The access log says HTTP/3.0 and the status page counts the requests.
#[test]
fn get_head_range_conditional_byte_exact() {
    if !have_client() {
        return;
    }
    let small = pseudo_random_bytes(SMALL, 1);
    let big = pseudo_random_bytes(BIG, 2);
    let huge = pseudo_random_bytes(HUGE, 4);
    for cache in ["", "[cache]\nmax_file = 67108864\n"] {
        let srv = h3_server(cache, |_, root| {
            write_bodies(root);
            std::fs::write(root.join("huge.bin"), pseudo_random_bytes(HUGE, 4)).unwrap();
        });
        let first = h3(&srv, "localhost", &[("GET", "/small.bin", "localhost", &[])]).unwrap();
        let etag = first[0].header("etag").expect("an ETag").to_string();
        let inm = [("if-none-match", etag.as_str())];
        let range = [("range", "bytes=100-1099")];
        let big_range = [("range", "bytes=2000000-")];
        let huge_range = [("range", "bytes=20000000-29999999")];
        let before = srv.io_counts();
        let r = h3(
            &srv,
            "localhost",
            &[
                ("GET", "/small.bin", "localhost", &[]),
                ("GET", "/big.bin", "localhost", &[]),
                ("HEAD", "/big.bin", "localhost", &[]),
                ("GET", "/small.bin", "localhost", &range),
                ("GET", "/big.bin", "localhost", &big_range),
                ("GET", "/small.bin", "localhost", &inm),
                ("GET", "/nope.bin", "localhost", &[]),
                ("GET", "/huge.bin", "localhost", &[]),
                ("HEAD", "/huge.bin", "localhost", &[]),
                ("GET", "/huge.bin", "localhost", &huge_range),
            ],
        )
        .unwrap();
        let what = if cache.is_empty() { "fd-backed" } else { "mapped" };
        assert_eq!((r[0].status, r[0].length, &r[0].sha256), (200, SMALL as u64, &sha256(&small)), "{what}");
        assert_eq!((r[1].status, r[1].length, &r[1].sha256), (200, BIG as u64, &sha256(&big)), "{what}");
        assert_eq!(r[1].header("content-length"), Some("3145728"));
        assert_eq!((r[2].status, r[2].length), (200, 0));
        assert_eq!(r[2].header("content-length"), Some("3145728"));
        assert_eq!((r[3].status, r[3].length, &r[3].sha256), (206, 1000, &sha256(&small[100..1100])));
        assert_eq!(r[3].header("content-range"), Some("bytes 100-1099/4096"));
        assert_eq!((r[4].status, &r[4].sha256), (206, &sha256(&big[2_000_000..])), "{what}");
        assert_eq!((r[5].status, r[5].length), (304, 0));
        assert_eq!(r[6].status, 404);
        assert_eq!((r[7].status, r[7].length, &r[7].sha256), (200, HUGE as u64, &sha256(&huge)), "{what}");
        assert_eq!((r[8].status, r[8].length), (200, 0));
        assert_eq!(r[8].header("content-length"), Some("33554432"));
        assert_eq!((r[9].status, &r[9].sha256), (206, &sha256(&huge[20_000_000..30_000_000])), "{what}");
        assert_eq!(r[9].header("content-range"), Some("bytes 20000000-29999999/33554432"));
        assert!(r.iter().all(|r| !r.reset));
        // No connection-specific fields, lowercase names (RFC 9114 §4.2).
        for resp in &r {
            for (n, _) in &resp.headers {
                assert!(!n.bytes().any(|b| b.is_ascii_uppercase()) && n != "connection" && n != "keep-alive", "{n}");
            }
        }
        // The large bodies' bytes (3 MiB, 1 MiB of it, 32 MiB, 10 MB of it): with `pread`
        // the server read each of them; from the mapping, none (sending over UDP reads nothing).
        let large = (BIG + (BIG - 2_000_000) + HUGE + 10_000_000) as u64;
        let read = srv.io("rchar") - before.0;
        if cache.is_empty() {
            assert!(read >= large, "fd-backed: {read} bytes read for {large} bytes of large bodies");
        } else {
            assert!(read < large / 100, "mapped: {read} bytes read for {large} bytes of large bodies");
        }
        let log = srv.wait_access_log(11);
        assert!(log.iter().any(|l| l.contains("\"GET /big.bin HTTP/3.0\" 200 3145728")), "{log:?}");
        assert!(log.iter().any(|l| l.contains("\"HEAD /big.bin HTTP/3.0\" 200 0")), "{log:?}");
        assert!(log.iter().any(|l| l.contains("\"GET /huge.bin HTTP/3.0\" 200 33554432")), "{log:?}");
        assert!(log.iter().any(|l| l.contains("\"GET /huge.bin HTTP/3.0\" 206 10000000")), "{log:?}");
        let status = srv.get("/.status");
        assert!(status.body_text().contains("requests_http3: 11\n"), "{}", status.body_text());
        let st = h3_status(&srv);
        assert_eq!((st["accepted"], st["handshakes"], st["open"]), (2, 2, 0), "{st:?}");
    }
}

#[test]
fn hundred_concurrent_streams() {
    if !have_client() {
        return;
    }
    let srv = h3_server("", |_, root| write_bodies(root));
    let small = sha256(&pseudo_random_bytes(SMALL, 1));
    let reqs: Vec<Req<'_>> = (0..100).map(|_| ("GET", "/small.bin", "localhost", &[][..])).collect();
    let r = h3(&srv, "localhost", &reqs).unwrap();
    assert_eq!(r.len(), 100);
    assert!(r.iter().all(|r| r.status == 200 && r.sha256 == small), "a response differs");
}

/// More responses at once than the connection's send window holds (300 × 16 KiB against
/// 1 MiB): the ones that do not fit wait in the server's queue, not refused by QUIC one by
/// one, and every one of them arrives whole as the window moves.
#[test]
fn responses_beyond_the_connection_window_all_arrive() {
    if !have_client() {
        return;
    }
    const MEDIUM: usize = 16 * 1024;
    let srv = h3_server("max_streams = 300\n", |_, root| {
        std::fs::write(root.join("medium.bin"), pseudo_random_bytes(MEDIUM, 3)).unwrap();
    });
    let want = sha256(&pseudo_random_bytes(MEDIUM, 3));
    let reqs: Vec<Req<'_>> = (0..300).map(|_| ("GET", "/medium.bin", "localhost", &[][..])).collect();
    let r = h3(&srv, "localhost", &reqs).unwrap();
    assert_eq!(r.len(), 300);
    assert!(r.iter().all(|r| r.status == 200 && r.sha256 == want), "a response differs");
}

/// UDP datagrams this host dropped so far because a socket's receive buffer was full
/// (`RcvbufErrors` of `/proc/net/snmp` and `Udp6RcvbufErrors` of `/proc/net/snmp6`).
fn udp_rcvbuf_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let udp: Vec<Vec<&str>> =
        snmp.lines().filter(|l| l.starts_with("Udp:")).map(|l| l.split_whitespace().collect()).collect();
    let col = udp[0].iter().position(|&k| k == "RcvbufErrors").unwrap();
    let v4: u64 = udp[1][col].parse().unwrap();
    let snmp6 = std::fs::read_to_string("/proc/net/snmp6").unwrap_or_default();
    let v6 = snmp6.lines().find_map(|l| l.strip_prefix("Udp6RcvbufErrors")).map_or(0, |v| v.trim().parse().unwrap());
    v4 + v6
}

/// A 32 MiB download over one connection arrives whole within the client's bound (20 s),
/// and every packet the server declared lost was one dropped at a receive buffer (the
/// client's: aioquic reads slower than loopback delivers), none lost by the server itself.
/// A GSO batch longer than a UDP datagram may be (more than 45 datagrams of 1,452 bytes)
/// is refused whole by the kernel (EMSGSIZE): each one lost up to 64 datagrams unseen, and
/// the download crawled (about 30 MiB/s with gtlsclient, 9x slower than now).
#[test]
fn large_download_loses_only_what_the_client_drops() {
    if !have_client() {
        return;
    }
    let srv = h3_server("", |_, root| std::fs::write(root.join("large.bin"), pseudo_random_bytes(HUGE, 5)).unwrap());
    let want = sha256(&pseudo_random_bytes(HUGE, 5));
    let drops = udp_rcvbuf_drops();
    let r = h3(&srv, "localhost", &[("GET", "/large.bin", "localhost", &[])]).unwrap();
    let drops = udp_rcvbuf_drops() - drops;
    assert!(r[0].status == 200 && r[0].length == HUGE as u64 && r[0].sha256 == want, "the body differs");
    // The counters are added when the connection is gone (the client closed it).
    let st = wait_h3_status(&srv, "packets.sent", |n| n > 0);
    let (sent, lost) = (st["packets.sent"], st["packets.lost"]);
    assert!(sent > (HUGE / 1452) as u64, "{st:?}");
    // Other processes' drops on this host only loosen the bound; a few packets may be taken
    // for lost by the time threshold when the client was slow to answer.
    assert!(lost <= drops + 16, "{lost} of {sent} packets lost, {drops} dropped at receive buffers: {st:?}");
}

/// The head of `GET /file.txt` over HTTPS (TCP, curl), lowercased.
fn https_head(srv: &Server) -> String {
    let port = srv.tls_addr().port();
    let cacert = srv.dir().join("localhost.crt");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/file.txt");
    let o = curl(&["-D", "-", "-o", "/dev/null", "--cacert", cacert.to_str().unwrap(), "--resolve", &resolve, &url]);
    assert_eq!(o.code, Some(0), "{o:?}");
    o.stdout_text().to_ascii_lowercase()
}

/// Responses over TCP with TLS advertise HTTP/3 on the same port (`Alt-Svc`); plain HTTP
/// does not, nor does TLS with `alt_svc = false`.
#[test]
fn alt_svc_on_tls_responses() {
    let srv = h3_server("", |_, _| {});
    let want = format!("alt-svc: h3=\":{}\"; ma=86400", srv.tls_addr().port());
    let head = https_head(&srv);
    assert!(head.contains(&want), "{head}");
    assert!(srv.get("/file.txt").header("Alt-Svc").is_none());
    let off = h3_server("alt_svc = false\n", |_, _| {});
    let head = https_head(&off);
    assert!(!head.contains("alt-svc"), "{head}");
}

/// Virtual hosts by `:authority`, and the 421 rule with the SNI name of the QUIC handshake:
/// a request whose authority picks another site than the SNI name is misdirected.
#[test]
fn vhosts_by_authority_and_sni() {
    if !have_client() {
        return;
    }
    let srv = h3_server("[[vhost]]\nhost = \"a.test\"\nroot = \"{dir}/a\"\n", |dir, _| {
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/file.txt"), b"site a\n").unwrap();
    });
    let r = h3(&srv, "a.test", &[("GET", "/file.txt", "a.test", &[]), ("GET", "/file.txt", "localhost", &[])]).unwrap();
    assert_eq!((r[0].status, &r[0].sha256), (200, &sha256(b"site a\n")));
    assert_eq!(r[1].status, 421);
    let r = h3(&srv, "localhost", &[("GET", "/file.txt", "localhost", &[])]).unwrap();
    assert_eq!((r[0].status, &r[0].sha256), (200, &sha256(FILE_TXT)));
}

/// `retry = "always"`: every new connection is validated with a Retry round trip, and then
/// served as usual.
#[test]
fn retry_always_validates_then_serves() {
    if !have_client() {
        return;
    }
    let srv = h3_server("retry = \"always\"\n", |_, _| {});
    let r = h3(&srv, "localhost", &[("GET", "/file.txt", "localhost", &[])]).unwrap();
    assert_eq!((r[0].status, &r[0].sha256), (200, &sha256(FILE_TXT)));
    let st = h3_status(&srv);
    assert_eq!((st["retries"], st["validated"], st["accepted"]), (1, 1, 1), "{st:?}");
}

/// A response the client stops part way (STOP_SENDING) is reset, logged with the bytes
/// handed on and counted as aborted; the connection and the other streams go on.
#[test]
fn stopped_stream_is_reset_and_accounted_aborted() {
    if !have_client() {
        return;
    }
    let srv = h3_server("", |_, root| write_bodies(root));
    let stop = [(STOP_AFTER, "65536")];
    let r = h3(&srv, "localhost", &[("GET", "/big.bin", "localhost", &stop), ("GET", "/small.bin", "localhost", &[])])
        .unwrap();
    assert!(r[0].length >= 65536 && r[0].length < BIG as u64, "{}", r[0].length);
    assert_eq!((r[1].status, &r[1].sha256), (200, &sha256(&pseudo_random_bytes(SMALL, 1))));
    let log = srv.wait_access_log(2);
    let big = log.iter().find(|l| l.contains("GET /big.bin HTTP/3.0")).expect("the stopped request is logged");
    let sent: u64 = big.split_whitespace().nth(9).and_then(|n| n.parse().ok()).expect("a byte count");
    assert!(sent < BIG as u64, "{big}");
    let status = srv.get("/.status");
    assert!(status.body_text().contains("requests_aborted: 1\n"), "{}", status.body_text());
    assert!(status.body_text().contains("requests_http3: 2\n"), "{}", status.body_text());
}

/// A file truncated in place while it is being sent over HTTP/3 (held to about 3 s by
/// `limit_rate`), fd-backed (`pread` finds its end early) and mapped (the copy from the
/// mapping faults on the pages gone, EFAULT rather than SIGBUS): its stream is reset short of
/// the file's old length, the other response on the same connection arrives whole, the
/// request is logged short and counted aborted, and the server lives on and serves the
/// file's new content.
#[test]
fn file_truncated_while_sent_resets_only_its_stream() {
    if !have_client() {
        return;
    }
    let big = sha256(&pseudo_random_bytes(BIG, 2));
    for cache in ["", "[cache]\nmax_file = 8388608\n"] {
        let what = if cache.is_empty() { "fd-backed" } else { "mapped" };
        let srv = h3_server(&format!("{cache}[http]\nlimit_rate = \"1MiB/s\"\n"), |_, root| {
            write_bodies(root);
            std::fs::write(root.join("shrinks.bin"), pseudo_random_bytes(BIG, 6)).unwrap();
        });
        let client = spawn_client(
            &srv,
            "localhost",
            &[("GET", "/shrinks.bin", "localhost", &[]), ("GET", "/big.bin", "localhost", &[])],
            None,
        )
        .unwrap();
        // Once about a third of it has gone out.
        let shrinks = srv.root().join("shrinks.bin");
        let before = srv.io_counts();
        for _ in 0..100 {
            if srv.get("/.status").body_text().contains("handshakes 1 ") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(1000));
        std::fs::File::options().write(true).open(&shrinks).unwrap().set_len(1000).unwrap();
        let r = collect(client).unwrap();
        assert!(r[0].reset && r[0].status == 200, "{what}: the stream was not reset ({} bytes)", r[0].length);
        assert!(r[0].length > 0 && r[0].length < BIG as u64 / 2, "{what}: {} bytes of the truncated file", r[0].length);
        assert_eq!((r[1].status, r[1].reset, &r[1].sha256), (200, false, &big), "{what}: the other stream");
        // The path the bodies took: `pread` reads them, the mapping does not.
        let read = srv.io("rchar") - before.0;
        if cache.is_empty() {
            assert!(read >= BIG as u64, "fd-backed: {read} bytes read");
        } else {
            assert!(read < BIG as u64 / 4, "mapped: {read} bytes read");
        }
        let log = srv.wait_access_log(2);
        let line = log.iter().find(|l| l.contains("GET /shrinks.bin HTTP/3.0")).expect("the request is logged");
        let sent: u64 = line.split_whitespace().nth(9).and_then(|n| n.parse().ok()).expect("a byte count");
        assert!(sent < BIG as u64 / 2, "{what}: {line}");
        let status = srv.get("/.status").body_text();
        assert!(status.contains("requests_aborted: 1\n") && status.contains("requests_http3: 2\n"), "{what}: {status}");
        // The server lives on, and serves what the file now holds, over a new connection.
        let r = h3(&srv, "localhost", &[("GET", "/shrinks.bin", "localhost", &[])]).unwrap();
        let now = sha256(&pseudo_random_bytes(BIG, 6)[..1000]);
        assert_eq!((r[0].status, r[0].length, &r[0].sha256), (200, 1000, &now), "{what}: after the truncation");
    }
}

/// Graceful stop (SIGTERM): a transfer in flight (held to about 1.5 s by `limit_rate`)
/// finishes byte for byte, then the connection is closed with H3_NO_ERROR (after GOAWAY)
/// and the server exits.
#[test]
fn graceful_stop_lets_the_transfer_finish() {
    if !have_client() {
        return;
    }
    let mut srv = h3_server("[http]\nlimit_rate = \"2MiB/s\"\n", |_, root| write_bodies(root));
    let client = spawn_client(&srv, "localhost", &[("GET", "/big.bin", "localhost", &[])], Some(10)).unwrap();
    // Once the transfer is under way (the client takes a moment to start).
    for _ in 0..100 {
        if srv.get("/.status").body_text().contains("handshakes 1 ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let exited = srv.terminate(Duration::from_secs(8));
    let r = collect(client).unwrap();
    assert!(exited.is_some_and(|s| s.success()), "the server did not stop in time: {exited:?}");
    assert_eq!((r[0].status, &r[0].sha256), (200, &sha256(&pseudo_random_bytes(BIG, 2))));
    assert_eq!(r[0].closed, Some(0x100), "closed with H3_NO_ERROR");
}

/// RFC 9218 priorities: of two large responses requested together, the one with the lower
/// urgency (`priority: u=0`) is sent first, although its request came second.
#[test]
fn urgent_response_goes_first() {
    if !have_client() {
        return;
    }
    let srv = h3_server("", |_, root| write_bodies(root));
    let (low, high) = ([("priority", "u=5")], [("priority", "u=0")]);
    let r = h3(&srv, "localhost", &[("GET", "/big.bin", "localhost", &low), ("GET", "/big.bin", "localhost", &high)])
        .unwrap();
    let big = sha256(&pseudo_random_bytes(BIG, 2));
    assert!(r.iter().all(|r| r.status == 200 && r.sha256 == big));
    assert_eq!((r[1].order, r[0].order), (0, 1), "the urgent response ended first");
}

/// Runs `tests/quicflood.py` with `args` (bounded by itself).
fn quicflood(args: &[&str]) -> Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/quicflood.py");
    Command::new("python3").arg(script).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "quicflood: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A flood of 2,000 real client Initials (each its own connection, from a new source port,
/// over 50 source addresses) against the defaults (`retry = "under_load"`,
/// `retry_threshold = 128`): a client before the flood gets no Retry; past 128 handshakes in
/// progress every new Initial gets a stateless Retry instead of a connection, so memory
/// stays bounded (a few MiB; `retry = "never"` keeps a connection for each of the 2,000);
/// a real client is served during and after the flood (after a Retry), and once the
/// flood's handshakes time out every connection is gone.
#[test]
fn initial_flood_gets_retries_and_spares_a_real_client() {
    if !have_client() {
        return;
    }
    // The flood's handshakes stay open for the idle timeout: long enough that the server is
    // still under load (at the Retry threshold, 128 handshaking) when the client after the
    // flood comes, even where a loaded machine starts that client seconds later.
    let srv = h3_server("idle_timeout = \"8s\"\n", |_, _| {});
    let get = [("GET", "/file.txt", "localhost", &[][..])];
    let r = h3(&srv, "localhost", &get).unwrap();
    assert_eq!((r[0].status, &r[0].sha256), (200, &sha256(FILE_TXT)));
    let st = h3_status(&srv);
    assert_eq!((st["accepted"], st["retries"], st["validated"]), (1, 0, 0), "no Retry below the threshold: {st:?}");
    let rss = srv.status_kb("VmRSS");
    let port = srv.tls_addr().port().to_string();
    let drops = udp_rcvbuf_drops();
    let mut flood = quicflood(&["flood", "127.0.0.1", &port, "2000", "50"]);
    let mut start = String::new();
    let mut out = std::io::BufReader::new(flood.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut start).unwrap();
    assert_eq!(start, "start\n");
    // The client "during" the flood connects once the server is under load (not after a
    // fixed pause, which a loaded machine can make too short).
    let st = wait_h3_status(&srv, "handshaking", |n| n >= 128);
    assert!(st["handshaking"] >= 128, "the flood's handshakes reached the Retry threshold: {st:?}");
    let during = h3(&srv, "localhost", &get);
    let mut sent = String::new();
    std::io::Read::read_to_string(&mut out, &mut sent).unwrap();
    assert!(flood.wait().unwrap().success());
    let after = h3(&srv, "localhost", &get).unwrap();
    let grown = srv.status_kb("VmRSS").saturating_sub(rss);
    let drops = udp_rcvbuf_drops() - drops;
    let st = h3_status(&srv);
    eprintln!("flood: {sent}; status {st:?}; VmRSS +{grown} kB; UDP receive-buffer drops {drops}");
    assert_eq!((after[0].status, &after[0].sha256), (200, &sha256(FILE_TXT)), "served after the flood");
    let during = during.unwrap();
    assert_eq!(during[0].status, 200, "served during the flood");
    assert!(st["handshaking"] <= 128 && st["accepted"] <= 128 + 3, "handshakes bounded: {st:?}");
    // Each of the flood's Initials was accepted, got a Retry, or was dropped by the kernel
    // before the server read it (a slow debug build on a loaded machine drops most).
    assert!(
        st["retries"] > 0 && st["retries"] + st["accepted"] + drops >= 1_800,
        "the flood got Retries: {st:?}, {drops} drops"
    );
    assert_eq!(st["validated"], 2, "both real clients came back validated: {st:?}");
    assert_eq!(st["refused"], 0, "{st:?}");
    assert!(grown < 16 * 1024, "VmRSS grew by {grown} kB");
    // The flood's handshakes time out (idle_timeout 8 s): nothing is left.
    let st = wait_h3_status(&srv, "open", |n| n == 0);
    assert_eq!((st["open"], st["handshaking"]), (0, 0), "{st:?}");
}

/// `max_connections_per_ip`: a third connection from 127.0.0.1 is refused while two are
/// open (`retry = "never"`: no Retry is ever sent); other addresses are not affected.
#[test]
fn connections_per_address_are_limited() {
    if !have_client() {
        return;
    }
    let srv = h3_server("retry = \"never\"\nmax_connections_per_ip = 2\n", |_, _| {});
    let get = [("GET", "/file.txt", "localhost", &[][..])];
    let held: Vec<Child> = (0..2).map(|_| spawn_client(&srv, "localhost", &get, Some(4)).unwrap()).collect();
    let st = wait_h3_status(&srv, "handshakes", |n| n == 2);
    assert_eq!(st["open"], 2, "{st:?}");
    let third = h3(&srv, "localhost", &get);
    assert!(third.is_err(), "a third connection from the address: {:?}", third.map(|r| r[0].status));
    let port = srv.tls_addr().port().to_string();
    finish(quicflood(&["flood", "127.0.0.1", &port, "6", "3"]));
    let st = wait_h3_status(&srv, "accepted", |n| n >= 8);
    assert_eq!(st["refused.per_ip"], 1, "{st:?}");
    assert_eq!((st["accepted"], st["retries"], st["refused"]), (8, 0, 1), "two from each other address: {st:?}");
    for c in held {
        assert_eq!(collect(c).unwrap()[0].status, 200);
    }
}

/// Initials forged in a client's name (handshakes that never finish) do not lock it out:
/// past `max_connections_per_ip` pending handshakes from its address, a new attempt gets a
/// Retry instead of a refusal, and comes back validated, counted against the address's
/// validated connections only.
#[test]
fn forged_initials_do_not_lock_an_address_out() {
    if !have_client() {
        return;
    }
    let srv = h3_server("max_connections_per_ip = 4\n", |_, _| {});
    let port = srv.tls_addr().port().to_string();
    finish(quicflood(&["flood", "127.0.0.1", &port, "10", "0"]));
    let st = wait_h3_status(&srv, "retries", |n| n >= 6);
    assert_eq!((st["accepted"], st["handshaking"], st["retries"]), (4, 4, 6), "{st:?}");
    let r = h3(&srv, "localhost", &[("GET", "/file.txt", "localhost", &[])]).unwrap();
    assert_eq!((r[0].status, &r[0].sha256), (200, &sha256(FILE_TXT)));
    let st = h3_status(&srv);
    assert_eq!((st["accepted"], st["validated"], st["retries"], st["refused"]), (5, 1, 7, 0), "{st:?}");
}

/// Before a client's address is validated the server sends at most three times what it
/// received (RFC 9000 §8.1), even when its first flight is larger (a certificate chain of
/// about 5 KB here) and across its retransmissions: the client sends one Initial and never
/// answers.
#[test]
fn amplification_limit_before_validation() {
    if !have_client() {
        return;
    }
    let srv = h3_server("retry = \"never\"\nidle_timeout = \"2s\"\n", |dir, _| {
        let crt = dir.join("localhost.crt");
        let pem = std::fs::read_to_string(&crt).unwrap();
        std::fs::write(&crt, pem.repeat(12)).unwrap();
    });
    let port = srv.tls_addr().port().to_string();
    let out = finish(quicflood(&["amp", "127.0.0.1", &port, "2.5"]));
    let v = json::parse_json(&out).unwrap();
    let (sent, received) = (v.num(&["sent"]).unwrap(), v.num(&["received"]).unwrap());
    eprintln!("amplification: {out}");
    assert!(received <= 3.0 * sent, "{out}");
    assert!(received >= 2.0 * sent, "the flight is cut at the limit, not smaller: {out}");
    assert_eq!(h3_status(&srv)["handshakes"], 0);
}

/// `[server] max_connections` bounds the QUIC connections: a flood of 20 Initials from 20
/// addresses gets 3 connections and 17 refusals (CONNECTION_REFUSED, stateless).
#[test]
fn connections_past_max_connections_are_refused() {
    if !have_client() {
        return;
    }
    let srv = Server::builder()
        .setup(|dir, _| proto::make_localhost_cert(dir))
        .raw_config(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{root}\"\nmax_connections = 3\n\
             [log]\nerror = \"-\"\n[status]\nenabled = true\n\
             [tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{dir}/localhost.crt\"\nkey = \"{dir}/localhost.key\"\n\
             [http3]\nenabled = true\nretry = \"never\"\n",
        )
        .start();
    let port = srv.tls_addr().port().to_string();
    finish(quicflood(&["flood", "127.0.0.1", &port, "20", "20"]));
    let st = wait_h3_status(&srv, "refused.max_connections", |n| n >= 17);
    assert_eq!((st["accepted"], st["refused.max_connections"], st["retries"]), (3, 17, 0), "{st:?}");
}

/// A packet for a connection the server has forgotten (timed out) gets a stateless reset,
/// and an Initial of an unknown version Version Negotiation, each counted.
#[test]
fn stateless_reset_and_version_negotiation_are_counted() {
    if !have_client() {
        return;
    }
    let srv = h3_server("idle_timeout = \"1s\"\n", |_, _| {});
    let port = srv.tls_addr().port().to_string();
    let out = finish(quicflood(&["reset", "127.0.0.1", &port, "localhost", "3"]));
    assert!(out.contains("\"handshake\": true"), "{out}");
    let st = wait_h3_status(&srv, "stateless_resets", |n| n >= 1);
    assert_eq!((st["stateless_resets"], st["handshakes"], st["open"]), (1, 1, 0), "{st:?}");
    finish(quicflood(&["vn", "127.0.0.1", &port]));
    let st = wait_h3_status(&srv, "version_negotiations", |n| n >= 1);
    assert_eq!((st["version_negotiations"], st["handshake_failures"], st["accepted"]), (1, 0, 1), "{st:?}");
}

/// Issue 35's memory target: an idle HTTP/3 connection costs at most what an idle HTTP/2
/// connection over TLS does plus 16 KiB. Each figure is `benches/load/idle_connections.py`'s
/// (RssAnon growth ÷ N) on a fresh server: N connections with one GET each, held open past
/// the 250 ms after which an idle HTTP/3 connection drops the buffers it keeps for reuse, as
/// an HTTP/2 one does (release build, N = 1,000: 27.3 KiB against 12.8 KiB; 29.1 KiB, over
/// the target, without that). The bound is the target: it fails without the shedding (this
/// debug build, N = 300, since HTTP/2 keeps its finished streams in boxes and holds no
/// 2 KiB queue when idle: HTTP/2 13.6 KB, HTTP/3 29.1 KB with the shedding, 31.3 KB without).
#[test]
fn an_idle_connection_costs_at_most_http2_over_tls_plus_16_kib() {
    if !have_client() {
        return;
    }
    let per_connection = |mode: &[&str]| -> u64 {
        let srv = h3_server(
            "max_connections_per_ip = 0\nidle_timeout = \"120s\"\n[http2]\nidle_timeout = \"120s\"\n",
            |_, root| write_bodies(root),
        );
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/load/idle_connections.py");
        let out = Command::new("python3")
            .arg(script)
            .args(mode)
            .args([srv.pid().to_string(), srv.tls_addr().port().to_string(), "300".into(), "/small.bin".into()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{mode:?}: {text} {}", String::from_utf8_lossy(&out.stderr));
        let n = text.split("RssAnon ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok());
        n.unwrap_or_else(|| panic!("{mode:?}: {text}"))
    };
    let h2 = per_connection(&["--tls", "--h2c"]);
    let h3 = per_connection(&["--h3"]);
    eprintln!("idle connection: HTTP/2 over TLS {h2} B, HTTP/3 {h3} B (RssAnon)");
    assert!(h3 <= h2 + 16 * 1024, "HTTP/3 {h3} B > HTTP/2 over TLS {h2} B + 16 KiB");
}
