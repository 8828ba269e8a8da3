//! CORS with `[[headers]]` rules (the recipe in docs/site.md): the rules apply to `OPTIONS` as to
//! `GET`, so a browser's preflight gets the same `Access-Control-*` fields as the resource.
//! Checked with curl's real preflight requests (`-X OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`), over HTTP/1.1 and (feature `http2`) h2c.

mod common;

use std::fs;

use common::*;

/// The CORS recipe of docs/site.md, with the API's origin `origin`, on the test fixture plus a font
/// and a JSON file; the access log to `{dir}/access.log`.
fn server_for(origin: &str) -> Server {
    Server::builder()
        .raw_config(&format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{{root}}\"\n\
             [log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n\
             [[headers]]\nmatch = \"/fonts/**\"\n\
             headers = {{ \"Access-Control-Allow-Origin\" = \"*\" }}\n\
             [[headers]]\nmatch = \"/api/**\"\n\
             headers = {{ \"Access-Control-Allow-Origin\" = \"{origin}\", \
             \"Access-Control-Allow-Methods\" = \"GET, HEAD\", \
             \"Access-Control-Allow-Headers\" = \"Authorization, Content-Type\", \
             \"Access-Control-Max-Age\" = \"86400\", \"Vary\" = \"Origin\" }}\n\
             [[headers]]\nmime = \"application/json\"\n\
             headers = {{ \"X-Content-Type-Options\" = \"nosniff\" }}\n",
        ))
        .setup(|_, root| {
            fs::create_dir_all(root.join("fonts")).unwrap();
            fs::write(root.join("fonts/site.woff2"), b"wOF2 not really a font").unwrap();
            fs::create_dir_all(root.join("api/v1")).unwrap();
            fs::write(root.join("api/v1/items.json"), b"[1,2,3]\n").unwrap();
        })
        .start()
}

fn server() -> Server {
    server_for("https://app.example")
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

/// Chromium's own preflight: a page on one origin fetches a font and a JSON file (with an
/// `Authorization` header, which needs a preflight) from a server on another origin, and a
/// file no rule gives CORS fields to, which the browser must block (so the check can fail).
#[test]
fn chromium_fetches_the_font_and_the_json_across_origins() {
    let Some(bin) = common::chromium::chromium() else { return };
    let page = Server::builder().start();
    let origin = format!("http://127.0.0.1:{}", page.port());
    let api = server_for(&origin);
    let html = format!(
        r#"<!DOCTYPE html><html><body><pre id="out">pending</pre><script>
const other = "http://127.0.0.1:{port}";
async function get(what, path, init) {{
  try {{
    const r = await fetch(other + path, init);
    return what + " " + r.status + " " + (await r.text()).trim().length;
  }} catch (e) {{
    return what + " blocked";
  }}
}}
(async () => {{
  const lines = [
    await get("font", "/fonts/site.woff2", {{}}),
    await get("json", "/api/v1/items.json", {{ headers: {{ "Authorization": "Bearer t" }} }}),
    await get("other", "/file.txt", {{}}),
  ];
  document.getElementById("out").textContent = lines.join(";");
}})();
</script></body></html>
"#,
        port = api.port()
    );
    fs::write(page.root().join("cors.html"), html).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dom = common::chromium::run_chromium(
        &bin,
        scratch.path(),
        &["--virtual-time-budget=5000", "--dump-dom", &format!("{origin}/cors.html")],
    );
    let dom = String::from_utf8_lossy(&dom);
    assert!(dom.contains("font 200 22;json 200 7;other blocked"), "what the page saw: {dom}");
    // The browser sent a real preflight, answered 204, before the GET of the JSON.
    // Four requests: the font, the preflight, the JSON, the blocked file (the access log is
    // written a moment after each response).
    let log = api.wait_access_log(4).join("\n");
    let preflight = log.lines().position(|l| l.contains("\"OPTIONS /api/v1/items.json HTTP/1.1\" 204"));
    let get = log.lines().position(|l| l.contains("\"GET /api/v1/items.json HTTP/1.1\" 200"));
    assert!(preflight.is_some() && preflight < get, "access log:\n{log}");
}
