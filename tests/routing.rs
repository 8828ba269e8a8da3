//! Site routing end to end: `[[redirect]]`/`[[rewrite]]` rules, Netlify-style `_redirects`,
//! hidden paths, clean URLs and the trailing-slash policies, the SPA fallback, and a small
//! generated site (`tests/site/`) served from the README's dozen-line configuration.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::*;

/// A complete config: the test listener, root and logs, then `extra` (tables and arrays).
fn config(extra: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{{root}}\"\n\n[log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n\n{extra}"
    )
}

fn write(root: &Path, rel: &str, data: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// GET (or another method) with extra header lines, on a fresh connection.
fn req(srv: &Server, method: &str, target: &str, headers: &str) -> Response {
    let text = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n");
    let mut s = srv.connect();
    raw(&mut s, text.as_bytes());
    if method == "HEAD" {
        read_head_response(&mut s)
    } else {
        read_response(&mut s)
    }
}

fn get(srv: &Server, target: &str) -> Response {
    req(srv, "GET", target, "")
}

fn expect(f: &mut Failures, srv: &Server, target: &str, status: u16, location: Option<&str>, body: Option<&str>) {
    let r = get(srv, target);
    let mut problems = Vec::new();
    if r.status != status {
        problems.push(format!("status {} (want {status})", r.status));
    }
    if r.header("Location") != location {
        problems.push(format!("Location {:?} (want {location:?})", r.header("Location")));
    }
    if let Some(b) = body {
        if r.body_text() != b {
            problems.push(format!("body {:?} (want {b:?})", r.body_text()));
        }
    }
    f.check(
        target,
        if problems.is_empty() { Ok(()) } else { Err(format!("{}\n{}", problems.join("; "), r.describe())) },
    );
}

#[test]
fn toml_redirects_status_location_query_and_placeholders() {
    let srv = Server::builder()
        .raw_config(&config(
            r#"
[[redirect]]
from = "/old"
to = "/file.txt"

[[redirect]]
from = "/blog/:year/:slug"
to = "/posts/:year-:slug.html"
status = 302

[[redirect]]
from = "/docs/*"
to = "https://docs.example/v2/:splat?src=old"
status = 308

[[redirect]]
from = "/search"
to = "/find?q=all"
status = 307
query = "replace"

[[redirect]]
from = "/see"
to = "/other"
status = 303

[[redirect]]
from = "/x/*"
to = "/:splat"
"#,
        ))
        .start();
    let mut f = Failures::new();
    expect(&mut f, &srv, "/old", 301, Some("/file.txt"), None);
    expect(&mut f, &srv, "/old/", 301, Some("/file.txt"), None);
    expect(&mut f, &srv, "/old?a=1&b=2", 301, Some("/file.txt?a=1&b=2"), None);
    expect(&mut f, &srv, "/blog/2024/hello", 302, Some("/posts/2024-hello.html"), None);
    expect(&mut f, &srv, "/blog/2024/h%20i", 302, Some("/posts/2024-h%20i.html"), None);
    expect(&mut f, &srv, "/blog/2024", 404, None, None);
    expect(&mut f, &srv, "/docs/a/b?x=1", 308, Some("https://docs.example/v2/a/b?src=old&x=1"), None);
    expect(&mut f, &srv, "/search?q=mine", 307, Some("/find?q=all"), None);
    expect(&mut f, &srv, "/see", 303, Some("/other"), None);
    // Never a protocol-relative Location, never a header injected through the path.
    expect(&mut f, &srv, "/x/", 301, Some("/"), None);
    expect(&mut f, &srv, "/x//evil.example/", 301, Some("/evil.example/"), None);
    expect(&mut f, &srv, "/x/a%20%22%3Cb%3E%3F", 301, Some("/a%20%22%3Cb%3E%3F"), None);
    expect(&mut f, &srv, "/x/a%0d%0aSet-Cookie:%20y=1", 400, None, None);
    // Everything else is served as before.
    expect(&mut f, &srv, "/file.txt", 200, None, Some(std::str::from_utf8(FILE_TXT).unwrap()));
    expect(&mut f, &srv, "/dir", 301, Some("/dir/"), None);
    f.finish();
    // Every redirect status has its reason phrase.
    for (target, line) in [
        ("/old", "HTTP/1.1 301 Moved Permanently"),
        ("/blog/1/2", "HTTP/1.1 302 Found"),
        ("/see", "HTTP/1.1 303 See Other"),
        ("/search", "HTTP/1.1 307 Temporary Redirect"),
        ("/docs/x", "HTTP/1.1 308 Permanent Redirect"),
    ] {
        assert_eq!(get(&srv, target).status_line, line);
    }

    // curl sees the same, and follows a relative redirect.
    let url = format!("http://127.0.0.1:{}/old?k=v", srv.port());
    let o = curl(&["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", &url]);
    assert_eq!(o.stdout_text(), format!("301 http://127.0.0.1:{}/file.txt?k=v", srv.port()), "{o:?}");
    let o = curl(&["-L", &url]);
    assert_eq!(o.stdout, FILE_TXT, "{o:?}");
}

#[test]
fn rewrites_are_invisible_and_go_through_the_whole_pipeline() {
    let srv = Server::builder()
        .raw_config(&config(
            r#"
[errors]
404 = "missing.html"

[[headers]]
match = "/dir/**"
headers = { "X-Dir" = "yes" }

[[rewrite]]
from = "/alias"
to = "/dir/file.txt"

[[rewrite]]
from = "/u/:name"
to = "/dir/:name"

[[rewrite]]
from = "/gone"
to = "/nothing-here.txt"

[[rewrite]]
from = "/sub"
to = "/dir"
"#,
        ))
        .setup(|_, root| {
            write(root, "missing.html", "custom missing page\n");
            // A precompressed sibling of the rewrite's target.
            fs::write(root.join("dir/file.txt.gz"), b"gzipped!").unwrap();
        })
        .start();
    let r = get(&srv, "/alias");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.body, DIR_FILE);
    assert_eq!(r.header("Location"), None);
    assert_eq!(r.header("X-Dir"), Some("yes"), "[[headers]] sees the path served: {}", r.describe());
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    // Preconditions and ranges apply to the file served.
    let etag = r.header("ETag").unwrap().to_string();
    let r = req(&srv, "GET", "/alias", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(r.status, 304, "{}", r.describe());
    let r = req(&srv, "GET", "/alias", "Range: bytes=0-3\r\n");
    assert_eq!(r.status, 206, "{}", r.describe());
    assert_eq!(r.body, &DIR_FILE[..4]);
    let r = req(&srv, "GET", "/alias", "Accept-Encoding: gzip\r\n");
    assert_eq!((r.status, r.header("Content-Encoding")), (200, Some("gzip")), "{}", r.describe());
    assert_eq!(r.body, b"gzipped!");
    // Placeholders, and a directory target served through its index, not redirected.
    let r = get(&srv, "/u/file.txt");
    assert_eq!((r.status, r.body.as_slice()), (200, DIR_FILE), "{}", r.describe());
    let r = get(&srv, "/sub");
    assert_eq!((r.status, r.body.as_slice(), r.header("Location")), (200, DIR_INDEX, None), "{}", r.describe());
    // A rewrite to a missing file is a 404 with the error page.
    let r = get(&srv, "/gone");
    assert_eq!((r.status, r.body_text().as_str()), (404, "custom missing page\n"), "{}", r.describe());
    // The access log shows what the client asked for.
    let lines = srv.wait_access_log(7);
    assert!(lines[0].contains("\"GET /alias HTTP/1.1\" 200"), "{lines:?}");
}

#[test]
fn rules_scoped_to_a_vhost_apply_only_there() {
    let srv = Server::builder()
        .raw_config(&config(
            r#"
[[vhost]]
host = "a.example"
root = "{dir}/a"

[[redirect]]
from = "/where"
to = "/a-only"
host = "a.example"

[[redirect]]
from = "/all"
to = "/everyone"
"#,
        ))
        .setup(|dir, _| write(dir, "a/index.html", "a\n"))
        .start();
    let on = |host: &str, path: &str| {
        let mut s = srv.connect();
        raw(&mut s, format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
        read_response(&mut s)
    };
    let r = on("a.example:8080", "/where");
    assert_eq!((r.status, r.header("Location")), (301, Some("/a-only")), "{}", r.describe());
    assert_eq!(on("localhost", "/where").status, 404);
    assert_eq!(on("a.example", "/all").header("Location"), Some("/everyone"));
    assert_eq!(on("localhost", "/all").header("Location"), Some("/everyone"));
}

#[test]
fn bad_rules_are_load_errors_naming_key_and_line() {
    for (rules, key, line) in [
        ("[[redirect]]\nfrom = \"/a/*/b\"\nto = \"/c\"\n", "redirect.from", 10),
        ("[[redirect]]\nfrom = \"/a/:x\"\nto = \"/c/:y\"\n", "redirect.to", 11),
        ("[[redirect]]\nfrom = \"/a\"\nto = \"//evil.example/\"\n", "redirect.to", 11),
        ("[[redirect]]\nfrom = \"/a\"\nto = \"/b\"\nstatus = 200\n", "redirect.status", 12),
        ("[[rewrite]]\nfrom = \"/a\"\nto = \"https://elsewhere.example/\"\n", "rewrite.to", 11),
        ("[[redirect]]\nfrom = \"/a\"\nto = \"/b\"\nhost = \"nowhere.example\"\n", "redirect.host", 12),
        ("[routing]\ntrailing_slash = \"sometimes\"\n", "routing.trailing_slash", 10),
        ("[routing]\nfallback_status = 302\n", "routing.fallback_status", 10),
        ("[routing]\nfallback_status = 418\n", "routing.fallback_status", 10),
    ] {
        let dir = tempfile::TempDir::new().unwrap();
        let text = config(rules)
            .replace("{root}", dir.path().to_str().unwrap())
            .replace("{dir}", dir.path().to_str().unwrap());
        let cfg = dir.path().join("f.toml");
        fs::write(&cfg, &text).unwrap();
        let o = run_program(BIN, &["--check-config", "--config", cfg.to_str().unwrap()], None);
        let err = o.stderr.clone();
        assert_ne!(o.code, Some(0), "{rules:?} was accepted");
        assert!(err.contains(key) && err.contains(&format!("line {line}")), "{rules:?}: {err}");
    }
}

#[test]
fn redirects_file_rules_shadowing_force_and_hidden_files() {
    let srv = Server::builder()
        .raw_config(&config(
            "[routing]\nredirects_file = \"_redirects\"\nclean_urls = true\nhidden = [\"/drafts/**\", \"**.map\", \"/private.html\"]\n",
        ))
        .setup(|_, root| {
            write(
                root,
                "_redirects",
                "# Netlify-style rules\n\
                 /home              /index.html        301\n\
                 /news/:year/*      /archive/:year/:splat 302\n\
                 /file.txt          /elsewhere         301\n\
                 /style.css         /dir/file.txt      200!\n\
                 /app/*             /dir/index.html    200\n\
                 /nf/*              /missing.html      404\n\
                 /api/*             https://api.example/:splat 200\n\
                 /peek              /_redirects        200\n",
            );
            write(root, "missing.html", "not here\n");
            write(root, "drafts/x.html", "draft\n");
            write(root, "app.js.map", "{}\n");
            write(root, "private.html", "private\n");
        })
        .start();
    let mut f = Failures::new();
    expect(&mut f, &srv, "/home", 301, Some("/index.html"), None);
    expect(&mut f, &srv, "/news/2024/05/x?y=1", 302, Some("/archive/2024/05/x?y=1"), None);
    // Shadowing: a line without ! does not apply over an existing file; with ! it does.
    expect(&mut f, &srv, "/file.txt", 200, None, Some(std::str::from_utf8(FILE_TXT).unwrap()));
    expect(&mut f, &srv, "/style.css", 200, None, Some(std::str::from_utf8(DIR_FILE).unwrap()));
    expect(&mut f, &srv, "/app/users/42", 200, None, Some(std::str::from_utf8(DIR_INDEX).unwrap()));
    expect(&mut f, &srv, "/nf/thing", 404, None, Some("not here\n"));
    // The proxy line was skipped with a warning.
    expect(&mut f, &srv, "/api/x", 404, None, None);
    // Never served: the rules file (also through a rewrite), and the hidden patterns.
    expect(&mut f, &srv, "/_redirects", 404, None, None);
    expect(&mut f, &srv, "/peek", 404, None, None);
    expect(&mut f, &srv, "/drafts/x.html", 404, None, None);
    expect(&mut f, &srv, "/app.js.map", 404, None, None);
    expect(&mut f, &srv, "/private.html", 404, None, None);
    expect(&mut f, &srv, "/private", 404, None, None);
    f.finish();
    let warned = wait_until(Duration::from_secs(3), || srv.stderr_text().contains("line 8: skipped"));
    assert!(warned, "no warning for the proxy line: {}", srv.stderr_text());
    assert!(srv.stderr_text().contains("_redirects: line 8: skipped"), "{}", srv.stderr_text());
}

#[test]
fn a_malformed_redirects_file_is_refused_with_its_line() {
    let dir = tempfile::TempDir::new().unwrap();
    let root = dir.path().join("root");
    write(&root, "_redirects", "/ok /fine\n\n# note\n/broken\n");
    let cfg = dir.path().join("f.toml");
    let text = config("[routing]\nredirects_file = \"_redirects\"\n")
        .replace("{root}", root.to_str().unwrap())
        .replace("{dir}", dir.path().to_str().unwrap());
    fs::write(&cfg, text).unwrap();
    let o = run_program(BIN, &["--check-config", "--config", cfg.to_str().unwrap()], None);
    assert_ne!(o.code, Some(0), "{o:?}");
    let err = o.stderr.clone();
    assert!(
        err.contains(&format!("{}: line 4: ", root.join("_redirects").display())) && err.contains("from to"),
        "{err}"
    );
    // A malformed _headers line too.
    fs::write(root.join("_redirects"), "/ok /fine\n").unwrap();
    write(&root, "_headers", "/css/*\n  Cache-Control public\n");
    let text = config("[routing]\nredirects_file = \"_redirects\"\nheaders_file = \"_headers\"\n")
        .replace("{root}", root.to_str().unwrap())
        .replace("{dir}", dir.path().to_str().unwrap());
    let cfg2 = dir.path().join("g.toml");
    fs::write(&cfg2, text).unwrap();
    let o = run_program(BIN, &["--check-config", "--config", cfg2.to_str().unwrap()], None);
    assert_ne!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.contains(&format!("{}: line 2: ", root.join("_headers").display())), "{}", o.stderr);
    fs::write(root.join("_redirects"), "/ok /fine\n\n# note\n/broken\n").unwrap();
    // The server does not start either.
    let o = run_program(BIN, &["--config", cfg.to_str().unwrap()], None);
    assert_ne!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.clone().contains("_redirects: line 4"), "{}", o.stderr.clone());
    // A line the server skips (proxying) passes the check with a warning naming it.
    fs::write(root.join("_redirects"), "/ok /fine\n/api/* https://api.example/:splat 200\n").unwrap();
    let o = run_program(BIN, &["--check-config", "--config", cfg.to_str().unwrap()], None);
    assert_eq!(o.code, Some(0), "{o:?}");
    let want = format!("warning: {}: line 2: skipped", root.join("_redirects").display());
    assert!(o.stderr.contains(&want), "{want:?} missing: {}", o.stderr);
}

