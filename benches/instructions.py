#!/usr/bin/env python3
"""User-space instructions per request of ferrohttpd binaries, counted by callgrind.

Wall-clock benchmarks on a shared 2-core machine move by several percent from run to run;
the instructions a request costs the server in user space do not. This runs each binary
under `valgrind --tool=callgrind`, serving a 4 KiB file from a temporary root on 127.0.0.1,
and makes N requests of each kind with a Python client, then a run of one request: the
difference divided by N - 1 is the cost of one more request, start-up excluded.

    benches/instructions.py [--requests 2000] [--file 4k.bin] [--accept-encoding AE] BINARY [BINARY ...]
    benches/instructions.py --h2c [--requests 20000] [--clients 10] [--streams 10] BINARY [BINARY ...]
    benches/instructions.py --tls [--requests 2000] BINARY [BINARY ...]

`--file` names the 4 KiB file served (its extension gives its type: `4k.html` is text, which
on-demand compression applies to); `--accept-encoding` adds that request field.

Kinds: `keep-alive` (N GETs on one connection, `keepalive_requests` raised to allow them)
and `close` (N connections, one GET with `Connection: close` each). With `--tls`, HTTPS
keep-alive: N GETs on one TLS 1.3 connection (Python's `ssl`, a self-signed ECDSA P-256
certificate made with `openssl`), so the handshake cancels out as start-up does. With `--h2c` the client
is `h2load` (Debian `nghttp2-client`) over HTTP/2 in clear text with prior knowledge:
`-n N -c C -m M` (C connections, M streams in flight on each), less a run of one request per
connection (`-n C -c C`), divided by N - C: the cost of one more request when many share
each write. The kernel's share (90 % of the CPU here) is not counted: check
system calls per request with `strace -c` separately. Needs `valgrind`.

HTTP/3 against HTTP/2 over TLS (a build with the cargo feature `http3`):

    benches/instructions.py --h2 [--requests 20000] [--clients 1] [--streams 100] [--size 4k] BINARY...
    benches/instructions.py --h3 [--requests 2000] [--streams 100] [--size 4k] BINARY...
    benches/instructions.py --cpu [--rounds 5] [--requests 20000] [--streams 100] [--size 4k] BINARY...

`--h2` is h2load over TLS 1.3 (`-n N -c C -m M`, less `-n C -c C`), `--h3` is `gtlsclient`
(Debian `ngtcp2-client`): one connection, N requests with the server's `[http3]
max_streams` = M in flight, less a run of one request. `--size` sets the file's size (`4k`,
`2M`, `32M`); from 1 MiB on, the figure per MiB is printed too. `--cpu` runs the binaries
without valgrind, each serving HTTP/3 and HTTP/2 over TLS from one process, and reads the
server's CPU time (every thread's first field of /proc/PID/task/TID/schedstat, kernel
included) around each client run: per round, every binary's h3 run then its h2 run, rounds
interleaved, so that load from elsewhere on a shared machine falls on all alike; it prints
each round's microseconds per request, and the median ratio h3/h2 per binary. Only the
ratios mean anything on a busy machine.
"""

import argparse
import contextlib
import os
import ssl
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQ = b"GET /4k.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: instructions.py\r\nAccept: */*\r\n"


