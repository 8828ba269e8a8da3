//! HTTP semantics: response heads, content types, methods, versions, request validation and
//! message framing, over raw sockets against the real binary.

mod common;

use common::*;

fn get_req(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

#[test]
fn get_file_exact_status_headers_and_body() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(&mut s, get_req("/file.txt"));
    let r = read_response(&mut s);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
    r.check_common(false).unwrap();
    assert_eq!(r.headers_named("Content-Length"), ["13"], "{r:?}");
    assert_eq!(r.headers_named("Content-Type"), ["text/plain; charset=utf-8"], "{r:?}");
    assert_eq!(r.headers_named("Last-Modified"), [FILE_TXT_LAST_MODIFIED], "{r:?}");
    assert!(!r.closes(), "HTTP/1.1 default is keep-alive: {r:?}");
    assert_eq!(r.body, FILE_TXT);
    // The connection stays usable and nothing stray follows the body.
    check_still_open(&mut s).unwrap();
}

#[test]
fn head_has_get_headers_and_no_body() {
    let srv = Server::start("");
    let mut s = srv.connect();
    // HEAD and a GET pipelined in one write: if HEAD leaked a body, the GET response would
    // not parse where expected.
    raw(&mut s, "HEAD /file.txt HTTP/1.1\r\nHost: localhost\r\n\r\nGET /p3.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let h = read_head_response(&mut s);
    assert_eq!(h.status_line, "HTTP/1.1 200 OK", "{h:?}");
    h.check_common(true).unwrap();
    assert_eq!(h.header("Content-Length"), Some("13"), "{h:?}");
    assert_eq!(h.header("Content-Type"), Some("text/plain; charset=utf-8"), "{h:?}");
    assert_eq!(h.header("Last-Modified"), Some(FILE_TXT_LAST_MODIFIED), "{h:?}");
    let g = read_response(&mut s);
    assert_eq!(g.status, 200, "{g:?}");
    assert_eq!(g.body, page(3));
}

#[test]
fn head_on_missing_file_is_404_without_body() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(
        &mut s,
        "HEAD /missing.txt HTTP/1.1\r\nHost: localhost\r\n\r\nGET /p1.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    let h = read_head_response(&mut s);
    assert_eq!(h.status, 404, "{h:?}");
    assert!(h.header("Content-Length").is_some(), "{h:?}");
    if !h.closes() {
        let g = read_response(&mut s);
        assert_eq!(g.status, 200, "{g:?}");
        assert_eq!(g.body, page(1));
    } else {
        expect_closed(&mut s);
    }
}

#[test]
fn missing_file_404_has_html_body_and_keeps_connection_consistent() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(&mut s, get_req("/no/such/file.txt"));
    let r = read_response(&mut s);
    assert_eq!(r.status_line, "HTTP/1.1 404 Not Found", "{r:?}");
    r.check_error_body().unwrap();
    check_connection_consistent(&mut s, &r).unwrap();
}

#[test]
fn content_types_by_extension() {
    let srv = Server::start("[mime]\nfoo = \"text/x-foo\"\nbar = \"application/x-bar\"");
    let cases: &[(&str, &[&str], &[u8])] = &[
        ("/index.html", &["text/html; charset=utf-8"], INDEX_HTML),
        ("/", &["text/html; charset=utf-8"], INDEX_HTML),
        ("/file.txt", &["text/plain; charset=utf-8"], FILE_TXT),
        ("/style.css", &["text/css; charset=utf-8"], STYLE_CSS),
        ("/image.png", &["image/png"], IMAGE_PNG),
        ("/data.xyz", &["application/octet-stream"], DATA_XYZ),
        ("/app.js", &["application/javascript; charset=utf-8", "text/javascript; charset=utf-8"], APP_JS),
        ("/data.json", &["application/json; charset=utf-8"], DATA_JSON),
        ("/thing.foo", &["text/x-foo; charset=utf-8"], THING_FOO),
        ("/thing.bar", &["application/x-bar"], THING_BAR),
    ];
    let mut f = Failures::new();
    for (path, types, body) in cases {
        let r = srv.get(path);
        f.check(
            &format!("GET {path}"),
            (|| {
                if r.status != 200 || r.body != *body {
                    return Err(format!("expected 200 with the file:\n{}", r.describe()));
                }
                let ct = r.headers_named("Content-Type");
                if ct.len() != 1 || !types.contains(&ct[0]) {
                    return Err(format!("expected Content-Type {types:?}, got {ct:?}"));
                }
                r.check_common(false)
            })(),
        );
    }
    f.finish();
}

