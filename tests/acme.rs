//! Automatic HTTPS (issue 36): the real binary against a real ACME CA, Debian's `pebble`,
//! on 127.0.0.1. Pebble validates on the ports ferrohttpd listens on (`httpPort`,
//! `tlsPort`), resolves `localhost` from /etc/hosts (other names through
//! `pebble-challtestsrv` as its DNS server), and trusts nothing of ours: its own HTTPS
//! certificate is made here with the openssl CLI, and its root comes from its management
//! API. Both are started as plain background processes and stopped by PID. Without
//! `pebble` the tests that need it say so and pass, except in CI (`CI` set), where
//! `.ci/run` installs it.
#![cfg(feature = "acme")]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// A CA and a leaf for `localhost`/127.0.0.1 signed by it (webpki refuses a self-signed CA
/// certificate as a server's): `ca.pem`, `leaf.pem`, `leaf.key` in `dir`.
fn make_pebble_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[&["req", "-x509"][..], &ec, &["-days", "2", "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.pem"]]
        .concat());
    run(&[&["req"][..], &ec, &["-subj", "/CN=localhost", "-keyout", "leaf.key", "-out", "leaf.csr"]].concat());
    fs::write(dir.join("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext",
        "-out",
        "leaf.pem",
    ]);
}

/// Whether Pebble can run here (in CI it must).
fn have_pebble() -> bool {
    let found = Command::new("pebble").arg("-h").stderr(Stdio::null()).stdout(Stdio::null()).status().is_ok();
    if !found {
        assert!(std::env::var_os("CI").is_none(), "pebble is not installed, and CI must run the ACME tests");
        eprintln!("note: pebble is not installed: the test is skipped (apt-get install pebble)");
    }
    found
}

fn wait_port(port: u16) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(15), "nothing listens on {port}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A running Pebble (and its DNS server when names other than localhost are needed).
struct Pebble {
    /// The ports the server under test listens on, where Pebble validates HTTP-01 and TLS-ALPN-01.
    http: u16,
    tls: u16,
    dir: tempfile::TempDir,
    children: Vec<Child>,
    port: u16,
    management: u16,
    /// pebble-challtestsrv's management port, when it runs.
    dns_management: Option<u16>,
}

