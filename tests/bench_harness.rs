//! The load benchmark's plan (`benches/load/run --dry-run`), which installs and starts
//! nothing: the defaults must make a runnable plan, and each workload must be selectable by
//! name. The benchmark itself is run by hand, never here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/load/run")
}

fn harness(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(script())
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
    let out = harness(&["--dry-run", "--server-quota", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--server-quota"));
}

#[test]
fn the_server_bound_mode_is_in_the_plan() {
    let out = harness(&["--dry-run", "--quick", "--server-quota", "40"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("every server capped at 40% of one core"), "{}", text(&out));
}

/// Runs `code` in Python with the harness loaded as the module `run` (its parsers are pure
/// functions of a tool's output); returns what the code prints.
fn harness_python(code: &str) -> String {
    let script = script();
    let prelude = format!(
        "import importlib.machinery, importlib.util\n\
         loader = importlib.machinery.SourceFileLoader('run', {script:?})\n\
         spec = importlib.util.spec_from_loader('run', loader)\n\
         run = importlib.util.module_from_spec(spec)\n\
         loader.exec_module(run)\n"
    );
    let out =
        Command::new("python3").arg("-c").arg(prelude + code).output().expect("python3 runs (it is in .ci/run's list)");
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn oha_requests_cancelled_at_the_deadline_are_not_errors() {
    // oha -z cancels the requests in flight when the time is up; a closed connection is an error.
    let printed = harness_python(
        r#"
import json
out = json.dumps({"summary": {"total": 10.0, "totalData": 409600, "average": 0.0002},
                  "latencyPercentiles": {"p50": 0.0001, "p99": 0.001, "p99.9": 0.004},
                  "statusCodeDistribution": {"200": 100},
                  "errorDistribution": {"aborted due to deadline": 44,
                                        "connection closed before message completed": 3}})
r = run.parse_oha("some banner\n" + out)
print(r["err_read"], r["requests"], r["lat_p99_ms"])
"#,
    );
    assert_eq!(printed, "3 100 1.0");
}

#[test]
fn siege_byte_count_rounding_is_not_a_short_response() {
    // siege prints "Data transferred" in MB with two decimals: 10,000 responses of 145 bytes
    // are 1.38 MB, which read back as 144.7 bytes each; 120-byte responses are short.
    let printed = harness_python(
        r#"
def summary(mb):
    return ('{"transactions": 10000, "availability": 100.00, "elapsed_time": 1.00, '
            '"data_transferred": %.2f, "response_time": 0.00, "failed_transactions": 0}' % mb)
exact = run.parse_siege(summary(10000 * 145 / 2**20))
short = run.parse_siege(summary(10000 * 120 / 2**20))
print(run.short_responses(exact, 10000, 145), "|", run.short_responses(short, 10000, 145))
"#,
    );
    assert_eq!(printed, "None | short responses: 120 bytes/response < file size 145");
}

#[test]
fn the_latency_instances_keep_their_connections_and_the_others_keep_128() {
    // h2o has no limit of requests per connection, so at a fixed rate every other server's
    // reconnection (1 request in 128) would land on the very requests p99 reports: the
    // latency workload's instances raise the limit to LONG_KEEPALIVE_REQUESTS, in their own
    // config files, beside the plain instances that keep KEEPALIVE_REQUESTS.
    let printed = harness_python(
        r#"
import atexit, pathlib, shutil, tempfile, types
base = pathlib.Path(tempfile.mkdtemp())
atexit.register(shutil.rmtree, base)
w = run.Work(base)
b = types.SimpleNamespace(work=w, max_concurrency=250, apache_threads=320, ferro_bin="/f", ceiling_bin="/c",
                          args=types.SimpleNamespace(baseline="/base"),
                          tools={"nginx": "nginx", "lighttpd": "lighttpd", "apache2": "apache2"})
line = {"nginx": "keepalive_requests {};", "lighttpd": "server.max-keep-alive-requests = {}\n",
        "apache2": "MaxKeepAliveRequests {}\n"}
for name in sorted(run.LATENCY_LONG):
    out = []
    for variant in (4096 if name == "ceiling" else None, "latency"):
        inst = run.Instance(b, name, variant)
        inst.port = 8080
        cmd = inst.command()
        if name == "ceiling":
            out.append(cmd[-1])
            continue
        conf = pathlib.Path(cmd[cmd.index("-f" if "-f" in cmd else "-c" if "-c" in cmd else "--config") + 1])
        text = conf.read_text()
        form = line.get(name, "keepalive_requests = {}\n")
        out.append(conf.name + ":" + ",".join(n for n in ("128", "65535") if form.format(n) in text))
    print(name, *out)
"#,
    );
    assert_eq!(
        printed,
        "apache2 apache2.conf:128 apache2-latency.conf:65535\n\
         ceiling 128 65535\n\
         ferrohttpd ferrohttpd.toml:128 ferrohttpd-latency.toml:65535\n\
         ferrohttpd-baseline ferrohttpd-baseline.toml:128 ferrohttpd-baseline-latency.toml:65535\n\
         lighttpd lighttpd.conf:128 lighttpd-latency.conf:65535\n\
         nginx nginx.conf:128 nginx-latency.conf:65535"
    );
}
