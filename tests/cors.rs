//! CORS with `[[headers]]` rules (the README's recipe): the rules apply to `OPTIONS` as to
//! `GET`, so a browser's preflight gets the same `Access-Control-*` fields as the resource.
//! Checked with curl's real preflight requests (`-X OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`), over HTTP/1.1 and (feature `http2`) h2c.

mod common;

use std::fs;

use common::*;

/// The README's CORS recipe, on the test fixture plus a font and a JSON file.
fn server() -> Server {
    Server::builder()
        .raw_config(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{root}\"\n\
             [log]\naccess = \"off\"\nerror = \"-\"\n\
             [[headers]]\nmatch = \"/fonts/**\"\n\
             headers = { \"Access-Control-Allow-Origin\" = \"*\" }\n\
             [[headers]]\nmatch = \"/api/**\"\n\
             headers = { \"Access-Control-Allow-Origin\" = \"https://app.example\", \
             \"Access-Control-Allow-Methods\" = \"GET, HEAD\", \
             \"Access-Control-Allow-Headers\" = \"Authorization, Content-Type\", \
             \"Access-Control-Max-Age\" = \"86400\", \"Vary\" = \"Origin\" }\n\
             [[headers]]\nmime = \"application/json\"\n\
             headers = { \"X-Content-Type-Options\" = \"nosniff\" }\n",
        )
        .setup(|_, root| {
            fs::create_dir_all(root.join("fonts")).unwrap();
            fs::write(root.join("fonts/site.woff2"), b"wOF2 not really a font").unwrap();
            fs::create_dir_all(root.join("api/v1")).unwrap();
            fs::write(root.join("api/v1/items.json"), b"[1,2,3]\n").unwrap();
        })
        .start()
}

fn preflight(srv: &Server, path: &str, extra: &[&str]) -> Response {
    let url = format!("http://127.0.0.1:{}{path}", srv.port());
    let mut args = vec![
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-X",
        "OPTIONS",
        "-H",
        "Origin: https://app.example",
        "-H",
        "Access-Control-Request-Method: GET",
        "-H",
        "Access-Control-Request-Headers: authorization",
    ];
    args.extend_from_slice(extra);
    args.push(&url);
    let o = curl(&args);
    assert_eq!(o.code, Some(0), "curl {args:?}: {o:?}");
    split_curl_dump(&o.stdout).unwrap_or_else(|| panic!("no response from curl {args:?}: {o:?}"))
}

#[test]
fn a_preflight_gets_the_rules_of_its_target() {
    let srv = server();
    let protocols: &[&[&str]] = if cfg!(feature = "http2") { &[&[], &["--http2-prior-knowledge"]] } else { &[&[]] };
    for &extra in protocols {
        let r = preflight(&srv, "/api/v1/items.json", extra);
        assert_eq!(r.status, 204, "{extra:?} {r:?}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some("https://app.example"), "{extra:?} {r:?}");
        assert_eq!(r.header("Access-Control-Allow-Methods"), Some("GET, HEAD"), "{r:?}");
        assert_eq!(r.header("Access-Control-Allow-Headers"), Some("Authorization, Content-Type"), "{r:?}");
        assert_eq!(r.header("Access-Control-Max-Age"), Some("86400"), "{r:?}");
        // A `mime` rule matches by the type the name gives.
        assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"), "{r:?}");
        assert!(r.header("Allow").is_some_and(|a| a.contains("OPTIONS")), "{r:?}");
        // Percent-encoded and dot segments normalize as for GET.
        let r = preflight(&srv, "/api/./v1/%69tems.json", extra);
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some("https://app.example"), "{extra:?} {r:?}");

        let r = preflight(&srv, "/fonts/site.woff2", extra);
        assert_eq!(r.status, 204, "{r:?}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some("*"), "{r:?}");
        assert_eq!(r.header("X-Content-Type-Options"), None, "{r:?}");

        // Outside the rules: Allow alone.
        let r = preflight(&srv, "/file.txt", extra);
        assert_eq!(r.status, 204, "{r:?}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), None, "{r:?}");
    }
}

#[test]
fn the_resource_gets_the_same_fields_as_its_preflight() {
    let srv = server();
    let url = format!("http://127.0.0.1:{}/api/v1/items.json", srv.port());
    let o = curl(&["-D", "-", "-H", "Origin: https://app.example", &url]);
    let r = split_curl_dump(&o.stdout).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"[1,2,3]\n");
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some("https://app.example"), "{r:?}");
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"), "{r:?}");
}

#[test]
fn options_asterisk_gets_allow_alone() {
    let srv = server();
    let r = srv.exchange("OPTIONS * HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 204, "{r:?}");
    assert!(r.header("Allow").is_some(), "{r:?}");
    assert_eq!(r.header("Access-Control-Allow-Origin"), None, "{r:?}");
}
