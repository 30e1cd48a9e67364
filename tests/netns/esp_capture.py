#!/usr/bin/python3
"""ESP on the WAN, from a capture: nonce reuse and replays.

  esp_capture.py ivs PCAP SOURCE      one line: "packets N repeated-iv R repeated-seq S"
                                      for the ESP (in UDP or raw) sent by SOURCE: R counts
                                      (SPI, IV) pairs seen more than once (AES-GCM and
                                      ChaCha20-Poly1305 carry an 8-byte explicit IV after
                                      the sequence number), S the same for (SPI, sequence)
  esp_capture.py replay PCAP SOURCE IFACE
                                      sends the frames again on IFACE (layer 2, as they
                                      were captured) and prints how many
"""
import sys

from scapy.all import IP, IPv6, UDP, Raw, rdpcap, sendp  # noqa: F401 (layers register)


def esp_bytes(packet, source):
    """The ESP header onwards (SPI, sequence, IV, ...), or None for anything else."""
    outer = packet.getlayer(IP) or packet.getlayer(IPv6)
    if outer is None or outer.src != source:
        return None
    if packet.haslayer(UDP):
        udp = packet[UDP]
        if udp.dport != 4500:
            return None
        data = bytes(udp.payload)
        if len(data) < 16 or data[:4] == b"\0\0\0\0":  # keepalive or IKE (non-ESP marker)
            return None
        return data
    next_header = outer.proto if isinstance(outer, IP) else outer.nh
    if next_header != 50:
        return None
    return bytes(outer.payload)


def esp_frames(path, source):
    return [(p, e) for p in rdpcap(path) for e in [esp_bytes(p, source)] if e is not None]


def main():
    command, path, source = sys.argv[1], sys.argv[2], sys.argv[3]
    frames = esp_frames(path, source)
    if command == "ivs":
        ivs, sequences = {}, {}
        for _, esp in frames:
            spi, sequence, iv = esp[0:4], esp[4:8], esp[8:16]
            ivs[(spi, iv)] = ivs.get((spi, iv), 0) + 1
            sequences[(spi, sequence)] = sequences.get((spi, sequence), 0) + 1
        repeated_iv = sum(1 for n in ivs.values() if n > 1)
        repeated_seq = sum(1 for n in sequences.values() if n > 1)
        print(f"packets {len(frames)} repeated-iv {repeated_iv} repeated-seq {repeated_seq}")
    elif command == "replay":
        # A capture on a veth holds the checksums the sender left to offload (partial):
        # computed afresh, or the receiving kernel drops the copies before ESP sees them.
        for packet, _ in frames:
            if packet.haslayer(UDP):
                del packet[UDP].chksum
            if packet.haslayer(IP):
                del packet[IP].chksum
        sendp([p for p, _ in frames], iface=sys.argv[4], verbose=False)
        print(len(frames))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
