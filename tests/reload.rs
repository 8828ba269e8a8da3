//! SIGHUP puts a changed configuration in force everywhere the loop derived something from
//! it (`ctx::Derived`, built by one function for start-up and reload): the document root,
//! the virtual hosts, the access log (file and format), the error log, the routing rules,
//! the MIME table, the request limits, the file cache and the fixed response fields. (The
//! referrer policy is derived too, but only thttpd's flags set it, and the thttpd
//! personality does not reload.)

mod common;

use std::fs;
use std::time::Duration;

use common::*;

/// The status page's `cache: hits H misses M entries E bytes B` line: E.
fn cache_entries(srv: &Server) -> u64 {
    let page = srv.get("/.status").body_text();
    let line = page.lines().find(|l| l.starts_with("cache:")).unwrap_or_else(|| panic!("no cache line: {page}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "entries").unwrap();
    words[i + 1].parse().unwrap()
}

fn get_with(srv: &Server, path: &str, fields: &str) -> Response {
    srv.exchange(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{fields}Connection: close\r\n\r\n"))
}

#[test]
fn a_reload_puts_every_derived_setting_in_force() {
    let srv = Server::builder()
        .config("[status]\nenabled = true")
        .setup(|dir, root| {
            fs::write(root.join("old-only.txt"), "old root\n").unwrap();
            fs::write(root.join("file.xyz"), "xyz\n").unwrap();
            fs::create_dir_all(dir.join("new-root")).unwrap();
            fs::write(dir.join("new-root/new-only.txt"), "new root\n").unwrap();
            fs::write(dir.join("new-root/file.xyz"), "xyz\n").unwrap();
            fs::write(dir.join("new-root/new.txt"), "the target\n").unwrap();
            fs::create_dir_all(dir.join("site-v")).unwrap();
            fs::write(dir.join("site-v/v.txt"), "vhost v\n").unwrap();
        })
        .start();
    let dir = srv.dir().to_path_buf();
    let long_field = format!("X-Long: {}\r\n", "a".repeat(3000));

    // Before: the first configuration.
    let r = srv.get("/old-only.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(srv.get("/new-only.txt").status, 404);
    assert_eq!(get_with(&srv, "/v.txt", "").status, 404);
    let r = srv.get("/file.xyz");
    assert_ne!(r.header("content-type"), Some("application/x-reload-test"), "{r:?}");
    assert_eq!(r.header("server"), Some("ferrohttpd"), "{r:?}");
    assert_eq!(srv.get("/old").status, 404);
    assert_eq!(get_with(&srv, "/old-only.txt", &long_field).status, 200);
    for p in ["/old-only.txt", "/file.xyz", "/index.html", "/missing-1", "/missing-2"] {
        srv.get(p);
    }
    assert!(cache_entries(&srv) >= 3, "the cache holds what was served");
    srv.wait_access_log(1);

    // The second configuration: every derived structure changes.
    let second = render_config(
        &dir,
        &dir.join("new-root"),
        &format!(
            "[http]\nserver_header = \"reloaded\"\nmax_header_bytes = 2048\nmax_uri_bytes = 1024\n\
             [log]\naccess = {:?}\nformat = \"json\"\nerror = {:?}\n\
             [mime]\nxyz = \"application/x-reload-test\"\n\
             [status]\nenabled = true\n\
             [[vhost]]\nhost = \"v.example\"\nroot = {:?}\n\
             [[redirect]]\nfrom = \"/old\"\nto = \"/new.txt\"\nstatus = 301\n",
            dir.join("access2.log"),
            dir.join("error2.log"),
            dir.join("site-v"),
        ),
    );
    fs::write(dir.join("ferrohttpd.toml"), second).unwrap();
    signal(srv.pid(), "HUP");
    let reloaded = wait_until(Duration::from_secs(5), || {
        fs::read_to_string(dir.join("error2.log")).is_ok_and(|t| t.contains("configuration reloaded"))
    });
    assert!(
        reloaded,
        "the error log named by the new configuration says it was reloaded; stderr: {}",
        srv.stderr_text()
    );

    // The file cache is a new one.
    assert!(cache_entries(&srv) <= 1, "the old cache's entries are gone after the reload");
    // The document root.
    assert_eq!(srv.get("/old-only.txt").status, 404);
    let r = srv.get("/new-only.txt");
    assert_eq!((r.status, r.body_text().as_str()), (200, "new root\n"), "{r:?}");
    // The virtual hosts.
    let r = srv.exchange("GET /v.txt HTTP/1.1\r\nHost: v.example\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.body_text().as_str()), (200, "vhost v\n"), "{r:?}");
    // The MIME table and the fixed fields.
    let r = srv.get("/file.xyz");
    assert_eq!(r.header("content-type"), Some("application/x-reload-test"), "{r:?}");
    assert_eq!(r.header("server"), Some("reloaded"), "{r:?}");
    // The routing rules.
    let r = srv.get("/old");
    assert_eq!((r.status, r.header("location")), (301, Some("/new.txt")), "{r:?}");
    // The request limits.
    let r = get_with(&srv, "/new-only.txt", &long_field);
    assert_eq!(r.status, 431, "a head over the new max_header_bytes: {r:?}");
    // The access log: the new file, in the new format.
    wait_until(Duration::from_secs(5), || {
        fs::read_to_string(dir.join("access2.log")).is_ok_and(|t| t.contains("/new-only.txt"))
    });
    let lines = wait_for_lines(&dir.join("access2.log"), 1, Duration::from_secs(1));
    assert!(
        lines.iter().all(|l| l.starts_with('{')) && lines.iter().any(|l| l.contains("/new-only.txt")),
        "JSON lines in the new access log: {lines:?}"
    );
    let old = fs::read_to_string(srv.access_log_path()).unwrap();
    assert!(
        !old.contains("GET /new-only.txt HTTP/1.1\" 200") && !old.contains("/v.txt HTTP/1.1\" 200"),
        "nothing after the reload in the old access log: {old}"
    );
}
