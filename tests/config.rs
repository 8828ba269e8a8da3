//! The command line and the config file: flags, thttpd-style overrides, validation errors,
//! relative paths.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn tmp() -> tempfile::TempDir {
    tempfile::TempDir::new().unwrap()
}

/// A minimal valid config (3 lines under `[server]`), with `rest` appended from line 4 on.
fn config_with(dir: &Path, rest: &str) -> String {
    fs::create_dir_all(dir.join("root")).unwrap();
    format!("[server]\nlisten = [\"127.0.0.1:0\"]\nroot = {:?}\n{rest}", dir.join("root"))
}

fn write_config(dir: &Path, text: &str) -> String {
    let p = dir.join("test.toml");
    fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn version_flag_prints_name_and_version() {
    let mut f = Failures::new();
    for flag in ["--version", "-V"] {
        let o = run_cli(&[flag], None);
        f.check(
            flag,
            if o.code == Some(0) && o.stdout_text().lines().next() == Some("ferrohttpd 0.1.0") {
                Ok(())
            } else {
                Err(format!("expected exit 0 and `ferrohttpd 0.1.0` first on stdout, got {o:?}"))
            },
        );
    }
    let o = run_cli(&["--version"], None);
    let features = o.stdout_text().lines().nth(1).unwrap_or_default().to_string();
    f.check(
        "the features line",
        if features
            == format!(
                "features: {}tls {}http2 {}compression {}acme",
                sign(cfg!(feature = "tls")),
                sign(cfg!(feature = "http2")),
                sign(cfg!(feature = "compression")),
                sign(cfg!(feature = "acme"))
            )
        {
            Ok(())
        } else {
            Err(format!("got {o:?}"))
        },
    );
    f.finish();
}

fn sign(on: bool) -> char {
    if on {
        '+'
    } else {
        '-'
    }
}

#[test]
fn help_prints_usage_on_stdout() {
    let o = run_cli(&["--help"], None);
    assert_eq!(o.code, Some(0), "{o:?}");
    let out = o.stdout_text();
    for needle in ["--config", "--check-config", "-p", "-d", "-l"] {
        assert!(out.contains(needle), "usage lacks {needle:?}: {o:?}");
    }
}

#[test]
fn unknown_flag_prints_usage_on_stderr_and_exits_1() {
    let o = run_cli(&["--no-such-flag"], None);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("--config"), "usage expected on stderr: {o:?}");
    assert!(o.stdout.is_empty(), "nothing expected on stdout: {o:?}");
}

#[test]
fn check_config_accepts_a_valid_config() {
    let d = tmp();
    let cfg = write_config(d.path(), &config_with(d.path(), ""));
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert!(!o.timed_out, "--check-config must not start serving: {o:?}");
    assert_eq!(o.code, Some(0), "{o:?}");
    let out = o.stdout_text();
    assert_eq!(out.trim_end().lines().count(), 1, "one short line: {o:?}");
    assert!(out.to_ascii_lowercase().contains("ok"), "{o:?}");
}

#[test]
fn shipped_config_with_every_default_is_valid() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/config/ferrohttpd.toml");
    let o = run_cli(&["--config", cfg, "--check-config"], None);
    assert_eq!(o.code, Some(0), "{o:?}");
}