#[test]
fn server_header_and_charset_are_configurable() {
    let srv = Server::start("[http]\nserver_header = \"acme/9\"\ncharset = \"\"");
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers_named("Server"), ["acme/9"], "{r:?}");
    assert_eq!(r.headers_named("Content-Type"), ["text/plain"], "{r:?}");
    assert_eq!(r.body, FILE_TXT);

    let srv = Server::start("[http]\nserver_header = \"\"");
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("Server"), None, "server_header = \"\" must omit it: {r:?}");
}

#[test]
fn disallowed_methods_get_405_with_allow() {
    let srv = Server::start("");
    let mut f = Failures::new();
    for m in ["POST", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT"] {
        // CONNECT takes only an authority-form target (RFC 9112 §3.2.3); any other is a 400.
        let target = if m == "CONNECT" { "localhost:443" } else { "/file.txt" };
        let req = format!("{m} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
        let r = srv.exchange(&req);
        f.check(
            &req.escape_debug().to_string(),
            (|| {
                if r.status != 405 {
                    return Err(format!("expected 405:\n{}", r.describe()));
                }
                if r.headers_named("Allow") != ["GET, HEAD, OPTIONS"] {
                    return Err(format!("expected `Allow: GET, HEAD, OPTIONS`:\n{}", r.describe()));
                }
                r.check_error_body()
            })(),
        );
    }
    f.finish();
}

#[test]
fn options_gets_204_with_allow() {
    let srv = Server::start("");
    let mut f = Failures::new();
    for target in ["*", "/file.txt", "/"] {
        let mut s = srv.connect();
        let req = format!("OPTIONS {target} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        raw(&mut s, &req);
        f.check(
            &req.escape_debug().to_string(),
            (|| {
                let r = try_read_response(&mut s, false).map_err(|e| e.to_string())?;
                if r.status != 204 {
                    return Err(format!("expected 204:\n{}", r.describe()));
                }
                if r.headers_named("Allow") != ["GET, HEAD, OPTIONS"] {
                    return Err(format!("expected `Allow: GET, HEAD, OPTIONS`:\n{}", r.describe()));
                }
                if let Some(cl) = r.header("Content-Length") {
                    if cl != "0" {
                        return Err(format!("204 with non-zero Content-Length:\n{}", r.describe()));
                    }
                }
                r.check_common(false)?;
                // No body follows a 204: the next response parses cleanly.
                check_connection_consistent(&mut s, &r)
            })(),
        );
    }
    f.finish();
}

#[test]
fn unknown_method_gets_501() {
    let srv = Server::start("");
    let r = srv.exchange("BREW /pot HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 501, "{r:?}");
    r.check_error_body().unwrap();
}

#[test]
fn http10_keep_alive_is_honoured() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(&mut s, "GET /file.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header_has_token("Connection", "keep-alive"), "{r:?}");
    assert_eq!(r.body, FILE_TXT);
    raw(&mut s, "GET /p2.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(2));
}

#[test]
fn http10_without_host_is_fine() {
    let srv = Server::start("");
    let r = srv.exchange("GET /file.txt HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn absolute_form_target_is_served() {
    let srv = Server::start("");
    let p = srv.port();
    let r = srv.exchange(format!(
        "GET http://127.0.0.1:{p}/file.txt HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn http_1_2_is_treated_as_1_1() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(&mut s, "GET /file.txt HTTP/1.2\r\nHost: localhost\r\n\r\n");
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.version, "HTTP/1.1", "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn http_2_0_request_gets_505_and_close() {
    let srv = Server::start("");
    check_rejected(srv.addr(), b"GET /file.txt HTTP/2.0\r\nHost: localhost\r\n\r\n", 505).unwrap();
}

#[test]
fn host_header_validation() {
    let srv = Server::start("");
    let mut f = Failures::new();
    let cases: &[&str] = &[
        "GET /file.txt HTTP/1.1\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: a b\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: exa/mple\r\n\r\n",
    ];
    for req in cases {
        f.check(&req.escape_debug().to_string(), check_rejected(srv.addr(), req.as_bytes(), 400));
    }
    f.finish();
}

#[test]
fn malformed_request_lines_and_headers_get_400() {
    let srv = Server::start("");
    let mut f = Failures::new();
    let cases: &[&[u8]] = &[
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Foo : y\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Foo: a\r\n b\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Foo: a\r\n\tb\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\n Host: x\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Foo: a\rb\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX(Foo): y\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX@Foo: y\r\n\r\n",
        b"GET /file.txt HTTP/1.1\r\nHost: x\r\nX\"Foo: y\r\n\r\n",
    ];
    for req in cases {
        f.check(&show(req), check_rejected(srv.addr(), req, 400));
    }
    f.finish();
}

#[test]
fn body_framing_errors_get_400() {
    let srv = Server::start("");
    let mut f = Failures::new();
    let cases: &[&str] = &[
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    ];
    for req in cases {
        f.check(&req.escape_debug().to_string(), check_rejected(srv.addr(), req.as_bytes(), 400));
    }
    f.finish();
}

/// After a request whose body turns out malformed or too large, the server may already
/// have answered it (it answers a GET at the end of the head and discards the body after).
/// Either way the body must never be taken as a request, and the connection must close:
/// accepted are a rejection (`statuses`, `Connection: close`, EOF), or the file followed by
/// EOF (or by a rejection, then EOF) - never the smuggled `/p2.txt`.
fn check_poisoned_body(addr: std::net::SocketAddr, req: &[u8], statuses: &[u16]) -> Result<(), String> {
    let mut s = connect(addr);
    raw_lenient(&mut s, req);
    let r = try_read_response(&mut s, false).map_err(|e| format!("no response: {e}"))?;
    if statuses.contains(&r.status) {
        if !r.closes() {
            return Err(format!("expected `Connection: close`:\n{}", r.describe()));
        }
        return check_closed(&mut s, IO_TIMEOUT).map(|_| ());
    }
    if r.status != 200 || r.body != FILE_TXT {
        return Err(format!("expected one of {statuses:?}, or 200 with the file:\n{}", r.describe()));
    }
    let mut rest = Vec::new();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    match std::io::Read::read_to_end(&mut s, &mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => return Err(format!("after the 200, the connection stayed open ({e}); got \"{}\"", show(&rest))),
    }
    if rest.windows(6).any(|w| w == b"page 2") {
        return Err(format!("THE BODY WAS PARSED AS A REQUEST: \"{}\"", show(&rest)));
    }
    if !(rest.is_empty() || statuses.iter().any(|st| rest.starts_with(format!("HTTP/1.1 {st}").as_bytes()))) {
        return Err(format!("unexpected bytes after the 200: \"{}\"", show(&rest)));
    }
    Ok(())
}

const SMUGGLED: &str = "GET /p2.txt HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn bad_chunked_framing_and_overflowing_lengths_are_rejected() {
    let srv = Server::start("");
    let mut f = Failures::new();
    let te = "GET /file.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (req, statuses) in [
        (format!("{te}zz\r\n{SMUGGLED}"), &[400][..]),
        (format!("{te}ffffffffffffffffffff\r\nhello\r\n0\r\n\r\n{SMUGGLED}"), &[400, 413][..]),
        (format!("{te}5\r\nhelloXX{SMUGGLED}"), &[400][..]),
        (format!("{te}-5\r\nhello\r\n0\r\n\r\n{SMUGGLED}"), &[400][..]),
        (
            format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n{SMUGGLED}"),
            &[400, 413][..],
        ),
        (format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello{SMUGGLED}"), &[400][..]),
        (format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\nhello{SMUGGLED}"), &[400][..]),
        (format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!{SMUGGLED}"), &[400][..]),
    ] {
        f.check(&req.escape_debug().to_string(), check_poisoned_body(srv.addr(), req.as_bytes(), statuses));
    }
    f.finish();
}

#[test]
fn chunked_body_over_max_body_discard_closes() {
    let srv = Server::start("[http]\nmax_body_discard = 1024");
    let mut req = b"GET /file.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..4 {
        req.extend_from_slice(b"200\r\n");
        req.extend_from_slice(&[b'z'; 0x200]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    req.extend_from_slice(SMUGGLED.as_bytes());
    check_poisoned_body(srv.addr(), &req, &[413]).unwrap();
}

#[test]
fn two_identical_content_lengths_are_accepted() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(
        &mut s,
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello\
         GET /p4.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(4));
}

/// The body of a GET is skipped, not parsed as a request (request smuggling).
#[test]
fn get_body_with_content_length_is_skipped() {
    let srv = Server::start("");
    let mut s = srv.connect();
    let smuggled = "GET /p2.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    raw(
        &mut s,
        format!(
            "GET /p0.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{smuggled}\
             GET /p1.txt HTTP/1.1\r\nHost: x\r\n\r\n",
            smuggled.len()
        ),
    );
    expect_body_skipped(&mut s, "the body");
}

/// After `GET /p0.txt` with a body hiding `GET /p2.txt`, then `GET /p1.txt`: the answers are
/// p0 and p1 only (`what` was skipped, not parsed), and the connection still works.
fn expect_body_skipped(s: &mut std::net::TcpStream, what: &str) {
    let r = read_response(s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(0));
    let r = read_response(s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(1), "{what} was parsed as a request");
    raw(s, "GET /p3.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = read_response(s);
    assert_eq!(r.body, page(3), "an extra response was queued: {r:?}");
    expect_closed(s);
}

#[test]
fn get_body_with_chunked_encoding_is_skipped() {
    let srv = Server::start("");
    let mut s = srv.connect();
    let smuggled = "GET /p2.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    raw(
        &mut s,
        format!(
            "GET /p0.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n\
             GET /p1.txt HTTP/1.1\r\nHost: x\r\n\r\n",
            smuggled.len()
        ),
    );
    expect_body_skipped(&mut s, "the chunked body");
}

/// RFC 9112 §7.1: recipients must parse chunk extensions and trailer fields.
#[test]
fn chunked_body_with_extension_and_trailer_is_skipped() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(
        &mut s,
        "GET /p0.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         5;name=value\r\nhello\r\n0\r\nX-Trailer: yes\r\n\r\n\
         GET /p1.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(0));
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(1));
}

#[test]
fn body_over_max_body_discard_gets_413() {
    let srv = Server::start("[http]\nmax_body_discard = 1024");
    check_rejected(srv.addr(), b"GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", 413).unwrap();
    // At the default limit (1 MiB) too.
    let srv = Server::start("");
    check_rejected(srv.addr(), b"GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 413).unwrap();
}

#[test]
fn body_at_max_body_discard_is_skipped() {
    let srv = Server::start("[http]\nmax_body_discard = 1024");
    let mut s = srv.connect();
    let mut req = b"GET /p0.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n".to_vec();
    req.extend_from_slice(&[b'x'; 1024]);
    req.extend_from_slice(b"GET /p1.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    raw(&mut s, &req);
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(0));
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(1));
}

#[test]
fn long_uri_gets_414() {
    let srv = Server::start("");
    let req = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000));
    check_rejected(srv.addr(), req.as_bytes(), 414).unwrap();
    // Just under max_uri_bytes (8192): an ordinary 404.
    let r = srv.exchange(format!("GET /{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "a".repeat(8000)));
    assert_eq!(r.status, 404, "{r:?}");
}

#[test]
fn large_head_gets_431() {
    let srv = Server::start("");
    let req = format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(20 * 1024));
    check_rejected(srv.addr(), req.as_bytes(), 431).unwrap();
    // A 15 000-byte head is within max_header_bytes (16384).
    let req =
        format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n", "b".repeat(15_000));
    let r = srv.exchange(req);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn date_header_advances() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(&mut s, get_req("/file.txt"));
    let d1 = parse_http_date(read_response(&mut s).header("Date").unwrap()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    raw(&mut s, get_req("/file.txt"));
    let d2 = parse_http_date(read_response(&mut s).header("Date").unwrap()).unwrap();
    assert!(d2 >= d1 + 2, "the Date header is stale: {d1} then {d2} 2.1 s later");
}

#[test]
fn changed_files_are_picked_up() {
    let srv = Server::start("");
    let r = srv.get("/p5.txt");
    assert_eq!(r.body, page(5));
    // Rewritten in place with a different size.
    std::fs::write(srv.root().join("p5.txt"), b"rewritten in place\n").unwrap();
    // Replaced by rename (a new inode).
    let tmp = srv.dir().join("p6.new");
    std::fs::write(&tmp, b"replaced by rename\n").unwrap();
    std::fs::rename(&tmp, srv.root().join("p6.txt")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let (a, b) = (srv.get("/p5.txt"), srv.get("/p6.txt"));
        if a.body == b"rewritten in place\n" && b.body == b"replaced by rename\n" {
            assert_eq!(a.header("Content-Length"), Some("19"), "{a:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "stale content 3 s after a change:\n{a:?}\n{b:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A deleted file is gone.
    std::fs::remove_file(srv.root().join("p7.txt")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let r = srv.get("/p7.txt");
        if r.status == 404 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "deleted file still served 3 s later: {r:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn too_many_headers_get_431_and_the_limit_itself_is_fine() {
    let srv = Server::start("");
    let headers = |n: usize| -> String { (0..n).map(|i| format!("X-H{i}: v\r\n")).collect::<String>() };
    // Host + 100 others = 101 headers.
    let req = format!("GET /file.txt HTTP/1.1\r\nHost: x\r\n{}\r\n", headers(100));
    check_rejected(srv.addr(), req.as_bytes(), 431).unwrap();
    // Host + 99 others = exactly max_headers.
    let req = format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}\r\n", headers(98));
    let r = srv.exchange(&req);
    assert_eq!(r.status, 200, "100 headers is within max_headers = 100: {r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn expect_100_continue_never_hangs() {
    let srv = Server::start("");
    let mut s = srv.connect();
    s.set_read_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
    raw(&mut s, "GET /file.txt HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    let mut r = try_read_response(&mut s, false)
        .unwrap_or_else(|e| panic!("no response within 3 s to Expect: 100-continue: {e}"));
    if r.status == 100 {
        raw(&mut s, "hello");
        r = try_read_response(&mut s, false).unwrap_or_else(|e| panic!("no final response after 100 Continue: {e}"));
    }
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

fn large_file_roundtrip(extra: &str) {
    let big1 = pseudo_random_bytes(1 << 20, 1);
    let big5 = pseudo_random_bytes(5 << 20, 5);
    let edge = pseudo_random_bytes(32768, 7);
    let edge1 = pseudo_random_bytes(32769, 9);
    let (b1, b5, e0, e1) = (big1.clone(), big5.clone(), edge.clone(), edge1.clone());
    let srv = Server::builder()
        .config(extra)
        .setup(move |_, root| {
            std::fs::write(root.join("big1.bin"), &b1).unwrap();
            std::fs::write(root.join("big5.bin"), &b5).unwrap();
            std::fs::write(root.join("edge.bin"), &e0).unwrap();
            std::fs::write(root.join("edge1.bin"), &e1).unwrap();
        })
        .start();
    let mut s = srv.connect();
    for (path, want) in
        [("/big1.bin", &big1), ("/big5.bin", &big5), ("/edge.bin", &edge), ("/edge1.bin", &edge1), ("/big1.bin", &big1)]
    {
        raw(&mut s, get_req(path));
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "GET {path}: {}", r.describe());
        assert_eq!(r.header("Content-Type"), Some("application/octet-stream"), "{r:?}");
        assert_eq!(r.body.len(), want.len(), "GET {path}: wrong length");
        assert!(r.body == *want, "GET {path}: body differs from the file");
        raw(&mut s, format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n"));
        let h = read_head_response(&mut s);
        assert_eq!(h.status, 200, "HEAD {path}: {h:?}");
        assert_eq!(h.header("Content-Length"), Some(want.len().to_string().as_str()), "HEAD {path}: {h:?}");
    }
    // Nothing stray after the last HEAD.
    check_still_open(&mut s).unwrap();
}

#[test]
fn large_files_with_sendfile() {
    large_file_roundtrip("sendfile = true");
}

#[test]
fn large_files_without_sendfile() {
    large_file_roundtrip("sendfile = false");
}
