#!/usr/bin/python3
"""Cross-check espgw's ESP against scapy's independent implementation, both directions.

Run with /usr/bin/python3: python3-scapy (Debian, 2.5.0) is installed for that interpreter
only.

    scapy_esp_interop.py --tool build/release/tests/interop/espgw_esp_tool

References:
  * scapy's SecurityAssociation, for all three algorithms: scapy 2.5.0 does have
    'CHACHA20-POLY1305' (RFC 7634 layout: 32-byte key + 4-byte salt, 8-byte IV, 16-byte
    ICV), built on python3-cryptography's ChaCha20Poly1305, as its AES-GCM is on AESGCM.
  * python3-cryptography's AEAD classes, driven by hand, as a second check of what scapy
    does not look at: on every espgw packet the trailer is decrypted and the padding
    (1, 2, 3, ..., minimal for 4-byte alignment), the pad length and the next header are
    verified, since scapy's decrypt() ignores the padding bytes.

AES-CBC with HMAC-SHA1-96 / HMAC-SHA2-256-128 / -384-192 / -512-256: scapy's AES-CBC and
its HMACs, and on every espgw packet a check by hand (python3-cryptography's AES-CBC,
Python's hmac): the ICV over SPI, sequence number, IV and ciphertext (and the ESN high
bits), an IV that is not the sequence number, padding to the 16-byte block.

Matrix (every combination, both directions, both espgw crypto backends):
  algorithm   aes-gcm-128, aes-gcm-256, chacha20-poly1305
  inner       IPv4, IPv6
  outer       IPv4, IPv6
  ESN         off (sequence numbers 1.., 0x7fffffff.., up to 0xffffffff) /
              on (sequence numbers with nonzero high 32 bits, one batch crossing an epoch)
  UDP         raw ESP / RFC 3948 UDP encapsulation (4500:4500)
  packets     ICMP echo (84 bytes over IPv4), UDP with 0..3 payload bytes (every padding
              length 0..3), a 1400-byte TCP segment with DSCP EF and DF set.
TFC padding: espgw pads to 1000 bytes (AES-GCM, ChaCha20, AES-CBC); see tfc_padding().
A case is one packet in one direction. AES-CBC: aes-cbc-128/192/256 with each of the four
HMACs, ESN on and off, both backends; inner and outer family and UDP rotate.

scapy -> espgw: scapy encrypts, espgw_esp_tool decap must return exactly the inner packet.
espgw -> scapy: espgw_esp_tool encap; the wire bytes must parse as IP(/UDP)/ESP with the
right addresses, lengths, SPI, sequence number, IPv4 header checksum, UDP checksum (0
over IPv4, a correct nonzero one over IPv6), DSCP/ECN and DF copied from the inner packet;
scapy must decrypt it to exactly the inner packet.

Negative checks: a packet built with another key is refused with icv-failure; the same
packet twice gives replayed; the ESN high bits are authenticated (wrong epoch ->
icv-failure, ESN on one side only -> icv-failure); scapy refuses espgw's packet under the
wrong key (so the reference is not vacuous).

scapy 2.5.0 quirks worked around here:
  * encrypt()/decrypt() combine their esn= and seq_num= arguments with the SA's by `or`, so
    esn=0 and seq_num=0 silently fall back to the SA's values (measured: encrypt(seq_num=0)
    sends 1, decrypt(esn=0) on an SA made with esn=7 uses 7). So one SecurityAssociation is
    made per ESN high-bits value, and the sequence number is set through sa.seq_num.
  * With NAT-T over IPv4 scapy leaves the UDP length at 8 (it freezes the UDP header before
    the ESP payload is attached). espgw refuses that packet (checked below as a quirk
    case); the UDP length is fixed up before the packet goes to espgw.
  * With NAT-T over IPv6 scapy forces the UDP checksum to 0, which is illegal over IPv6.
    espgw's parse_wire leaves UDP checksums to the kernel, so the packet is passed as is.
  * decrypt() does not check padding and does not strip TFC padding: the TFC cases expect
    the inner packet followed by its zeros from it.
  * The ESP HMAC leaves the ESN high bits out (scapy appends them for AH only; RFC 4303
    2.2.1 appends them for ESP too): with ESN the ICV of scapy's packet is redone by hand,
    and espgw's packets are checked by hand only.

Prints one line per case and a final line "N passed, M failed"; exits 1 on any failure.
"""

