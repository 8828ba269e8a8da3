//! The load benchmark's plan (`benches/load/run --dry-run`), which installs and starts
//! nothing: the defaults must make a runnable plan, and each workload must be selectable by
//! name. The benchmark itself is run by hand, never here.

use std::path::Path;
use std::process::{Command, Output};

fn harness(args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/load/run");
    Command::new("python3")
        .arg(script)
        .args(args)
        // $OHA and $DARKHTTPD name no program, so the plan must say what it would skip
        // whatever the caller's environment and PATH hold (a developer may have installed oha).
        .env("OHA", "/nonexistent/oha")
        .env("DARKHTTPD", "/nonexistent/darkhttpd")
        .output()
        .expect("python3 runs (it is in .ci/run's list)")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_default_plan_runs_every_server_but_the_baseline() {
    let out = harness(&["--dry-run", "--quick"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let line = t.lines().find(|l| l.contains("servers in turn each round:")).unwrap_or_else(|| panic!("{t}"));
    for s in ["ferrohttpd ", "nginx ", "lighttpd ", "h2o ", "apache2 ", "apache2-stock ", "darkhttpd ", "ceiling"] {
        assert!(line.contains(s), "{s:?} missing from {line:?}");
    }
    assert!(!line.contains("ferrohttpd-baseline"), "{line}");
}

#[test]
fn each_workload_is_selectable_by_name() {
    let out = harness(&["--dry-run", "--workloads", "burst,sizes,tiny,siege,c10,latency"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for want in [
        "wrk -t1 -c500",
        "Connection: close\", sizes",
        "ab -n 5000 -c 1",
        "siege -c 10 -b",
        "wrk -t1 -c10",
        "--latency-correction",
    ] {
        assert!(t.contains(want), "{want:?} missing from the plan:\n{t}");
    }
    // Not packaged in Debian: without the environment variable, the plan names the skip.
    assert!(t.contains("would skip: oha"), "{t}");
}

#[test]
fn a_bad_argument_exits_2_naming_it() {
    let out = harness(&["--dry-run", "--workloads", "burst,nonsense"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nonsense"));
    let out = harness(&["--dry-run", "--latency-rates", "10"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--latency-rates"));
}