#[test]
fn sighup_reloads_changed_rules_and_keeps_the_old_ones_on_a_bad_file() {
    let srv = Server::builder()
        .raw_config(&config("[routing]\nredirects_file = \"_redirects\"\n"))
        .setup(|_, root| write(root, "_redirects", "/a /first 302\n"))
        .start();
    assert_eq!(get(&srv, "/a").header("Location"), Some("/first"));
    let file = srv.root().join("_redirects");

    fs::write(&file, "/a /second 302\n/b /new 301\n").unwrap();
    signal(srv.pid(), "HUP");
    let reloaded = wait_until(Duration::from_secs(3), || get(&srv, "/a").header("Location") == Some("/second"));
    assert!(reloaded, "rules not reloaded: {}", srv.stderr_text());
    assert_eq!(get(&srv, "/b").header("Location"), Some("/new"));

    let before = srv.stderr_text().len();
    fs::write(&file, "/a /third 302\n/b\n").unwrap();
    signal(srv.pid(), "HUP");
    let logged = wait_until(Duration::from_secs(3), || srv.stderr_text()[before..].contains("line 2"));
    let said = srv.stderr_text()[before..].to_string();
    assert!(logged && said.contains("reload failed"), "{said:?}");
    assert_eq!(get(&srv, "/a").header("Location"), Some("/second"), "the bad file was (partly) applied");
}

