#!/usr/bin/env python3
"""HTTP/3 clients that change their source port mid-transfer, for tests/http3_workers.rs.

Usage: h3migrate.py HOST PORT SNI PATH CONNS REBINDS

Opens CONNS connections at once (aioquic, the client of tests/h3client.py). Each GETs PATH
REBINDS + 1 times, one after the other; during each of the first REBINDS transfers, once a
quarter of the body has come, it stops reading (what arrives meanwhile is lost), moves to a
new UDP socket (a new source port, as after a NAT rebinding: the old socket is closed) and
the transfer goes on there. stdout: a JSON
list, one per connection, of its responses: {"status", "length", "body_hex_sha256",
"from_port" and "port" (the source ports it started and ended on), "moved_at" (body bytes received when the
client moved, or null)}; a response that did not end within 5 s has "status": null. A
connection that cannot be made is {"error": "..."}. Exit 0.
"""

import asyncio
import json
import os
import socket
import ssl
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from aioquic.asyncio.client import connect  # noqa: E402
from aioquic.h3.connection import H3_ALPN  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from h3client import Client  # noqa: E402


class Mover(Client):
    """A client that, once a quarter of a response's body has come, stops reading its
    socket (what arrives is lost, as during a NAT rebinding) until it has moved."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.watch = None
        self.moving = False
        self.moved_at = None
        self.due = asyncio.Event()

    def quic_event_received(self, event):
        super().quic_event_received(event)
        if self.watch is None:
            return
        r = self.results[self.watch]
        size = next((int(v) for n, v in r["headers"] if n == "content-length"), None)
        if size is not None and r["length"] >= size // 4:
            self.watch = None
            self.moving = True
            self.moved_at = r["length"]
            self.due.set()

    def datagram_received(self, data, addr):
        if not self.moving:
            super().datagram_received(data, addr)


async def rebind(client):
    """Moves the connection to a new socket on a new port and closes the old one."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0, 0, 0))
    old = client._transport
    await loop.create_datagram_endpoint(lambda: client, sock=sock)
    old.close()
    # The client speaks first from its new port (as after a rebinding, its next packet is
    # what shows the server the new address): a PING, acknowledged by the server.
    client._quic.send_ping(0)
    client.transmit()


async def one(host, port, sni, path, rebinds):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=sni)
    cfg.verify_mode = ssl.CERT_NONE
    out = []
    try:
        async with connect(host, port, configuration=cfg, create_protocol=Mover) as client:
            for k in range(rebinds + 1):
                start_port = client._transport.get_extra_info("sockname")[1]
                sid = client.request({"path": path, "authority": sni})
                client.transmit()
                r = client.results[sid]
                moved_at = None
                try:
                    if k < rebinds:
                        client.due.clear()
                        client.moved_at = None
                        client.watch = sid
                        await asyncio.wait_for(client.due.wait(), 5)
                        await rebind(client)
                        client.moving = False
                        moved_at = client.moved_at
                    await asyncio.wait_for(asyncio.shield(client.waiters[sid]), 5)
                except asyncio.TimeoutError:
                    r["status"] = None
                out.append(
                    {
                        "status": r["status"],
                        "length": r["length"],
                        "body_hex_sha256": r["body"].hexdigest(),
                        "from_port": start_port,
                        "port": client._transport.get_extra_info("sockname")[1],
                        "moved_at": moved_at,
                    }
                )
                if r["status"] is None:
                    break
    except Exception as e:  # noqa: BLE001 - the test prints what went wrong
        return {"error": repr(e), "responses": out}
    return out


async def main():
    host, port, sni, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    conns, rebinds = int(sys.argv[5]), int(sys.argv[6])
    res = await asyncio.gather(*(one(host, port, sni, path, rebinds) for _ in range(conns)))
    print(json.dumps(res))


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 60))
