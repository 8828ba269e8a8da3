//! The file cache under change (issue 14): permission changes reach the access checks within
//! `[cache] revalidate`, and a file that shrinks and grows while it is fetched never panics the
//! server (the entry describes the mapping it holds, not a stale `fstat`).
//!
//! Every server listens on 127.0.0.1 with a kernel-chosen port; every socket has a timeout and
//! every loop is bounded in time.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{connect, spawn_listening, try_read_response, wait_until, Server, Spawned};

/// `GET path` on a fresh connection, in thttpd's personality: the status.
fn status_of(addr: std::net::SocketAddr, path: &str) -> u16 {
    let mut s = connect(addr);
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    try_read_response(&mut s, false).map(|r| r.status).unwrap_or(0)
}

#[test]
fn a_permission_change_takes_effect_within_revalidate() {
    // thttpd mode serves only world-readable, non-executable files. With the default
    // `revalidate` (1 s, which thttpd's personality keeps), a chmod must show within a few
    // seconds, in both directions; before the fix the first answer was cached forever.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    let root = d.join("www");
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let file = root.join("page.txt");
    fs::write(&file, b"mode test\n").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let sub = root.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("x.txt"), b"x\n").unwrap();
    fs::set_permissions(sub.join("x.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o755)).unwrap();
    let thttpd = d.join("thttpd");
    symlink(common::BIN, &thttpd).unwrap();
    let mut cmd = Command::new(&thttpd);
    cmd.args(["-D", "-d", root.to_str().unwrap(), "-l", "/dev/null", "-h", "127.0.0.1", "-p", "0"]).current_dir(d);
    let Spawned { mut child, addr, .. } = spawn_listening(cmd);

    let limit = Duration::from_secs(5);
    let mode = |m: u32| fs::set_permissions(&file, fs::Permissions::from_mode(m)).unwrap();
    let result = (|| {
        if status_of(addr, "/page.txt") != 200 {
            return Err("644 is not served".to_string());
        }
        // World-executable: refused (a CGI program in thttpd), readable by anyone.
        mode(0o755);
        if !wait_until(limit, || status_of(addr, "/page.txt") == 403) {
            return Err("still served 5 s after chmod 755".into());
        }
        mode(0o644);
        if !wait_until(limit, || status_of(addr, "/page.txt") == 200) {
            return Err("still refused 5 s after chmod 644 again".into());
        }
        mode(0o640);
        if !wait_until(limit, || status_of(addr, "/page.txt") == 403) {
            return Err("still served 5 s after chmod 640".into());
        }
        // A directory listing follows its directory's mode the same way.
        if status_of(addr, "/sub/") != 200 {
            return Err("a world-readable directory is not listed".into());
        }
        fs::set_permissions(&sub, fs::Permissions::from_mode(0o711)).unwrap();
        if !wait_until(limit, || status_of(addr, "/sub/") == 403) {
            return Err("a directory is still listed 5 s after chmod 711".into());
        }
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result.unwrap();
}

#[test]
fn a_file_shrinking_and_growing_under_requests_never_panics() {
    // `revalidate = 0`: every request re-checks the file, so some of them map it while it is
    // being truncated to 0 and written back. Before the fix the entry kept the size of the
    // first `fstat` while the mapping had the length of the truncated file, and the send
    // sliced past its end: a caught panic ("internal error") per such request.
    const SIZE: usize = 500_000;
    const RUN: Duration = Duration::from_millis(3000);
    let data = vec![b'z'; SIZE];
    let srv = Server::builder()
        .config("[cache]\nrevalidate = 0")
        .setup(|_, root| fs::write(root.join("churn.bin"), vec![b'z'; SIZE]).unwrap())
        .start();
    let addr = srv.addr();
    let path = srv.root().join("churn.bin");
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let (stop, answered) = (stop.clone(), answered.clone());
            thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while !stop.load(Ordering::Relaxed) {
                    let mut s = connect(addr);
                    // Half the requests are ranges (the slice path of a part), half whole.
                    let range = if c % 2 == 0 { "" } else { "Range: bytes=1000-2000,400000-499999\r\n" };
                    let req = format!("GET /churn.bin HTTP/1.1\r\nHost: localhost\r\n{range}Connection: close\r\n\r\n");
                    if s.write_all(req.as_bytes()).is_err() {
                        continue;
                    }
                    // Read to the end (or the close): the body may be cut short, that is allowed.
                    let mut total = 0usize;
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        total += n;
                    }
                    if total > 0 {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    let mut cycles = 0;
    while start.elapsed() < RUN {
        fs::File::options().write(true).open(&path).unwrap().set_len(0).unwrap();
        thread::sleep(Duration::from_millis(1));
        fs::write(&path, &data).unwrap();
        thread::sleep(Duration::from_millis(1));
        cycles += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let answered = answered.load(Ordering::Relaxed);
    eprintln!("{cycles} truncate/rewrite cycles, {answered} responses");
    assert!(answered > 0, "no request was answered during the churn");
    let r = srv.get("/churn.bin");
    assert_eq!((r.status, r.body.len()), (200, SIZE), "after the churn: {}", r.describe());
    // The error log is the server's stderr.
    thread::sleep(Duration::from_millis(200));
    let log = srv.stderr_text();
    let internal = log.lines().filter(|l| l.contains("internal error") || l.contains("panicked")).count();
    assert_eq!(internal, 0, "{internal} internal errors (panics) during the churn; the log:\n{}", tail(&log));
}

/// The last 20 lines of a log, for a failure message.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