fn clean_site(policy: &str) -> Server {
    Server::builder()
        .raw_config(&config(&format!(
            "[routing]\nclean_urls = true\nclean_url_redirect = true\ntrailing_slash = \"{policy}\"\n"
        )))
        .setup(|_, root| {
            write(root, "about.html", "about\n");
            write(root, "posts.html", "post list\n");
            write(root, "posts/first/index.html", "first post\n");
            write(root, "docs/index.html", "docs\n");
        })
        .start()
}

#[test]
fn clean_urls_with_trailing_slash_leave() {
    let srv = clean_site("leave");
    let mut f = Failures::new();
    expect(&mut f, &srv, "/about", 200, None, Some("about\n"));
    expect(&mut f, &srv, "/about/", 200, None, Some("about\n"));
    expect(&mut f, &srv, "/about.html", 301, Some("/about"), None);
    expect(&mut f, &srv, "/about.html?x=1", 301, Some("/about?x=1"), None);
    // A file beats a directory of the same name.
    expect(&mut f, &srv, "/posts", 200, None, Some("post list\n"));
    expect(&mut f, &srv, "/posts/first/", 200, None, Some("first post\n"));
    expect(&mut f, &srv, "/posts/first", 301, Some("/posts/first/"), None);
    expect(&mut f, &srv, "/posts/first/index.html", 301, Some("/posts/first/"), None);
    expect(&mut f, &srv, "/docs", 301, Some("/docs/"), None);
    expect(&mut f, &srv, "/docs/", 200, None, Some("docs\n"));
    expect(&mut f, &srv, "/nope", 404, None, None);
    expect(&mut f, &srv, "/file.txt", 200, None, None);
    f.finish();
    // HEAD and conditionals on a clean URL apply to about.html.
    let r = req(&srv, "HEAD", "/about", "");
    assert_eq!((r.status, r.header("Content-Length")), (200, Some("6")), "{}", r.describe());
    let lm = get(&srv, "/about").header("Last-Modified").unwrap().to_string();
    assert_eq!(req(&srv, "GET", "/about", &format!("If-Modified-Since: {lm}\r\n")).status, 304);
}

