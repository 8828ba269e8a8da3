#!/usr/bin/env python3
"""A small HTTP/3 client for tests/http3.rs, on aioquic's H3Connection.

Usage: h3client.py HOST PORT SNI [LINGER] < requests.json

With LINGER (seconds), the client keeps the connection open that long after the responses
and reports how the server closed it ("closed": the error code, or null).

stdin: a JSON list of requests, each {"method": "GET", "path": "/x", "authority": "...",
"headers": [["name", "value"], ...], "stop_after": N (optional: once N body bytes came, the
client stops the stream with STOP_SENDING H3_REQUEST_CANCELLED and takes it as done)};
all are sent at once, each on its own stream, over one
connection (certificate not verified: the tests' certificate is self-signed; the SNI is
SNI). stdout: a JSON list in the same order, each {"status": 200, "headers": [[n, v], ...],
"body_hex_sha256": "...", "length": N, "reset": bool, "order": which of the responses
ended first (0), second...}; exit 0. A connection that cannot be
made prints {"error": "..."} and exits 2. Everything is bounded by a 20 s timeout.
"""

import asyncio
import hashlib
import json
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.results = {}
        self.waiters = {}
        # aioquic checks a response's content-length against its body even for HEAD, whose
        # response has none (RFC 9110 §9.3.2): not for those.
        self.heads = set()
        self.stops = {}
        self.closed = self._loop.create_future()
        self.ended = 0
        check = self.h3._check_content_length
        self.h3._check_content_length = lambda stream: None if stream.stream_id in self.heads else check(stream)

    def request(self, req):
        sid = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", req.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", req["authority"].encode()),
            (b":path", req["path"].encode()),
        ] + [(n.lower().encode(), v.encode()) for n, v in req.get("headers", [])]
        if req.get("method") == "HEAD":
            self.heads.add(sid)
        self.h3.send_headers(stream_id=sid, headers=headers, end_stream=True)
        self.results[sid] = {"status": None, "headers": [], "body": hashlib.sha256(), "length": 0, "reset": False}
        if req.get("stop_after") is not None:
            self.stops[sid] = req["stop_after"]
        self.waiters[sid] = self._loop.create_future()
        return sid

    def finish(self, sid):
        w = self.waiters.get(sid)
        if w is not None and not w.done():
            self.results[sid]["order"] = self.ended
            self.ended += 1
            w.set_result(True)

    def quic_event_received(self, event: QuicEvent):
        if isinstance(event, ConnectionTerminated) and not self.closed.done():
            self.closed.set_result(event.error_code)
        if isinstance(event, StreamReset) and event.stream_id in self.results:
            self.results[event.stream_id]["reset"] = True
            self.finish(event.stream_id)
            return
        for ev in self.h3.handle_event(event):
            r = self.results.get(getattr(ev, "stream_id", None))
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                for n, v in ev.headers:
                    if n == b":status":
                        r["status"] = int(v)
                    else:
                        r["headers"].append([n.decode(), v.decode()])
            elif isinstance(ev, DataReceived):
                r["body"].update(ev.data)
                r["length"] += len(ev.data)
                stop = self.stops.get(ev.stream_id)
                if stop is not None and r["length"] >= stop:
                    del self.stops[ev.stream_id]
                    self._quic.stop_stream(ev.stream_id, 0x10C)
                    self.transmit()
                    self.finish(ev.stream_id)
                    continue

            if getattr(ev, "stream_ended", False):
                self.finish(ev.stream_id)


async def main():
    host, port, sni = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    reqs = json.load(sys.stdin)
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=sni)
    cfg.verify_mode = ssl.CERT_NONE
    cfg.max_data = 1 << 26
    cfg.max_stream_data = 1 << 24
    async with connect(host, port, configuration=cfg, create_protocol=Client) as client:
        sids = [client.request(r) for r in reqs]
        client.transmit()
        await asyncio.gather(*(client.waiters[s] for s in sids))
        # Let what the server sends after a stopped stream arrive (its RESET_STREAM).
        if any(r.get("stop_after") is not None for r in reqs):
            await asyncio.sleep(0.3)
        closed = None
        if len(sys.argv) > 4:
            try:
                closed = await asyncio.wait_for(asyncio.shield(client.closed), float(sys.argv[4]))
            except asyncio.TimeoutError:
                pass
        out = []
        for s in sids:
            r = client.results[s]
            r["body_hex_sha256"] = r.pop("body").hexdigest()
            r["closed"] = closed
            out.append(r)
        print(json.dumps(out))


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 20))
    except Exception as e:  # noqa: BLE001 - the test prints what went wrong
        print(json.dumps({"error": repr(e)}))
        sys.exit(2)