import argparse
import random
import socket
import struct
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")  # scapy/cryptography deprecation noise

import hashlib  # noqa: E402
import hmac  # noqa: E402

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305  # noqa: E402
from scapy.all import ICMP, IP, TCP, UDP, ICMPv6EchoRequest, IPv6, Raw, raw  # noqa: E402
from scapy.layers.inet6 import in6_chksum  # noqa: E402
from scapy.layers.ipsec import ESP, IPSecIntegrityError, SecurityAssociation  # noqa: E402
from scapy.utils import checksum  # noqa: E402

ALGORITHMS = {
    # espgw name: (scapy name, cipher key length, python-cryptography class)
    "aes-gcm-128": ("AES-GCM", 16, AESGCM),
    "aes-gcm-256": ("AES-GCM", 32, AESGCM),
    "chacha20-poly1305": ("CHACHA20-POLY1305", 32, ChaCha20Poly1305),
    # AES-CBC: no AEAD class; checked by hand with AES-CBC and hmac (aead None)
    "aes-cbc-128": ("AES-CBC", 16, None),
    "aes-cbc-192": ("AES-CBC", 24, None),
    "aes-cbc-256": ("AES-CBC", 32, None),
}
CBC_ALGORITHMS = ("aes-cbc-128", "aes-cbc-192", "aes-cbc-256")
INTEGRITY = {
    # espgw name: (scapy name, key length, ICV length, hashlib constructor)
    "hmac-sha1-96": ("HMAC-SHA1-96", 20, 12, hashlib.sha1),
    "hmac-sha2-256-128": ("SHA2-256-128", 32, 16, hashlib.sha256),
    "hmac-sha2-384-192": ("SHA2-384-192", 48, 24, hashlib.sha384),
    "hmac-sha2-512-256": ("SHA2-512-256", 64, 32, hashlib.sha512),
}
BACKENDS = ("ipsec-mb", "openssl")
OUTER = {
    4: ("192.0.2.1", "198.51.100.2"),
    6: ("2001:db8:a::1", "2001:db8:b::2"),
}
NAT_T_PORT = 4500
ESN_OFF_STARTS = (1, 0x7FFFFFFF, 0xFFFFFFFA)  # the last batch ends at 2^32 - 1 exactly
ESN_ON_STARTS = (0x1_0000_0005, 0x1_FFFF_FFFD, 0xABCD_0123_7FFF_FFF0)  # 2nd crosses an epoch


def inner_packets(family):
    """(name, bytes) of the inner packets for one inner address family."""
    if family == 4:
        src, dst = "10.1.0.1", "10.2.0.7"
        ip = lambda **kw: IP(src=src, dst=dst, id=0x1234, **kw)  # noqa: E731
        icmp = ip() / ICMP(type=8, id=0x77, seq=3) / Raw(bytes(range(56)))
        name_icmp = "icmp-echo"
    else:
        src, dst = "fd00:1::1", "fd00:2::7"
        ip = lambda **kw: IPv6(src=src, dst=dst, **kw)  # noqa: E731
        icmp = ip() / ICMPv6EchoRequest(id=0x77, seq=3, data=bytes(range(56)))
        name_icmp = "icmpv6-echo"
    packets = [(name_icmp, raw(icmp))]
    for n in range(4):
        udp = ip() / UDP(sport=5353, dport=53) / Raw(b"xyz"[:n])
        packets.append((f"udp+{n}", raw(udp)))
    header = 20 + 20 if family == 4 else 40 + 20
    body = bytes((i * 7 + 3) & 0xFF for i in range(1400 - header))
    if family == 4:
        tcp = ip(tos=0xB9, flags="DF") / TCP(sport=40000, dport=443, seq=1, ack=2, flags="PA")
    else:
        tcp = ip(tc=0xB9, fl=0x12345) / TCP(sport=40000, dport=443, seq=1, ack=2, flags="PA")
    packets.append(("tcp-1400", raw(tcp / Raw(body))))
    for name, data in packets:
        assert (data[0] >> 4) == family, name
    assert len(packets[0][1]) == (84 if family == 4 else 104)
    assert len(packets[-1][1]) == 1400
    return packets


