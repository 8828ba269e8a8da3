#!/usr/bin/env python3
"""The cost of on-demand compression (`[compression] on_demand`), measured on a real server.

    nice -n 10 benches/compression_flood.py BINARY [--files N] [--size BYTES] [--big MB]
                                                   [--cache-bytes B] [--cache-entries E]

Makes a temporary document root with N (default 10000) text files of SIZE (default 32768)
bytes of random lowercase words (about 2:1 compressible, so variants are large), a text file
of BIG (default 10) MB, a 4 KiB page and a small file; starts BINARY (a ferrohttpd built with
`cargo build --release`) on 127.0.0.1 with a kernel-chosen port and the status page on; then:

1. the first request of the 4 KiB page with `Accept-Encoding: br` (identity), the time until
   the variant is served, and the median of 200 later requests (the variant, from memory)
   against 200 of identity (no Accept-Encoding) on one keep-alive connection;
2. the flood: GETs every one of the N files with `Accept-Encoding: br` on keep-alive
   connections, twice over; prints the status page's counters (variants made, bytes saved,
   queue drops, the variants cache's files and bytes) and the server's memory from
   /proc/PID/status (VmRSS, RssAnon) and smaps_rollup (Pss, Private), before and after;
3. asks for the BIG file in br and, while it compresses, GETs the small file on a fresh
   connection every 10 ms: that client's latency median / p99 / max, how long the variant
   took, and the compressor thread's CPU time (from /proc/PID/task/*/stat, the thread named
   `ferrohttpd-zip`).

Everything goes to 127.0.0.1 only, every loop stops by itself, and the server is killed at
the end. Run by hand, never in CI (the figures depend on the machine).
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TIMEOUT = 60


def read_response(s, buf, head_only=False):
    """One response from s (buf: bytes already read): (status, headers, body, rest)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the head")
        buf += chunk
    idx = buf.index(b"\r\n\r\n")
    head, rest = bytes(buf[:idx]), bytearray(buf[idx + 4:])
    status = int(head.split(b" ", 2)[1])
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    length = 0 if head_only or status == 304 else int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed in the body")
        rest += chunk
    return status, headers, bytes(rest[:length]), bytearray(rest[length:])


class Client:
    def __init__(self, port):
        self.port = port
        self.sock = None
        self.buf = bytearray()
        self.used = 0

    def get(self, path, ae=None):
        if self.sock is None or self.used >= 900:
            if self.sock:
                self.sock.close()
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
            self.buf, self.used = bytearray(), 0
        extra = f"Accept-Encoding: {ae}\r\n" if ae else ""
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n{extra}\r\n".encode())
        self.used += 1
        status, headers, body, self.buf = read_response(self.sock, self.buf)
        return status, headers, body


def once(port, path, ae=None):
    c = Client(port)
    r = c.get(path, ae)
    c.sock.close()
    return r


def words(n, rng):
    out = bytearray()
    while len(out) < n:
        out += bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) + b" "
    return bytes(out[:n])


def memory(pid):
    st = open(f"/proc/{pid}/status").read()
    field = lambda name, text: int(re.search(rf"^{name}:\s+(\d+) kB", text, re.M).group(1))
    roll = open(f"/proc/{pid}/smaps_rollup").read()
    private = field("Private_Clean", roll) + field("Private_Dirty", roll)
    return {"VmRSS": field("VmRSS", st), "RssAnon": field("RssAnon", st), "Pss": field("Pss", roll),
            "Private": private}


def zip_cpu(pid):
    """CPU seconds of the compressor thread."""
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if name.startswith("ferrohttpd-zip"):
            f = stat[stat.rindex(")") + 2:].split()
            return (int(f[11]) + int(f[12])) / tick
    return 0.0


