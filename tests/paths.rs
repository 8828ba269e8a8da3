//! Path resolution: decoding, normalisation, traversal, symlink and dotfile policies,
//! permissions, directories, index files and special files.

mod common;

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::*;

/// (request target, expected status, expected body)
type Case<'a> = (&'a [u8], u16, Option<&'a [u8]>);

/// GET `target` on a fresh connection; the response.
fn get_target(addr: SocketAddr, target: &[u8]) -> Result<Response, String> {
    let mut s = connect(addr);
    let mut req = b"GET ".to_vec();
    req.extend_from_slice(target);
    req.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    raw_lenient(&mut s, &req);
    try_read_response(&mut s, false).map_err(|e| format!("no response: {e}"))
}

/// Expects `status` with `body` (when given) and never a byte of the secret.
fn expect(addr: SocketAddr, target: &[u8], status: u16, body: Option<&[u8]>) -> Result<(), String> {
    let r = get_target(addr, target)?;
    if r.body.windows(SECRET_MARKER.len()).any(|w| w == SECRET_MARKER) {
        return Err(format!("SERVED A FILE OUTSIDE THE ROOT:\n{}", r.describe()));
    }
    if r.status != status {
        return Err(format!("expected {status}, got:\n{}", r.describe()));
    }
    if let Some(b) = body {
        if r.body != b {
            return Err(format!("expected body \"{}\", got:\n{}", show(b), r.describe()));
        }
    }
    if status >= 400 {
        r.check_error_body()?;
    } else {
        r.check_common(false)?;
    }
    Ok(())
}

fn run(addr: SocketAddr, cases: &[Case]) {
    let mut f = Failures::new();
    for (target, status, body) in cases {
        f.check(&format!("GET {}", show(target)), expect(addr, target, *status, *body));
    }
    f.finish();
}

#[test]
fn traversal_out_of_the_root_is_400() {
    let srv = Server::start("");
    let cases: Vec<Case> = [
        &b"/../secret.txt"[..],
        b"/%2e%2e/secret.txt",
        b"/%2E%2E/secret.txt",
        b"/.%2e/secret.txt",
        b"/a/../../secret.txt",
        b"/dir/../../secret.txt",
        b"/dir/%2e%2e/%2e%2e/secret.txt",
        b"/./../secret.txt",
        b"/..%2fsecret.txt",
        b"/%2e%2e%2fsecret.txt",
        b"/dir/..%2f..%2fsecret.txt",
        b"/..",
        b"/../",
        b"/../../../../../../../../etc/passwd",
        b"/../outside/secret.txt",
    ]
    .into_iter()
    .map(|t| (t, 400, None))
    .collect();
    run(srv.addr(), &cases);
}

#[test]
fn absolute_form_traversal_is_400() {
    let srv = Server::start("");
    let p = srv.port();
    let r = srv.exchange(format!("GET http://127.0.0.1:{p}/../secret.txt HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n"));
    assert!(!r.body.windows(SECRET_MARKER.len()).any(|w| w == SECRET_MARKER), "SERVED A FILE OUTSIDE THE ROOT: {r:?}");
    assert_eq!(r.status, 400, "{r:?}");
}

#[test]
fn bad_bytes_in_paths_are_400() {
    let srv = Server::start("");
    let cases: Vec<Case> = [
        &b"/file%00.txt"[..],
        b"/file.txt%00",
        b"/%00",
        b"/%01file.txt",
        b"/file%0a.txt",
        b"/file%0d%0a.txt",
        b"/file%7f.txt",
        b"/dir%5Cfile.txt",
        b"/dir%5cfile.txt",
        b"/dir\\file.txt",
        b"/..%5C..%5Csecret.txt",
        b"/%ff.txt",
        b"/file%c3.txt",
        b"/%zz.txt",
        b"/file.txt%",
        b"/file.txt%2",
        b"/%g0",
    ]
    .into_iter()
    .map(|t| (t, 400, None))
    .collect();
    run(srv.addr(), &cases);
}

