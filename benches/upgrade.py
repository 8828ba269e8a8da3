#!/usr/bin/env python3
"""Requests per second, latency and errors at a fixed rate across a binary upgrade
(issue 39): ferrohttpd's SIGUSR2 beside nginx's own (USR2 to the master, then WINCH and
QUIT to the old one, as nginx documents).

    benches/upgrade.py [--rate 1000] [--seconds 9] [--at 3] [--bin target/release/ferrohttpd]
                       [--nginx nginx] [--servers ferrohttpd,nginx] [--port 18439]

For each server: a temporary document root (a 4 KiB and a 64 KiB file) and configuration
on 127.0.0.1:PORT; a fixed request rate (open loop: each request has its start time, and its
latency counts from then, so a stall shows instead of slowing the load down), spread over
keep-alive and new-connection clients (threads); the upgrade at `--at` seconds; then a
table per phase: before the signal, during (signal to the old process's exit), after.
Errors are requests that failed in any way (refused, reset, short or wrong body, timeout).

The load generator is Python: it holds the rate up to about 1,500 requests/s on a small
machine, far below the servers' capacity, so the latency figures are the client's as much
as the server's. On a shared machine only the error counts are clean figures; compare
latencies only between servers measured in the same run.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BODIES = {"/a.bin": os.urandom(4096), "/b.bin": os.urandom(65536)}


def request(addr, path, sock):
    """One GET; returns (sock to reuse or None, error or None)."""
    want = BODIES[path]
    reused = sock is not None
    try:
        if sock is None:
            sock = socket.create_connection(addr, timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                if reused and not buf:
                    return None, "retry"
                raise ConnectionError("closed in the head")
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").lower().split("\r\n")
        if not lines[0].startswith("http/1.1 200"):
            raise ConnectionError(lines[0])
        length = next(int(l.split(":", 1)[1]) for l in lines if l.startswith("content-length:"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("short body")
            body += chunk
        if body != want:
            raise ConnectionError("wrong body")
        if any(l.startswith("connection:") and "close" in l for l in lines):
            sock.close()
            return None, None
        return sock, None
    except (OSError, ConnectionError, StopIteration, ValueError) as e:
        if sock is not None:
            sock.close()
        if reused and isinstance(e, (ConnectionResetError, BrokenPipeError)):
            return None, "retry"
        return None, f"{type(e).__name__}: {e}"


def client(addr, keep, interval, start, end, results, lock, offset):
    """Sends a request every `interval` s from `start + offset` until `end`."""
    sock = None
    n = 0
    local = []
    while True:
        due = start + offset + n * interval
        if due >= end:
            break
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        path = "/a.bin" if n % 4 else "/b.bin"
        sock, err = request(addr, path, sock if keep else None)
        if err == "retry":
            # A reused keep-alive connection closed under the request: sent again, as
            # clients do (RFC 9112 §9.3.1); counted apart.
            sock, err = request(addr, path, None)
            err = err or "retried"
        if not keep and sock is not None:
            sock.close()
            sock = None
        local.append((due, time.monotonic() - due, err))
        n += 1
    if sock is not None:
        sock.close()
    with lock:
        results.extend(local)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def write_root(d):
    root = os.path.join(d, "www")
    os.makedirs(root)
    for path, body in BODIES.items():
        with open(root + path, "wb") as f:
            f.write(body)
        os.chmod(root + path, 0o644)
    return root


def wait_port(addr, limit=10):
    t = time.monotonic() + limit
    while time.monotonic() < t:
        try:
            socket.create_connection(addr, timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {addr}")


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wait_gone(pid, limit=30):
    t = time.monotonic() + limit
    while time.monotonic() < t:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return time.monotonic()
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return time.monotonic()
        except ChildProcessError:
            pass
        time.sleep(0.01)
    return None


class Ferrohttpd:
    name = "ferrohttpd"

    def __init__(self, binary, port, d):
        root = write_root(d)
        self.exe = os.path.join(d, "ferrohttpd")
        shutil.copy(binary, self.exe)
        self.binary = binary
        self.pid_file = os.path.join(d, "pid")
        cfg = os.path.join(d, "f.toml")
        with open(cfg, "w") as f:
            f.write(f'[server]\nlisten = ["127.0.0.1:{port}"]\nroot = "{root}"\npid_file = "{self.pid_file}"\n'
                    f'[log]\naccess = "off"\nerror = "{d}/error.log"\n')
        self.proc = subprocess.Popen([self.exe, "--config", cfg], stdout=subprocess.DEVNULL)

    def upgrade(self):
        """Replaces the binary, signals; returns (old pid, new pid)."""
        old = self.proc.pid
        shutil.copy(self.binary, self.exe + ".new")
        os.replace(self.exe + ".new", self.exe)
        os.kill(old, signal.SIGUSR2)
        t = time.monotonic() + 30
        while time.monotonic() < t and read_pid(self.pid_file) in (None, old):
            time.sleep(0.01)
        return old, read_pid(self.pid_file)

    def stop(self):
        pid = read_pid(self.pid_file)
        for p in {pid, self.proc.pid} - {None}:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


class Nginx:
    name = "nginx"

    def __init__(self, binary, port, d):
        root = write_root(d)
        self.binary = shutil.which(binary) or binary
        self.exe = os.path.join(d, "nginx")
        shutil.copy(self.binary, self.exe)
        self.pid_file = os.path.join(d, "nginx.pid")
        cfg = os.path.join(d, "nginx.conf")
        with open(cfg, "w") as f:
            # Daemonised: a master whose parent is the one that started it ignores USR2
            # ("changing binary, ignoring"), so nginx upgrades only as a daemon.
            f.write(f"worker_processes 1;\ndaemon on;\npid {self.pid_file};\nerror_log {d}/error.log;\n"
                    f"events {{ worker_connections 4096; }}\n"
                    f"http {{ access_log off; keepalive_requests 100000;\n"
                    f"  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f;\n"
                    f"  uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;\n"
                    f"  server {{ listen 127.0.0.1:{port}; root {root}; }} }}\n")
        subprocess.run([self.exe, "-c", cfg, "-p", d], check=True)
        t = time.monotonic() + 10
        while read_pid(self.pid_file) is None and time.monotonic() < t:
            time.sleep(0.01)
        self.master = read_pid(self.pid_file)

    def upgrade(self):
        """nginx's procedure: USR2 (a new master starts with the sockets), WINCH to the old
        master (its workers finish and exit), QUIT to it (it exits)."""
        old = self.master
        shutil.copy(self.binary, self.exe + ".new")
        os.replace(self.exe + ".new", self.exe)
        os.kill(old, signal.SIGUSR2)
        t = time.monotonic() + 30
        while time.monotonic() < t and read_pid(self.pid_file) in (None, old):
            time.sleep(0.01)
        new = read_pid(self.pid_file)
        os.kill(old, signal.SIGWINCH)
        os.kill(old, signal.SIGQUIT)
        return old, new

    def stop(self):
        pid = read_pid(self.pid_file)
        for p in {pid, self.master} - {None}:
            try:
                os.kill(p, signal.SIGQUIT)
            except ProcessLookupError:
                pass
        for p in {pid, self.master} - {None}:
            wait_gone(p, 10)


def run(kind, binary, args):
    d = tempfile.mkdtemp(prefix=f"upgrade-{kind.name}-")
    # nginx's workers run as nobody when started as root: the root must be readable.
    os.chmod(d, 0o755)
    try:
        srv = kind(binary, args.port, d)
        addr = ("127.0.0.1", args.port)
        wait_port(addr)
        clients = args.clients
        interval = clients / args.rate
        start = time.monotonic() + 0.2
        end = start + args.seconds
        results, lock = [], threading.Lock()
        threads = [
            threading.Thread(target=client, args=(addr, i % 4 != 0, interval, start, end, results, lock, i * interval / clients))
            for i in range(clients)
        ]
        for t in threads:
            t.start()
        time.sleep(max(0.0, start + args.at - time.monotonic()))
        signalled = time.monotonic()
        old, new = srv.upgrade()
        gone = wait_gone(old) or end
        for t in threads:
            t.join()
        srv.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    phases = [("before", start, signalled), ("during", signalled, gone), ("after", gone, end)]
    rows = []
    for name, a, b in phases:
        xs = [r for r in results if a <= r[0] < b]
        ok = [lat for _, lat, err in xs if err in (None, "retried")]
        errors = [err for _, _, err in xs if err not in (None, "retried")]
        retried = sum(1 for _, _, err in xs if err == "retried")
        span = max(b - a, 1e-9)
        rows.append((kind.name, name, span, len(ok) / span, pct(ok, 0.5) * 1e3, pct(ok, 0.99) * 1e3, len(errors), retried,
                     sorted(set(errors))[:3]))
    return rows, old, new


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000, help="requests per second, in total")
    ap.add_argument("--clients", type=int, default=40, help="client threads (3 in 4 keep-alive)")
    ap.add_argument("--seconds", type=float, default=9)
    ap.add_argument("--at", type=float, default=3, help="when to upgrade, seconds after the start")
    ap.add_argument("--bin", default="target/release/ferrohttpd")
    ap.add_argument("--nginx", default="nginx")
    ap.add_argument("--servers", default="ferrohttpd,nginx")
    ap.add_argument("--port", type=int, default=18439)
    args = ap.parse_args()
    print(f"{args.rate:.0f} req/s for {args.seconds} s, {args.clients} clients (3 in 4 keep-alive), "
          f"upgrade at {args.at} s; phases: before the signal, during (to the old process's exit), after")
    print(f"{'server':<11} {'phase':<7} {'secs':>5} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} {'retried':>7}")
    for name in args.servers.split(","):
        kind, binary = {"ferrohttpd": (Ferrohttpd, args.bin), "nginx": (Nginx, args.nginx)}[name]
        if kind is Nginx and not shutil.which(binary) and not os.path.exists(binary):
            print(f"{name:<11} SKIPPED: no {binary} (apt-get install nginx-light)")
            continue
        rows, old, new = run(kind, binary, args)
        for r in rows:
            print(f"{r[0]:<11} {r[1]:<7} {r[2]:5.2f} {r[3]:7.0f} {r[4]:7.2f} {r[5]:7.2f} {r[6]:6d} {r[7]:7d} {' '.join(r[8])}")
        print(f"{name:<11} pid {old} -> {new}")


if __name__ == "__main__":
    main()
