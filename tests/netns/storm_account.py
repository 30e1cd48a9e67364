#!/usr/bin/python3
"""Accounts for every datagram of a storm (tests/netns/storm.py) at the receiving gateway.

  storm_account.py BEFORE AFTER STORM_JSON LEGIT_SENT

BEFORE and AFTER are snapshot prefixes (written by the `storm_snapshot` shell function of
tests/netns/site_to_site.sh): PREFIX.stats and PREFIX.sas (espgwctl --json), PREFIX.snmp
(/proc/net/snmp of the gateway's namespace), PREFIX.link (ip -j -s link show wan0).
LEGIT_SENT: genuine ESP packets the peer gateway sent meanwhile (the pings).

Every datagram that reached the gateway's namespace ends in exactly one of:
  espgw's counters  engine drops before an SA is known (no-sa, too-short, nat-keepalive,
                    ...), the inbound SAs' drops (icv-failure, queue-full, ...) and
                    packets, the gateway's IKE drops (ike-no-charon, ike-rate-limited), the
                    WAN sockets' oversize, IKE events shed on the control socket
  the kernel's      UDP InErrors (receive buffer full: RcvbufErrors, bad checksums),
                    NoPorts, IP reassembly failures, the WAN device's receive drops
Prints a JSON object: the sum of the differences, what was sent, the breakdown.
"""
import json
import sys


def load_json(path):
    with open(path) as f:
        return json.load(f)


def counters(section):
    return {k: int(v) for k, v in (section or {}).items() if str(v).isdigit()}


def snmp(path):
    rows = {}
    with open(path) as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[0::2], lines[1::2]):
        proto, keys = names.split(":", 1)
        rows[proto] = dict(zip(keys.split(), (int(x) for x in values.split(":", 1)[1].split())))
    return rows


def snapshot(prefix):
    stats = load_json(prefix + ".stats")
    sas = load_json(prefix + ".sas").get("sas", {})
    out = {}
    for name, value in counters(stats.get("engine-drops")).items():
        out["engine:" + name] = value
    for name in ("ike-no-charon", "ike-rate-limited"):
        out["gateway:" + name] = counters(stats.get("gateway-drops")).get(name, 0)
    for name, value in counters(stats.get("wan")).items():
        if name.endswith("-oversize"):
            out["wan:" + name] = value
    out["control:ike-events-shed"] = counters(stats.get("control-socket")).get("ike-events-shed", 0)
    for sa in sas.values():
        if sa.get("direction") != "in":
            continue
        out["sa:packets"] = out.get("sa:packets", 0) + int(sa.get("packets", 0))
        for name, value in counters(sa.get("drops")).items():
            out["sa:" + name] = out.get("sa:" + name, 0) + value
    kernel = snmp(prefix + ".snmp")
    out["kernel:udp-in-errors"] = kernel["Udp"]["InErrors"]
    out["kernel:udp-no-ports"] = kernel["Udp"]["NoPorts"]
    out["kernel:ip-reasm-fails"] = kernel["Ip"]["ReasmFails"]
    link = load_json(prefix + ".link")[0]["stats64"]["rx"]
    out["kernel:wan-rx-dropped"] = link["dropped"]
    return out


def main():
    before, after = snapshot(sys.argv[1]), snapshot(sys.argv[2])
    storm = load_json(sys.argv[3])
    legit = int(sys.argv[4])
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(before) | set(after))}
    diff = {k: v for k, v in diff.items() if v}
    accounted = sum(diff.values())
    expected = storm["sent"] + legit
    print(json.dumps({
        "sent": storm["sent"], "legit_sent": legit, "expected": expected,
        "accounted": accounted, "unaccounted": expected - accounted,
        "kernel_drops": sum(v for k, v in diff.items() if k.startswith("kernel:")),
        "breakdown": diff,
    }))


if __name__ == "__main__":
    main()
