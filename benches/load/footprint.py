#!/usr/bin/env python3
"""Footprint: what each server costs a small box, measured the way its operator would.

    benches/load/footprint.py [--servers a,b,...] [--conns 1000,10000] [--small BIN] [--out DIR]

For each server (ferrohttpd, ferrohttpd-small, nginx, lighttpd; thttpd and darkhttpd when
their binaries are found in --peers DIR or on PATH), with one worker and the access log off,
serving the same small docroot on 127.0.0.1:

  1. binary size (the file that is executed, and a stripped copy of it);
  2. time from exec to the first response byte (polling connect + GET every millisecond);
  3. after three GETs: VmRSS, PSS, private (clean + dirty) and anonymous memory, summed over
     the server's process tree, from /proc/PID/smaps_rollup;
  4. memory per idle keep-alive connection: N connections (each after one GET, kept open),
     the growth of RSS and of anonymous memory divided by N, for each N in --conns. A server
     that closes the connection after its response (thttpd has no keep-alive) holds none:
     the report says so instead of dividing by N; one that refuses or resets connections
     says after how many (darkhttpd waits with select(), whose fd_set only holds descriptors
     below FD_SETSIZE = 1,024: past that its behaviour is undefined).

Writes footprint.md and footprint.json to --out (default benches/results/<date>-footprint/).
Run by hand; never in CI. Needs root only to install missing servers (apt-get), which it
never does on its own: install nginx and lighttpd first (apt-get install nginx lighttpd).
ferrohttpd-small is `cargo build --profile small` (target/small/ferrohttpd, or --small BIN);
ferrohttpd is target/release/ferrohttpd. The servers are pinned to CPU 0 and this script to
CPU 1, as in benches/load/run.

thttpd and darkhttpd are not packaged in Debian 12; build them into one directory and pass it
as --peers DIR:
  thttpd     sthttpd, the maintained fork of thttpd 2.27 (github.com/blueness/sthttpd; needs
             autoconf and automake): ./autogen.sh && ./configure && make; cp src/thttpd DIR/
  darkhttpd  one C file (github.com/emikulic/darkhttpd): gcc -O2 -o DIR/darkhttpd darkhttpd.c
"""
import argparse
import datetime
import importlib.machinery
import importlib.util
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

_loader = importlib.machinery.SourceFileLoader("loadrun", str(HERE / "run"))
_spec = importlib.util.spec_from_loader("loadrun", _loader)
run = importlib.util.module_from_spec(_spec)
_loader.exec_module(run)

ALL = ["ferrohttpd", "ferrohttpd-small", "thttpd", "darkhttpd", "lighttpd", "nginx"]
KEEPALIVE_S = 300


def smaps(pid):
    """smaps_rollup of one process, in kB: Rss, Pss, Private_*, Anonymous."""
    d = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            parts = v.split()
            if len(parts) == 2 and parts[1] == "kB":
                d[k] = int(parts[0])
    return d


def tree_memory(root):
    tot = {"rss": 0, "pss": 0, "private": 0, "anon": 0, "procs": 0}
    for pid, _ in run.tree(root):
        try:
            s = smaps(pid)
        except OSError:
            continue
        tot["rss"] += s.get("Rss", 0)
        tot["pss"] += s.get("Pss", 0)
        tot["private"] += s.get("Private_Clean", 0) + s.get("Private_Dirty", 0)
        tot["anon"] += s.get("Anonymous", 0)
        tot["procs"] += 1
    return tot


