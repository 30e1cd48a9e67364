"""The cases of scapy_esp_interop.py: the transforms and their keys, the inner packets,
one case's configuration (an espgw_esp_tool command line and the matching scapy
SecurityAssociation, with scapy 2.5.0's quirks worked around as that script's docstring
lists them), and how the tool is run.
"""

import hashlib
import hmac
import struct
import subprocess
import warnings

warnings.filterwarnings("ignore")  # scapy/cryptography deprecation noise

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305  # noqa: E402
from scapy.all import ICMP, IP, TCP, UDP, ICMPv6EchoRequest, IPv6, Raw, raw  # noqa: E402
from scapy.layers.ipsec import ESP, SecurityAssociation  # noqa: E402
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