/// Each config error: exit 1, and stderr names the key and the line.
#[test]
fn config_errors_name_the_key_and_the_line() {
    let d = tmp();
    let dp = d.path();
    // (config after the 3 valid lines, strings stderr must contain)
    let cases: &[(&str, &[&str])] = &[
        ("bogus_key = 1\n", &["bogus_key", "line 4"]),
        ("\n[http]\nkeepalive_secs = 5\n", &["keepalive_secs", "line 6"]),
        ("[bogus_section]\nx = 1\n", &["bogus_section", "line 4"]),
        ("workers = 0\n", &["workers", "line 4"]),
        ("[http]\nkeepalive_requests = 0\n", &["keepalive_requests", "line 5"]),
        ("backlog = \"many\"\n", &["backlog", "line 4"]),
        ("sendfile_min = -1\n", &["sendfile_min", "line 4"]),
        ("sendfile = \"yes\"\n", &["sendfile", "line 4"]),
        ("[http]\ndotfiles = \"maybe\"\n", &["dotfiles", "line 5"]),
        ("[http]\nsymlinks = \"sometimes\"\n", &["symlinks", "line 5"]),
        ("[http]\nheader_timeout = \"10 parsecs\"\n", &["header_timeout", "line 5"]),
        ("[http]\nindex = \"index.html\"\n", &["index", "line 5"]),
        ("[log]\nformat = \"xml\"\n", &["format", "line 5"]),
        ("[mime]\nfoo = 3\n", &["foo", "line 5"]),
        ("workers = 1\nworkers = 1\n", &["workers", "line 5"]),
        ("max_connections = \"x\"\n", &["max_connections", "line 4"]),
    ];
    let mut f = Failures::new();
    for (i, (rest, needles)) in cases.iter().enumerate() {
        let sub = dp.join(format!("c{i}"));
        fs::create_dir_all(&sub).unwrap();
        let cfg = write_config(&sub, &config_with(&sub, rest));
        let o = run_cli(&["--config", &cfg, "--check-config"], None);
        let ok = o.code == Some(1) && needles.iter().all(|n| o.stderr.contains(n));
        f.check(
            &format!("config line 4.. {:?}", rest),
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "expected exit 1 and stderr containing {needles:?}; got exit {:?}, \
                     timed out: {}, stderr: {:?}",
                    o.code, o.timed_out, o.stderr
                ))
            },
        );
    }
    f.finish();
}

#[test]
fn config_errors_also_stop_a_normal_start() {
    let d = tmp();
    let cfg = write_config(d.path(), &config_with(d.path(), "bogus_key = 1\n"));
    let o = run_cli(&["--config", &cfg], None);
    assert!(!o.timed_out, "the server started despite an unknown key: {o:?}");
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("bogus_key") && o.stderr.contains("line 4"), "{o:?}");

    let cfg = write_config(d.path(), &config_with(d.path(), "[http]\nkeepalive_requests = 0\n"));
    let o = run_cli(&["--config", &cfg], None);
    assert!(!o.timed_out, "the server started despite keepalive_requests = 0: {o:?}");
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("keepalive_requests"), "{o:?}");
}

#[test]
fn bad_toml_and_missing_file_exit_1() {
    let d = tmp();
    let cfg = write_config(d.path(), "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"unterminated\n");
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("line 3"), "{o:?}");

    let missing = d.path().join("does-not-exist.toml");
    let missing = missing.to_str().unwrap();
    let o = run_cli(&["--config", missing, "--check-config"], None);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("does-not-exist.toml"), "{o:?}");
    let o = run_cli(&["--config", missing], None);
    assert!(!o.timed_out, "{o:?}");
    assert_eq!(o.code, Some(1), "{o:?}");
}

#[test]
fn relative_paths_are_relative_to_the_config_file() {
    let srv = Server::builder()
        .raw_config(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"../root\"\n\
             [log]\naccess = \"../logs/access.log\"\nerror = \"-\"\n",
        )
        .config_file("conf/ferrohttpd.toml")
        .setup(|dir, _| fs::create_dir_all(dir.join("logs")).unwrap())
        .cwd("/")
        .start();
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
    let lines = wait_for_lines(&srv.dir().join("logs/access.log"), 1, Duration::from_secs(3));
    assert_eq!(lines.len(), 1, "access log relative to the config file: {lines:?}");
    assert!(lines[0].contains("\"GET /file.txt HTTP/1.1\" 200 13"), "{lines:?}");
}

#[test]
fn thttpd_d_flag_overrides_root() {
    let srv = Server::builder()
        .setup(|dir, _| {
            fs::create_dir_all(dir.join("root2")).unwrap();
            fs::write(dir.join("root2/file.txt"), b"from root2\n").unwrap();
        })
        .args(&["-d", "{dir}/root2"])
        .start();
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"from root2\n");
}

#[test]
fn thttpd_p_and_h_flags_override_listen() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let srv = Server::builder()
        .config("listen = [\"127.0.0.2:0\"]")
        .args(&["-p", &port.to_string(), "-h", "127.0.0.1"])
        .start();
    assert_eq!(srv.addr().to_string(), format!("127.0.0.1:{port}"));
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn thttpd_l_dash_logs_to_stdout() {
    let srv = Server::builder().args(&["-l", "-", "-D"]).start();
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !srv.stdout_text().contains("\"GET /file.txt HTTP/1.1\" 200 13") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = srv.stdout_text();
    assert!(out.contains("\"GET /file.txt HTTP/1.1\" 200 13"), "access log line expected on stdout, got {out:?}");
    let line = out.lines().find(|l| l.contains("GET /file.txt")).unwrap();
    parse_combined(line).unwrap();
    assert!(
        !srv.access_log_path().exists() || fs::read(srv.access_log_path()).unwrap().is_empty(),
        "-l - must replace the configured access log file"
    );
}