impl Pebble {
    /// Pebble validating HTTP-01 and TLS-ALPN-01 on two fresh ports (`http`, `tls`: the
    /// server under test listens there), issuing certificates valid for `validity` seconds;
    /// with `dns`, every name resolves to 127.0.0.1 through pebble-challtestsrv. `None`
    /// (the test is skipped) where pebble is not installed, outside CI.
    fn start(validity: u64, dns: bool) -> Option<Pebble> {
        if !have_pebble() {
            return None;
        }
        let (http_port, tls_port) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        make_pebble_certs(dir.path());
        let (port, management) = (free_port(), free_port());
        let d = dir.path().display();
        let config = format!(
            "{{\"pebble\": {{\"listenAddress\": \"127.0.0.1:{port}\", \"managementListenAddress\": \"127.0.0.1:{management}\", \
             \"certificate\": \"{d}/leaf.pem\", \"privateKey\": \"{d}/leaf.key\", \"httpPort\": {http_port}, \
             \"tlsPort\": {tls_port}, \"ocspResponderURL\": \"\", \"externalAccountBindingRequired\": false, \
             \"certificateValidityPeriod\": {validity}}}}}"
        );
        fs::write(dir.path().join("pebble.json"), config).unwrap();
        let mut children = Vec::new();
        let mut dns_management_port = None;
        let mut pebble = Command::new("pebble");
        pebble.arg("-config").arg(dir.path().join("pebble.json"));
        if dns {
            let (dns_port, dns_management) = (free_port(), free_port());
            let srv = Command::new("pebble-challtestsrv")
                .args(["-dns01", &format!("127.0.0.1:{dns_port}"), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-management", &format!("127.0.0.1:{dns_management}")])
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.path().join("challtestsrv.log")).unwrap())
                .spawn()
                .expect("pebble-challtestsrv runs (apt-get install pebble)");
            children.push(srv);
            wait_port(dns_management);
            dns_management_port = Some(dns_management);
            pebble.args(["-dnsserver", &format!("127.0.0.1:{dns_port}")]);
        }
        let log = fs::File::create(dir.path().join("pebble.log")).unwrap();
        let child = pebble
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_VA_NOSLEEP", "1")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("pebble runs (apt-get install pebble)");
        children.push(child);
        let p = Pebble {
            http: http_port,
            tls: tls_port,
            dir,
            children,
            port,
            management,
            dns_management: dns_management_port,
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", management)).is_err()
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        {
            assert!(start.elapsed() < Duration::from_secs(15), "pebble did not start:\n{}", p.log());
            thread::sleep(Duration::from_millis(50));
        }
        Some(p)
    }

    /// The `[acme]` and listener configuration of a server on this Pebble's ports.
    fn config(&self, domains: &str, extra: &str) -> String {
        acme_config(self.http, self.tls, &self.directory(), &self.ca_roots(), domains, extra)
    }

    fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    fn ca_roots(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    /// The root that signs what Pebble issues (made anew at each start), as a PEM file.
    fn issuing_root(&self) -> PathBuf {
        let path = self.dir.path().join("issuing-root.pem");
        let url = format!("https://127.0.0.1:{}/roots/0", self.management);
        let o = curl(&["--cacert", self.ca_roots().to_str().unwrap(), "-o", path.to_str().unwrap(), &url]);
        assert_eq!(o.code, Some(0), "{o:?}");
        assert!(fs::read_to_string(&path).unwrap().contains("BEGIN CERTIFICATE"));
        path
    }

    /// Makes `host` resolve to `address` (pebble-challtestsrv's management API).
    fn add_a(&self, host: &str, address: &str) {
        let url = format!("http://127.0.0.1:{}/add-a", self.dns_management.expect("started with dns"));
        let body = format!("{{\"host\":\"{host}.\",\"addresses\":[\"{address}\"]}}");
        let o = curl(&["-f", "-d", &body, &url]);
        assert_eq!(o.code, Some(0), "{o:?}");
    }

    /// New orders Pebble has taken so far.
    fn orders(&self) -> usize {
        self.log().matches("POST /order-plz").count()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The `[acme]` and listener configuration for a server on fixed ports.
fn acme_config(http: u16, tls: u16, directory: &str, roots: &Path, domains: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{http}\"]\nroot = \"{{root}}\"\n\
         [log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n\
         [tls]\nlisten = [\"127.0.0.1:{tls}\"]\n\
         [status]\nenabled = true\n\
         [acme]\ndomains = [{domains}]\ndirectory = \"{directory}\"\nca_roots = \"{}\"\nstate_dir = \"{{dir}}/acme\"\n{extra}",
        roots.display()
    )
}

/// curl to `https://NAME:PORT/PATH` resolved to 127.0.0.1, verifying against `root`.
fn fetch(name: &str, port: u16, path: &str, root: &Path) -> CliOutput {
    let resolve = format!("{name}:{port}:127.0.0.1");
    let url = format!("https://{name}:{port}{path}");
    curl(&["--cacert", root.to_str().unwrap(), "--resolve", &resolve, &url])
}

/// The serial and issuer of the certificate served for `name`, by `openssl s_client`.
fn served(name: &str, port: u16) -> (String, String) {
    let mut c = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-servername", name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(c.stdout.as_mut().unwrap(), &mut out).unwrap();
    let _ = c.wait();
    let mut x = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-issuer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(x.stdin.as_mut().unwrap(), out.as_bytes()).unwrap();
    let o = x.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("").trim().to_string();
    (field("serial="), field("issuer="))
}

/// Waits until `name` is served with a certificate that verifies against `root`.
fn wait_issued(srv: &Server, name: &str, port: u16, root: &Path, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if fetch(name, port, "/file.txt", root).code == Some(0) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "no certificate for {name} within {limit:?}:\n{}", srv.stderr_text());
        thread::sleep(Duration::from_millis(100));
    }
}

fn wait_stderr(srv: &Server, what: &str, limit: Duration) {
    let start = Instant::now();
    while !srv.stderr_text().contains(what) {
        assert!(start.elapsed() < limit, "no {what:?} in the error log:\n{}", srv.stderr_text());
        thread::sleep(Duration::from_millis(50));
    }
}

/// HTTP-01 for `localhost`: issued at start and served with a chain that verifies against
/// Pebble's root, while plain HTTP answers throughout; a restart with `workers = 2` reuses
/// the account and the certificate (no new order); the short-lived certificate is renewed
/// by one worker while a client keeps fetching over HTTPS, with no failed request, and then
/// every worker serves the new serial.
#[test]
fn http01_issues_renews_under_load_and_a_restart_reuses_everything() {
    let Some(pebble) = Pebble::start(60, false) else { return };
    let tls = pebble.tls;
    let config = pebble.config("\"localhost\"", "challenges = [\"http-01\"]\n");
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("acme");
    let config = config.replace("{dir}/acme", state_dir.to_str().unwrap());
    let srv = Server::builder().raw_config(&config).start();
    assert_eq!(srv.get("/file.txt").status, 200, "plain HTTP serves before the certificate");
    let root = pebble.issuing_root();
    let took = wait_issued(&srv, "localhost", tls, &root, Duration::from_secs(30));
    eprintln!("issued in {took:?} after the server started listening");
    wait_stderr(&srv, "certificate obtained in", Duration::from_secs(5));
    assert_eq!(
        fetch("localhost", tls, "/file.txt", &root).stdout_text(),
        fs::read_to_string(srv.root().join("file.txt")).unwrap()
    );
    let (serial, issuer) = served("localhost", tls);
    assert!(issuer.contains("Pebble"), "{issuer}");
    // The state: 0700 directory, 0600 files.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(fs::metadata(&state_dir).unwrap().permissions().mode() & 0o777, 0o700);
    for f in ["account.json", "localhost.crt", "localhost.key"] {
        assert_eq!(fs::metadata(state_dir.join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
    }
    let status = srv.get("/.status").body_text();
    assert!(status.contains("acme: localhost expires ") && status.contains("last_error -"), "{status}");
    drop(srv);

    // A restart, now with two workers: the same certificate at once from each (SO_REUSEPORT
    // spreads the connections), no new order, no new account.
    let orders = pebble.orders();
    let srv = Server::builder().raw_config(&config.replace("[server]\n", "[server]\nworkers = 2\n")).start();
    for _ in 0..10 {
        assert_eq!(fetch("localhost", tls, "/file.txt", &root).code, Some(0), "{}", srv.stderr_text());
        assert_eq!(served("localhost", tls).0, serial);
    }
    thread::sleep(Duration::from_millis(500));
    assert_eq!(pebble.orders(), orders, "a restart ordered again:\n{}", srv.stderr_text());
    assert!(!srv.stderr_text().contains("account created"), "{}", srv.stderr_text());

    // Renewal: due with a third of the 60 s left; one worker orders, the other installs the
    // new certificate from state_dir. A client fetches all along.
    let start = Instant::now();
    let mut fetched = 0;
    let renewed_in = loop {
        let o = fetch("localhost", tls, "/file.txt", &root);
        assert_eq!(o.code, Some(0), "a request failed during renewal: {o:?}\n{}", srv.stderr_text());
        fetched += 1;
        if srv.stderr_text().contains("renewing a certificate") && served("localhost", tls).0 != serial {
            break start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(75), "not renewed:\n{}", srv.stderr_text());
        thread::sleep(Duration::from_millis(100));
    };
    eprintln!("renewed {renewed_in:?} after the restart; {fetched} requests, none failed");
    for l in srv.stderr_text().lines().filter(|l| l.contains("acme: ")) {
        eprintln!("{l}");
    }
    // Within the watchers' 1 s poll, every worker serves the new serial to new connections.
    thread::sleep(Duration::from_millis(1500));
    let renewed = served("localhost", tls).0;
    for _ in 0..20 {
        assert_eq!(fetch("localhost", tls, "/file.txt", &root).code, Some(0));
        assert_eq!(served("localhost", tls).0, renewed, "a worker still serves the old certificate");
    }
    let err = srv.stderr_text();
    assert_eq!(err.matches("renewing a certificate").count(), 1, "one worker orders:\n{err}");
}

/// TLS-ALPN-01 for two names (the second resolved by pebble-challtestsrv), each with a
/// certificate of its own chosen by SNI; plain HTTP is never asked. The second name starts
/// with a certificate in `state_dir` whose key is not its own: it is ordered anew.
#[test]
fn tls_alpn01_issues_for_two_names() {
    let Some(pebble) = Pebble::start(3600, true) else { return };
    let tls = pebble.tls;
    let config = pebble.config("\"localhost\", \"www.acme.test\"", "challenges = [\"tls-alpn-01\", \"http-01\"]\n");
    let srv = Server::builder()
        .setup(|dir, _| {
            let mut p = rcgen::CertificateParams::new(vec!["www.acme.test".to_string()]).unwrap();
            p.not_after = rcgen::date_time_ymd(2099, 1, 1);
            let cert = p.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap();
            fs::create_dir_all(dir.join("acme")).unwrap();
            fs::write(dir.join("acme/www.acme.test.crt"), cert.pem()).unwrap();
            fs::write(dir.join("acme/www.acme.test.key"), rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
        })
        .raw_config(&config)
        .start();
    let root = pebble.issuing_root();
    for name in ["localhost", "www.acme.test"] {
        wait_issued(&srv, name, tls, &root, Duration::from_secs(30));
        assert!(served(name, tls).1.contains("Pebble"));
    }
    assert_ne!(served("localhost", tls).0, served("www.acme.test", tls).0);
    assert!(srv.stderr_text().contains("www.acme.test: ordering a certificate (tls-alpn-01)"), "{}", srv.stderr_text());
    let log = fs::read_to_string(srv.dir().join("access.log")).unwrap_or_default();
    assert!(!log.contains("acme-challenge"), "HTTP-01 was used: {log}");
    // The challenge certificates are gone once used.
    assert_eq!(fs::read_dir(srv.dir().join("acme/tls-alpn-01")).unwrap().count(), 0);
}

/// One name whose validation fails (it resolves to an address nothing listens on): the
/// other is issued all the same; the failure is in the error log with the CA's reason and
/// the backoff, and on the status page.
#[test]
fn a_failing_challenge_holds_up_no_other_name() {
    let Some(pebble) = Pebble::start(3600, true) else { return };
    let tls = pebble.tls;
    pebble.add_a("broken.acme.test", "127.0.0.2");
    let config = pebble.config("\"broken.acme.test\", \"localhost\"", "challenges = [\"tls-alpn-01\", \"http-01\"]\n");
    let srv = Server::builder().raw_config(&config).start();
    let root = pebble.issuing_root();
    wait_issued(&srv, "localhost", tls, &root, Duration::from_secs(30));
    let err = srv.stderr_text();
    let line = err.lines().find(|l| l.contains("acme: broken.acme.test: failed: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("validation by tls-alpn-01: ") && line.contains("next attempt in 30 s"), "{line}");
    let status = srv.get("/.status?json").body_text();
    assert!(status.contains("\"name\":\"broken.acme.test\",\"expires\":0,"), "{status}");
    assert!(status.contains("\"last_error\":\"validation by tls-alpn-01: "), "{status}");
    assert!(fetch("broken.acme.test", tls, "/file.txt", &root).code != Some(0));
}

/// `workers = 2`: one worker orders (the HTTP-01 answer is a file any worker can serve),
/// and every worker serves the certificate to new connections.
#[test]
fn with_two_workers_one_orders_and_every_worker_serves() {
    let Some(pebble) = Pebble::start(3600, false) else { return };
    let tls = pebble.tls;
    let config =
        pebble.config("\"localhost\"", "challenges = [\"http-01\"]\n").replace("[server]\n", "[server]\nworkers = 2\n");
    let srv = Server::builder().raw_config(&config).start();
    let root = pebble.issuing_root();
    wait_issued(&srv, "localhost", tls, &root, Duration::from_secs(30));
    // Both workers install it within the watch interval; SO_REUSEPORT spreads new
    // connections over them.
    thread::sleep(Duration::from_millis(1500));
    for _ in 0..20 {
        let o = fetch("localhost", tls, "/file.txt", &root);
        assert_eq!(o.code, Some(0), "{o:?}\n{}", srv.stderr_text());
    }
    assert_eq!(pebble.orders(), 1, "{}", srv.stderr_text());
    assert_eq!(srv.stderr_text().matches("ordering a certificate").count(), 1, "{}", srv.stderr_text());
}

/// Started as root with `-u nobody`: `state_dir` is given to nobody before the switch, so
/// the ACME thread, running as nobody, writes the account and the certificate there.
#[test]
fn after_the_switch_to_another_user_state_dir_stays_writable() {
    if !std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n") {
        eprintln!("note: not root: the user switch is not tested");
        return;
    }
    let Some(pebble) = Pebble::start(3600, false) else { return };
    let tls = pebble.tls;
    let state = tempfile::tempdir().unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    fs::set_permissions(state.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let state_dir = state.path().join("acme");
    let config = pebble
        .config("\"localhost\"", "challenges = [\"http-01\"]\n")
        .replace("{dir}/acme", state_dir.to_str().unwrap());
    let srv = Server::builder().raw_config(&config).args(&["-u", "nobody"]).start();
    let root = pebble.issuing_root();
    wait_issued(&srv, "localhost", tls, &root, Duration::from_secs(30));
    let nobody = fs::metadata(state_dir.join("localhost.crt")).unwrap().uid();
    assert_ne!(nobody, 0);
    assert_eq!(fs::metadata(&state_dir).unwrap().uid(), nobody);
    assert_eq!(fs::metadata(state_dir.join("account.json")).unwrap().uid(), nobody);
}

/// The CA unreachable at start: the server starts and serves plain HTTP, says why in the
/// error log and on the status page, retries after a backoff, and answers TLS clients of
/// the name with an alert (no certificate yet).
#[test]
fn ca_down_at_start_serves_plain_http_and_says_why() {
    let (http, tls) = (free_port(), free_port());
    let dead = format!("https://127.0.0.1:{}/dir", free_port());
    let roots = tempfile::tempdir().unwrap();
    make_pebble_certs(roots.path());
    let config = acme_config(http, tls, &dead, &roots.path().join("ca.pem"), "\"localhost\"", "");
    let srv = Server::builder().raw_config(&config).start();
    wait_stderr(&srv, "acme: localhost: failed: ", Duration::from_secs(10));
    assert!(srv.stderr_text().contains("next attempt in 30 s"), "{}", srv.stderr_text());
    assert_eq!(srv.get("/file.txt").status, 200);
    let status = srv.get("/.status").body_text();
    assert!(status.contains("acme: localhost expires - next ") && status.contains("last_error account: "), "{status}");
    assert!(!status.contains("last_error -"), "{status}");
    // A TLS client of the name: an alert, not a certificate nobody issued.
    let o = fetch("localhost", tls, "/file.txt", &roots.path().join("ca.pem"));
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("alert"), "{o:?}");
}

/// The CA unreachable and the certificate in `state_dir` expired: it is served all the
/// same, with a warning, and its renewal is attempted (and fails, and is retried).
#[test]
fn ca_down_and_an_expired_certificate_serves_it_with_a_warning() {
    let (http, tls) = (free_port(), free_port());
    let dead = format!("https://127.0.0.1:{}/dir", free_port());
    let roots = tempfile::tempdir().unwrap();
    make_pebble_certs(roots.path());
    let config = acme_config(http, tls, &dead, &roots.path().join("ca.pem"), "\"localhost\"", "");
    let srv = Server::builder()
        .setup(|dir, _| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 3, 31);
            let cert = p.self_signed(&key).unwrap();
            fs::create_dir_all(dir.join("acme")).unwrap();
            fs::write(dir.join("acme/localhost.crt"), cert.pem()).unwrap();
            fs::write(dir.join("acme/localhost.key"), key.serialize_pem()).unwrap();
        })
        .raw_config(&config)
        .start();
    wait_stderr(&srv, "acme: localhost: failed: ", Duration::from_secs(10));
    let err = srv.stderr_text();
    assert!(err.contains("localhost.crt expired on Tue, 31 Mar 2020") && err.contains("serving it until"), "{err}");
    assert!(err.contains("acme: localhost: renewing a certificate"), "{err}");
    let resolve = format!("localhost:{tls}:127.0.0.1");
    let o = curl(&["-k", "--resolve", &resolve, &format!("https://localhost:{tls}/file.txt")]);
    assert_eq!(o.code, Some(0), "{o:?}");
}

/// HTTP-01 answers come before every rule: redirect_http, `[[auth]]` on `/`, hidden
/// paths, a `_redirects` catch-all; a token that names no pending answer is a 404.
#[test]
fn http01_answers_come_before_every_rule() {
    let (http, tls) = (free_port(), free_port());
    let dead = format!("https://127.0.0.1:{}/dir", free_port());
    let roots = tempfile::tempdir().unwrap();
    make_pebble_certs(roots.path());
    let token = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0";
    let config = acme_config(http, tls, &dead, &roots.path().join("ca.pem"), "\"localhost\"", "")
        .replace("[tls]\n", "[tls]\nredirect_http = true\n")
        + "[routing]\nhidden = [\"/.well-known/**\"]\nredirects_file = \"_redirects\"\n\
           [[auth]]\npath = \"/\"\nhtpasswd = \"{dir}/htpasswd\"\n";
    let srv = Server::builder()
        .setup(move |dir, root| {
            fs::write(dir.join("htpasswd"), "joe:aZGJuE6EXrjEE\n").unwrap();
            fs::write(root.join("_redirects"), "/*  /index.html  200\n").unwrap();
            fs::create_dir_all(dir.join("acme/http-01")).unwrap();
            fs::write(dir.join("acme/http-01").join(token), format!("{token}.thumbprint")).unwrap();
        })
        .raw_config(&config)
        .start();
    let r = srv.get(&format!("/.well-known/acme-challenge/{token}"));
    assert_eq!((r.status, r.body_text()), (200, format!("{token}.thumbprint")));
    assert_eq!(srv.get("/.well-known/acme-challenge/unknownunknownunknown").status, 404);
    assert_eq!(srv.get("/.well-known/acme-challenge/..%2F..%2Fhtpasswd").status, 404);
    // Everything else still goes by the rules.
    assert_eq!(srv.get("/file.txt").status, 301);
    assert_eq!(srv.get("/.well-known/other").status, 301);
}

/// A `state_dir` that cannot be made is a start-up error naming it, from `--check-config`
/// too.
#[test]
fn an_unusable_state_dir_stops_the_start_and_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    fs::write(&blocker, "not a directory").unwrap();
    let state = blocker.join("acme");
    let config = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{}\"\n[tls]\nlisten = [\"127.0.0.1:0\"]\n\
         [acme]\ndomains = [\"localhost\"]\nstate_dir = \"{}\"\n",
        dir.path().display(),
        state.display()
    );
    let cfg = dir.path().join("f.toml");
    fs::write(&cfg, config).unwrap();
    for check in [true, false] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferrohttpd"));
        c.arg("--config").arg(&cfg);
        if check {
            c.arg("--check-config");
        }
        let o = c.stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("acme.state_dir {}", state.display())) && err.contains("cannot create"), "{err}");
    }
}

