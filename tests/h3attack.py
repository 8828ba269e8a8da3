#!/usr/bin/env python3
"""HTTP/3 attacks for tests/h3_attacks.rs, on aioquic: one connection per run, driven below
H3Connection where the attack needs it (raw frames on the control, QPACK and request
streams, stream limits and flow-control windows overridden, connection IDs retired).

Usage: h3attack.py ATTACK HOST PORT SNI [N]

stdout: one JSON object: {"closed": the error code the server closed the connection with
(null: it did not, within the attack's time), "reason": its reason phrase, "statuses":
{stream: status} of the responses that came, "resets": {stream: code} of the streams the
server reset, "stops": {stream: code} of those it stopped, "bytes": body bytes received,
plus what the attack itself counts}. A connection that cannot be made prints {"error": ...}
and exits 2. Every attack is bounded in time (at most about 15 s).

Attacks (N: how many of the thing, where there is a count):
  reset-flood N        N request streams, each HEADERS for /big.bin then RESET_STREAM and
                       STOP_SENDING (H3_REQUEST_CANCELLED) at once, within the stream limit
  too-many-streams N   N request streams at once, past the server's MAX_STREAMS (bidi)
  too-many-uni N       N unidirectional streams of a reserved type, past its MAX_STREAMS (uni)
  qpack-capacity       Set Dynamic Table Capacity 4096 on the encoder stream (we advertised 0)
  qpack-insert         an Insert With Literal Name on the encoder stream
  qpack-ric            a request whose field section claims Required Insert Count 1
  qpack-bomb N         a request of N static-table references (each ~40 bytes decoded)
  huge-headers         a HEADERS frame that declares 2^40 bytes
  second-settings      a second SETTINGS frame on the control stream
  data-on-control      a DATA frame on the control stream
  headers-on-control   a HEADERS frame on the control stream
  close-control        the control stream ended (FIN)
  reset-control        the control stream reset
  second-control       a second control stream
  missing-settings     a control stream whose first frame is not SETTINGS
  forbidden-setting    SETTINGS with an HTTP/2 setting (0x2, ENABLE_PUSH)
  unknown N            N unknown frames (reserved types) on the control stream and around a
                       request's HEADERS and DATA, and N unidirectional streams of unknown
                       types: all ignored, the request answered
  zero-window N        N requests for /big.bin with no flow-control window, never opened;
                       then waits, silent, until the server drops the connection (idle
                       timeout) or 12 s ("seconds": how long it took)
  zero-window-ping N   the same, with a PING every 0.5 s (never idle)
  slow-reader N        /big.bin with a 1 KiB window raised by 64 bytes every 20 ms, for N s
  cid-retire N         the client retires the server's connection ID N times (each
                       RETIRE_CONNECTION_ID; the server must issue a new one), then a request
  cid-flood N          N NEW_CONNECTION_ID frames, past the server's active_connection_id_limit
  flood-KIND N         N frames or stream events that do no work, of one kind: "control"
                       (reserved frame types on the control stream), "priority"
                       (PRIORITY_UPDATEs for a stream not open), "request" (reserved frame
                       types on a request stream, no HEADERS), "qpack" (Stream Cancellations
                       on the decoder stream, Set Dynamic Table Capacity 0 on the encoder
                       stream), "uni" (unidirectional streams of reserved types, opened as
                       the stream limit allows); then, if the connection is still open, a
                       request ("request_stream")
  trickle N            /big.bin with a 1 KiB window raised by N bytes every 20 ms, for at
                       most 6 s or until the server closes ("seconds": how long it took)
"""

import asyncio
import json
import os
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import FrameType, H3Connection, StreamType, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.connection import MAX_STREAM_DATA_FRAME_CAPACITY, QuicConnectionId
from aioquic.quic.events import ConnectionTerminated, StopSendingReceived, StreamReset
from aioquic.quic.packet import QuicFrameType

from h3client import configuration

H3_REQUEST_CANCELLED = 0x10C