def counters(port):
    _, _, body = once(port, "/.status?json")
    return json.loads(body)["compression"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--size", type=int, default=32768)
    ap.add_argument("--big", type=int, default=10)
    ap.add_argument("--cache-bytes", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--cache-entries", type=int, default=1024)
    a = ap.parse_args()
    rng = random.Random(1)
    tmp = tempfile.mkdtemp(prefix="compression-flood-")
    proc = None
    try:
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "f"))
        chunk = words(1 << 20, rng)
        for i in range(a.files):
            off = rng.randrange(0, len(chunk) - a.size)
            with open(os.path.join(root, "f", f"{i}.txt"), "wb") as f:
                f.write(chunk[off:off + a.size])
        with open(os.path.join(root, "big.txt"), "wb") as f:
            for _ in range(a.big):
                f.write(words(1 << 20, rng))
        page = b"".join(b'<li><a href="/item/%d">item %d</a></li>\n' % (i, i) for i in range(200))[:4096]
        open(os.path.join(root, "page.html"), "wb").write(page)
        open(os.path.join(root, "small.txt"), "wb").write(b"small\n")
        conf = os.path.join(tmp, "ferrohttpd.toml")
        open(conf, "w").write(
            f'[server]\nlisten = ["127.0.0.1:0"]\nroot = "{root}"\n[log]\naccess = "off"\n'
            f"[status]\nenabled = true\n[cache]\nmax_entries = {a.files + 100}\n"
            f"[compression]\ncache_bytes = {a.cache_bytes}\ncache_entries = {a.cache_entries}\n")
        proc = subprocess.Popen([a.binary, "--config", conf], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        port = None
        while port is None:
            line = proc.stdout.readline().decode()
            if not line:
                sys.exit("the server did not start")
            m = re.search(r"listening on http://[^ ]*:(\d+)/", line)
            port = m and int(m.group(1))
        pid = proc.pid

        print("## first request, later requests (4 KiB page, br)")
        t = time.perf_counter()
        status, h, _ = once(port, "/page.html", "br")
        first = time.perf_counter() - t
        t0 = time.perf_counter()
        while once(port, "/page.html", "br")[1].get("content-encoding") != "br":
            if time.perf_counter() - t0 > TIMEOUT:
                sys.exit("no variant")
            time.sleep(0.001)
        ready = time.perf_counter() - t
        c = Client(port)
        for label, ae in (("variant (br)", "br"), ("identity", None)):
            lat = []
            for _ in range(200):
                t = time.perf_counter()
                c.get("/page.html", ae)
                lat.append(time.perf_counter() - t)
            print(f"- {label}: median {statistics.median(lat) * 1e6:.0f} µs over 200 keep-alive requests")
        print(f"- first request: {first * 1e6:.0f} µs ({h.get('content-encoding', 'identity')}); "
              f"variant served {ready * 1e3:.1f} ms after it")

        print(f"\n## flood: {a.files} distinct files of {a.size} bytes, br, twice over")
        before = memory(pid)
        t = time.perf_counter()
        for _ in range(2):
            for i in range(a.files):
                c.get(f"/f/{i}.txt", "br")
        took = time.perf_counter() - t
        time.sleep(1)
        after = memory(pid)
        z = counters(port)
        print(f"- {2 * a.files} requests in {took:.1f} s; counters {z}")
        print(f"- memory before: {before}")
        print(f"- memory after:  {after}")
        print(f"- bound: cache_bytes {a.cache_bytes // 1024} KiB, cache_entries {a.cache_entries}")

        print(f"\n## another client while {a.big} MB compress (br)")
        cpu0 = zip_cpu(pid)
        once(port, "/big.txt", "br")
        t0 = time.perf_counter()
        lat = []
        done = None
        while time.perf_counter() - t0 < 120:
            t = time.perf_counter()
            once(port, "/small.txt")
            lat.append(time.perf_counter() - t)
            if len(lat) % 10 == 0:
                s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                s.sendall(b"HEAD /big.txt HTTP/1.1\r\nHost: b\r\nAccept-Encoding: br\r\nConnection: close\r\n\r\n")
                _, h, _, _ = read_response(s, bytearray(), head_only=True)
                s.close()
                if h.get("content-encoding") == "br":
                    done = time.perf_counter() - t0
                    break
            time.sleep(0.01)
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(f"- small file on fresh connections, {len(lat)} requests: median "
              f"{statistics.median(lat) * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, max {lat[-1] * 1e3:.2f} ms")
        print(f"- variant ready after {done:.2f} s" if done else "- variant not ready within 120 s")
        print(f"- compressor thread CPU for it: {zip_cpu(pid) - cpu0:.2f} s; memory now {memory(pid)}")
    finally:
        if proc:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
