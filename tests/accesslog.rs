//! The access log: combined, common and JSON formats, escaping, append, off.

mod common;

use common::json::{parse_json, Json};

use std::fs;
use std::time::Duration;

use common::*;

#[test]
fn combined_log_has_one_line_per_request() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(
        &mut s,
        "GET /file.txt HTTP/1.1\r\nHost: localhost\r\nReferer: http://example.com/from\r\n\
         User-Agent: test-agent/1.0\r\n\r\n",
    );
    let r1 = read_response(&mut s);
    assert_eq!(r1.status, 200, "{r1:?}");
    raw(&mut s, "GET /missing.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let r2 = read_response(&mut s);
    assert_eq!(r2.status, 404, "{r2:?}");
    raw(&mut s, "HEAD /p1.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let r3 = read_head_response(&mut s);
    assert_eq!(r3.status, 200, "{r3:?}");

    let lines = srv.wait_access_log(3);
    assert_eq!(lines.len(), 3, "expected 3 lines: {lines:?}");
    let now = unix_now() as i64;
    let parsed: Vec<LogLine> = lines.iter().map(|l| parse_combined(l).unwrap_or_else(|e| panic!("{e}"))).collect();
    for p in &parsed {
        assert_eq!((p.host.as_str(), p.ident.as_str(), p.user.as_str()), ("127.0.0.1", "-", "-"));
        let t = parse_clf_time(&p.time).unwrap() as i64;
        assert!((t - now).abs() < 120, "log time {:?} is not now", p.time);
    }
    assert_eq!(parsed[0].request, "GET /file.txt HTTP/1.1");
    assert_eq!(parsed[0].status, 200);
    assert_eq!(parsed[0].bytes, "13");
    assert_eq!(parsed[0].referer, "http://example.com/from");
    assert_eq!(parsed[0].user_agent, "test-agent/1.0");

    assert_eq!(parsed[1].request, "GET /missing.txt HTTP/1.1");
    assert_eq!(parsed[1].status, 404);
    assert_eq!(parsed[1].bytes, r2.body.len().to_string());
    assert_eq!(parsed[1].referer, "-");
    assert_eq!(parsed[1].user_agent, "-");

    assert_eq!(parsed[2].request, "HEAD /p1.txt HTTP/1.1");
    assert_eq!(parsed[2].status, 200);
    assert!(parsed[2].bytes == "0" || parsed[2].bytes == "-", "HEAD sends no body bytes: {:?}", lines[2]);

    // No extra lines turn up later.
    std::thread::sleep(Duration::from_millis(1200));
    let again = srv.wait_access_log(0);
    assert_eq!(again.len(), 3, "{again:?}");
}

#[test]
fn quotes_in_logged_fields_are_escaped() {
    let srv = Server::start("");
    let r = srv.exchange(
        "GET /file.txt?q=\"x\" HTTP/1.1\r\nHost: localhost\r\nUser-Agent: a\"b\r\n\
         Referer: r\"f\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
    let lines = srv.wait_access_log(1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let p = parse_combined(&lines[0]).unwrap();
    assert_eq!(p.request, "GET /file.txt?q=\\x22x\\x22 HTTP/1.1", "{:?}", lines[0]);
    assert_eq!(p.user_agent, "a\\x22b", "{:?}", lines[0]);
    assert_eq!(p.referer, "r\\x22f", "{:?}", lines[0]);
    assert_eq!(p.status, 200);
}

#[test]
fn control_bytes_never_reach_the_log_raw() {
    let srv = Server::start("");
    // A control byte in the target: rejected, and if logged, escaped.
    let r = srv.exchange(b"GET /a\x01b\x1b[31m HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 400, "{r:?}");
    // Then a normal request, so there is something to wait for.
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut lines = srv.wait_access_log(1);
    while !lines.iter().any(|l| l.contains("GET /file.txt")) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        lines = srv.wait_access_log(0);
    }
    let text = fs::read(srv.access_log_path()).unwrap_or_default();
    for (i, b) in text.iter().enumerate() {
        assert!(
            *b == b'\n' || (*b >= 0x20 && *b != 0x7f),
            "raw control byte {b:#04x} at offset {i} of the access log: {:?}",
            String::from_utf8_lossy(&text)
        );
    }
    for l in &lines {
        parse_combined(l).unwrap();
    }
    assert!(lines.iter().any(|l| l.contains("\"GET /file.txt HTTP/1.1\" 200 13")), "{lines:?}");
    // The rejected request is logged too, its control bytes escaped `\xHH`-style.
    let bad = lines
        .iter()
        .map(|l| parse_combined(l).unwrap())
        .find(|p| p.status == 400)
        .unwrap_or_else(|| panic!("the 400 is not logged: {lines:?}"));
    assert!(bad.request.eq_ignore_ascii_case("GET /a\\x01b\\x1b[31m HTTP/1.1"), "request field {:?}", bad.request);
}

/// A backslash must itself be escaped, or a field ending in `\` would swallow its closing
/// quote and a logged `\x22` would be ambiguous.
#[test]
fn backslashes_in_logged_fields_are_escaped() {
    let srv = Server::start("");
    let r = srv.exchange(
        "GET /file.txt?a\\x22 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ua\\\r\n\
         Connection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{r:?}");
    let lines = srv.wait_access_log(1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let p = parse_combined(&lines[0]).unwrap_or_else(|e| panic!("{e}"));
    let esc = |s: &str| [s.replace('\\', "\\x5c"), s.replace('\\', "\\x5C"), s.replace('\\', "\\\\")];
    assert!(esc("GET /file.txt?a\\x22 HTTP/1.1").contains(&p.request), "{:?}", lines[0]);
    assert!(esc("ua\\").contains(&p.user_agent), "{:?}", lines[0]);
}

#[test]
fn common_format_has_no_referer_or_agent() {
    let srv = Server::start("[log]\nformat = \"common\"");
    let r = srv.exchange("GET /file.txt HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ua\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200, "{r:?}");
    let lines = srv.wait_access_log(1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(parse_combined(&lines[0]).is_err(), "common has 7 fields: {lines:?}");
    let p = parse_combined(&format!("{} \"-\" \"-\"", lines[0])).unwrap();
    assert_eq!(p.host, "127.0.0.1");
    assert_eq!(p.request, "GET /file.txt HTTP/1.1");
    assert_eq!(p.status, 200);
    assert_eq!(p.bytes, "13");
}

#[test]
fn access_log_is_appended_to() {
    let srv = Server::builder().setup(|dir, _| fs::write(dir.join("access.log"), "previous line\n").unwrap()).start();
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    let lines = srv.wait_access_log(2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], "previous line");
    assert!(lines[1].contains("\"GET /file.txt HTTP/1.1\" 200 13"), "{lines:?}");
}

#[test]
fn access_log_off_writes_nothing() {
    let srv = Server::start("[log]\naccess = \"off\"");
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!srv.access_log_path().exists());
    assert!(!srv.stdout_text().contains("GET /file.txt"), "{}", srv.stdout_text());
    // No file named "off" either, anywhere we can see.
    assert!(!srv.dir().join("off").exists());
    assert!(!srv.root().join("off").exists());
}

#[test]
fn json_format_gives_one_object_per_line() {
    let srv = Server::start("[log]\nformat = \"json\"");
    let r = srv.exchange(
        "GET /file.txt HTTP/1.1\r\nHost: localhost\r\nUser-Agent: a\"b\\c\r\n\
         Connection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = srv.get("/missing.txt");
    assert_eq!(r.status, 404, "{r:?}");
    let lines = srv.wait_access_log(2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, status) in lines.iter().zip([200.0, 404.0]) {
        assert!(line.starts_with('{') && line.ends_with('}'), "{line:?}");
        let obj = flat_object(line);
        assert!(
            obj.iter().any(|(k, v)| k == "status" && *v == Json::Num(status)),
            "expected \"status\":{status} in {line:?}"
        );
        assert!(
            obj.iter().any(|(_, v)| matches!(v, Json::Str(s) if s.contains("/file.txt") || s.contains("/missing.txt"))),
            "the path is missing from {line:?}"
        );
    }
    let first = flat_object(&lines[0]);
    assert!(
        first.iter().any(|(_, v)| *v == Json::Str("a\"b\\c".into())),
        "the user agent a\"b\\c is not logged intact: {:?}",
        lines[0]
    );
}

/// The members of a log line that must be one flat JSON object (scalar values only).
fn flat_object(line: &str) -> Vec<(String, Json)> {
    match parse_json(line) {
        Ok(Json::Obj(members)) => {
            for (k, v) in &members {
                assert!(!matches!(v, Json::Obj(_) | Json::Arr(_)), "{k} is not a scalar in {line:?}");
            }
            members
        }
        other => panic!("not a JSON object ({other:?}): {line:?}"),
    }
}
