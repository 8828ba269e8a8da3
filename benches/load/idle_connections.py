#!/usr/bin/env python3
"""Memory per idle keep-alive connection.

    benches/load/idle_connections.py [--tls] [--h2c] PID PORT [N] [PATH]
    benches/load/idle_connections.py --h3 PID PORT [N] [PATH]

Opens N (default 10000) connections to 127.0.0.1:PORT, makes one GET of PATH (default
/4k.bin) on each and reads the whole response, keeps them all open, then prints the RSS of
the server process PID (VmRSS, RssAnon, RssFile from /proc) before and after, and the
difference per connection. The server needs max_connections above N and a keep-alive
timeout longer than the run; this process raises its own descriptor limit as far as the hard
limit allows. With --tls, PORT is a TLS listener (the certificate is not verified: this
measures memory, not trust). With --h2c, each connection speaks cleartext HTTP/2 (prior
knowledge) and makes its GET as stream 1; with both, HTTP/2 over TLS (ALPN h2, checked).
With --h3, each connection is HTTP/3 over QUIC to the UDP port PORT (Python's aioquic, one
UDP socket per connection, certificate not verified) and its GET must answer 200; the
server needs [http3] max_connections_per_ip = 0 (or above N), an idle_timeout longer than
the run, and [server] max_connections above N. Run by hand; never in CI.
"""
import asyncio
import contextlib
import os
import resource
import socket
import ssl
import sys
import time


def rss(pid):
    d = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                d[k] = int(v.split()[0])
    return d


def h2_frame(kind, flags, stream, payload):
    n = len(payload)
    return bytes([n >> 16, (n >> 8) & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big") + payload


def h2_get(s, path, scheme):
    """The preface, an empty SETTINGS, and GET path on stream 1 (literal fields, no Huffman);
    reads frames until stream 1 ends."""
    block = b""
    for name, value in ((b":method", b"GET"), (b":scheme", scheme), (b":path", path.encode()),
                        (b":authority", b"localhost")):
        block += bytes([0, len(name)]) + name + bytes([len(value)]) + value
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"") + h2_frame(1, 5, 1, block))
    buf = b""
    while True:
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            buf = buf[9 + n:]
            if kind == 4 and not flags & 1:
                s.sendall(h2_frame(4, 1, 0, b""))
            if stream == 1 and flags & 1 and kind in (0, 1):
                return
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("closed before the response ended")
        buf += chunk


async def h3_open(port, n, path, stack):
    """N HTTP/3 connections, one GET on each, answered 200 and read to its end; they stay open
    (the connection contexts are entered on `stack`)."""
    from aioquic.asyncio.client import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration

    class Client(QuicConnectionProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.h3 = H3Connection(self._quic)
            self.status = None
            self.done = asyncio.get_running_loop().create_future()

        def quic_event_received(self, event):
            for e in self.h3.handle_event(event):
                if isinstance(e, HeadersReceived):
                    self.status = dict(e.headers).get(b":status")
                if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_ended and not self.done.done():
                    self.done.set_result(self.status)

    # the client's idle timeout outlasts the run; the server's decides
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE,
                               idle_timeout=3600.0, server_name="localhost")
    clients = []
    for i in range(n):
        client = await stack.enter_async_context(
            connect("127.0.0.1", port, configuration=config, create_protocol=Client, wait_connected=True))
        clients.append(client)
        stream = client._quic.get_next_available_stream_id()
        client.h3.send_headers(stream, [(b":method", b"GET"), (b":scheme", b"https"),
                                        (b":authority", b"localhost"), (b":path", path.encode())],
                               end_stream=True)
        client.transmit()
        status = await asyncio.wait_for(client.done, 10)
        if status != b"200":
            sys.exit(f"connection {i}: status {status!r}, not 200")
    return clients


async def h3_main(pid, port, n, path):
    async with contextlib.AsyncExitStack() as stack:
        before = rss(pid)
        clients = await h3_open(port, n, path, stack)
        await asyncio.sleep(1.0)
        report(pid, n, before, "HTTP/3")
        # all at once: one by one, each close would wait out its closing period
        for c in clients:
            c.close()
        await asyncio.wait_for(asyncio.gather(*(c.wait_closed() for c in clients)), 60)


def report(pid, n, before, what):
    after = rss(pid)
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    print(f"before: {before}")
    print(f"after {n} idle {what} connections: {after}; server descriptors: {fds}")
    print(f"per connection: VmRSS {(after['VmRSS'] - before['VmRSS']) * 1024 / n:.0f} B, "
          f"RssAnon {(after['RssAnon'] - before['RssAnon']) * 1024 / n:.0f} B")


def main():
    h3 = "--h3" in sys.argv[1:]
    if h3:
        sys.argv.remove("--h3")
    h2c = "--h2c" in sys.argv[1:]
    if h2c:
        sys.argv.remove("--h2c")
    tls = "--tls" in sys.argv[1:]
    if tls:
        sys.argv.remove("--tls")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if h2c:
            ctx.set_alpn_protocols(["h2"])
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    path = sys.argv[4] if len(sys.argv) > 4 else "/4k.bin"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 1000)), hard))
    if h3:
        asyncio.run(h3_main(pid, port, n, path))
        return
    before = rss(pid)
    req = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
    conns = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if tls:
            s = ctx.wrap_socket(s, server_hostname="localhost")
        if h2c:
            if tls and s.selected_alpn_protocol() != "h2":
                sys.exit(f"connection {i}: ALPN chose {s.selected_alpn_protocol()!r}, not h2")
            h2_get(s, path, b"https" if tls else b"http")
            conns.append(s)
            continue
        s.sendall(req)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                sys.exit(f"connection {i}: closed before the response ended")
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
                break
        conns.append(s)
    time.sleep(1.0)
    report(pid, n, before, "keep-alive")
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
