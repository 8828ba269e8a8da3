#!/usr/bin/env python3
"""User-space instructions per HTTPS keep-alive request of ferrohttpd binaries (callgrind).

The TLS counterpart of `benches/instructions.py`: each binary runs under
`valgrind --tool=callgrind` with one TLS listener (an ECDSA P-256 certificate made here by the
openssl CLI, as `benches/load/run` makes it), serving a 4 KiB file; a Python client makes one
TLS 1.3 connection and N keep-alive GETs on it, then a run of one: the difference divided by
N - 1 is the cost of one more request, the handshake and start-up excluded. Instruction counts
do not depend on the machine's load, so two binaries compare to well under 1 %.

    benches/load/tls_instructions.py [--requests 2000] [--size 4096] [--annotate] BINARY [BINARY ...]

`--annotate` prints callgrind_annotate's top functions of the N-request run (inclusive of
everything: the handshake is in it, but amortised over N). The kernel's share is not counted:
check system calls per request with `strace -c -f` separately. Needs `valgrind` and `openssl`.
"""

import argparse
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_response(s, buf):
    """Reads one 200 response with a Content-Length body; returns the bytes after it."""
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


def load(port, n, cafile):
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    req = b"GET /4k.bin HTTP/1.1\r\nHost: localhost\r\nUser-Agent: tls_instructions.py\r\nAccept: */*\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            buf = b""
            for _ in range(n):
                s.sendall(req)
                buf = read_response(s, buf)


def count(binary, work, n, annotate):
    port, tport = free_port(), free_port()
    conf = work / f"c{tport}.toml"
    conf.write_text(
        f'[server]\nlisten = ["127.0.0.1:{port}"]\nroot = "{work}/root"\n\n'
        f'[http]\nkeepalive_requests = 1000000\n\n'
        f'[log]\naccess = "off"\nerror = "{work}/error.log"\n\n'
        f'[tls]\nlisten = ["127.0.0.1:{tport}"]\ncert = "{work}/tls.crt"\nkey = "{work}/tls.key"\n'
    )
    out = work / f"callgrind.{tport}"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "--config", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                # A probe of the plain listener: the TLS one sees only the measured client.
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise OSError(f"{binary} did not start listening under valgrind")
                time.sleep(0.2)
        load(tport, n, work / "tls.crt")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    text = out.read_text()
    m = re.search(r"^summary:\s+(\d+)", text, re.M)
    if not m:
        raise OSError(f"no summary in {out}")
    if annotate:
        r = subprocess.run(["callgrind_annotate", "--inclusive=no", str(out)], capture_output=True, text=True)
        print("\n".join(r.stdout.splitlines()[:60]))
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--annotate", action="store_true")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    if args.requests < 2:
        sys.exit("--requests must be at least 2")
    with tempfile.TemporaryDirectory(prefix="ferro-tls-instr-") as tmp:
        work = Path(tmp)
        (work / "root").mkdir()
        (work / "root" / "4k.bin").write_bytes(os.urandom(args.size))
        r = subprocess.run(
            ["openssl", "req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-days", "7", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", str(work / "tls.key"), "-out", str(work / "tls.crt")],
            capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"openssl req: {r.stderr.strip()}")
        print(f"instructions per HTTPS keep-alive request (callgrind, {args.requests} requests minus 1, "
              f"{args.size} B body)")
        for b in args.binaries:
            many = count(b, work, args.requests, args.annotate)
            one = count(b, work, 1, False)
            print(f"{b:<60} {(many - one) / (args.requests - 1):>12,.0f}")


if __name__ == "__main__":
    main()