#[test]
fn clean_urls_with_trailing_slash_add() {
    let srv = clean_site("add");
    let mut f = Failures::new();
    expect(&mut f, &srv, "/about", 301, Some("/about/"), None);
    expect(&mut f, &srv, "/about/", 200, None, Some("about\n"));
    expect(&mut f, &srv, "/about.html", 301, Some("/about/"), None);
    expect(&mut f, &srv, "/posts/first/index.html", 301, Some("/posts/first/"), None);
    expect(&mut f, &srv, "/posts", 301, Some("/posts/"), None);
    expect(&mut f, &srv, "/docs", 301, Some("/docs/"), None);
    expect(&mut f, &srv, "/docs/", 200, None, Some("docs\n"));
    expect(&mut f, &srv, "/file.txt", 200, None, None);
    f.finish();
}

#[test]
fn clean_urls_with_trailing_slash_remove() {
    let srv = clean_site("remove");
    let mut f = Failures::new();
    expect(&mut f, &srv, "/about", 200, None, Some("about\n"));
    expect(&mut f, &srv, "/about/", 301, Some("/about"), None);
    expect(&mut f, &srv, "/docs", 200, None, Some("docs\n"));
    expect(&mut f, &srv, "/docs/", 301, Some("/docs"), None);
    expect(&mut f, &srv, "/docs/?q=1", 301, Some("/docs?q=1"), None);
    expect(&mut f, &srv, "/docs/index.html", 301, Some("/docs"), None);
    expect(&mut f, &srv, "/posts/first", 200, None, Some("first post\n"));
    expect(&mut f, &srv, "/", 200, None, Some(std::str::from_utf8(INDEX_HTML).unwrap()));
    expect(&mut f, &srv, "/file.txt", 200, None, None);
    f.finish();
}

