#!/usr/bin/env python3
"""Password-guessing flood against `.htpasswd` Basic auth, and what it costs everyone else.

Run by hand (not part of `cargo test` or CI), from the repository root:

    cargo build --release
    nice -n 10 python3 benches/auth_flood.py [--bin target/release/ferrohttpd] [--seconds 10]

It starts the given binary in its thttpd personality (a `thttpd` symlink to it, `-D -h
127.0.0.1 -p 0`) on a temporary site whose `/private/.htpasswd` holds one bcrypt cost-12 hash.
Then, for `--seconds`:

- the attacker: `--attackers` keep-alive connections (default 1), each pipelining batches of
  20 `GET /private/secret.txt` with a different wrong password every time (so no cache helps),
  as fast as the server answers;
- the other client: a `GET /index.html` on a fresh connection every 20 ms, timed from connect
  to the last byte of the response.

It prints the other client's latency (median, p99, max, in ms) and how the attacker's requests
were answered (401 / 503 / other). Loopback only; every socket has a timeout; the server is
killed by its pid at the end.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import base64

# `htpasswd -nbB -C 12 alice 'correct horse'`
HTPASSWD = "alice:$2y$12$2/PGhXXKgbW2TniUGHtJpu7l30pJyL0.NhGQShz/9zDpSqGGuMFvS\n"
TIMEOUT = 30.0


def start_server(binary, site):
    root = os.path.join(site, "www")
    os.makedirs(os.path.join(root, "private"))
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<p>index</p>\n")
    with open(os.path.join(root, "private", "secret.txt"), "w") as f:
        f.write("secret\n")
    with open(os.path.join(root, "private", ".htpasswd"), "w") as f:
        f.write(HTPASSWD)
    for d, _, files in os.walk(site):
        os.chmod(d, 0o755)
        for n in files:
            os.chmod(os.path.join(d, n), 0o644)
    link = os.path.join(site, "thttpd")
    os.symlink(os.path.abspath(binary), link)
    proc = subprocess.Popen(
        [link, "-D", "-d", root, "-l", "/dev/null", "-h", "127.0.0.1", "-p", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.time() + 10
    while time.time() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    sys.exit("the server did not start")


def read_responses(sock, buf, want):
    """Reads until `want` complete responses (heads + Content-Length bodies) are in; returns
    their status codes and the rest of the buffer."""
    statuses = []
    while len(statuses) < want:
        m = re.match(rb"HTTP/1\.[01] (\d{3})[^\r\n]*\r\n(.*?)\r\n\r\n", buf, re.S)
        if m:
            length = re.search(rb"(?i)content-length: *(\d+)", m.group(2))
            end = m.end() + (int(length.group(1)) if length else 0)
            if len(buf) >= end:
                statuses.append(int(m.group(1)))
                buf = buf[end:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return statuses, buf


def attacker(port, stop, counts, lock, ident):
    n = 0
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        except OSError:
            time.sleep(0.05)
            continue
        buf = b""
        try:
            while not stop.is_set():
                batch = []
                for _ in range(20):
                    n += 1
                    cred = base64.b64encode(f"alice:wrong-{ident}-{n}".encode()).decode()
                    batch.append(
                        f"GET /private/secret.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {cred}\r\n\r\n"
                    )
                s.sendall("".join(batch).encode())
                statuses, buf = read_responses(s, buf, len(batch))
                with lock:
                    for st in statuses:
                        counts[st] = counts.get(st, 0) + 1
                if len(statuses) < len(batch):
                    break  # the server closed the connection: open another
        except OSError:
            pass
        finally:
            s.close()


def victim(port, stop, latencies):
    req = b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
                s.sendall(req)
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            if data.startswith(b"HTTP/1.1 200"):
                latencies.append((time.perf_counter() - t0) * 1000)
        except OSError:
            pass
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/ferrohttpd")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--attackers", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as site:
        os.chmod(site, 0o755)
        proc, port = start_server(args.bin, site)
        try:
            stop = threading.Event()
            counts, lock, latencies = {}, threading.Lock(), []
            threads = [threading.Thread(target=attacker, args=(port, stop, counts, lock, i)) for i in range(args.attackers)]
            threads.append(threading.Thread(target=victim, args=(port, stop, latencies)))
            for t in threads:
                t.start()
            time.sleep(args.seconds)
            stop.set()
            for t in threads:
                t.join(TIMEOUT + 5)
        finally:
            proc.kill()
            proc.wait()
    if not latencies:
        sys.exit("the other client got no answer at all")
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"binary: {args.bin}; {args.seconds:.0f} s, {args.attackers} attacking connection(s)")
    print(
        f"other client GET /index.html: n={len(lat)} median={statistics.median(lat):.1f} ms "
        f"p99={p99:.1f} ms max={lat[-1]:.1f} ms"
    )
    print("attacker's answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