#[test]
fn thttpd_l_file_and_dev_null() {
    let srv = Server::builder().args(&["-l", "{dir}/other.log"]).start();
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    let lines = wait_for_lines(&srv.dir().join("other.log"), 1, Duration::from_secs(3));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("\"GET /file.txt HTTP/1.1\" 200 13"), "{lines:?}");

    let srv = Server::builder().args(&["-l", "/dev/null"]).start();
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    std::thread::sleep(Duration::from_millis(1500));
    let logged = fs::read(srv.access_log_path()).unwrap_or_default();
    assert!(logged.is_empty(), "-l /dev/null means no access log, got {:?}", String::from_utf8_lossy(&logged));
}

#[test]
fn thttpd_flags_alone_without_a_config_file() {
    let srv = Server::builder()
        .no_config()
        .args(&["-p", "0", "-h", "127.0.0.1", "-d", "{root}", "-l", "/dev/null", "-D"])
        .start();
    let r = srv.get("/p7.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(7));
}

#[test]
fn every_documented_duration_form_is_accepted() {
    let d = tmp();
    let cfg = write_config(
        d.path(),
        &config_with(d.path(), "[http]\nheader_timeout = 10\nkeepalive_timeout = \"500ms\"\nsend_timeout = \"2m\"\n"),
    );
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert_eq!(o.code, Some(0), "{o:?}");
    let cfg =
        write_config(d.path(), &config_with(d.path(), "[http]\nsend_timeout = \"1h\"\nheader_timeout = \"10s\"\n"));
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert_eq!(o.code, Some(0), "{o:?}");
}

#[test]
fn one_line_per_listener_including_ipv6() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("NOTE: no IPv6 loopback here: skipping");
        return;
    }
    let srv = Server::start("listen = [\"127.0.0.1:0\", \"[::1]:0\"]");
    let deadline = Instant::now() + Duration::from_secs(3);
    while srv.listen_addrs().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let addrs = srv.listen_addrs();
    assert_eq!(addrs.len(), 2, "stdout: {}", srv.stdout_text());
    assert!(addrs[0].is_ipv4() && addrs[1].is_ipv6(), "{addrs:?}");
    for a in addrs {
        let r = exchange(a, b"GET /file.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        assert_eq!(r.status, 200, "via {a}: {r:?}");
        assert_eq!(r.body, FILE_TXT);
    }
}