/// The one-line case: `ferrohttpd DIR --domain NAME --email ADDR`, with the plain address
/// given by `--listen` and the HTTPS one by the configuration (which has no `domains` and
/// no certificate: `--domain` completes it), gets its certificate by HTTP-01 on the
/// `--listen` address.
#[test]
fn domain_on_the_command_line_gets_its_certificate() {
    let Some(pebble) = Pebble::start(3600, false) else { return };
    let (http, tls) = (pebble.http, pebble.tls);
    let config = format!(
        "[log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n[tls]\nlisten = [\"127.0.0.1:{tls}\"]\n\
         [acme]\ndirectory = \"{}\"\nca_roots = \"{}\"\nstate_dir = \"{{dir}}/acme\"\nchallenges = [\"http-01\"]\n",
        pebble.directory(),
        pebble.ca_roots().display()
    );
    let listen = format!("127.0.0.1:{http}");
    let srv = Server::builder()
        .raw_config(&config)
        .args(&["{root}", "--domain", "localhost", "--email", "admin@example.org", "--listen", &listen])
        .start();
    assert_eq!(srv.port(), http);
    let root = pebble.issuing_root();
    let took = wait_issued(&srv, "localhost", tls, &root, Duration::from_secs(30));
    eprintln!("issued in {took:?} after the server started listening");
    // Validated on the --listen address: the CA's fetch is in its access log.
    let start = Instant::now();
    while !fs::read_to_string(srv.access_log_path()).unwrap_or_default().contains("GET /.well-known/acme-challenge/") {
        assert!(start.elapsed() < Duration::from_secs(10), "no challenge in the access log:\n{}", srv.stderr_text());
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        fetch("localhost", tls, "/file.txt", &root).stdout_text(),
        fs::read_to_string(srv.root().join("file.txt")).unwrap()
    );
    assert!(srv.dir().join("acme/account.json").is_file() && srv.dir().join("acme/localhost.crt").is_file());
}

/// `[[vhost]] acme = true`: the vhost's host is ordered with no `domains` in `[acme]`, and
/// its HTTPS requests are served from its own root with that certificate.
#[test]
fn a_vhost_with_acme_gets_its_certificate() {
    let Some(pebble) = Pebble::start(3600, false) else { return };
    let tls = pebble.tls;
    let config = pebble.config("", "").replace(
        "[acme]\ndomains = []\n",
        "[[vhost]]\nhost = \"LocalHost\"\nroot = \"{dir}/site\"\nacme = true\n[acme]\n",
    );
    let srv = Server::builder()
        .raw_config(&config)
        .setup(|dir, _| {
            fs::create_dir(dir.join("site")).unwrap();
            fs::write(dir.join("site/file.txt"), "the vhost's own file\n").unwrap();
        })
        .start();
    let root = pebble.issuing_root();
    wait_issued(&srv, "localhost", tls, &root, Duration::from_secs(30));
    assert_eq!(fetch("localhost", tls, "/file.txt", &root).stdout_text(), "the vhost's own file\n");
    assert!(srv.stderr_text().contains("acme: localhost: certificate obtained in"), "{}", srv.stderr_text());
}
