//! `workers = N`: a parent process and N event-loop processes sharing the port.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;

fn start_workers(n: u32) -> (Server, Vec<u32>) {
    let port = free_port();
    let srv = Server::start(&format!("listen = [\"127.0.0.1:{port}\"]\nworkers = {n}"));
    assert_eq!(srv.port(), port);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut kids = children_of(srv.pid());
    while kids.len() < n as usize && Instant::now() < deadline {
        sleep(Duration::from_millis(50));
        kids = children_of(srv.pid());
    }
    assert_eq!(kids.len(), n as usize, "expected {n} worker processes, found {kids:?}");
    (srv, kids)
}

fn serve_some(srv: &Server) {
    for i in 0..20 {
        let r = srv.get(&format!("/p{}.txt", i % PAGES));
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, page(i % PAGES));
    }
}

/// Kills, by PID, any listed process still alive; returns those that were.
fn reap_leftovers(pids: &[u32]) -> Vec<u32> {
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    for p in &left {
        signal(*p, "KILL");
    }
    left
}

/// Waits (up to 3 s) until a connection to the server succeeds.
fn wait_until_accepting(srv: &Server) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::net::TcpStream::connect(srv.addr()).is_err() {
        assert!(Instant::now() < deadline, "workers never started accepting");
        sleep(Duration::from_millis(20));
    }
}

/// The `listening on` line is a promise that the port accepts connections: a client that
/// connects right after it must not be refused.
#[test]
fn workers_accept_as_soon_as_listening_is_printed() {
    // The window is short: try a few fresh starts.
    let mut refused = 0;
    for _ in 0..5 {
        let port = free_port();
        let mut srv = Server::start(&format!("listen = [\"127.0.0.1:{port}\"]\nworkers = 2"));
        if std::net::TcpStream::connect(srv.addr()).is_err() {
            refused += 1;
        }
        wait_until_accepting(&srv);
        let kids = children_of(srv.pid());
        srv.terminate(Duration::from_secs(5));
        reap_leftovers(&kids);
    }
    assert_eq!(refused, 0, "{refused} of 5 connections made right after `listening on` were refused");
}

#[test]
fn workers_serve_and_stop_on_sigterm() {
    let (mut srv, kids) = start_workers(2);
    wait_until_accepting(&srv);
    serve_some(&srv);
    let st = srv.terminate(Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(3);
    while kids.iter().any(|k| alive(*k)) && Instant::now() < deadline {
        sleep(Duration::from_millis(50));
    }
    let left = reap_leftovers(&kids);
    assert!(st.is_some(), "the parent did not exit within 5 s of SIGTERM");
    assert!(left.is_empty(), "workers {left:?} outlived the parent's SIGTERM");
}

#[test]
fn a_killed_worker_is_restarted() {
    let (srv, kids) = start_workers(2);
    wait_until_accepting(&srv);
    signal(kids[0], "KILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut now = children_of(srv.pid());
    let restarted = |now: &[u32]| now.len() == 2 && !now.contains(&kids[0]);
    while !restarted(&now) && Instant::now() < deadline {
        sleep(Duration::from_millis(100));
        now = children_of(srv.pid());
    }
    assert!(restarted(&now), "worker not restarted: {kids:?} -> {now:?}");
    serve_some(&srv);
}

/// If the parent is killed outright (SIGKILL, OOM killer), its workers must not live on as
/// orphans that keep the port.
#[test]
fn workers_do_not_outlive_a_killed_parent() {
    let (mut srv, kids) = start_workers(2);
    wait_until_accepting(&srv);
    let port = srv.port();
    srv.kill_parent_only();
    let deadline = Instant::now() + Duration::from_secs(3);
    while kids.iter().any(|k| alive(*k)) && Instant::now() < deadline {
        sleep(Duration::from_millis(50));
    }
    let left = reap_leftovers(&kids);
    assert!(
        left.is_empty(),
        "workers {left:?} were still running (and serving 127.0.0.1:{port}) 3 s after the parent was SIGKILLed"
    );
}