def request(name, accept_encoding):
    req = REQ.replace(b"/4k.bin", b"/" + name.encode())
    if accept_encoding:
        req += b"Accept-Encoding: " + accept_encoding.encode() + b"\r\n"
    return req


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_response(s, buf):
    """Reads one response with a Content-Length body; returns the bytes after it."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("connection closed before a response")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200"):
        first = head.split(b"\r\n", 1)[0]
        raise OSError(f"unexpected status line {first!r}")
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("connection closed inside a body")
        rest += chunk
    return rest[length:]


REQ_NOW = REQ


def load(port, kind, n):
    if kind == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                buf = b""
                for _ in range(n):
                    s.sendall(REQ_NOW + b"\r\n")
                    buf = read_response(s, buf)
    elif kind == "keep-alive":
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            buf = b""
            for _ in range(n):
                s.sendall(REQ_NOW + b"\r\n")
                buf = read_response(s, buf)
    else:
        for _ in range(n):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(REQ_NOW + b"Connection: close\r\n\r\n")
                read_response(s, b"")


@contextlib.contextmanager
def running(binary, config, work, wrap=()):
    """Starts `binary` (under the command `wrap`, if any) with the TOML `config(port)` (a
    free port), waits until it listens and yields (port, pid); stops it after."""
    port = free_port()
    conf = work / f"c{port}.toml"
    conf.write_text(config(port))
    proc = subprocess.Popen(
        [*wrap, binary, "--config", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise OSError(f"{binary} did not start listening")
                time.sleep(0.2)
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def under_callgrind(binary, config, work, drive):
    """Runs `binary` under callgrind with the TOML `config(port)` (a free port) while
    `drive(port)` makes its requests; returns the instructions it executed."""
    out = work / f"callgrind.{time.monotonic_ns()}"
    with running(binary, config, work, ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")) as (port, _):
        drive(port)
    # The probe connection above costs the same in every run, so it cancels out.
    m = re.search(r"^summary:\s+(\d+)", out.read_text(), re.M)
    if not m:
        raise OSError(f"no summary in {out}")
    return int(m.group(1))


def count(binary, root, kind, n, work):
    def config(port):
        if kind != "tls":
            listen = f'[server]\nlisten = ["127.0.0.1:{port}"]\nroot = "{root}"\n\n'
            tls = ""
        else:
            # The probed and driven port is the TLS one; the plain listener is spare.
            listen = f'[server]\nlisten = ["127.0.0.1:{free_port()}"]\nroot = "{root}"\n\n'
            tls = f'[tls]\nlisten = ["127.0.0.1:{port}"]\ncert = "{work}/cert.pem"\nkey = "{work}/key.pem"\n\n'
        return (
            listen + f'[http]\nkeepalive_requests = {n + 1}\n\n' + tls
            + f'[log]\naccess = "off"\nerror = "{work}/error.log"\n'
        )

    return under_callgrind(
        binary,
        config,
        work,
        lambda port: load(port, kind, n),
    )


def count_h2c(binary, root, path, n, clients, streams, work):
    def drive(port):
        h2load(f"http://127.0.0.1:{port}/{path}", n, clients, streams)

    return under_callgrind(
        binary,
        lambda port: (
            f'[server]\nlisten = ["127.0.0.1:{port}"]\nroot = "{root}"\n\n'
            f'[http2]\nh2c = true\n\n'
            f'[log]\naccess = "off"\nerror = "{work}/error.log"\n'
        ),
        work,
        drive,
    )


def tls_config(root, work, streams, h3):
    """The TOML of a server whose TLS listener is on `port` (HTTP/3 on the same port number
    when `h3`); the plain listener is spare."""
    def config(port):
        h3conf = f'[http3]\nenabled = true\nmax_streams = {streams}\nidle_timeout = "120s"\n\n' if h3 else ""
        return (
            f'[server]\nlisten = ["127.0.0.1:{free_port()}"]\nroot = "{root}"\n\n'
            f'[tls]\nlisten = ["127.0.0.1:{port}"]\ncert = "{work}/cert.pem"\nkey = "{work}/key.pem"\n\n'
            f'[http2]\nmax_concurrent_streams = {max(streams, 100)}\n\n'
            + h3conf + f'[log]\naccess = "off"\nerror = "{work}/error.log"\n'
        )

    return config


def h2load(url, n, clients, streams):
    """`h2load -n N -c C -m M URL`; an error unless all N requests succeeded."""
    r = subprocess.run(
        ["h2load", "-n", str(n), "-c", str(clients), "-m", str(streams), url],
        capture_output=True, text=True, timeout=600,
    )
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", r.stdout)
    if not m or int(m.group(2)) != n:
        raise OSError(f"h2load did not complete {n} requests: {r.stdout[-400:]}{r.stderr[-400:]}")


def gtlsclient(port, path, n):
    """`n` requests on one HTTP/3 connection; gtlsclient prints each response's :status
    header, which is checked."""
    r = subprocess.run(
        ["gtlsclient", "--no-quic-dump", "--no-http-dump", "--exit-on-all-streams-close", "-n", str(n),
         "127.0.0.1", str(port), f"https://localhost:{port}/{path}"],
        capture_output=True, text=True, timeout=900,
    )
    ok = len(re.findall(r"\[:status: 200\]", r.stdout + r.stderr))
    if r.returncode != 0 or ok != n:
        out = (r.stdout + r.stderr)[-600:]
        raise OSError(f"gtlsclient: exit {r.returncode}, {ok} of {n} responses 200: {out}")


def cpu_ns(pid):
    """The CPU time of every thread of `pid` so far, in nanoseconds (user and kernel)."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def size_bytes(text):
    m = re.fullmatch(r"(\d+)([kKmM]?)", text)
    if not m:
        sys.exit(f"--size: {text!r} is not a size (4096, 4k, 2M)")
    return int(m.group(1)) * {"": 1, "k": 1024, "K": 1024, "m": 1 << 20, "M": 1 << 20}[m.group(2)]


