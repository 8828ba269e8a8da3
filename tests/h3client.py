#!/usr/bin/env python3
"""A small HTTP/3 client for tests/http3.rs and the semantics table's HTTP/3 row
(tests/common/proto.rs), on aioquic's H3Connection.

Usage: h3client.py HOST PORT SNI [LINGER] < requests.json
   or: h3client.py --session HOST PORT SNI

--session: one connection for as long as stdin stays open: {"connected": true} once its
handshake is done (within 5 s, else an error line); then each line of stdin is one request
as below (no stop_after), sent when the previous response has ended; each response is one
line of stdout: {"status": 200, "headers": [[n, v], ...] (names as received), "body_hex":
"...", "reset": bool}, or {"error": "..."} when the exchange failed, after which the
connection is closed and every later line gets the same error. Each exchange is bounded by
a 10 s timeout. The client does not check a response's content-length against its body
(the caller does, and a 304 or a HEAD response has none).

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
        self.session = False
        self.failure = None
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
        if self.session:
            self.results[sid]["bytes"] = bytearray()
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
            self.failure = f"connection closed: {event.error_code:#x} {event.reason_phrase}"
        if isinstance(event, StreamReset) and event.stream_id in self.results:
            self.results[event.stream_id]["reset"] = True
            self.finish(event.stream_id)
            return
        try:
            events = self.h3.handle_event(event)
        except Exception as e:  # noqa: BLE001 - a malformed response: the session reports it
            if not self.session:
                raise
            events = []
            self.failure = f"invalid HTTP/3 from the server: {e!r}"
        if self.session and self.h3._is_done and self.failure is None:
            # aioquic found a protocol error (a malformed response) and closes the connection.
            why = getattr(self._quic, "_close_event", None)
            self.failure = f"invalid HTTP/3 from the server: {getattr(why, 'reason_phrase', '?')}"
        if self.failure is not None and self.session:
            for sid in list(self.waiters):
                self.finish(sid)
            return
        for ev in events:
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
                if "bytes" in r:
                    r["bytes"] += ev.data
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


def configuration(sni):
    """The client's QUIC configuration: ALPN h3, SNI `sni`, the certificate not verified,
    windows large enough that flow control never holds a response back."""
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=sni)
    cfg.verify_mode = ssl.CERT_NONE
    cfg.max_data = 1 << 26
    cfg.max_stream_data = 1 << 24
    return cfg


async def main():
    host, port, sni = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    reqs = json.load(sys.stdin)
    cfg = configuration(sni)
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


async def session():
    host, port, sni = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    loop = asyncio.get_running_loop()
    cfg = configuration(sni)
    # A server that never answers ends the session's handshake in 10 s, not aioquic's 60.
    cfg.idle_timeout = 10.0

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    try:
        async with connect(host, port, configuration=cfg, create_protocol=Client, wait_connected=False) as client:
            client.session = True
            client.transmit()
            await asyncio.wait_for(client.wait_connected(), 5)
            reply({"connected": True})
            # The caller's content-length checks are stricter (a 304 may announce one).
            client.h3._check_content_length = lambda stream: None
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    return
                if client.failure is not None:
                    reply({"error": client.failure})
                    continue
                sid = client.request(json.loads(line))
                client.transmit()
                try:
                    await asyncio.wait_for(asyncio.shield(client.waiters[sid]), 10)
                except asyncio.TimeoutError:
                    client.failure = "no complete response within 10 s"
                if client.failure is not None:
                    reply({"error": client.failure})
                    continue
                r = client.results.pop(sid)
                del client.waiters[sid]
                reply({"status": r["status"], "headers": r["headers"], "body_hex": r["bytes"].hex(), "reset": r["reset"]})
    except Exception as e:  # noqa: BLE001 - the caller reads the error
        reply({"error": repr(e)})
        # Every later request of the caller's gets an answer too.
        for _ in sys.stdin:
            reply({"error": repr(e)})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--session"]:
        asyncio.run(session())
        sys.exit(0)
    try:
        asyncio.run(asyncio.wait_for(main(), 20))
    except Exception as e:  # noqa: BLE001 - the test prints what went wrong
        print(json.dumps({"error": repr(e)}))
        sys.exit(2)
