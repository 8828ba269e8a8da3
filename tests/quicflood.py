#!/usr/bin/env python3
"""Abusive QUIC traffic for tests/http3.rs, built with aioquic's sans-IO QuicConnection.

Usage:
  quicflood.py flood HOST PORT COUNT ADDRS
      Sends COUNT real client Initials (each a new connection: its own connection IDs and
      TLS ClientHello, 1,200 bytes), each from a new UDP socket (a new source port), the
      sockets bound in turn to ADDRS loopback source addresses (127.0.2.1, 127.0.2.2, ...;
      Linux routes all of 127/8 to lo; ADDRS 0: all from 127.0.0.1). Never answers: the server's handshakes stay open
      until they time out. Prints "start" once the Initials are built, then sends them in
      bursts of 50 every 25 ms (2,000 per second: the loopback socket buffer keeps up, and
      the flood lasts long enough for a real client to connect during it). stdout then:
      {"sent": N, "seconds": S}.
  quicflood.py reset HOST PORT SNI WAIT
      Completes one handshake (ALPN h3), then stays silent for WAIT seconds (longer than
      the server's idle timeout, so that the server forgets the connection) and sends a
      PING on it: the server answers with a stateless reset. stdout: {"handshake": true}.
  quicflood.py amp HOST PORT SECONDS
      Sends one real client Initial from one socket and never answers; counts what comes
      back within SECONDS (the server's first flight and its retransmissions), to check
      the 3x amplification limit before validation (RFC 9000 §8.1).
      stdout: {"sent": BYTES, "received": BYTES, "datagrams": N}.
  quicflood.py vn HOST PORT
      Sends one 1,200-byte Initial of an unknown version (0x0a0a0a0a, reserved for
      negotiation): the server answers with Version Negotiation. stdout: {"sent": 1}.

Everything is bounded (a few thousand datagrams, 10 s per wait).
"""

import json
import socket
import sys
import time

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import HandshakeCompleted


def flood(host, port, count, addrs):
    config = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name="localhost")
    packets = []
    for _ in range(count):
        conn = QuicConnection(configuration=config)
        conn.connect((host, port), now=time.time())
        packets.extend(data for data, _ in conn.datagrams_to_send(now=time.time()))
    print("start", flush=True)
    start = time.time()
    for i, data in enumerate(packets):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.2.%d" % (1 + i % addrs) if addrs else "127.0.0.1", 0))
        s.sendto(data, (host, port))
        s.close()
        if i % 50 == 49:
            time.sleep(0.025)
    print(json.dumps({"sent": len(packets), "seconds": time.time() - start}))


def reset(host, port, sni, wait):
    config = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name=sni, idle_timeout=600)
    config.verify_mode = 0  # ssl.CERT_NONE: the tests' certificate is self-signed
    conn = QuicConnection(configuration=config)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.05)
    conn.connect((host, port), now=time.time())
    done = False
    deadline = time.time() + 10
    while not done and time.time() < deadline:
        for data, addr in conn.datagrams_to_send(now=time.time()):
            s.sendto(data, addr)
        try:
            data, addr = s.recvfrom(65536)
            conn.receive_datagram(data, addr, now=time.time())
        except socket.timeout:
            conn.handle_timer(now=time.time())
        while (ev := conn.next_event()) is not None:
            done = done or isinstance(ev, HandshakeCompleted)
    for data, addr in conn.datagrams_to_send(now=time.time()):
        s.sendto(data, addr)
    if not done:
        print(json.dumps({"handshake": False}))
        sys.exit(2)
    # Silent, then a PING at a "now" the client's own timers have not reached.
    then = time.time()
    time.sleep(wait)
    conn.send_ping(1)
    for data, addr in conn.datagrams_to_send(now=then + 0.01):
        s.sendto(data, addr)
    print(json.dumps({"handshake": True}))


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "flood":
        flood(host, port, int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "reset":
        reset(host, port, sys.argv[4], min(float(sys.argv[5]), 10.0))
    elif mode == "amp":
        config = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name="localhost")
        conn = QuicConnection(configuration=config)
        conn.connect((host, port), now=time.time())
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent = 0
        for data, _ in conn.datagrams_to_send(now=time.time()):
            s.sendto(data, (host, port))
            sent += len(data)
        received, n = 0, 0
        deadline = time.time() + min(float(sys.argv[4]), 10.0)
        while (left := deadline - time.time()) > 0:
            s.settimeout(left)
            try:
                received += len(s.recv(65536))
                n += 1
            except socket.timeout:
                break
        print(json.dumps({"sent": sent, "received": received, "datagrams": n}))
    elif mode == "vn":
        cids = bytes([8]) + bytes(range(8)) + bytes([8]) + bytes(range(8, 16))
        data = bytes([0xC0]) + bytes.fromhex("0a0a0a0a") + cids
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(data + bytes(1200 - len(data)), (host, port))
        print(json.dumps({"sent": 1}))
    else:
        sys.exit("unknown mode")


if __name__ == "__main__":
    main()
