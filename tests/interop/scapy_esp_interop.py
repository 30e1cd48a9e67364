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
import sys
import warnings

warnings.filterwarnings("ignore")  # scapy/cryptography deprecation noise

import hmac  # noqa: E402

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402
from scapy.all import IP, UDP, IPv6, raw  # noqa: E402
from scapy.layers.inet6 import in6_chksum  # noqa: E402
from scapy.layers.ipsec import ESP, IPSecIntegrityError  # noqa: E402
from scapy.utils import checksum  # noqa: E402

from scapy_esp_cases import (  # noqa: E402
    ALGORITHMS,
    BACKENDS,
    CBC_ALGORITHMS,
    ESN_OFF_STARTS,
    ESN_ON_STARTS,
    INTEGRITY,
    NAT_T_PORT,
    Config,
    inner_packets,
    run_tool,
)


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