class Attacker(QuicConnectionProtocol):
    """A connection that records what the server does: its close, resets, stops, responses.
    With `h3` (the default), aioquic's H3Connection opens the control and QPACK streams and
    reads the responses; without it the attack writes every stream itself."""

    def __init__(self, *args, h3=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic) if h3 else None
        self.closed = self._loop.create_future()
        self.close_code = None
        self.reason = None
        self.statuses = {}
        self.resets = {}
        self.stops = {}
        self.ended = set()
        self.bytes = 0
        self.changed = asyncio.Event()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated) and not self.closed.done():
            self.close_code = event.error_code
            self.reason = event.reason_phrase
            self.closed.set_result(event.error_code)
        elif isinstance(event, StreamReset):
            self.resets[event.stream_id] = event.error_code
        elif isinstance(event, StopSendingReceived):
            self.stops[event.stream_id] = event.error_code
        self.changed.set()
        if self.h3 is None or self.closed.done():
            return
        try:
            events = self.h3.handle_event(event)
        except Exception:  # noqa: BLE001 - what the server closes with is the result
            return
        for ev in events:
            if isinstance(ev, HeadersReceived):
                for n, v in ev.headers:
                    if n == b":status":
                        self.statuses[ev.stream_id] = int(v)
            elif isinstance(ev, DataReceived):
                self.bytes += len(ev.data)
            if getattr(ev, "stream_ended", False):
                self.ended.add(ev.stream_id)

    def request_headers(self, path, extra=()):
        return [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost"), (b":path", path)] + list(
            extra
        )

    def get(self, path, end=True, extra=()):
        """A GET on a new request stream (through H3Connection): its stream ID."""
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, self.request_headers(path, extra), end_stream=end)
        return sid

    def uni(self, stream_type):
        """A new unidirectional stream of `stream_type`, its type written: its ID."""
        sid = self._quic.get_next_available_stream_id(is_unidirectional=True)
        self._quic.send_stream_data(sid, encode_uint_var(stream_type))
        return sid

    def control(self, frame_type, payload):
        """A frame on our control stream (H3Connection's, after its SETTINGS)."""
        self._quic.send_stream_data(self.h3._local_control_stream_id, encode_frame(frame_type, payload))

    async def until(self, cond, timeout):
        """Waits until `cond()` holds, the connection closes or `timeout` seconds pass."""
        end = self._loop.time() + timeout
        while not cond() and not self.closed.done():
            left = end - self._loop.time()
            if left <= 0:
                return
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return

    async def one_more_request(self, timeout):
        """A GET of /small.bin after the attack, waited for (at most `timeout` seconds): its
        stream ID, in `ended` if its response came whole."""
        sid = self.get(b"/small.bin")
        self.transmit()
        await self.until(lambda: sid in self.ended, timeout)
        return sid

    async def closing(self, timeout):
        """Waits for the server to close the connection (at most `timeout` seconds)."""
        await self.until(lambda: False, timeout)


def field_line_static(index):
    """An Indexed Field Line referring to the static table (RFC 9204 §4.5.2), 6-bit prefix."""
    if index < 63:
        return bytes([0xC0 | index])
    return bytes([0xFF]) + prefixed_rest(index - 63)


def prefixed_rest(n):
    out = bytearray()
    while n >= 128:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


def section(lines, ric=0):
    """A field section: its prefix (Required Insert Count `ric` as encoded, Base 0) and lines."""
    return bytes([ric, 0]) + b"".join(lines)


def request_section(path=b"/small.bin", ric=0, extra=b""):
    # :method GET (17), :scheme https (23), :path as a literal with the name ref :path (1),
    # :authority localhost as a literal with the name ref :authority (0).
    def literal(index, value):
        return bytes([0x50 | index]) + bytes([len(value)]) + value

    return section([field_line_static(17), field_line_static(23), literal(1, path), literal(0, b"localhost")], ric) + extra