/// `trailing_slash = "canonical"`: each file one URL by what it is, the other spelling 308.
#[test]
fn canonical_urls_one_per_page() {
    let srv = Server::builder()
        .raw_config(&config("[routing]\ntrailing_slash = \"canonical\"\n"))
        .setup(|_, root| {
            write(root, "about.html", "about\n");
            // A file and a directory without index of the same name.
            write(root, "posts.html", "post list\n");
            write(root, "posts/first/index.html", "first post\n");
            // A directory with an index.
            write(root, "docs/index.html", "docs\n");
            // A file and a directory with an index of the same name: two pages.
            write(root, "guide.html", "guide\n");
            write(root, "guide/index.html", "guide index\n");
            // A directory without an index and no page beside it.
            write(root, "empty/.keep", "");
            write(root, "app.js", "js\n");
        })
        .start();
    let mut f = Failures::new();
    // A file x.html is /x.
    expect(&mut f, &srv, "/about", 200, None, Some("about\n"));
    expect(&mut f, &srv, "/about/", 308, Some("/about"), None);
    expect(&mut f, &srv, "/about.html", 308, Some("/about"), None);
    expect(&mut f, &srv, "/about/?a=1&b=2", 308, Some("/about?a=1&b=2"), None);
    expect(&mut f, &srv, "/about.html?x=1", 308, Some("/about?x=1"), None);
    expect(&mut f, &srv, "/about?x=1", 200, None, Some("about\n"));
    // A directory's index is /x/.
    expect(&mut f, &srv, "/docs/", 200, None, Some("docs\n"));
    expect(&mut f, &srv, "/docs", 308, Some("/docs/"), None);
    expect(&mut f, &srv, "/docs?q=1", 308, Some("/docs/?q=1"), None);
    expect(&mut f, &srv, "/docs/index.html", 308, Some("/docs/"), None);
    expect(&mut f, &srv, "/posts/first", 308, Some("/posts/first/"), None);
    expect(&mut f, &srv, "/posts/first/", 200, None, Some("first post\n"));
    // A file beside a directory without an index: the directory redirects to the file.
    expect(&mut f, &srv, "/posts", 200, None, Some("post list\n"));
    expect(&mut f, &srv, "/posts/", 308, Some("/posts"), None);
    expect(&mut f, &srv, "/posts/?page=2", 308, Some("/posts?page=2"), None);
    // A file and a directory with an index: each keeps its own URL.
    expect(&mut f, &srv, "/guide", 200, None, Some("guide\n"));
    expect(&mut f, &srv, "/guide/", 200, None, Some("guide index\n"));
    expect(&mut f, &srv, "/guide.html", 308, Some("/guide"), None);
    expect(&mut f, &srv, "/guide/index.html", 308, Some("/guide/"), None);
    // A directory without an index and nothing beside it: as without routing (403 unlisted).
    expect(&mut f, &srv, "/empty", 308, Some("/empty/"), None);
    expect(&mut f, &srv, "/empty/", 403, None, None);
    // The root, other files, misses.
    expect(&mut f, &srv, "/", 200, None, Some(std::str::from_utf8(INDEX_HTML).unwrap()));
    expect(&mut f, &srv, "/index.html", 308, Some("/"), None);
    expect(&mut f, &srv, "/app.js", 200, None, Some("js\n"));
    expect(&mut f, &srv, "/app.js/", 404, None, None);
    expect(&mut f, &srv, "/file.txt", 200, None, None);
    expect(&mut f, &srv, "/nope", 404, None, None);
    expect(&mut f, &srv, "/nope/", 404, None, None);
    f.finish();
}

