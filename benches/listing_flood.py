#!/usr/bin/env python3
"""Another client's latency while a directory listing is flooded (issue 14, finding 6).

    nice -n 10 benches/listing_flood.py BINARY [--entries N] [--name-len L] [--clients C]
                                               [--pipeline P] [--seconds S] [--idle K]

Makes a temporary document root with a directory of N (default 10000) empty files whose
names are L (default 40) bytes long, and a small file; starts BINARY (a ferrohttpd built with
`cargo build --release`) on 127.0.0.1 with a kernel-chosen port and `[listing] enabled`;
then:

1. times the first GET of the listing (read and rendered) and the median of 20 more (a
   server that caches listings answers those from memory);
2. floods the listing for S (default 10) seconds from C (default 8) keep-alive clients, half
   asking for HTML and half for JSON, each sending P (default 1) requests at a time
   (pipelined) and reading every response whole, while one more client GETs the small file
   on a fresh connection every 10 ms; prints that client's latency median / p99 / max and
   how many listings the flood got;
3. opens K (default 50) connections that ask for the listing and never read (with a small
   receive buffer, so the kernel holds little of it), and prints the server's RSS before and
   at its peak.

Everything goes to 127.0.0.1 only, every loop stops by itself, and the server is killed at
the end. Run by hand, never in CI (the figures depend on the machine). Example, comparing
main with a branch:

    nice -n 10 benches/listing_flood.py /tmp/main/target/release/ferrohttpd
    nice -n 10 benches/listing_flood.py target/release/ferrohttpd
"""
import argparse
import multiprocessing
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT = 30


def read_response(s, buf):
    """Reads one response (head and Content-Length body) from s, starting with the bytes in
    buf; returns (status, body length, the bytes read past it)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the head")
        buf += chunk
    idx = buf.index(b"\r\n\r\n")
    head, rest = bytes(buf[:idx]), buf[idx + 4:]
    status = int(head.split(b" ", 2)[1])
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(m.group(1)) if m and status != 304 else 0
    if len(rest) >= length:
        return status, length, bytearray(rest[length:])
    need = length - len(rest)
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed in the body")
        if len(chunk) >= need:
            return status, length, bytearray(chunk[need:])
        need -= len(chunk)


def get(port, path, headers=""):
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\r\n".encode())
        status, length, _ = read_response(s, bytearray())
    return status, length, time.monotonic() - t


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--entries", type=int, default=10000)
    ap.add_argument("--name-len", type=int, default=40)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--idle", type=int, default=50)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="listing-flood-")
    proc = None
    try:
        root = os.path.join(tmp, "root")
        big = os.path.join(root, "big")
        os.makedirs(big)
        for i in range(a.entries):
            name = f"{i:06d}-" + "n" * max(0, a.name_len - 7)
            open(os.path.join(big, name), "wb").close()
        with open(os.path.join(root, "small.txt"), "wb") as f:
            f.write(b"small\n")
        conf = os.path.join(tmp, "ferrohttpd.toml")
        with open(conf, "w") as f:
            f.write(f'[server]\nlisten = ["127.0.0.1:0"]\nroot = "{root}"\nmax_connections = 4096\n')
            f.write('[log]\naccess = "/dev/null"\nerror = "-"\n[listing]\nenabled = true\n')
        proc = subprocess.Popen([a.binary, "--config", conf], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("the server did not start")

        # 1. First and repeated listing.
        status, size, first = get(port, "/big/")
        again = [get(port, "/big/")[2] for _ in range(20)]
        print(f"listing of {a.entries} entries ({a.name_len}-byte names): {size} bytes, status {status}")
        print(f"  first GET {first * 1000:.1f} ms, median of the next 20 {statistics.median(again) * 1000:.1f} ms")

        # 2. The flood (in another process, so the probe does not wait for this one's GIL),
        # and the probe.
        stop = multiprocessing.Event()
        served = multiprocessing.Array("l", a.clients)

        def flood(i):
            path = "/big/" if i % 2 == 0 else "/big/?format=json"
            req = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() * a.pipeline
            while not stop.is_set():
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
                        buf = bytearray()
                        while not stop.is_set():
                            s.sendall(req)
                            for _ in range(a.pipeline):
                                _, _, buf = read_response(s, buf)
                                served[i] += 1
                except OSError:
                    pass

        def flood_all():
            threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(a.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=a.seconds + TIMEOUT)

        flooder = multiprocessing.Process(target=flood_all, daemon=True)
        flooder.start()
        time.sleep(0.5)
        lat = []
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            status, _, took = get(port, "/small.txt")
            if status != 200:
                print(f"  probe got {status}")
            lat.append(took)
            time.sleep(0.01)
        stop.set()
        flooder.join(timeout=2 * TIMEOUT)
        if flooder.is_alive():
            flooder.kill()
        ms = [x * 1000 for x in lat]
        print(
            f"flood: {a.clients} clients x {a.pipeline} pipelined, {a.seconds:.0f} s, {sum(served)} listings served"
        )
        print(
            f"  other client's GET /small.txt ({len(ms)} probes): median {statistics.median(ms):.1f} ms, "
            f"p99 {pct(ms, 0.99):.1f} ms, max {max(ms):.1f} ms"
        )

        # 3. Clients that do not read.
        before = rss_kb(proc.pid)
        idle = []
        for _ in range(a.idle):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(TIMEOUT)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /big/ HTTP/1.1\r\nHost: localhost\r\n\r\n")
            idle.append(s)
        for s in idle:
            s.recv(1)
        peak = before
        for _ in range(20):
            peak = max(peak, rss_kb(proc.pid))
            time.sleep(0.1)
        print(f"{a.idle} clients that do not read: server RSS {before} kB before, peak {peak} kB")
        for s in idle:
            s.close()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