def get(port, path="/index.html", sock=None, timeout=5.0):
    """One keep-alive GET; returns the open socket after reading the whole response."""
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed before the response ended")
        got += chunk
        end = got.find(b"\r\n\r\n")
        if end < 0:
            continue
        length = 0
        for line in got[:end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(got) >= end + 4 + length:
            if not got.startswith(b"HTTP/1.1 200"):
                first = got.split(b"\r\n", 1)[0]
                raise OSError(f"status line {first!r}")
            return s


def configs(name, w, port, max_conn):
    """The command line for `name`, with its config written into the work dir."""
    if name.startswith("ferrohttpd"):
        conf = w.conf / f"{name}.toml"
        text = run.cfg_ferrohttpd(w, port, True, name)
        text = text.replace("[http]\n", f"[http]\nkeepalive_timeout = \"{KEEPALIVE_S}s\"\n")
        text = text.replace("[server]\n", f"[server]\nmax_connections = {max_conn + 100}\n")
        conf.write_text(text)
        return [None, "--config", str(conf)]
    if name == "nginx":
        conf = w.conf / "nginx.conf"
        conf.write_text(run.cfg_nginx(w, port, max_conn).replace("keepalive_timeout 15s", f"keepalive_timeout {KEEPALIVE_S}s")
                        .replace("open_file_cache max=1000", "open_file_cache max=10"))
        return [shutil.which("nginx"), "-p", str(w.run / "nginx"), "-e", str(w.logs / "nginx-error.log"),
                "-c", str(conf)]
    if name == "lighttpd":
        conf = w.conf / "lighttpd.conf"
        conf.write_text(run.cfg_lighttpd(w, port, max_conn)
                        .replace("server.max-keep-alive-idle = 15", f"server.max-keep-alive-idle = {KEEPALIVE_S}"))
        return [shutil.which("lighttpd"), "-D", "-f", str(conf)]
    if name == "thttpd":
        return [None, "-D", "-p", str(port), "-h", "127.0.0.1", "-d", str(w.docroot),
                "-l", "/dev/null"]
    if name == "darkhttpd":
        return [None, str(w.docroot), "--addr", "127.0.0.1", "--port", str(port),
                "--no-listing", "--timeout", str(KEEPALIVE_S), "--maxconn", str(max_conn + 100)]
    raise ValueError(name)


def still_open(s):
    """True if the server has not closed (or reset) this idle connection."""
    s.settimeout(0)  # a socket with a timeout would wait for data first
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def idle_per_conn(proc, port, n):
    """RSS and anonymous memory growth per idle keep-alive connection, in bytes."""
    before = tree_memory(proc.pid)
    conns = []
    try:
        for _ in range(n):
            try:
                conns.append(get(port))
            except OSError as e:
                raise OSError(f"{e} (after {len(conns):,} connections)") from e
        time.sleep(1.0)
        if proc.poll() is not None:
            raise OSError("the server exited")
        after = tree_memory(proc.pid)
        held = sum(1 for s in conns if still_open(s))
    finally:
        for s in conns:
            s.close()
    if held < n:
        return {"n": n, "held": held, "error": f"closed {n - held:,} of {n:,} connections after the response"}
    return {"n": n, "held": held, "rss_b": (after["rss"] - before["rss"]) * 1024 / n,
            "anon_b": (after["anon"] - before["anon"]) * 1024 / n}


def measure(name, binary, w, conns, used):
    port = run.free_port(used)
    cmd = configs(name, w, port, max(conns))
    if cmd[0] is None:
        cmd[0] = str(binary)
    exe = Path(cmd[0])
    res = {"server": name, "binary": str(exe), "binary_bytes": exe.stat().st_size}
    stripped = w.base / f"{name}.stripped"
    if subprocess.run(["strip", "-o", str(stripped), str(exe)], capture_output=True).returncode == 0:
        res["stripped_bytes"] = stripped.stat().st_size
    log = open(w.logs / f"{name}.out", "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=str(w.base))
    log.close()
    try:
        deadline = t0 + 10
        while True:
            try:
                get(port, timeout=1.0).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    res["error"] = "did not answer within 10 s"
                    return res
                time.sleep(0.001)
        res["first_byte_ms"] = (time.monotonic() - t0) * 1000
        for _ in range(3):
            get(port).close()
        time.sleep(0.3)
        res["after_3"] = tree_memory(proc.pid)
        res["idle"] = []
        for n in conns:
            try:
                res["idle"].append(idle_per_conn(proc, port, n))
            except OSError as e:
                res["idle"].append({"n": n, "error": str(e)})
            time.sleep(0.5)
    finally:
        procs = run.tree(proc.pid)
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for pid, start in procs:
            try:
                if run.read_stat(pid)["start"] == start:
                    os.kill(pid, 9)
            except (OSError, ValueError, IndexError):
                pass
        proc.wait()
    return res


def render(results, conns, meta):
    L = [f"# Footprint: {meta['date'][:10]} (commit {meta['commit']})", "",
         "Each server with one worker and no access log, after three GETs of a 145-byte page; memory "
         "summed over the process tree from /proc/PID/smaps_rollup (kB). Per-connection figures: "
         "growth of RSS and of anonymous memory over N idle keep-alive connections, each after one "
         "GET, divided by N. `benches/load/footprint.py`.", ""]
    hdr = ["server", "binary", "stripped", "exec → first byte", "VmRSS", "PSS", "private", "anonymous"]
    for n in conns:
        hdr.append(f"per conn @{n:,} (RSS / anon)")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    for r in results:
        if "skipped" in r:
            L.append(f"| {r['server']} | skipped: {r['skipped']} |" + " |" * (len(hdr) - 2))
            continue
        if "error" in r:
            L.append(f"| {r['server']} | error: {r['error']} |" + " |" * (len(hdr) - 2))
            continue
        m = r["after_3"]
        row = [r["server"], f"{r['binary_bytes'] / 1024:,.0f} KiB",
               f"{r['stripped_bytes'] / 1024:,.0f} KiB" if "stripped_bytes" in r else "–",
               f"{r['first_byte_ms']:.1f} ms", f"{m['rss']:,} kB", f"{m['pss']:,} kB", f"{m['private']:,} kB",
               f"{m['anon']:,} kB"]
        for i in r["idle"]:
            row.append(f"error: {i['error']}" if "error" in i else f"{i['rss_b']:,.0f} B / {i['anon_b']:,.0f} B")
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append("Binaries: " + "; ".join(f"{r['server']}: `{r.get('binary', '-')}`" for r in results if "binary" in r))
    L.append("")
    return "\n".join(L)


def main(argv=None):
    p = argparse.ArgumentParser(prog="benches/load/footprint.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default=",".join(ALL))
    p.add_argument("--conns", default="1000,10000", help="idle connection counts, e.g. 1000,10000")
    p.add_argument("--small", default=str(REPO / "target" / "small" / "ferrohttpd"))
    p.add_argument("--release", default=str(REPO / "target" / "release" / "ferrohttpd"))
    p.add_argument("--peers", default=None, help="directory holding thttpd and darkhttpd builds (else PATH)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    servers = [s for s in ALL if s in a.servers.split(",")]
    conns = [int(x) for x in a.conns.split(",") if x.strip()]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * max(conns) + 1000)), hard))
    os.sched_setaffinity(0, {1})
    commit = run.git_short_commit() or "uncommitted"
    out = Path(a.out) if a.out else REPO / "benches" / "results" / f"{datetime.date.today()}-{commit}-footprint"
    out.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="ferro-footprint."))
    os.chmod(base, 0o755)  # servers that drop root (nginx, lighttpd: nobody) must reach the docroot
    w = run.Work(base)
    run.make_docroot(w.docroot, [4096])
    used = set()
    results = []
    for s in servers:
        binary = {"ferrohttpd": a.release, "ferrohttpd-small": a.small}.get(s)
        if not binary and a.peers and os.access(Path(a.peers) / s, os.X_OK):
            binary = str(Path(a.peers) / s)
        binary = binary or shutil.which(s)
        if not binary or not os.access(binary, os.X_OK):
            why = (f"{binary} not built" if s.startswith("ferrohttpd") else
                   f"{s} is not installed (not packaged in this machine's Debian release; see --peers)")
            results.append({"server": s, "skipped": why})
            print(f"-- {s}: SKIPPED: {why}", flush=True)
            continue
        print(f"-- {s}", flush=True)
        results.append(measure(s, binary, w, conns, used))
        print(json.dumps(results[-1]), flush=True)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
            "kernel": os.uname().release}
    (out / "footprint.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = render(results, conns, meta)
    (out / "footprint.md").write_text(md)
    print(md)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