#[test]
fn spa_fallback_for_html_clients_only_and_never_for_assets() {
    let srv = Server::builder()
        .raw_config(&config(
            "[routing]\nfallback = \"/index.html\"\n\n[[headers]]\nmatch = \"/index.html\"\ncache_control = \"no-cache\"\n",
        ))
        .start();
    let index = std::str::from_utf8(INDEX_HTML).unwrap();
    for accept in ["", "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n", "Accept: */*\r\n"] {
        let r = req(&srv, "GET", "/users/42/profile", accept);
        assert_eq!((r.status, r.body_text().as_str()), (200, index), "{accept:?}: {}", r.describe());
        assert_eq!(r.header("Cache-Control"), Some("no-cache"), "[[headers]] on the fallback: {}", r.describe());
    }
    let r = req(&srv, "HEAD", "/deep/link", "Accept: text/html\r\n");
    assert_eq!(r.status, 200, "{}", r.describe());
    for (target, accept) in [
        ("/users/42", "Accept: application/json\r\n"),
        ("/missing.js", "Accept: */*\r\n"),
        ("/img/logo.png", "Accept: text/html\r\n"),
        ("/a/b.css", ""),
    ] {
        let r = req(&srv, "GET", target, accept);
        assert_eq!(r.status, 404, "{target} {accept:?}: {}", r.describe());
        assert_ne!(r.body_text(), index);
    }
    // Files that exist are served as they are.
    assert_eq!(get(&srv, "/file.txt").body, FILE_TXT);
    // A POST is still refused.
    assert_eq!(req(&srv, "POST", "/users/42", "Content-Length: 0\r\n").status, 405);

    // Without a fallback, the same deep link is a 404.
    let plain = Server::start("");
    assert_eq!(req(&plain, "GET", "/users/42/profile", "Accept: text/html\r\n").status, 404);
}