class Config:
    """One SA configuration of the matrix."""

    def __init__(self, alg, inner, outer, esn, udp, backend, start, rng, spi=None, integ=None):
        self.alg, self.inner, self.outer, self.esn, self.udp = alg, inner, outer, esn, udp
        self.backend, self.start, self.integ = backend, start, integ
        self.scapy_alg, key_length, self.aead = ALGORITHMS[alg]
        if integ is None:
            self.key = rng.randbytes(key_length + 4)  # cipher key || 4-byte salt, as charon
        else:
            # encryption key || integrity key: the SA's key material for AES-CBC
            self.key = rng.randbytes(key_length + INTEGRITY[integ][1])
        self.cipher_key_length = key_length
        self.spi = spi if spi is not None else rng.randrange(0x100, 0xFFFFFFFF)
        self.src, self.dst = OUTER[outer]

    def label(self):
        return "%s in%d out%d %s %s %s" % (
            self.alg + ("/" + self.integ if self.integ else ""), self.inner, self.outer,
            "esn" if self.esn else "no-esn", "udp" if self.udp else "raw-esp", self.backend)

    def split_key(self, key=None):
        """(cipher key, integrity key or None) of the key material."""
        key = key or self.key
        if self.integ is None:
            return key, None
        return key[:self.cipher_key_length], key[self.cipher_key_length:]

    def icv_length(self):
        return INTEGRITY[self.integ][2] if self.integ else 16

    def tool_args(self, key=None):
        args = ["--alg", self.alg, "--key", (key or self.key).hex(), "--spi", str(self.spi),
                "--src", self.src, "--dst", self.dst, "--backend", self.backend]
        if self.integ:
            args += ["--integ", self.integ]
        if self.esn:
            args.append("--esn")
        if self.udp:
            args += ["--udp", "%d:%d" % (NAT_T_PORT, NAT_T_PORT)]
        return args

    def scapy_sa(self, high, key=None, esn=None):
        esn = self.esn if esn is None else esn
        tunnel = IP(src=self.src, dst=self.dst) if self.outer == 4 else IPv6(src=self.src,
                                                                             dst=self.dst)
        if self.integ:
            crypt_key, auth_key = self.split_key(key)
            auth = dict(auth_algo=INTEGRITY[self.integ][0], auth_key=auth_key)
        else:
            crypt_key, auth = key or self.key, {}
        return SecurityAssociation(
            ESP, spi=self.spi, crypt_algo=self.scapy_alg, crypt_key=crypt_key, **auth,
            tunnel_header=tunnel,
            nat_t_header=UDP(sport=NAT_T_PORT, dport=NAT_T_PORT) if self.udp else None,
            esn_en=esn, esn=high)

    def scapy_encrypt(self, inner, sequence, key=None, esn=None, fix_udp_length=True):
        """scapy's wire bytes for `inner` sent with full sequence number `sequence`."""
        sa = self.scapy_sa(sequence >> 32, key=key, esn=esn)
        sa.seq_num = sequence & 0xFFFFFFFF  # encrypt(seq_num=0) would be ignored
        pkt = sa.encrypt(IP(inner) if inner[0] >> 4 == 4 else IPv6(inner))
        wire = bytearray(raw(pkt))
        if self.udp and self.outer == 4 and fix_udp_length:
            # scapy quirk: UDP length left at 8 over IPv4; fix it (the UDP checksum is 0,
            # so nothing else changes).
            assert struct.unpack_from("!H", wire, 24)[0] == 8, "scapy quirk changed?"
            struct.pack_into("!H", wire, 24, len(wire) - 20)
        if self.integ and (self.esn if esn is None else esn):
            # scapy 2.5.0 leaves the ESN high bits out of an ESP HMAC (it appends them for
            # AH only); RFC 4303 2.2.1 appends them for ESP too. The ICV is redone here.
            esp_offset = (20 if self.outer == 4 else 40) + (8 if self.udp else 0)
            icv_length = self.icv_length()
            body = bytes(wire[esp_offset:len(wire) - icv_length])
            wire[len(wire) - icv_length:] = self.hmac(body, sequence >> 32, key)
        return bytes(wire)

    def hmac(self, esp_without_icv, high, key=None):
        """The truncated HMAC of an ESP packet, the ESN high bits appended when on."""
        _, auth_key = self.split_key(key)
        data = esp_without_icv + (struct.pack("!I", high) if self.esn else b"")
        digest = hmac.new(auth_key, data, INTEGRITY[self.integ][3]).digest()
        return digest[:self.icv_length()]