#[test]
fn paths_are_decoded_once_and_normalised() {
    let srv = Server::builder()
        .setup(|_, root| {
            std::fs::write(root.join("with space.txt"), b"spaced\n").unwrap();
            std::fs::write(root.join("caf\u{e9}.txt"), b"utf8 name\n").unwrap();
        })
        .start();
    let cases: &[Case] = &[
        (b"/file.txt", 200, Some(FILE_TXT)),
        (b"//file.txt", 200, Some(FILE_TXT)),
        (b"///file.txt", 200, Some(FILE_TXT)),
        (b"/dir//file.txt", 200, Some(DIR_FILE)),
        (b"/./file.txt", 200, Some(FILE_TXT)),
        (b"/dir/./file.txt", 200, Some(DIR_FILE)),
        (b"/dir/../file.txt", 200, Some(FILE_TXT)),
        (b"/noindex/../dir/file.txt", 200, Some(DIR_FILE)),
        (b"/dir/%2e%2e/file.txt", 200, Some(FILE_TXT)),
        (b"/dir/%2e/file.txt", 200, Some(DIR_FILE)),
        (b"/fi%6ce.txt", 200, Some(FILE_TXT)),
        (b"/%66%69%6C%65.txt", 200, Some(FILE_TXT)),
        (b"/with%20space.txt", 200, Some(b"spaced\n")),
        (b"/caf%C3%A9.txt", 200, Some(b"utf8 name\n")),
        (b"/file.txt?x=1", 200, Some(FILE_TXT)),
        (b"/file.txt?", 200, Some(FILE_TXT)),
        (b"/file.txt?../../secret.txt", 200, Some(FILE_TXT)),
        (b"/file.txt?%zz%00", 200, Some(FILE_TXT)),
        // Decoded once: %25 becomes a literal '%', not a second round of escapes.
        (b"/%252e%252e/secret.txt", 404, None),
        (b"/fi%256ce.txt", 404, None),
        (b"/missing.txt", 404, None),
        (b"/dir/missing.txt", 404, None),
    ];
    run(srv.addr(), cases);
}

#[test]
fn symlinks_within_root_policy_is_the_default() {
    let srv = Server::start("");
    run(
        srv.addr(),
        &[
            (b"/link-rel.txt", 200, Some(FILE_TXT)),
            (b"/link-abs.txt", 200, Some(FILE_TXT)),
            (b"/dir/link-up.txt", 200, Some(FILE_TXT)),
            (b"/link-dir-in/file.txt", 200, Some(DIR_FILE)),
            (b"/link-out.txt", 403, None),
            (b"/link-out-abs.txt", 403, None),
            (b"/link-dir-out/secret.txt", 403, None),
        ],
    );
}

#[test]
fn symlinks_within_root_policy_explicit() {
    let srv = Server::start("[http]\nsymlinks = \"within-root\"");
    run(
        srv.addr(),
        &[
            (b"/link-rel.txt", 200, Some(FILE_TXT)),
            (b"/link-abs.txt", 200, Some(FILE_TXT)),
            (b"/link-out.txt", 403, None),
            (b"/link-dir-out/secret.txt", 403, None),
        ],
    );
}

#[test]
fn symlinks_follow_policy_serves_outside_targets() {
    let srv = Server::start("[http]\nsymlinks = \"follow\"");
    let cases: &[Case] = &[
        (b"/link-rel.txt", 200, Some(FILE_TXT)),
        (b"/link-abs.txt", 200, Some(FILE_TXT)),
        (b"/link-dir-in/file.txt", 200, Some(DIR_FILE)),
    ];
    run(srv.addr(), cases);
    // These deliberately reach the secret, so check them without the secret guard.
    let mut f = Failures::new();
    for t in ["/link-out.txt", "/link-out-abs.txt", "/link-dir-out/secret.txt"] {
        let r = srv.get(t);
        f.check(
            t,
            if r.status == 200 && r.body == SECRET {
                Ok(())
            } else {
                Err(format!("symlinks = \"follow\" must serve it:\n{}", r.describe()))
            },
        );
    }
    f.finish();
}