async def attack(name, client, n):
    q = client._quic
    out = {}
    if name == "reset-flood":
        done = 0
        end = client._loop.time() + 10

        def room():
            # Streams the server's MAX_STREAMS still allows (aioquic would send a reset
            # past it, opening the stream: a STREAM_LIMIT_ERROR of ours).
            return q._remote_max_streams_bidi - q.get_next_available_stream_id() // 4

        while done < n and not client.closed.done() and client._loop.time() < end:
            burst = min(room(), n - done)
            for _ in range(burst):
                sid = client.get(b"/big.bin")
                q.reset_stream(sid, H3_REQUEST_CANCELLED)
                q.stop_stream(sid, H3_REQUEST_CANCELLED)
                done += 1
            client.transmit()
            # What the server gives back (MAX_STREAMS) as it closes them.
            await client.until(lambda: room() > 0, 1)
        out["sent"] = done
        # The connection still takes requests (the cancelled streams were all given back).
        out["request_stream"] = await client.one_more_request(3)
    elif name == "too-many-streams":
        # Past the limit the server advertised: aioquic is told the limit is higher.
        out["advertised"] = q._remote_max_streams_bidi
        q._remote_max_streams_bidi = 1 << 20
        # Conditional GETs answered 304: the responses to the streams within the limit stay
        # small. With bodies they can fill the congestion window before the stream past the
        # limit arrives, and quinn-proto 0.11.19 then never sends its CONNECTION_CLOSE
        # (quinn issue #2785, fixed upstream by #2787, in no 0.11 release yet): the client
        # would see its idle timeout instead of STREAM_LIMIT_ERROR. (HEAD would do too, but
        # aioquic holds a HEAD response's Content-Length against its empty body.)
        for _ in range(n):
            client.get(b"/small.bin", extra=[(b"if-none-match", b"*")])
        client.transmit()
        await client.closing(5)
    elif name == "too-many-uni":
        out["advertised"] = q._remote_max_streams_uni
        q._remote_max_streams_uni = 1 << 20
        for i in range(n):
            client.uni(0x21 + 0x1F * (i + 7))
        client.transmit()
        await client.closing(5)
    elif name == "qpack-capacity":
        # Set Dynamic Table Capacity (001xxxxx, 5-bit prefix): 4096.
        q.send_stream_data(client.h3._local_encoder_stream_id, bytes([0x3F]) + prefixed_rest(4096 - 31))
        client.transmit()
        await client.closing(5)
    elif name == "qpack-insert":
        # Insert With Literal Name (01HNNNNN): "x-a: b".
        q.send_stream_data(client.h3._local_encoder_stream_id, bytes([0x43]) + b"x-a" + bytes([1]) + b"b")
        client.transmit()
        await client.closing(5)
    elif name == "qpack-ric":
        # Required Insert Count 1 (encoded 2 with MaxEntries... any non-zero with a table of
        # 0): the stream would block, and we allowed no blocked streams.
        sid = q.get_next_available_stream_id()
        q.send_stream_data(sid, encode_frame(FrameType.HEADERS, request_section(ric=2)), end_stream=True)
        client.transmit()
        await client.closing(5)
    elif name == "qpack-bomb":
        # Static-table references that each decode to a long field (31: accept-encoding:
        # gzip, deflate, br; 73: access-control-allow-headers: ...), N of them in one section.
        bomb = b"".join(field_line_static(73 if i % 2 else 31) for i in range(n))
        sid = q.get_next_available_stream_id()
        q.send_stream_data(sid, encode_frame(FrameType.HEADERS, request_section(extra=bomb)), end_stream=True)
        # And a small request behind it on the same connection: still answered.
        ok = client.get(b"/small.bin")
        client.transmit()
        await client.until(lambda: {sid, ok} <= client.ended | set(client.resets), 8)
        out["bomb_stream"] = sid
        out["ok_stream"] = ok
    elif name == "huge-headers":
        sid = q.get_next_available_stream_id()
        # HEADERS (0x01), length 2^40 (an 8-byte varint), then a few bytes: nothing more.
        q.send_stream_data(sid, encode_uint_var(FrameType.HEADERS) + encode_uint_var(1 << 40) + b"\x00\x00")
        ok = client.get(b"/small.bin")
        client.transmit()
        await client.until(lambda: {sid, ok} <= client.ended | set(client.resets), 8)
        out["huge_stream"] = sid
        out["ok_stream"] = ok
    elif name == "second-settings":
        client.control(FrameType.SETTINGS, b"")
        client.transmit()
        await client.closing(5)
    elif name == "data-on-control":
        client.control(FrameType.DATA, b"hello")
        client.transmit()
        await client.closing(5)
    elif name == "headers-on-control":
        client.control(FrameType.HEADERS, request_section())
        client.transmit()
        await client.closing(5)
    elif name == "close-control":
        q.send_stream_data(client.h3._local_control_stream_id, b"", end_stream=True)
        client.transmit()
        await client.closing(5)
    elif name == "reset-control":
        # Once the server has read the stream's type (a stream reset before that is not yet
        # its control stream).
        await asyncio.sleep(0.3)
        q.reset_stream(client.h3._local_control_stream_id, 0x100)
        client.transmit()
        await client.closing(5)
    elif name == "second-control":
        sid = client.uni(StreamType.CONTROL)
        q.send_stream_data(sid, encode_frame(FrameType.SETTINGS, b""))
        client.transmit()
        await client.closing(5)
    elif name == "missing-settings":
        sid = client.uni(StreamType.CONTROL)
        q.send_stream_data(sid, encode_frame(FrameType.GOAWAY, encode_uint_var(0)))
        client.transmit()
        await client.closing(5)
    elif name == "forbidden-setting":
        sid = client.uni(StreamType.CONTROL)
        q.send_stream_data(sid, encode_frame(FrameType.SETTINGS, encode_uint_var(0x2) + encode_uint_var(0)))
        client.transmit()
        await client.closing(5)
    elif name == "unknown":
        unknown = b"".join(encode_frame(0x21 + 0x1F * i, os.urandom(i % 16)) for i in range(n))
        q.send_stream_data(client.h3._local_control_stream_id, unknown)
        sid = q.get_next_available_stream_id()
        body = encode_frame(FrameType.DATA, b"x")
        q.send_stream_data(sid, unknown + encode_frame(FrameType.HEADERS, request_section()) + unknown + body + unknown)
        q.send_stream_data(sid, b"", end_stream=True)
        unis = [client.uni(0x21 + 0x1F * (i + 100)) for i in range(min(n, 4))]
        for u in unis:
            q.send_stream_data(u, os.urandom(100))
        client.transmit()
        await client.until(lambda: sid in client.ended, 8)
        out["request_stream"] = sid
        # The streams of unknown types are stopped, not an error.
        await client.until(lambda: all(u in client.stops for u in unis), 2)
        out["unknown_streams"] = unis
    elif name in ("zero-window", "zero-window-ping"):
        # The window stays as it is (none): aioquic raises it as data arrives, not here.
        q._write_connection_limits = lambda *a, **k: None
        q._write_stream_limits = lambda *a, **k: None
        for _ in range(n):
            client.get(b"/big.bin")
        client.transmit()
        start = client._loop.time()
        if name == "zero-window":
            # Silent from now on (aioquic sends nothing more without data or a timer).
            await client.closing(12)
        else:
            # A PING every 0.5 s: the connection never idles.
            while not client.closed.done() and client._loop.time() < start + 12:
                q.send_ping(0)
                client.transmit()
                await client.closing(0.5)
        out["seconds"] = client._loop.time() - start
    elif name == "slow-reader":
        sid = client.get(b"/big.bin")
        stream = q._streams[sid]
        q._write_stream_limits = lambda builder, space, stream: window(q, builder, stream)
        end = client._loop.time() + n
        while client._loop.time() < end and not client.closed.done() and sid not in client.ended:
            await asyncio.sleep(0.02)
            stream.max_stream_data_local += 64
            client.transmit()
    elif name == "cid-retire":
        changes = 0
        end = client._loop.time() + 10
        while changes < n and not client.closed.done() and client._loop.time() < end:
            if q._peer_cid_available:
                q.change_connection_id()
                changes += 1
                client.transmit()
                await asyncio.sleep(0.002)
            else:
                # The server issues a new one for each retired.
                await client.until(lambda: bool(q._peer_cid_available), 1)
        out["changes"] = changes
        out["request_stream"] = await client.one_more_request(5)
    elif name == "cid-flood":
        for _ in range(n):
            q._host_cids.append(
                QuicConnectionId(
                    cid=os.urandom(q._configuration.connection_id_length),
                    sequence_number=q._host_cid_seq,
                    stateless_reset_token=os.urandom(16),
                )
            )
            q._host_cid_seq += 1
        client.transmit()
        await client.closing(5)
    elif name.startswith("flood-"):
        kind = name[len("flood-") :]
        if kind == "control":
            for i in range(n):
                client.control(0x21 + 0x1F * i, b"")
        elif kind == "priority":
            for _ in range(n):
                client.control(0xF0700, encode_uint_var(0) + b"u=5")
        elif kind == "request":
            sid = q.get_next_available_stream_id()
            q.send_stream_data(sid, b"".join(encode_frame(0x21 + 0x1F * i, b"") for i in range(n)))
        elif kind == "qpack":
            q.send_stream_data(client.h3._local_decoder_stream_id, bytes([0x40]) * (n // 2))
            q.send_stream_data(client.h3._local_encoder_stream_id, bytes([0x20]) * (n - n // 2))
        elif kind == "uni":
            done = 0
            end = client._loop.time() + 10

            def room():
                return q._remote_max_streams_uni - q.get_next_available_stream_id(is_unidirectional=True) // 4

            while done < n and not client.closed.done() and client._loop.time() < end:
                for _ in range(min(room(), n - done)):
                    u = client.uni(0x21 + 0x1F * (done + 7))
                    q.send_stream_data(u, b"", end_stream=True)
                    done += 1
                client.transmit()
                await client.until(lambda: room() > 0, 1)
            out["sent"] = done
        else:
            raise SystemExit(f"unknown flood {kind}")
        client.transmit()
        await client.closing(1.5)
        if not client.closed.done():
            out["request_stream"] = await client.one_more_request(3)
    elif name == "trickle":
        sid = client.get(b"/big.bin")
        stream = q._streams[sid]
        q._write_stream_limits = lambda builder, space, stream: window(q, builder, stream)
        start = client._loop.time()
        while client._loop.time() < start + 6 and not client.closed.done() and sid not in client.ended:
            await asyncio.sleep(0.02)
            stream.max_stream_data_local += n
            client.transmit()
        out["seconds"] = client._loop.time() - start
    else:
        raise SystemExit(f"unknown attack {name}")
    return out


def window(q, builder, stream):
    """MAX_STREAM_DATA with the stream's window as the attack set it (aioquic's own writer
    doubles it as data arrives)."""
    if stream.max_stream_data_local_sent != stream.max_stream_data_local:
        buf = builder.start_frame(
            QuicFrameType.MAX_STREAM_DATA,
            capacity=MAX_STREAM_DATA_FRAME_CAPACITY,
            handler=q._on_max_stream_data_delivery,
            handler_args=(stream,),
        )
        buf.push_uint_var(stream.stream_id)
        buf.push_uint_var(stream.max_stream_data_local)
        stream.max_stream_data_local_sent = stream.max_stream_data_local


async def main():
    name, host, port, sni = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    cfg = configuration(sni)
    cfg.idle_timeout = 30.0
    if name.startswith("zero-window"):
        cfg.max_data = 0
        cfg.max_stream_data = 0
    elif name in ("slow-reader", "trickle"):
        cfg.max_stream_data = 1024
    # These write their own control stream.
    h3 = name not in ("missing-settings", "forbidden-setting")

    def proto(*args, **kwargs):
        return Attacker(*args, h3=h3, **kwargs)

    async with connect(host, port, configuration=cfg, create_protocol=proto) as client:
        out = await attack(name, client, n)
        out.update(
            closed=client.close_code,
            reason=client.reason,
            statuses=client.statuses,
            resets=client.resets,
            stops=client.stops,
            bytes=client.bytes,
        )
        print(json.dumps(out))


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 25))
    except Exception as e:  # noqa: BLE001 - the test prints what went wrong
        print(json.dumps({"error": repr(e)}))
        sys.exit(2)