#[test]
fn fallback_with_a_not_found_status_and_error_pages() {
    let srv = Server::builder()
        .raw_config(&config(
            "[routing]\nfallback = \"404.html\"\nfallback_status = 404\n\n[errors]\n404 = \"errors/plain404.html\"\n",
        ))
        .setup(|_, root| {
            write(root, "404.html", "<h1>Lost?</h1>\n");
            write(root, "errors/plain404.html", "plain not found\n");
        })
        .start();
    let r = req(&srv, "GET", "/nowhere", "Accept: text/html\r\n");
    assert_eq!((r.status, r.body_text().as_str()), (404, "<h1>Lost?</h1>\n"), "{}", r.describe());
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    // Sent as an error page is: no validator, preconditions ignored, not stored.
    assert_eq!((r.header("ETag"), r.header("Cache-Control")), (None, Some("no-store")), "{}", r.describe());
    let r = req(&srv, "GET", "/nowhere", "Accept: text/html\r\nIf-None-Match: *\r\n");
    assert_eq!(r.status, 404, "{}", r.describe());
    assert_eq!(req(&srv, "HEAD", "/nowhere", "Accept: text/html\r\n").header("Content-Length"), Some("15"));
    // An asset miss gets the [errors] page instead.
    let r = req(&srv, "GET", "/nowhere.js", "Accept: */*\r\n");
    assert_eq!((r.status, r.body_text().as_str()), (404, "plain not found\n"), "{}", r.describe());
}

// ---------------------------------------------------------------------------------------------
// The generated site in tests/site, with the configuration shown in the README.
// ---------------------------------------------------------------------------------------------

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// The README's example: the part between the markers is the configuration shown there.
fn readme_site_config() -> String {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("```toml\n# a generated static site").expect("README has the site example");
    let body = &readme[start + "```toml\n".len()..];
    body[..body.find("```").unwrap()].to_string()
}

#[test]
fn a_generated_site_is_served_from_the_readme_config() {
    let text = readme_site_config();
    let lines = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
    assert!(lines <= 14, "the README's site config has {lines} lines");
    let site = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/site");
    let srv = Server::builder()
        .raw_config(&text.replace("\"/srv/site\"", "\"{dir}/site\"").replace("0.0.0.0:8080", "127.0.0.1:0"))
        .setup(move |dir, _| copy_tree(&site, &dir.join("site")))
        .start();
    let html = "Accept: text/html\r\n";
    let probe = |target: &str, accept: &str| req(&srv, "GET", target, accept);
    let mut f = Failures::new();
    let css = probe("/css/site.css", "Accept: text/css\r\n");
    let cc = css.header("Cache-Control").map(str::to_string);
    let html_cc = probe("/about", html).header("Cache-Control").map(str::to_string);
    let mut check = |what: &str, r: Response, status: u16, location: Option<&str>, body_has: &str| {
        let ok = r.status == status && r.header("Location") == location && r.body_text().contains(body_has);
        f.check(what, if ok { Ok(()) } else { Err(r.describe()) });
    };
    check("home", probe("/", html), 200, None, "<h1>My Blog</h1>");
    check("clean URL", probe("/about", html), 200, None, "<h1>About</h1>");
    check("clean URL with a query", probe("/about?ref=x", html), 200, None, "<h1>About</h1>");
    check("extension redirect", probe("/about.html", html), 308, Some("/about"), "");
    check("page with a slash", probe("/about/?ref=x", html), 308, Some("/about?ref=x"), "");
    check("file beside a directory", probe("/posts", html), 200, None, "<h1>All posts</h1>");
    check("directory without index beside a file", probe("/posts/", html), 308, Some("/posts"), "");
    check("pretty post", probe("/posts/hello-world/", html), 200, None, "Hello, world");
    check("post without slash", probe("/posts/hello-world", html), 308, Some("/posts/hello-world/"), "");
    check("post index", probe("/posts/hello-world/index.html", html), 308, Some("/posts/hello-world/"), "");
    check("_redirects 301", probe("/blog/hello-world", html), 301, Some("/posts/hello-world/"), "");
    check("_redirects splat", probe("/feed/x", html), 302, Some("/feed.xml"), "");
    check("_redirects 200 rewrite", probe("/latest", html), 200, None, "Hello, world");
    check("_redirects external", probe("/gh", html), 302, Some("https://github.example/me"), "");
    check("asset", css, 200, None, "font-family");
    check("missing asset", probe("/css/nope.css", "Accept: text/css\r\n"), 404, None, "Page not found");
    check("fallback page", probe("/no/such/page", html), 404, None, "Page not found");
    check("JSON client", probe("/no/such/page", "Accept: application/json\r\n"), 404, None, "");
    check("_redirects not served", probe("/_redirects", html), 404, None, "");
    check("_headers not served", probe("/_headers", html), 404, None, "");
    check("feed", probe("/feed.xml", "Accept: */*\r\n"), 200, None, "<rss");
    let immutable = Some("public, max-age=31536000, immutable");
    f.check("_headers on /css/*", if cc.as_deref() == immutable { Ok(()) } else { Err(format!("{cc:?}")) });
    f.check("_headers not on pages", if html_cc.is_none() { Ok(()) } else { Err(format!("{html_cc:?}")) });
    f.finish();
}

