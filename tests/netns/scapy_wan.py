#!/usr/bin/python3
"""Cross-checks espgw on the wire with scapy's independent ESP implementation.

  scapy_wan.py decrypt PCAP --spi N --key HEX --src A --dst B [--udp]
      Decrypts every ESP packet of SPI N in the capture (taken on the WAN) with scapy and
      checks that each holds an IPv4 or IPv6 packet between the two LANs. Prints the count.
  scapy_wan.py inject --spi N --key HEX --src A --dst B [--udp] --seq S --ident I
      Builds an ICMP echo request lanA -> lanB (IPv4, identifier I) inside ESP with scapy,
      sequence number S, and sends it from this namespace to the peer gateway.

Run with /usr/bin/python3 (the interpreter Debian's python3-scapy is installed for).
"""
import argparse
import ipaddress
import sys

from scapy.all import ICMP, IP, UDP, IPv6, conf, rdpcap, send
from scapy.layers.ipsec import ESP, SecurityAssociation

conf.verb = 0


def make_sa(args):
    key = bytes.fromhex(args.key.removeprefix("0x"))
    outer = IP if ipaddress.ip_address(args.src).version == 4 else IPv6
    kwargs = dict(spi=int(args.spi, 0), crypt_algo="AES-GCM", crypt_key=key,
                  tunnel_header=outer(src=args.src, dst=args.dst))
    if args.udp:
        kwargs["nat_t_header"] = UDP(sport=4500, dport=4500)
    return SecurityAssociation(ESP, **kwargs), outer


def decrypt(args):
    sa, outer = make_sa(args)
    spi = int(args.spi, 0)
    ok = bad = 0
    for frame in rdpcap(args.pcap):
        if ESP not in frame or frame[ESP].spi != spi or outer not in frame:
            continue
        packet = frame[outer]  # scapy finds the ESP layer itself, after UDP or not
        try:
            inner = sa.decrypt(packet)
        except Exception as error:  # noqa: BLE001 - any failure is a failed check
            print(f"decrypt failed: {error}")
            bad += 1
            continue
        addresses = (str(inner.src), str(inner.dst))
        if all(a.startswith(("10.1.", "10.2.", "fd00:1:", "fd00:2:")) for a in addresses):
            ok += 1
        else:
            print(f"unexpected inner packet {addresses}")
            bad += 1
    print(f"scapy decrypted {ok} ESP packets of SPI {args.spi}, {bad} failed")
    return 0 if ok > 0 and bad == 0 else 1


def inject(args):
    sa, outer = make_sa(args)
    sa.seq_num = args.seq  # scapy ignores seq_num=0 in encrypt(); set it on the SA
    inner = IP(src="10.1.0.2", dst="10.2.0.2") / ICMP(id=args.ident, seq=1) / (b"scapy" * 8)
    packet = sa.encrypt(inner)
    if args.udp:
        # scapy leaves the UDP length at 8 and the checksum at 0: let scapy recompute them.
        del packet[UDP].len
        del packet[UDP].chksum
        packet = outer(bytes(packet))
    send(packet)
    print(f"sent scapy-built ESP seq {args.seq} with ICMP id {args.ident}")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["decrypt", "inject"])
    parser.add_argument("pcap", nargs="?")
    parser.add_argument("--spi", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--dst", required=True)
    parser.add_argument("--udp", action="store_true")
    parser.add_argument("--seq", type=int, default=3000000000)
    parser.add_argument("--ident", type=int, default=4242)
    args = parser.parse_args()
    return decrypt(args) if args.mode == "decrypt" else inject(args)


if __name__ == "__main__":
    sys.exit(main())
