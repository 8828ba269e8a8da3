//! HTTP/3 with `workers = N` (issue 35): every packet of a connection reaches the worker that
//! owns it, by connection ID (`quic::steer`), also after the client's source port changed
//! mid-transfer, and after a worker was restarted. The real binary, 127.0.0.1, aioquic
//! clients that move to a new UDP socket (`tests/h3migrate.py`). Built only with the `http3`
//! feature; skipped, saying so, without aioquic (a failure in CI, which installs it).
#![cfg(feature = "http3")]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::json::{self, Json};
use common::*;

const WORKERS: usize = 4;
const SIZE: usize = 512 * 1024;

fn have_client() -> bool {
    have_aioquic("the HTTP/3 workers tests are")
}

fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

/// A server with `workers = 4`, a TLS listener and HTTP/3 on its port, serving `big.bin`;
/// waits until every worker runs.
fn start() -> Server {
    let (plain, tls) = (free_port(), free_port());
    let srv = Server::builder()
        .setup(|dir, _| proto::make_localhost_cert(dir))
        .setup(|_, root| std::fs::write(root.join("big.bin"), pseudo_random_bytes(SIZE, 7)).unwrap())
        .raw_config(&format!(
            "[server]\nlisten = [\"127.0.0.1:{plain}\"]\nroot = \"{{root}}\"\nworkers = {WORKERS}\n\
             [log]\nerror = \"-\"\n\
             [tls]\nlisten = [\"127.0.0.1:{tls}\"]\ncert = \"{{dir}}/localhost.crt\"\nkey = \"{{dir}}/localhost.key\"\n\
             [http3]\nenabled = true\n"
        ))
        .start();
    wait_workers(&srv);
    srv
}

fn wait_workers(srv: &Server) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while children_of(srv.pid()).len() < WORKERS {
        assert!(Instant::now() < deadline, "the workers did not start");
        sleep(Duration::from_millis(20));
    }
}

/// Runs `conns` clients at once, each making `rebinds + 1` transfers of `big.bin` and moving
/// to a new source port in the middle of each but the last; checks every response.
fn migrate(srv: &Server, conns: usize, rebinds: usize) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3migrate.py");
    let port = srv.tls_addr().port().to_string();
    let out = Command::new("python3")
        .arg(script)
        .args(["127.0.0.1", &port, "localhost", "/big.bin", &conns.to_string(), &rebinds.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "client failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    let Ok(Json::Arr(list)) = json::parse_json(&text) else { panic!("not a list: {text}") };
    assert_eq!(list.len(), conns, "{text}");
    let want = sha256(&pseudo_random_bytes(SIZE, 7));
    for (c, conn) in list.iter().enumerate() {
        let Json::Arr(resps) = conn else { panic!("connection {c}: {conn:?}") };
        assert_eq!(resps.len(), rebinds + 1, "connection {c}: {text}");
        for (k, r) in resps.iter().enumerate() {
            let status = r.num(&["status"]).ok();
            assert_eq!(status, Some(200.0), "connection {c}, transfer {k} did not finish: {r:?}");
            assert_eq!(r.get("body_hex_sha256").and_then(Json::str), Some(want.as_str()), "connection {c}, {k}");
            // It moved to a new port while the body was still coming (all but the last).
            let (from, to) = (r.num(&["from_port"]).unwrap(), r.num(&["port"]).unwrap());
            assert_eq!(from != to, k < rebinds, "connection {c}, transfer {k}: ports {from} -> {to}");
            if k < rebinds {
                let at = r.num(&["moved_at"]).unwrap_or(f64::MAX);
                assert!(at < SIZE as f64, "connection {c}, transfer {k}: moved at {at}");
            }
        }
    }
    assert!(!srv.stderr_text().contains("not steered"), "{}", srv.stderr_text());
}

/// Clients that change their source port in the middle of transfers (as after a NAT
/// rebinding) finish every transfer, byte-exact: their packets, whatever the port, reach the
/// worker that owns the connection. Without the steering program the kernel's hash sends a
/// moved client to another worker 3 times in 4, and the test fails.
#[test]
fn clients_that_change_port_mid_transfer_keep_their_worker() {
    if !have_client() {
        return;
    }
    let srv = start();
    migrate(&srv, 8, 3);
}

/// A reload (SIGHUP: the workers keep their sockets) and a worker killed and restarted by
/// the parent (it gets the same socket, so the same number in the group): connections to
/// every worker are still steered after both.
#[test]
fn steering_survives_a_reload_and_a_worker_restart() {
    if !have_client() {
        return;
    }
    let srv = start();
    signal(srv.pid(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.stderr_text().matches("reloaded").count() < WORKERS {
        assert!(Instant::now() < deadline, "the workers did not reload: {}", srv.stderr_text());
        sleep(Duration::from_millis(20));
    }
    migrate(&srv, 4, 1);
    let before = children_of(srv.pid());
    let victim = before[1];
    signal(victim, "KILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = children_of(srv.pid());
        if now.len() == WORKERS && !now.contains(&victim) {
            break;
        }
        assert!(Instant::now() < deadline, "the worker was not restarted: {now:?}");
        sleep(Duration::from_millis(50));
    }
    // Restarted after the parent's pause for a worker that died young (1 s at most).
    sleep(Duration::from_millis(300));
    migrate(&srv, 8, 2);
}
