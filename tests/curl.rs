//! curl as a real client.

mod common;

use common::*;

fn url(srv: &Server, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", srv.port())
}

fn curl_dump(args: &[&str]) -> Response {
    let mut all = vec!["-o", "-", "-D", "-"];
    all.extend_from_slice(args);
    let o = curl(&all);
    assert_eq!(o.code, Some(0), "curl {args:?} failed: {o:?}");
    split_curl_dump(&o.stdout).unwrap_or_else(|| panic!("cannot parse curl output {:?}", o.stdout_text()))
}

#[test]
fn curl_get() {
    let srv = Server::start("");
    let r = curl_dump(&[&url(&srv, "/file.txt")]);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
    r.check_common(false).unwrap();
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("Last-Modified"), Some(FILE_TXT_LAST_MODIFIED));
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn curl_head() {
    let srv = Server::start("");
    let o = curl(&["-I", &url(&srv, "/style.css")]);
    assert_eq!(o.code, Some(0), "{o:?}");
    let r = split_curl_dump(&o.stdout).expect("a response head");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("Content-Length"), Some(STYLE_CSS.len().to_string().as_str()));
    assert_eq!(r.header("Content-Type"), Some("text/css; charset=utf-8"));
    assert!(r.body.is_empty(), "HEAD returned a body: {r:?}");
}

#[test]
fn curl_http10() {
    let srv = Server::start("");
    let r = curl_dump(&["--http1.0", &url(&srv, "/p3.txt")]);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(3));
}

#[test]
fn curl_reuses_one_connection_for_two_urls() {
    let srv = Server::start("");
    let o = curl(&["-v", "-o", "/dev/null", "-o", "/dev/null", &url(&srv, "/p1.txt"), &url(&srv, "/p2.txt")]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stderr.contains("Re-using existing connection") || o.stderr.contains("Reusing existing"),
        "curl did not reuse the connection:\n{}",
        o.stderr
    );
    assert_eq!(o.stderr.matches("Connected to").count(), 1, "{}", o.stderr);
    let lines = srv.wait_access_log(2);
    assert_eq!(lines.len(), 2, "{lines:?}");
}

#[test]
fn curl_path_as_is_traversal_never_escapes() {
    let srv = Server::start("");
    let mut f = Failures::new();
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/dir/../../secret.txt",
        "/./../outside/secret.txt",
        "/..%2f..%2fsecret.txt",
    ] {
        let o = curl(&["--path-as-is", "-o", "-", "-D", "-", &url(&srv, path)]);
        let r = split_curl_dump(&o.stdout);
        f.check(
            path,
            match r {
                _ if o.stdout.windows(SECRET_MARKER.len()).any(|w| w == SECRET_MARKER) => {
                    Err(format!("SERVED A FILE OUTSIDE THE ROOT: {:?}", o.stdout_text()))
                }
                Some(r) if r.status == 400 => Ok(()),
                Some(r) => Err(format!("expected 400:\n{}", r.describe())),
                None => Err(format!("no response: {o:?}")),
            },
        );
    }
    f.finish();
}