#[test]
fn serve_a_folder_given_on_the_command_line() {
    // No configuration: the directory and the address on the command line are enough.
    let srv = Server::builder().no_config().args(&["{root}", "--listen", "127.0.0.1:0", "-l", "/dev/null"]).start();
    let r = srv.get("/p7.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(7));
    assert!(srv.stdout_text().contains("serving "), "{}", srv.stdout_text());

    // With a configuration: the directory given replaces its root, --listen its addresses.
    let srv = Server::builder()
        .config("listen = [\"127.0.0.1:1\"]")
        .setup(|dir, _| {
            fs::create_dir_all(dir.join("other")).unwrap();
            fs::write(dir.join("other/only-here.txt"), "other\n").unwrap();
        })
        .args(&["--root", "{dir}/other", "--listen=127.0.0.1:0"])
        .start();
    let r = srv.get("/only-here.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"other\n");
    assert_eq!(srv.get("/p7.txt").status, 404);
}

#[test]
fn no_www_here_says_in_one_line_what_to_pass() {
    let d = tmp();
    let o = run_cli(&[], Some(d.path()));
    assert_eq!(o.code, Some(1), "{o:?}");
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "one line: {o:?}");
    assert!(o.stderr.contains("ferrohttpd DIR") && o.stderr.contains("--config"), "{o:?}");
    // The same with --check-config, and a directory given is served.
    assert_eq!(run_cli(&["--check-config"], Some(d.path())).code, Some(1));
    let o = run_cli(&[".", "--check-config", "--listen", "127.0.0.1:0"], Some(d.path()));
    assert_eq!(o.code, Some(0), "{o:?}");
}

#[test]
fn port_listen_and_root_options_are_in_the_help() {
    let o = run_cli(&["--help"], None);
    let out = o.stdout_text();
    let first = out.lines().next().unwrap_or_default();
    for needle in ["[DIR]", "--port", "--listen"] {
        assert!(first.contains(needle), "the first usage line names {needle}: {first}");
    }
    assert!(out.contains("--root DIR"), "{out}");
}

/// `--check-config` on a bad configuration: exit 1 and one line on stderr naming the key, in
/// words (no Rust type names).
fn check_fails(d: &Path, text: &str, must: &[&str]) {
    let cfg = write_config(d, text);
    let o = run_cli(&["--config", &cfg, "--check-config"], Some(d));
    assert_eq!(o.code, Some(1), "{text}: {o:?}");
    let err = o.stderr.trim_end();
    assert_eq!(err.lines().count(), 1, "one line for {text:?}: {err}");
    for m in must {
        assert!(err.contains(m), "{text:?}: {m:?} missing from: {err}");
    }
    for jargon in ["i64", "u64", "untagged", "enum Raw", "sequence"] {
        assert!(!err.contains(jargon), "{text:?}: Rust jargon {jargon:?} in: {err}");
    }
}

#[test]
fn check_config_names_the_key_of_each_bad_input() {
    let d = tmp();
    let dir = d.path();
    // Type errors.
    check_fails(
        dir,
        &config_with(dir, "[http]\nmax_headers = \"x\"\n"),
        &["line 5", "http.max_headers", "whole number", "\"x\""],
    );
    check_fails(dir, &config_with(dir, "[listing]\nenabled = 1\n"), &["line 5", "listing.enabled", "true or false"]);
    check_fails(dir, &config_with(dir, "[http]\nkeepalive_timeout = true\n"), &["http.keepalive_timeout", "\"10s\""]);
    check_fails(dir, &config_with(dir, "workers = [1]\n"), &["server.workers", "\"auto\""]);
    check_fails(dir, "[server]\nlisten = \"127.0.0.1:0\"\n", &["line 2", "server.listen", "a list"]);
    // Files the keys name.
    check_fails(
        dir,
        &config_with(dir, "[errors]\n404 = \"missing.html\"\n"),
        &["errors.404", "missing.html", "no such file"],
    );
    check_fails(dir, "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"no-such-dir\"\n", &["server.root", "no-such-dir"]);
    check_fails(
        dir,
        &config_with(dir, "[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"no.crt\"\nkey = \"no.key\"\n"),
        if cfg!(feature = "tls") { &["tls.cert", "no.crt"][..] } else { &["tls"][..] },
    );
    check_fails(
        dir,
        &config_with(dir, "[[auth]]\npath = \"/x/\"\nrealm = \"x\"\nhtpasswd = \"no.htpasswd\"\n"),
        &["auth.htpasswd", "no.htpasswd"],
    );
    // An error page that is there passes.
    fs::write(dir.join("root/missing.html"), "here now\n").unwrap();
    let cfg = write_config(dir, &config_with(dir, "[errors]\n404 = \"missing.html\"\n"));
    let o = run_cli(&["--config", &cfg, "--check-config"], Some(dir));
    assert_eq!(o.code, Some(0), "{o:?}");
}

/// `--check-config` binds each listen address and lets it go, as `nginx -t` does: one held by
/// a running server (here a real ferrohttpd, and the check of its own configuration) is a note
/// and the check passes; one that cannot be bound at all fails it, naming the key.
#[test]
fn check_config_binds_the_listen_addresses_and_a_running_server_is_no_error() {
    let srv = Server::start("");
    let d = tmp();
    let held = format!("[server]\nlisten = [\"{}\"]\nroot = {:?}\n", srv.addr(), srv.root());
    let cfg = write_config(d.path(), &held);
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert_eq!(o.code, Some(0), "a check while the server runs: {o:?}");
    let note = format!("note: server.listen {}: address already in use", srv.addr());
    assert!(o.stderr.contains(&note), "{note:?} missing: {o:?}");
    assert!(o.stdout_text().contains(&format!("listen {}; ", srv.addr())), "{o:?}");
    assert!(o.stdout_text().contains(&format!("; in use: {}", srv.addr())), "{o:?}");
    // The server did not notice.
    assert_eq!(srv.get("/").status, 200);

    // A free address passes without a note; an address this machine does not have fails.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let cfg = write_config(d.path(), &format!("[server]\nlisten = [\"{free}\"]\nroot = {:?}\n", srv.root()));
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(!o.stderr.contains("note:") && !o.stdout_text().contains("in use"), "{o:?}");
    assert!(std::net::TcpListener::bind(free).is_ok(), "the check let {free} go");
    // 192.0.2.1 is TEST-NET-1 (RFC 5737): no machine has it.
    let cfg = write_config(d.path(), &format!("[server]\nlisten = [\"192.0.2.1:8080\"]\nroot = {:?}\n", srv.root()));
    let o = run_cli(&["--config", &cfg, "--check-config"], None);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{o:?}");
    assert!(o.stderr.contains("server.listen: cannot listen on 192.0.2.1:8080"), "{o:?}");
}

/// The password file an `[[auth]]` rule names is read by `--check-config`: each line that lets
/// no one in is a warning `FILE: line N: …` (the check passes: the server would start), and a
/// file the server cannot read is an error.
#[test]
fn check_config_reports_password_file_lines_by_number() {
    let d = tmp();
    let dir = d.path();
    let pw = dir.join("users.htpasswd");
    let cost13 = format!("$2b$13${}", "a".repeat(53));
    let good = "ab01FJadG3tKc"; // traditional DES: 13 crypt(3) characters
    fs::write(&pw, format!("# team\nalice:$apr1$salt$hash\nbob\n\ncarol:{cost13}\ndave:{good}\n")).unwrap();
    let auth = format!("[[auth]]\npath = \"/x/\"\nhtpasswd = {pw:?}\n");
    let cfg = write_config(dir, &config_with(dir, &auth));
    let o = run_cli(&["--config", &cfg, "--check-config"], Some(dir));
    assert_eq!(o.code, Some(0), "{o:?}");
    let p = pw.display();
    for want in [
        format!("warning: auth.htpasswd {p}: line 2: user \"alice\": not a hash the server checks"),
        format!("warning: auth.htpasswd {p}: line 3: not \"user:hash\"; ignored"),
        format!("warning: auth.htpasswd {p}: line 5: bcrypt cost 13 is above the maximum of 12"),
    ] {
        assert!(o.stderr.contains(&want), "{want:?} missing from:\n{}", o.stderr);
    }
    assert_eq!(o.stderr.lines().count(), 3, "dave's entry is fine: {}", o.stderr);
    fs::write(&pw, b"eve:\xff\n").unwrap();
    let o = run_cli(&["--config", &cfg, "--check-config"], Some(dir));
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains(&format!("auth.htpasswd {p}: not valid UTF-8")), "{o:?}");
}