#[test]
fn symlinks_deny_policy_refuses_every_link() {
    let srv = Server::start("[http]\nsymlinks = \"deny\"");
    run(
        srv.addr(),
        &[
            (b"/file.txt", 200, Some(FILE_TXT)),
            (b"/link-rel.txt", 403, None),
            (b"/link-abs.txt", 403, None),
            (b"/dir/link-up.txt", 403, None),
            (b"/link-dir-in/file.txt", 403, None),
            (b"/link-out.txt", 403, None),
            (b"/link-dir-out/secret.txt", 403, None),
        ],
    );
}

#[test]
fn dotfiles_are_denied_by_default_except_well_known() {
    let srv = Server::start("");
    run(
        srv.addr(),
        &[
            (b"/.secret", 403, None),
            (b"/%2esecret", 403, None),
            (b"/.git/config", 403, None),
            (b"/.git/", 403, None),
            (b"/dir/.hidden", 403, None),
            (b"/.well-known/x.txt", 200, Some(WELL_KNOWN)),
            (b"/", 200, Some(INDEX_HTML)),
        ],
    );
}

#[test]
fn well_known_is_served_on_every_thttpd_virtual_host() {
    // Issue 14, finding 12: with `-v` the host directory is not part of the URL, so the
    // `.well-known` exemption applies after it (ACME challenges).
    let srv = Server::builder()
        .args(&["-v"])
        .setup(|_, root| {
            fs::create_dir_all(root.join("a.example/.well-known/acme-challenge")).unwrap();
            fs::write(root.join("a.example/.well-known/acme-challenge/tok"), b"token a\n").unwrap();
            fs::write(root.join("a.example/.secret"), b"secret\n").unwrap();
        })
        .start();
    let get = |path: &str| {
        exchange(srv.addr(), format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n").as_bytes())
    };
    let r = get("/.well-known/acme-challenge/tok");
    assert_eq!((r.status, r.body_text().as_str()), (200, "token a\n"), "{}", r.describe());
    assert_eq!(get("/.secret").status, 403);
}

#[test]
fn headers_rules_match_the_url_under_thttpd_virtual_hosts() {
    // Same mistake as finding 12: `[[headers]]` patterns were matched against the path with
    // the `-v` host directory in front.
    let srv = Server::builder()
        .args(&["-v"])
        .config("[[headers]]\nmatch = \"/assets/**\"\ncache_control = \"immutable\"")
        .setup(|_, root| {
            fs::create_dir_all(root.join("a.example/assets")).unwrap();
            fs::write(root.join("a.example/assets/x.css"), b"x\n").unwrap();
        })
        .start();
    let r = exchange(srv.addr(), b"GET /assets/x.css HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.header("Cache-Control")), (200, Some("immutable")), "{}", r.describe());
}

#[test]
fn host_with_a_trailing_dot_matches_its_vhost() {
    // Issue 14, finding 13.
    let srv = Server::builder()
        .config("[[vhost]]\nhost = \"a.example\"\nroot = \"{dir}/a\"")
        .setup(|dir, _| {
            fs::create_dir_all(dir.join("a")).unwrap();
            fs::write(dir.join("a/file.txt"), b"vhost a\n").unwrap();
        })
        .start();
    for host in ["a.example", "a.example.", "A.EXAMPLE.:80"] {
        let r = exchange(
            srv.addr(),
            format!("GET /file.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!((r.status, r.body_text().as_str()), (200, "vhost a\n"), "{host}: {}", r.describe());
    }
}

#[test]
fn dotfiles_allow_serves_them() {
    let srv = Server::start("[http]\ndotfiles = \"allow\"");
    run(
        srv.addr(),
        &[
            (b"/.secret", 200, Some(DOT_SECRET)),
            (b"/.git/config", 200, Some(GIT_CONFIG)),
            (b"/dir/.hidden", 200, Some(DIR_HIDDEN)),
            (b"/.well-known/x.txt", 200, Some(WELL_KNOWN)),
        ],
    );
}

#[test]
fn unreadable_file_is_403() {
    let Some(srv) = Server::builder()
        .config("[log]\naccess = \"off\"")
        .setup(|_, root| {
            let p = root.join("locked.txt");
            std::fs::write(&p, b"locked\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        })
        .start_unprivileged()
    else {
        return;
    };
    run(srv.addr(), &[(b"/file.txt", 200, Some(FILE_TXT)), (b"/locked.txt", 403, None)]);
}

#[test]
fn directories_index_and_redirects() {
    let srv = Server::start("");
    run(
        srv.addr(),
        &[
            (b"/", 200, Some(INDEX_HTML)),
            (b"/dir/", 200, Some(DIR_INDEX)),
            (b"/dir/?q=1", 200, Some(DIR_INDEX)),
            (b"/noindex/", 403, None),
            (b"/missing/", 404, None),
        ],
    );
    let mut f = Failures::new();
    for (target, location) in [("/dir", "/dir/"), ("/dir?a=b", "/dir/?a=b"), ("/noindex", "/noindex/")] {
        let r = srv.get(target);
        f.check(
            &format!("GET {target}"),
            if r.status != 301 {
                Err(format!("expected 301:\n{}", r.describe()))
            } else if r.headers_named("Location") != [location] {
                Err(format!("expected `Location: {location}`:\n{}", r.describe()))
            } else {
                r.check_common(false)
            },
        );
    }
    f.finish();
    // The index page is text/html.
    let r = srv.get("/dir/");
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"), "{r:?}");
}

#[test]
fn configured_index_files_are_honoured() {
    let srv = Server::start("[http]\nindex = [\"home.html\"]");
    run(
        srv.addr(),
        &[
            (b"/home/", 200, Some(HOME_HTML)),
            (b"/dir/", 403, None),
            (b"/", 403, None),
            (b"/dir/index.html", 200, Some(DIR_INDEX)),
        ],
    );
}

#[test]
fn fifo_is_403_and_does_not_block_the_server() {
    let srv = Server::builder()
        .setup(|_, root| {
            let st = std::process::Command::new("mkfifo").arg(root.join("fifo")).status().expect("mkfifo");
            assert!(st.success());
        })
        .start();
    let start = Instant::now();
    let mut s = connect(srv.addr());
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    raw(&mut s, "GET /fifo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = try_read_response(&mut s, false).unwrap_or_else(|e| panic!("no response for a FIFO within 3 s: {e}"));
    assert_eq!(r.status, 403, "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(3));
    // The event loop is not stuck: another client is served.
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

/// Collapses `//` and removes dot segments, as a check of where a Location leads.
fn normalise(path: &str) -> String {
    let mut out: Vec<&str> = vec![];
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let trailing = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    format!("/{}{}", out.join("/"), if trailing && !out.is_empty() { "/" } else { "" })
}

/// A directory redirect must lead to the directory, percent-encoded, and must never be a
/// protocol-relative URL (`//host/...`): that would be an open redirect to any host.
#[test]
fn redirect_locations_are_encoded_and_never_protocol_relative() {
    let srv = Server::builder()
        .setup(|_, root| {
            std::fs::create_dir_all(root.join("sp ace")).unwrap();
            std::fs::write(root.join("sp ace/index.html"), b"<p>space</p>\n").unwrap();
        })
        .start();
    let mut f = Failures::new();
    for (target, dest) in [
        ("/sp%20ace", "/sp%20ace/"),
        ("//dir", "/dir/"),
        ("///dir", "/dir/"),
        ("//evil.example/../dir", "/dir/"),
        ("//evil.example/%2e%2e/dir", "/dir/"),
        ("/\\evil.example/../dir", "/dir/"),
        ("/x/..//dir", "/dir/"),
    ] {
        let r = get_target(srv.addr(), target.as_bytes());
        f.check(
            &format!("GET {target}"),
            match r {
                Err(e) => Err(e),
                Ok(r) if r.status == 400 && target.contains('\\') => Ok(()),
                Ok(r) if r.status != 301 => Err(format!("expected 301:\n{}", r.describe())),
                Ok(r) => {
                    let loc = r.header("Location").unwrap_or("");
                    if !loc.starts_with('/') || loc.starts_with("//") || loc.starts_with("/\\") {
                        Err(format!("OPEN REDIRECT: `Location: {loc}` is not a local absolute path"))
                    } else if normalise(loc.split('?').next().unwrap()) != dest {
                        Err(format!("`Location: {loc}` does not lead to {dest}"))
                    } else {
                        Ok(())
                    }
                }
            },
        );
    }
    f.finish();
    let r = srv.get("/sp%20ace/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"<p>space</p>\n");
}

#[test]
fn symlink_loops_and_chains() {
    let srv = Server::builder()
        .setup(|_, root| {
            std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
            std::os::unix::fs::symlink("loop-b", root.join("loop-a")).unwrap();
            std::os::unix::fs::symlink("loop-a", root.join("loop-b")).unwrap();
            std::os::unix::fs::symlink("chain-2", root.join("chain-1")).unwrap();
            std::os::unix::fs::symlink("link-rel.txt", root.join("chain-2")).unwrap();
            std::os::unix::fs::symlink("link-out.txt", root.join("chain-out")).unwrap();
        })
        .start();
    let mut f = Failures::new();
    for t in ["/loop", "/loop-a", "/loop/x"] {
        let r = get_target(srv.addr(), t.as_bytes());
        f.check(
            t,
            match r {
                Ok(r) if r.status == 403 || r.status == 404 => Ok(()),
                Ok(r) => Err(format!("expected 403 or 404:\n{}", r.describe())),
                Err(e) => Err(e),
            },
        );
    }
    f.finish();
    run(srv.addr(), &[(b"/chain-1", 200, Some(FILE_TXT)), (b"/chain-out", 403, None)]);
}

/// Index files go through the same policies as any other file.
#[test]
fn index_files_obey_symlink_policy_and_special_files() {
    let srv = Server::builder()
        .setup(|dir, root| {
            std::fs::create_dir_all(root.join("idx-out")).unwrap();
            std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("idx-out/index.html")).unwrap();
            std::fs::create_dir_all(root.join("idx-fifo")).unwrap();
            let st = std::process::Command::new("mkfifo").arg(root.join("idx-fifo/index.html")).status().unwrap();
            assert!(st.success());
            std::fs::create_dir_all(root.join("idx-in")).unwrap();
            std::os::unix::fs::symlink("../file.txt", root.join("idx-in/index.html")).unwrap();
        })
        .start();
    run(srv.addr(), &[(b"/idx-out/", 403, None), (b"/idx-fifo/", 403, None), (b"/idx-in/", 200, Some(FILE_TXT))]);
    // The FIFO index did not block the event loop.
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn well_known_exemption_is_narrow() {
    let srv = Server::builder()
        .setup(|_, root| {
            std::fs::write(root.join(".well-known/.secret"), b"hidden in well-known\n").unwrap();
        })
        .start();
    run(
        srv.addr(),
        &[
            (b"/.well-known/../.git/config", 403, None),
            (b"/.well-known/%2e%2e/.secret", 403, None),
            (b"/.well-known/.secret", 403, None),
            (b"/.well-known/x.txt", 200, Some(WELL_KNOWN)),
        ],
    );
}
