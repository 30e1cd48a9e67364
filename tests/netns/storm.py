#!/usr/bin/python3
"""Sends a storm of hostile datagrams at a gateway's IKE and NAT-T ports (tests/netns
scenario `storm`, bench/storm_bench.sh).

  storm.py --dst 192.0.2.2 --src 192.0.2.66 --spi 0x1001 --count 50000 --rate 25000 \
           [--forged-from N] [--seed N] [--json OUT]

The mix, one class after another in turn (so every class gets its share at any rate):
  random      random bytes, 8-1400 long (first word neither 0 nor a keepalive): a random SPI
  forged      the real SPI, sequence numbers from --forged-from on (7 in 8 within 400 of
              it, the rest far ahead), random ICV: fails authentication, or the replay
              pre-check; these also take the SA's in-flight places
  unknown-spi an ESP header with a random SPI, random body
  truncated   2-7 bytes that are no keepalive and no IKE marker (too short for ESP)
  ike-marker  the non-ESP marker (4 zero bytes) and random bytes: looks like IKE to espgw
  keepalive   the one-byte RFC 3948 NAT keepalive 0xFF
  oversize    3,000 to --oversize-max (6,000) random bytes: fragmented on the WAN, larger
              than a packet buffer
  ike-500     random bytes to UDP 500 (the IKE port)

All datagrams are built first; the send loop is a plain sendto() per datagram (scapy is
far too slow for this). --rate 0 sends as fast as the loop goes. Prints, and writes to
--json, how many of each class were sent, per port, and the rate reached.
"""
import argparse
import json
import os
import random
import socket
import struct
import sys
import time

CLASSES = ["random", "forged", "unknown-spi", "truncated", "ike-marker", "keepalive",
           "oversize", "ike-500"]


def build(kind, rng, spi, seq, forged_from, oversize_max):
    if kind == "random":
        while True:
            b = rng.randbytes(rng.randint(8, 1400))
            if b[:4] != b"\0\0\0\0":
                return b, 4500
    if kind == "forged":
        # SPI, sequence, 8-byte IV, body (4-byte aligned, as RFC 4303 wants), 16-byte ICV:
        # a well-formed ESP packet of the SA that fails authentication. Numbers ahead of
        # the genuine ones (within the replay window's reach, so that they get as far as
        # the ICV check), one in eight far ahead.
        number = seq if rng.random() < 0.125 else forged_from + rng.randint(0, 400)
        body = rng.randbytes(4 * rng.randint(4, 325))
        return struct.pack("!II", spi, number) + rng.randbytes(8) + body + rng.randbytes(16), 4500
    if kind == "unknown-spi":
        s = rng.randint(0x100, 0xFFFFFFFF)
        if s == spi:
            s += 1
        return struct.pack("!II", s, rng.randint(1, 1 << 31)) + rng.randbytes(rng.randint(40, 1300)), 4500
    if kind == "truncated":
        while True:
            b = rng.randbytes(rng.randint(2, 7))
            if not (len(b) >= 4 and b[:4] == b"\0\0\0\0"):
                return b, 4500
    if kind == "ike-marker":
        return b"\0\0\0\0" + rng.randbytes(rng.randint(24, 600)), 4500
    if kind == "keepalive":
        return b"\xff", 4500
    if kind == "oversize":
        b = rng.randbytes(rng.randint(3000, oversize_max))
        return b"\x01" + b[1:], 4500
    if kind == "ike-500":
        return rng.randbytes(rng.randint(28, 600)), 500
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dst", required=True)
    ap.add_argument("--src", default="")
    ap.add_argument("--spi", default="0x1001")
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--rate", type=float, default=25000, help="datagrams/s; 0: unpaced")
    ap.add_argument("--forged-from", type=int, default=1,
                    help="forged packets' numbers: from here (the SA's next genuine one) on")
    ap.add_argument("--oversize-max", type=int, default=6000,
                    help="largest oversized datagram (up to 65000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--distinct", type=int, default=4096,
                    help="distinct datagrams built per class (reused in turn)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    spi = int(args.spi, 0)
    family = socket.AF_INET6 if ":" in args.dst else socket.AF_INET
    pools = {}
    seq = 1 << 20
    for kind in CLASSES:
        n = min(args.distinct, args.count // len(CLASSES) + 1)
        pool = []
        for _ in range(n):
            seq += rng.randint(1, 50)
            pool.append(build(kind, rng, spi, seq, args.forged_from, args.oversize_max))
        pools[kind] = pool
    socks = {}
    for port in (4500, 500):
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        if args.src:
            s.bind((args.src, 0))
        socks[port] = s
    # The send order: classes in turn, each class's datagrams in turn.
    order = []
    for i in range(args.count):
        kind = CLASSES[i % len(CLASSES)]
        pool = pools[kind]
        order.append((kind, pool[(i // len(CLASSES)) % len(pool)]))
    sent = {k: 0 for k in CLASSES}
    failed = 0
    dst4500 = (args.dst, 4500)
    dst500 = (args.dst, 500)
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    chunk = 64  # datagrams between clock reads when paced
    start = time.perf_counter()
    next_at = start
    s4500, s500 = socks[4500], socks[500]
    for i, (kind, (payload, port)) in enumerate(order):
        if interval and i % chunk == 0:
            next_at = start + i * interval
            while True:
                now = time.perf_counter()
                if now >= next_at:
                    break
                time.sleep(min(next_at - now, 0.002))
        try:
            if port == 4500:
                s4500.sendto(payload, dst4500)
            else:
                s500.sendto(payload, dst500)
            sent[kind] += 1
        except OSError:
            failed += 1
    elapsed = time.perf_counter() - start
    total = sum(sent.values())
    result = {
        "sent": total,
        "send_failed": failed,
        "per_class": sent,
        "to_4500": total - sent["ike-500"],
        "to_500": sent["ike-500"],
        "seconds": round(elapsed, 3),
        "rate": round(total / elapsed) if elapsed > 0 else 0,
        "rate_asked": args.rate,
    }
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    sys.exit(main())
