//! `[[auth]]`: Basic authentication of path prefixes from the TOML file, decided on the path
//! actually served: under a protected prefix directly, through a rewrite, a clean URL, the
//! SPA fallback or a symbolic link, the file still needs the password.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use common::*;

/// `joe` with password `test` (traditional DES crypt, a glibc test vector).
const HTPASSWD: &str = "joe:aZGJuE6EXrjEE\n";
/// base64("joe:test"), and a wrong password.
const GOOD: &str = "Authorization: Basic am9lOnRlc3Q=\r\n";
const BAD: &str = "Authorization: Basic am9lOnRlc3U=\r\n";

fn write(root: &Path, rel: &str, data: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

fn get(srv: &Server, host: &str, target: &str, headers: &str) -> Response {
    let mut s = srv.connect();
    raw(&mut s, format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"));
    read_response(&mut s)
}

fn site(dir: &Path, root: &Path) {
    fs::write(dir.join("htpasswd"), HTPASSWD).unwrap();
    write(root, "private/secret.txt", "secret\n");
    write(root, "privateer/open.txt", "open\n");
    write(root, "members.html", "members\n");
    write(root, "app.html", "the app shell\n");
    write(root, "public/readme.txt", "public\n");
    symlink("../private/secret.txt", root.join("public/link.txt")).unwrap();
    symlink("../private", root.join("public/dirlink")).unwrap();
    write(root, "b-root/private/b.txt", "b\n");
}

fn server() -> Server {
    Server::builder()
        .setup(site)
        .raw_config(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{root}\"\n\n[log]\naccess = \"{dir}/access.log\"\nerror = \"-\"\n\n\
             [listing]\nenabled = true\n\n\
             [routing]\nclean_urls = true\nfallback = \"/app.html\"\n\n\
             [[rewrite]]\nfrom = \"/docs/*\"\nto = \"/private/:splat\"\n\n\
             [[vhost]]\nhost = \"b.example\"\nroot = \"{root}/b-root\"\n\n\
             [[auth]]\npath = \"/private/\"\nhtpasswd = \"{dir}/htpasswd\"\nrealm = \"Staff only\"\n\n\
             [[auth]]\npath = \"/members.html\"\nhtpasswd = \"{dir}/htpasswd\"\n\n\
             [[auth]]\npath = \"/app.html\"\nhtpasswd = \"{dir}/htpasswd\"\n\n\
             [[auth]]\npath = \"/\"\nhost = \"b.example\"\nhtpasswd = \"{dir}/htpasswd\"\n",
        )
        .start()
}

#[test]
fn a_protected_prefix_needs_the_password() {
    let srv = server();
    let r = get(&srv, "localhost", "/private/secret.txt", "");
    assert_eq!(r.status, 401, "{}", r.describe());
    assert_eq!(r.header("WWW-Authenticate"), Some("Basic realm=\"Staff only\""));
    assert!(!r.body_text().contains("secret"));
    assert_eq!(get(&srv, "localhost", "/private/secret.txt", BAD).status, 401);
    let r = get(&srv, "localhost", "/private/secret.txt", GOOD);
    assert_eq!((r.status, r.body_text().as_str()), (200, "secret\n"));
    // Whole segments: /privateer is not under /private.
    assert_eq!(get(&srv, "localhost", "/privateer/open.txt", "").status, 200);
    assert_eq!(get(&srv, "localhost", "/public/readme.txt", "").status, 200);
    // The user is logged.
    let log = srv.wait_access_log(6);
    assert!(log[2].contains(" joe "), "{}", log[2]);
}

#[test]
fn the_served_path_decides_through_rewrites_clean_urls_fallback_and_symlinks() {
    let srv = server();
    // (request, what serving it would show with the password)
    let cases = [
        ("/docs/secret.txt", "secret\n"),          // [[rewrite]] to /private/
        ("/members", "members\n"),                 // clean URL: /members.html
        ("/some/client/route", "the app shell\n"), // SPA fallback: /app.html
        ("/public/link.txt", "secret\n"),          // symlink into /private/
    ];
    for (path, body) in cases {
        let r = get(&srv, "localhost", path, "Accept: text/html\r\n");
        assert_eq!(r.status, 401, "{path}: {}", r.describe());
        assert!(!r.body_text().contains(body.trim_end()), "{path}: {}", r.describe());
        let r = get(&srv, "localhost", path, &format!("Accept: text/html\r\n{GOOD}"));
        assert_eq!((r.status, r.body_text().as_str()), (200, body), "{path}");
    }
    // The listing of a linked directory names the protected files: protected too.
    let r = get(&srv, "localhost", "/public/dirlink/", "");
    assert_eq!(r.status, 401, "{}", r.describe());
    let r = get(&srv, "localhost", "/public/dirlink/", GOOD);
    assert!(r.status == 200 && r.body_text().contains("secret.txt"), "{}", r.describe());
    // A listing outside every prefix stays open.
    assert_eq!(get(&srv, "localhost", "/public/", "").status, 200);
}

#[test]
fn what_does_not_exist_under_a_prefix_is_not_revealed_without_the_password() {
    let srv = server();
    // A miss, and a directory without its slash, are challenged like the files there.
    for path in ["/nothing.txt", "/private/nothing/", "/private"] {
        let r = get(&srv, "b.example", path, "");
        assert_eq!(r.status, 401, "{path}: {}", r.describe());
    }
    let r = get(&srv, "b.example", "/private", GOOD);
    assert_eq!(r.status, 301, "{}", r.describe());
    let r = get(&srv, "localhost", "/private/nothing.txt", "");
    assert_eq!(r.status, 401, "{}", r.describe());
    let r = get(&srv, "localhost", "/private/nothing.txt", GOOD);
    assert_eq!(r.status, 404, "{}", r.describe());
    // Outside every prefix a miss is still a plain 404 (here the fallback's HTML shell for
    // clients that accept HTML, so ask for something else).
    let r = get(&srv, "localhost", "/public/nothing.txt", "Accept: text/plain\r\n");
    assert_eq!(r.status, 404, "{}", r.describe());
}

#[test]
fn a_rule_can_be_for_one_virtual_host() {
    let srv = server();
    assert_eq!(get(&srv, "b.example", "/private/b.txt", "").status, 401);
    assert_eq!(get(&srv, "b.example", "/private/b.txt", GOOD).status, 200);
    // The main site's other paths stay open.
    assert_eq!(get(&srv, "localhost", "/privateer/open.txt", "").status, 200);
}

#[test]
fn a_missing_password_file_refuses_the_start() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("f.toml");
    fs::write(
        &cfg,
        "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \".\"\n[[auth]]\npath = \"/\"\nhtpasswd = \"nowhere\"\n",
    )
    .unwrap();
    let o = run_cli(&["--config", cfg.to_str().unwrap(), "--check-config"], None);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("auth.htpasswd") && o.stderr.contains("nowhere"), "{o:?}");
}
