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
    for s in
        ["ferrohttpd ", "nginx ", "lighttpd ", "h2o ", "apache2 ", "apache2-stock ", "darkhttpd ", "ceiling", "caddy"]
    {
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
    let out = harness(&["--dry-run", "--udp-rmem", "100"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--udp-rmem"));
}

#[test]
fn the_server_bound_mode_is_in_the_plan() {
    let out = harness(&["--dry-run", "--quick", "--server-quota", "40"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("every server capped at 40% of one core"), "{}", text(&out));
}

#[test]
fn the_raised_udp_buffer_is_in_the_plan() {
    let out = harness(&["--dry-run", "--quick", "--workloads", "h3", "--udp-rmem", "4194304"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("net.core.rmem_default raised to 4194304 bytes"), "{}", text(&out));
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
fn the_latency_rows_carry_p90_and_each_servers_range_over_rounds() {
    // Three rounds of one server: the medians, and the lowest and highest p99 and p99.9 (the
    // report prints them so that a difference smaller than a server's own spread is not read
    // as an order).
    let printed = harness_python(
        r#"
import json
runs = []
for rnd, (p90, p99, p999) in enumerate([(0.2, 0.9, 5.0), (0.1, 0.5, 4.0), (0.3, 0.7, 6.5)]):
    out = json.dumps({"summary": {"total": 10.0, "totalData": 409600, "average": 0.0002},
                      "latencyPercentiles": {"p50": 0.0001, "p90": p90 / 1000, "p99": p99 / 1000,
                                             "p99.9": p999 / 1000},
                      "statusCodeDistribution": {"200": 100}})
    r = {k: None for k in run.FIELDS}
    r.update(run.parse_oha(out))
    r.update(round=rnd, workload="latency", param="ka-c50", point="ka-c50", server="ferrohttpd", note="",
             rps=10.0, errors=0)
    runs.append(r)
v = run.aggregate(runs)[("latency", "ka-c50", "ferrohttpd")]
print(round(v["lat_p90_ms"], 3), round(v["lat_p99_ms"], 3), [round(x, 3) for x in v["lat_p99_range"]],
      [round(x, 3) for x in v["lat_p999_range"]])
"#,
    );
    assert_eq!(printed, "0.2 0.7 [0.5, 0.9] [4.0, 6.5]");
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

#[test]
fn the_http3_workloads_are_in_the_plan_with_an_http3_build() {
    let out = harness(&["--dry-run", "--quick", "--workloads", "h3"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for wl in ["h3-small", "h3-page", "h3-big"] {
        let line = t.lines().find(|l| l.trim_start().starts_with(wl)).unwrap_or_else(|| panic!("{wl}: {t}"));
        assert!(line.contains("gtlsclient") && line.contains("h2-tls: h2load"), "{line}");
    }
    assert!(t.contains("servers: ferrohttpd, caddy; runs/round: 4"), "{t}");
    assert!(t.contains("cargo build --release --features http3 first"), "{t}");
    // Only the HTTP/3 workloads ask for it; the others keep the default build.
    let t = text(&harness(&["--dry-run", "--quick", "--workloads", "h2"]));
    assert!(!t.contains("--features http3"), "{t}");
    assert!(t.lines().filter(|l| l.contains("servers:")).all(|l| !l.contains("caddy")), "{t}");
}

#[test]
fn gtlsclient_runs_count_only_the_processes_that_finished_quietly() {
    // GTLS_SCRIPT's output, captured: two processes of 100 requests that finished, and two
    // that exited 0 all the same after printing an error (gtlsclient -q on a dead port).
    let printed = harness_python(
        r#"
ok = "gtlsclient plan: 2 x 1 processes, 100 requests and 409600 bytes each\n" \
     "gtlsclient exit 0 printed 0 ns 9000000\ngtlsclient exit 0 printed 0 ns 9100000\n"
bad = "gtlsclient plan: 2 x 1 processes, 100 requests and 409600 bytes each\n" \
      "gtlsclient exit 0 printed 0 ns 9000000\ngtlsclient exit 0 printed 41 ns 300000\n" \
      "ngtcp2_conn_handle_expiry: ERR_IDLE_CLOSE\n"
for out in (ok, bad, "gtlsclient plan: 3 x 2 processes, 5 requests and 20480 bytes each\n"):
    r = run.parse_gtlsclient(out)
    print(r["requests"], r["bytes"], r["err_read"])
print(run.parse_gtlsclient("sh: 1: gtlsclient: not found\n"))
"#,
    );
    assert_eq!(printed, "200 819200 0\n100 409600 100\n0 0 30\nNone");
}

#[test]
fn h3_big_takes_each_gtlsclient_runs_fixed_cost_out_of_its_data_phase() {
    // Three fixed runs (30, 34 and 31 ms: median 31) and two good transfers of 32 MiB (81 and 84
    // ms) and a failed one: the data phase is 81 + 84 - 2 x 31 = 103 ms for 2 x 32 MiB. Without
    // fixed runs (every other workload) there is no data-phase figure.
    let printed = harness_python(
        r#"
out = "gtlsclient plan: 1 x 3 processes, 1 requests and 33554432 bytes each\n" \
      "gtlsclient fixed exit 0 printed 0 ns 30000000\ngtlsclient fixed exit 0 printed 0 ns 34000000\n" \
      "gtlsclient fixed exit 0 printed 0 ns 31000000\n" \
      "gtlsclient exit 0 printed 0 ns 81000000\ngtlsclient exit 0 printed 0 ns 84000000\n" \
      "gtlsclient exit 0 printed 12 ns 5000000\nERR_IDLE_CLOSE\n"
r = run.parse_gtlsclient(out)
print(r["requests"], round(r["data_mb_per_s"], 1), r["fixed_ms"])
r = run.parse_gtlsclient("gtlsclient plan: 1 x 1 processes, 1 requests and 4096 bytes each\n"
                         "gtlsclient exit 0 printed 0 ns 5000000\n")
print(r["data_mb_per_s"], r["fixed_ms"])
"#,
    );
    assert_eq!(printed, format!("2 {:.1} 31.0\nNone None", 2.0 * 33554432.0 / 0.103 / 1e6));
}

#[test]
fn the_http3_check_reads_each_request_status_and_length_from_gtlsclient() {
    // gtlsclient's log without -q (captured against Caddy): streams 0, 4, 8 are its requests in
    // the order of its URIs.
    let printed = harness_python(
        r#"
log = """http: stream 0x0 submit request headers
http: stream 0x4 submit request headers
http: stream 0x4 response headers started
http: stream 0x4 [:status: 200]
http: stream 0x4 [content-length: 4096]
http: stream 0x4 [server: Caddy]
http: stream 0x0 response headers started
http: stream 0x0 [:status: 404]
http: stream 0x0 [content-length: 19]
http: stream 0x8 [:status: 200]
"""
print(sorted(run.h3_fields(log).items()))
"#,
    );
    assert_eq!(
        printed,
        "[(0, {':status': 404, 'content-length': 19}), (1, {':status': 200, 'content-length': 4096}), \
         (2, {':status': 200})]"
    );
}

#[test]
fn the_http3_instances_serve_both_protocols_from_one_process() {
    // ferrohttpd: the TLS config plus [http3], run by the http3 build; Caddy: h1, h2 and h3 on
    // its TLS port, GOMAXPROCS=1, no encode handler (no compression), no access log.
    let printed = harness_python(
        r#"
import atexit, json, pathlib, shutil, tempfile, types
base = pathlib.Path(tempfile.mkdtemp())
atexit.register(shutil.rmtree, base)
w = run.Work(base)
for name in ("tls.crt", "tls.key"):
    (base / name).write_text("")
b = types.SimpleNamespace(work=w, max_concurrency=10, ferro_bin="/default/ferrohttpd", used_ports=set(),
                          ferro_h3_bin="/h3/ferrohttpd", tools={"caddy": "/usr/bin/caddy"})
for name in ("ferrohttpd", "caddy"):
    inst = run.Instance(b, name, "h3")
    inst.port = 8080
    cmd = inst.command()
    conf = pathlib.Path(cmd[-1]).read_text()
    if name == "caddy":
        c = json.loads(conf)
        tls = c["apps"]["http"]["servers"]["tls"]
        handlers = [h["handler"] for srv in c["apps"]["http"]["servers"].values() for r in srv["routes"]
                    for h in r["handle"]]
        print(cmd[:3], tls["protocols"], tls["listen"] == [f"127.0.0.1:{inst.tls_port}"], handlers,
              "logs" in tls)
    else:
        print(cmd[0], "[http3]\nenabled = true" in conf, f'listen = ["127.0.0.1:{inst.tls_port}"]' in conf)
"#,
    );
    assert_eq!(
        printed,
        "/h3/ferrohttpd True True\n\
         ['env', 'GOMAXPROCS=1', '/usr/bin/caddy'] ['h1', 'h2', 'h3'] True ['file_server', 'file_server'] False"
    );
}