def per(size, v):
    """A figure per request, and per MiB for a body of a MiB or more."""
    return f"{v:>14,.0f}" + (f" {v / (size / (1 << 20)):>14,.0f}/MiB" if size >= 1 << 20 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--file", default="4k.bin")
    ap.add_argument("--accept-encoding")
    ap.add_argument("--h2c", action="store_true", help="HTTP/2 in clear text, h2load as the client")
    ap.add_argument("--clients", type=int, help="--h2c, --h2: connections (h2load -c; 10 with --h2c, else 1)")
    ap.add_argument("--streams", type=int,
                    help="streams in flight per connection (h2load -m; HTTP/3's max_streams): 10 with --h2c, else 100")
    ap.add_argument("--tls", action="store_true", help="HTTPS keep-alive (TLS 1.3, Python's ssl as the client)")
    ap.add_argument("--h2", action="store_true", help="HTTP/2 over TLS, h2load as the client")
    ap.add_argument("--h3", action="store_true", help="HTTP/3, gtlsclient (ngtcp2-client) as the client")
    ap.add_argument("--cpu", action="store_true",
                    help="server CPU time per request, HTTP/3 against HTTP/2 over TLS, no valgrind")
    ap.add_argument("--rounds", type=int, default=5, help="--cpu: interleaved rounds")
    ap.add_argument("--size", default="4k", help="the file's size (4k, 2M, 32M)")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    if args.clients is None:
        args.clients = 10 if args.h2c else 1
    if args.streams is None:
        args.streams = 10 if args.h2c else 100
    if args.h2c and (args.clients < 1 or args.streams < 1 or args.requests <= args.clients):
        sys.exit("--h2c needs --clients and --streams of at least 1 and --requests above --clients")
    global REQ_NOW
    REQ_NOW = request(args.file, args.accept_encoding)
    if args.requests < 2:
        sys.exit("--requests must be at least 2")
    with tempfile.TemporaryDirectory(prefix="ferro-instr-") as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        size = size_bytes(args.size)
        if args.file.endswith(".bin"):
            (root / args.file).write_bytes(os.urandom(size))
        else:
            text = b"<p>some text, compressible</p>\n"
            (root / args.file).write_bytes((text * (size // len(text) + 1))[:size])
        if args.h2 or args.h3 or args.cpu:
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem"), "-days", "1",
                 "-subj", "/CN=localhost"],
                check=True, capture_output=True,
            )
        if args.h2:
            config = tls_config(root, work, args.streams, False)
            c = args.clients
            print(f"instructions per request (callgrind, HTTP/2 over TLS, {args.size}, h2load -n {args.requests} "
                  f"-c {c} -m {args.streams} minus -n {c} -c {c})")
            for b in args.binaries:
                many = under_callgrind(b, config, work, lambda p: h2load(f"https://127.0.0.1:{p}/{args.file}", args.requests, c, args.streams))
                few = under_callgrind(b, config, work, lambda p: h2load(f"https://127.0.0.1:{p}/{args.file}", c, c, 1))
                print(f"{b:<50} {per(size, (many - few) / (args.requests - c))}")
            return
        if args.h3:
            config = tls_config(root, work, args.streams, True)
            print(f"instructions per request (callgrind, HTTP/3, {args.size}, gtlsclient -n {args.requests} "
                  f"with max_streams {args.streams}, minus -n 1)")
            for b in args.binaries:
                many = under_callgrind(b, config, work, lambda p: gtlsclient(p, args.file, args.requests))
                one = under_callgrind(b, config, work, lambda p: gtlsclient(p, args.file, 1))
                print(f"{b:<50} {per(size, (many - one) / (args.requests - 1))}")
            return
        if args.cpu:
            cpu(args, root, work, size)
            return
        if args.h2c:
            print(f"instructions per request (callgrind, h2c, h2load -n {args.requests} -c {args.clients} "
                  f"-m {args.streams} minus -n {args.clients})")
            for b in args.binaries:
                many = count_h2c(b, root, args.file, args.requests, args.clients, args.streams, work)
                few = count_h2c(b, root, args.file, args.clients, args.clients, 1, work)
                print(f"{b:<50} {(many - few) / (args.requests - args.clients):>12,.0f}")
            return
        if args.tls:
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem"), "-days", "1",
                 "-subj", "/CN=localhost"],
                check=True, capture_output=True,
            )
            print(f"instructions per request (callgrind, HTTPS keep-alive, {args.requests} requests minus 1)")
            for b in args.binaries:
                many = count(b, root, "tls", args.requests, work)
                one = count(b, root, "tls", 1, work)
                print(f"{b:<50} {(many - one) / (args.requests - 1):>12,.0f}")
            return
        print(f"instructions per request (callgrind, {args.requests} requests minus 1)")
        print(f"{'binary':<50} {'keep-alive':>12} {'close':>12}")
        for b in args.binaries:
            row = []
            for kind in ("keep-alive", "close"):
                many = count(b, root, kind, args.requests, work)
                one = count(b, root, kind, 1, work)
                row.append((many - one) / (args.requests - 1))
            print(f"{b:<50} {row[0]:>12,.0f} {row[1]:>12,.0f}")


