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
"""

import argparse
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


def under_callgrind(binary, config, work, drive):
    """Starts `binary` under callgrind with the TOML `config(port)` (a free port), waits
    until it listens, runs `drive(port)`, stops it and returns the instructions it
    executed."""
    port = free_port()
    conf = work / f"c{port}.toml"
    conf.write_text(config(port))
    out = work / f"callgrind.{port}"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "--config", str(conf)],
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
                    raise OSError(f"{binary} did not start listening under valgrind")
                time.sleep(0.2)
        drive(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
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
        r = subprocess.run(
            ["h2load", "-n", str(n), "-c", str(clients), "-m", str(streams), f"http://127.0.0.1:{port}/{path}"],
            capture_output=True, text=True, timeout=600,
        )
        m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", r.stdout)
        if not m or int(m.group(2)) != n:
            raise OSError(f"h2load did not complete {n} requests: {r.stdout[-400:]}{r.stderr[-400:]}")

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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--file", default="4k.bin")
    ap.add_argument("--accept-encoding")
    ap.add_argument("--h2c", action="store_true", help="HTTP/2 in clear text, h2load as the client")
    ap.add_argument("--clients", type=int, default=10, help="--h2c: connections (h2load -c)")
    ap.add_argument("--streams", type=int, default=10, help="--h2c: streams in flight per connection (h2load -m)")
    ap.add_argument("--tls", action="store_true", help="HTTPS keep-alive (TLS 1.3, Python's ssl as the client)")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
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
        if args.file.endswith(".bin"):
            (root / args.file).write_bytes(os.urandom(4096))
        else:
            (root / args.file).write_bytes((b"<p>some text, compressible</p>\n" * 200)[:4096])
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


if __name__ == "__main__":
    main()