def run_tool(tool, command, args, packets):
    """Runs espgw_esp_tool; returns (exit code, list of per-packet results, stderr).
    A result is bytes (the output packet) or the string drop reason."""
    stdin = "".join(p.hex() + "\n" for p in packets)
    proc = subprocess.run([tool, command] + args, input=stdin, capture_output=True, text=True,
                          timeout=120)
    results = []
    for line in proc.stdout.splitlines():
        if line.startswith("drop "):
            results.append(line[5:].strip())
        elif line.strip():
            results.append(bytes.fromhex(line.strip()))
    return proc.returncode, results, proc.stderr.strip()


class Runner:
    def __init__(self, tool):
        self.tool = tool
        self.passed = self.failed = 0

    def report(self, name, problems):
        if problems:
            self.failed += 1
            print("FAIL %s: %s" % (name, "; ".join(problems)))
        else:
            self.passed += 1
            print("PASS %s" % name)
        sys.stdout.flush()

    # --- scapy -> espgw -------------------------------------------------------------

    def scapy_to_espgw(self, cfg, packets):
        sequences = [cfg.start + i for i in range(len(packets))]
        wires = [cfg.scapy_encrypt(data, seq) for (_, data), seq in zip(packets, sequences)]
        args = cfg.tool_args()
        if cfg.start > 1:
            # Prime the receiver just below the batch, so ESN inference picks its epoch.
            args += ["--highest", str(cfg.start - 1)]
        rc, results, stderr = run_tool(self.tool, "decap", args, wires)
        for i, ((name, data), seq) in enumerate(zip(packets, sequences)):
            case = "scapy->espgw %s %s seq=%#x" % (cfg.label(), name, seq)
            problems = []
            if rc not in (0, 3) or len(results) != len(packets):
                problems.append("tool exit %d, %d results: %s" % (rc, len(results), stderr))
            elif isinstance(results[i], str):
                problems.append("espgw dropped it: %s" % results[i])
            elif results[i] != data:
                problems.append("inner packet differs: got %s want %s"
                                % (results[i].hex(), data.hex()))
            self.report(case, problems)

    # --- espgw -> scapy -------------------------------------------------------------

    def check_wire(self, cfg, wire, inner, seq):
        """Header checks on espgw's outer packet; returns (problems, parsed packet)."""
        problems = []
        pkt = IP(wire) if cfg.outer == 4 else IPv6(wire)
        if (wire[0] >> 4) != cfg.outer:
            return ["outer version %d" % (wire[0] >> 4)], pkt
        if pkt.src != cfg.src or pkt.dst != cfg.dst:
            problems.append("outer addresses %s -> %s" % (pkt.src, pkt.dst))
        inner_tc = inner[1] if inner[0] >> 4 == 4 else ((inner[0] & 0x0F) << 4) | (inner[1] >> 4)
        if cfg.outer == 4:
            ip_header_length = 20
            if wire[0] != 0x45:
                problems.append("IPv4 version/IHL byte %#x" % wire[0])
            if pkt.len != len(wire):
                problems.append("IPv4 total length %d, packet %d" % (pkt.len, len(wire)))
            header = bytearray(wire[:20])
            header[10:12] = b"\0\0"
            want = checksum(bytes(header))
            if pkt.chksum != want:
                problems.append("IPv4 header checksum %#06x, want %#06x" % (pkt.chksum, want))
            if pkt.frag != 0 or pkt.flags.MF:
                problems.append("outer packet is a fragment")
            inner_df = (inner[6] & 0x40) != 0 if inner[0] >> 4 == 4 else True
            if bool(pkt.flags.DF) != inner_df:
                problems.append("outer DF %s, inner %s" % (bool(pkt.flags.DF), inner_df))
            if pkt.tos != inner_tc:
                problems.append("outer TOS %#x, inner %#x" % (pkt.tos, inner_tc))
            proto = pkt.proto
        else:
            ip_header_length = 40
            if pkt.plen != len(wire) - 40:
                problems.append("IPv6 payload length %d, packet %d" % (pkt.plen, len(wire)))
            if pkt.tc != inner_tc:
                problems.append("outer traffic class %#x, inner %#x" % (pkt.tc, inner_tc))
            proto = pkt.nh
        esp_offset = ip_header_length
        if cfg.udp:
            if proto != socket.IPPROTO_UDP or UDP not in pkt:
                return problems + ["outer protocol %d, want UDP" % proto], pkt
            udp = pkt[UDP]
            esp_offset += 8
            if (udp.sport, udp.dport) != (NAT_T_PORT, NAT_T_PORT):
                problems.append("UDP ports %d:%d" % (udp.sport, udp.dport))
            if udp.len != len(wire) - ip_header_length:
                problems.append("UDP length %d, want %d" % (udp.len, len(wire) - ip_header_length))
            if cfg.outer == 4:
                if udp.chksum != 0:
                    problems.append("UDP checksum over IPv4 %#06x, want 0" % udp.chksum)
            else:
                segment = bytearray(wire[40:])
                segment[6:8] = b"\0\0"
                want = in6_chksum(socket.IPPROTO_UDP, pkt, bytes(segment)) or 0xFFFF
                if udp.chksum != want:
                    problems.append("UDP checksum over IPv6 %#06x, want %#06x"
                                    % (udp.chksum, want))
        elif proto != 50:
            return problems + ["outer protocol %d, want ESP (50)" % proto], pkt
        if ESP not in pkt:
            return problems + ["scapy does not see an ESP layer"], pkt
        esp = pkt[ESP]
        if esp.spi != cfg.spi:
            problems.append("SPI %#x, want %#x" % (esp.spi, cfg.spi))
        if esp.seq != seq & 0xFFFFFFFF:
            problems.append("sequence %#x, want %#x" % (esp.seq, seq & 0xFFFFFFFF))
        problems += self.check_trailer(cfg, wire[esp_offset:], inner, seq)
        return problems, pkt

    def open_cbc(self, cfg, esp, seq):
        """AES-CBC + HMAC by hand (hmac, python3-cryptography): (plaintext, problems)."""
        icv_length = cfg.icv_length()
        if len(esp) < 8 + 16 + 16 + icv_length or (len(esp) - 8 - 16 - icv_length) % 16:
            return None, ["ESP length %d: ciphertext not a whole number of blocks" % len(esp)]
        if not hmac.compare_digest(cfg.hmac(esp[:-icv_length], seq >> 32), esp[-icv_length:]):
            return None, ["hand-computed HMAC differs from the ICV"]
        iv = esp[8:24]
        if iv[:8] == struct.pack("!Q", seq) or iv == bytes(16):
            return None, ["IV %s is predictable" % iv.hex()]
        cipher_key, _ = cfg.split_key()
        decryptor = Cipher(algorithms.AES(cipher_key), modes.CBC(iv)).decryptor()
        return decryptor.update(esp[24:-icv_length]) + decryptor.finalize(), []

    def check_trailer(self, cfg, esp, inner, seq):
        """Decrypts by hand with python3-cryptography and checks the ESP trailer."""
        if cfg.integ:
            plain, problems = self.open_cbc(cfg, esp, seq)
            if problems:
                return problems
            alignment = 16
        else:
            if len(esp) < 8 + 8 + 16 or (len(esp) - 8 - 8 - 16) % 4:
                return ["ESP length %d not 4-byte aligned" % len(esp)]
            spi, low = struct.unpack_from("!II", esp)
            aad = struct.pack("!III", spi, seq >> 32, low) if cfg.esn else esp[:8]
            nonce = cfg.key[-4:] + esp[8:16]
            try:
                plain = cfg.aead(cfg.key[:-4]).decrypt(nonce, esp[16:], aad)
            except Exception as err:  # cryptography.exceptions.InvalidTag
                return ["python-cryptography refuses the ICV: %r" % err]
            alignment = 4
        pad_length, next_header = plain[-2], plain[-1]
        problems = []
        want_pad = -(len(inner) + 2) % alignment
        if pad_length != want_pad:
            problems.append("pad length %d, want %d" % (pad_length, want_pad))
        padding = plain[len(plain) - 2 - pad_length:len(plain) - 2]
        if padding != bytes(range(1, pad_length + 1)):
            problems.append("padding bytes %s" % padding.hex())
        want_nh = 4 if inner[0] >> 4 == 4 else 41
        if next_header != want_nh:
            problems.append("next header %d, want %d" % (next_header, want_nh))
        if plain[:len(plain) - 2 - pad_length] != inner:
            problems.append("hand-decrypted payload differs from the inner packet")
        return problems

    def espgw_to_scapy(self, cfg, packets):
        sequences = [cfg.start + i for i in range(len(packets))]
        rc, results, stderr = run_tool(self.tool, "encap", cfg.tool_args() +
                                       ["--seq", str(cfg.start)], [d for _, d in packets])
        for i, ((name, data), seq) in enumerate(zip(packets, sequences)):
            case = "espgw->scapy %s %s seq=%#x" % (cfg.label(), name, seq)
            problems = []
            if rc != 0 or len(results) != len(packets):
                problems.append("tool exit %d, %d results: %s" % (rc, len(results), stderr))
            elif isinstance(results[i], str):
                problems.append("espgw dropped it: %s" % results[i])
            else:
                wire = results[i]
                problems, pkt = self.check_wire(cfg, wire, data, seq)
                if not problems and cfg.integ and cfg.esn:
                    pass  # scapy's ESP HMAC leaves ESN out: check_trailer verified it by hand
                elif not problems:
                    try:
                        out = cfg.scapy_sa(seq >> 32).decrypt(pkt)
                        if raw(out) != data:
                            problems.append("scapy decrypts to %s, want %s"
                                            % (raw(out).hex(), data.hex()))
                    except IPSecIntegrityError as err:
                        problems.append("scapy: ICV check failed: %s" % err)
            self.report(case, problems)

    # --- TFC padding (RFC 4303 2.7) ---------------------------------------------------

    def tfc_padding(self, rng, pad_to=1000):
        """espgw pads every inner packet shorter than pad_to with zeros up to it: all such
        packets leave with one ESP size; scapy decrypts them to the inner packet followed by
        the zeros (its decrypt() keeps TFC padding), the trailer checks out by hand over the
        padded payload, and espgw's own receiver returns exactly the inner packet."""
        for alg, integ, inner, outer, udp in (("aes-gcm-128", None, 4, 4, True),
                                              ("chacha20-poly1305", None, 6, 6, False),
                                              ("aes-cbc-128", "hmac-sha2-256-128", 4, 6, False)):
            packets = inner_packets(inner)
            cfg = Config(alg, inner, outer, False, udp, "ipsec-mb", 1, rng, integ=integ)
            rc, results, stderr = run_tool(self.tool, "encap", cfg.tool_args() +
                                           ["--seq", "1", "--tfc", str(pad_to)],
                                           [d for _, d in packets])
            case = "tfc pad to %d espgw->scapy %s" % (pad_to, cfg.label())
            if rc != 0 or len(results) != len(packets):
                self.report(case, ["tool exit %d, %d results: %s" % (rc, len(results), stderr)])
                continue
            problems = []
            small_sizes = set()
            for i, ((name, data), wire) in enumerate(zip(packets, results)):
                padded = data + bytes(max(0, pad_to - len(data)))
                wire_problems, pkt = self.check_wire(cfg, wire, padded, i + 1)
                problems += ["%s: %s" % (name, p) for p in wire_problems]
                if len(data) < pad_to:
                    small_sizes.add(len(wire))
                if wire_problems:
                    continue
                out = raw(cfg.scapy_sa(0).decrypt(pkt))
                if out != padded:
                    problems.append("%s: scapy decrypts to %d bytes, want the %d-byte packet "
                                    "and zeros up to %d" % (name, len(out), len(data),
                                                           len(padded)))
            if len(small_sizes) != 1:
                problems.append("packets below %d bytes leave with sizes %s, want one size"
                                % (pad_to, sorted(small_sizes)))
            # espgw's receiver: the inner IP length ends the packet, the zeros go.
            rc, inners, stderr = run_tool(self.tool, "decap", cfg.tool_args(), results)
            if rc != 0 or inners != [d for _, d in packets]:
                problems.append("espgw decap: exit %d, %s" % (rc, stderr or "inner packets "
                                                              "differ"))
            self.report(case, problems)

    # --- negative checks ------------------------------------------------------------

    def expect_drop(self, case, cfg, wires, want, extra_args=(), expect_first_ok=None):
        rc, results, stderr = run_tool(self.tool, "decap", cfg.tool_args() + list(extra_args),
                                       wires)
        problems = []
        if rc != 3:
            problems.append("tool exit %d, want 3 (%s)" % (rc, stderr))
        if len(results) != len(wires):
            problems.append("%d results for %d packets" % (len(results), len(wires)))
        else:
            if expect_first_ok is not None and results[0] != expect_first_ok:
                problems.append("first packet: %s" % (results[0] if isinstance(results[0], str)
                                                      else "wrong inner packet"))
            last = results[-1]
            if want is None:
                if not isinstance(last, str):
                    problems.append("accepted, want a drop")
                else:
                    case += " (espgw: %s)" % last
            elif last != want:
                problems.append("got %s, want %s" % (last if isinstance(last, str) else "accept",
                                                     want))
            if want is not None and want not in stderr.split():
                problems.append("stderr does not name %s: %r" % (want, stderr))
        self.report(case, problems)

    def negatives(self, rng):
        inner4 = inner_packets(4)[0][1]
        inner6 = inner_packets(6)[0][1]
        for alg in [a for a in ALGORITHMS if a not in CBC_ALGORITHMS]:
            for outer, udp, esn in ((4, False, False), (6, True, True)):
                start = 0x1_0000_0005 if esn else 7
                prime = ["--highest", str(start - 1)]
                cfg = Config(alg, 4, outer, esn, udp, "ipsec-mb", start, rng)
                other_key = bytes(b ^ 0x5A for b in cfg.key[:-4]) + cfg.key[-4:]
                wire = cfg.scapy_encrypt(inner4, start, key=other_key)
                self.expect_drop("negative scapy->espgw wrong key %s -> icv-failure"
                                 % cfg.label(), cfg, [wire], "icv-failure", prime)
                wire = cfg.scapy_encrypt(inner4, start)
                self.expect_drop("negative scapy->espgw same packet twice %s -> replayed"
                                 % cfg.label(), cfg, [wire, wire], "replayed", prime,
                                 expect_first_ok=inner4)
            # ESN: the high 32 bits are in the AAD. scapy sends 0x2_0000_0005, espgw infers
            # 0x1_0000_0005 from its window.
            cfg = Config(alg, 6, 4, True, False, "openssl", 0x1_0000_0005, rng)
            wire = cfg.scapy_encrypt(inner6, 0x2_0000_0005)
            self.expect_drop("negative scapy->espgw ESN wrong epoch %s -> icv-failure"
                             % cfg.label(), cfg, [wire], "icv-failure",
                             ["--highest", str(0x1_0000_0004)])
            # ESN on at espgw, off at scapy: 8- vs 12-byte AAD.
            cfg = Config(alg, 4, 6, True, False, "ipsec-mb", 9, rng)
            wire = cfg.scapy_encrypt(inner4, 9, esn=False)
            self.expect_drop("negative scapy->espgw ESN on one side only %s -> icv-failure"
                             % cfg.label(), cfg, [wire], "icv-failure", ["--highest", "8"])
            # The reference is not vacuous: scapy refuses espgw's packet under another key.
            cfg = Config(alg, 4, 4, False, True, "ipsec-mb", 1, rng)
            rc, results, stderr = run_tool(self.tool, "encap", cfg.tool_args() + ["--seq", "1"],
                                           [inner4])
            case = "negative espgw->scapy wrong key %s -> scapy refuses" % cfg.label()
            problems = []
            if rc != 0 or len(results) != 1 or isinstance(results[0], str):
                problems.append("encap failed: %d %s" % (rc, stderr))
            else:
                other_key = bytes(b ^ 0xA5 for b in cfg.key[:-4]) + cfg.key[-4:]
                try:
                    cfg.scapy_sa(0, key=other_key).decrypt(IP(results[0]))
                    problems.append("scapy accepted it")
                except IPSecIntegrityError:
                    pass
            self.report(case, problems)

        self.cbc_negatives(rng, inner4)

        # The scapy NAT-T/IPv4 quirk, as built (UDP length 8): espgw must refuse it.
        cfg = Config("aes-gcm-128", 4, 4, False, True, "ipsec-mb", 1, rng)
        wire = cfg.scapy_encrypt(inner4, 1, fix_udp_length=False)
        self.expect_drop("quirk scapy NAT-T over IPv4 leaves UDP length 8 -> espgw refuses",
                         cfg, [wire], None)


    def cbc_negatives(self, rng, inner4):
        for alg, integ in (("aes-cbc-128", "hmac-sha1-96"), ("aes-cbc-256", "hmac-sha2-256-128"),
                           ("aes-cbc-192", "hmac-sha2-512-256")):
            for outer, udp, esn in ((4, False, False), (6, True, True)):
                start = 0x1_0000_0005 if esn else 7
                prime = ["--highest", str(start - 1)]
                cfg = Config(alg, 4, outer, esn, udp, "ipsec-mb", start, rng, integ=integ)
                cipher_key, auth_key = cfg.split_key()
                for what, other in (("integrity", cipher_key + bytes(b ^ 0x5A for b in auth_key)),
                                    ("encryption", bytes(b ^ 0x5A for b in cipher_key) + auth_key)):
                    wire = cfg.scapy_encrypt(inner4, start, key=other)
                    # A wrong encryption key with the right integrity key authenticates:
                    # the padding check catches the garbage.
                    want = "icv-failure" if what == "integrity" else None
                    self.expect_drop("negative scapy->espgw wrong %s key %s -> %s"
                                     % (what, cfg.label(), want or "a drop"), cfg, [wire], want,
                                     prime)
                wire = cfg.scapy_encrypt(inner4, start)
                self.expect_drop("negative scapy->espgw same packet twice %s -> replayed"
                                 % cfg.label(), cfg, [wire, wire], "replayed", prime,
                                 expect_first_ok=inner4)
            cfg = Config(alg, 4, 4, True, False, "openssl", 0x1_0000_0005, rng, integ=integ)
            wire = cfg.scapy_encrypt(inner4, 0x2_0000_0005)
            self.expect_drop("negative scapy->espgw ESN wrong epoch %s -> icv-failure"
                             % cfg.label(), cfg, [wire], "icv-failure",
                             ["--highest", str(0x1_0000_0004)])
            cfg = Config(alg, 4, 6, True, False, "ipsec-mb", 9, rng, integ=integ)
            wire = cfg.scapy_encrypt(inner4, 9, esn=False)
            self.expect_drop("negative scapy->espgw ESN on one side only %s -> icv-failure"
                             % cfg.label(), cfg, [wire], "icv-failure", ["--highest", "8"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tool", required=True, help="path to espgw_esp_tool")
    parser.add_argument("--seed", type=int, default=0xE5B6)
    options = parser.parse_args()

    rng = random.Random(options.seed)
    runner = Runner(options.tool)
    packets = {4: inner_packets(4), 6: inner_packets(6)}
    index = 0
    for alg in [a for a in ALGORITHMS if a not in CBC_ALGORITHMS]:
        for inner in (4, 6):
            for outer in (4, 6):
                for esn in (False, True):
                    for udp in (False, True):
                        for backend in BACKENDS:
                            starts = ESN_ON_STARTS if esn else ESN_OFF_STARTS
                            start = starts[index % len(starts)]
                            index += 1
                            # Separate SAs (keys, SPIs) per direction, as IPsec has them.
                            out = Config(alg, inner, outer, esn, udp, backend, start, rng)
                            runner.espgw_to_scapy(out, packets[inner])
                            into = Config(alg, inner, outer, esn, udp, backend, start, rng)
                            runner.scapy_to_espgw(into, packets[inner])
    # AES-CBC: every cipher with every HMAC, ESN on and off, both backends; the inner and
    # outer families and UDP encapsulation rotate through the pairings.
    for alg in CBC_ALGORITHMS:
        for integ in INTEGRITY:
            for esn in (False, True):
                for backend in BACKENDS:
                    inner, outer, udp = ((4, 4, False), (6, 6, True), (4, 6, False),
                                         (6, 4, True))[index % 4]
                    starts = ESN_ON_STARTS if esn else ESN_OFF_STARTS
                    start = starts[index % len(starts)]
                    index += 1
                    out = Config(alg, inner, outer, esn, udp, backend, start, rng, integ=integ)
                    runner.espgw_to_scapy(out, packets[inner])
                    into = Config(alg, inner, outer, esn, udp, backend, start, rng, integ=integ)
                    runner.scapy_to_espgw(into, packets[inner])
    runner.tfc_padding(rng)
    runner.negatives(rng)

    print("%d passed, %d failed" % (runner.passed, runner.failed))
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