/// A port below 1024 that the checking user may not bind is a warning, not an error: the
/// check is meant to be run as the service's user (`runuser -u ferrohttpd`), who lacks the
/// CAP_NET_BIND_SERVICE the packaged unit gives the server.
#[test]
fn check_config_as_a_user_who_may_not_bind_port_1_warns() {
    let unprivileged_from: u32 = fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024);
    if unprivileged_from <= 1 {
        eprintln!("note: net.ipv4.ip_unprivileged_port_start = {unprivileged_from}: any user binds port 1; skipped");
        return;
    }
    let d = tmp();
    let dir = d.path();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("ferrohttpd-bin");
    fs::copy(BIN, &bin).unwrap();
    let args = [bin.to_str().unwrap(), dir.to_str().unwrap(), "--listen", "127.0.0.1:1", "--check-config"];
    let o = if std::os::unix::fs::MetadataExt::uid(&fs::metadata(dir).unwrap()) == 0 {
        if run_program("setpriv", &["--version"], None).code != Some(0) {
            eprintln!("note: running as root and setpriv is missing (apt-get install util-linux): skipped");
            return;
        }
        let mut all = vec!["--reuid=65534", "--regid=65534", "--clear-groups"];
        all.extend_from_slice(&args);
        run_program("setpriv", &all, None)
    } else {
        run_program(args[0], &args[1..], None)
    };
    assert_eq!(o.code, Some(0), "{o:?}");
    let want = "warning: server.listen 127.0.0.1:1: not bound: this user may not bind ports below 1024";
    assert!(o.stderr.contains(want), "{want:?} missing: {o:?}");
    assert!(o.stdout_text().contains("; not bound (no privilege): 127.0.0.1:1"), "{o:?}");
}