def cpu(args, root, work, size):
    """Server CPU per request, HTTP/3 and HTTP/2 over TLS, rounds interleaved (see the
    module docs)."""
    config = tls_config(root, work, args.streams, True)
    n, m = args.requests, args.streams
    print(f"server CPU per request, us (schedstat; {args.size}; h3: gtlsclient -n {n} with max_streams {m}; "
          f"h2: h2load -n {n} -c 1 -m {m}; rounds interleaved)")
    results = {b: [] for b in args.binaries}
    with contextlib.ExitStack() as stack:
        # Every binary serves all along, idle but while measured.
        servers = [(b, *stack.enter_context(running(b, config, work))) for b in args.binaries]
        for r in range(args.rounds):
            for b, port, pid in servers:
                row = []
                for run in (lambda: gtlsclient(port, args.file, n), lambda: h2load(f"https://127.0.0.1:{port}/{args.file}", n, 1, m)):
                    t0 = cpu_ns(pid)
                    run()
                    row.append((cpu_ns(pid) - t0) / n / 1000)
                results[b].append(row)
                print(f"round {r + 1} {b:<40} h3 {row[0]:8.2f} us  h2 {row[1]:8.2f} us  h3/h2 {row[0] / row[1]:.2f}",
                      flush=True)
    mib = size / (1 << 20)
    for b, rows in results.items():
        mid = len(rows) // 2
        h3 = sorted(r[0] for r in rows)[mid]
        h2 = sorted(r[1] for r in rows)[mid]
        ratio = sorted(r[0] / r[1] for r in rows)[mid]
        extra = f"  (per MiB: h3 {h3 / mib:.0f} us, h2 {h2 / mib:.0f} us)" if mib >= 1 else ""
        print(f"median {b:<40} h3 {h3:.2f} us  h2 {h2:.2f} us  h3/h2 {ratio:.2f}{extra}")


if __name__ == "__main__":
    main()