#[test]
fn health_endpoint_answers_from_memory_and_can_stay_out_of_the_log() {
    let srv = Server::builder()
        .raw_config(&config("[health]\npath = \"/healthz\"\nlog = false\n\n[routing]\nfallback = \"/index.html\"\n"))
        // A file of the same name is not what answers.
        .setup(|_, root| write(root, "healthz", "from the disk\n"))
        .start();
    let r = get(&srv, "/healthz");
    assert_eq!((r.status, r.body_text().as_str()), (200, "OK\n"), "{}", r.describe());
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    let r = get(&srv, "/healthz?probe=1");
    assert_eq!((r.status, r.body_text().as_str()), (200, "OK\n"), "{}", r.describe());
    let r = req(&srv, "HEAD", "/healthz", "");
    assert_eq!((r.status, r.header("Content-Length"), r.body.len()), (200, Some("3"), 0), "{}", r.describe());
    assert_eq!(req(&srv, "POST", "/healthz", "Content-Length: 0\r\n").status, 405);
    // Health checks on a keep-alive connection, then a file: only the file (and the POST) is logged.
    let mut s = srv.connect();
    raw(&mut s, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(read_response(&mut s).body, b"OK\n");
    assert_eq!(read_response(&mut s).body, FILE_TXT);
    let lines = srv.wait_access_log(2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("POST /healthz"), "{lines:?}");
    assert!(lines[1].contains("GET /file.txt"), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("GET /healthz")), "{lines:?}");

    // Logged when asked to.
    let logged = Server::builder().raw_config(&config("[health]\npath = \"/healthz\"\n")).start();
    assert_eq!(get(&logged, "/healthz").status, 200);
    let lines = logged.wait_access_log(1);
    assert!(lines[0].contains("GET /healthz HTTP/1.1\" 200 3"), "{lines:?}");
}

#[test]
fn curl_follows_the_generated_sites_redirects() {
    let text = readme_site_config();
    let site = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/site");
    let srv = Server::builder()
        .raw_config(&text.replace("\"/srv/site\"", "\"{dir}/site\"").replace("0.0.0.0:8080", "127.0.0.1:0"))
        .setup(move |dir, _| copy_tree(&site, &dir.join("site")))
        .start();
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", srv.port());
    let o = curl(&["-L", "-w", "\n%{http_code} %{num_redirects} %{url_effective}", &url("/blog/hello-world")]);
    let out = o.stdout_text();
    assert!(out.contains("<h1>Hello, world</h1>"), "{out}");
    assert!(out.ends_with(&format!("200 1 {}", url("/posts/hello-world/"))), "{out}");
    let o = curl(&["-L", "-w", "\n%{http_code} %{num_redirects}", "-H", "Accept: text/html", &url("/about.html")]);
    let out = o.stdout_text();
    assert!(out.contains("<h1>About</h1>") && out.ends_with("200 1"), "{out}");
    let o = curl(&["-w", "\n%{http_code}", &url("/_redirects")]);
    assert!(o.stdout_text().ends_with("404") && !o.stdout_text().contains("/blog/:slug"), "{o:?}");
}
