# shellcheck shell=bash
# Sourced by bench/site_to_site_bench.sh: the profile summary, the results JSON and the table.
# ---------------------------------------------------------------- profile

write_profile() {  # with BENCH_PROFILE: CPU samples per thread name and the hottest functions
  PROFILE_OUT=${BENCH_OUT%.json}-profile.txt
  for PATH_NAME in "${PATHS[@]}"; do
    data=$RESULTS/$PATH_NAME/perf.data
    [[ -f $data ]] || continue
    echo "=== $PATH_NAME: CPU samples by thread name (lanA→lanB -P4, whole machine, $(nproc) CPUs) ==="
    perf report -i "$data" --no-children --sort comm -g none --stdio --percent-limit 1 2>/dev/null | grep '%' || true
    echo "=== $PATH_NAME: hottest functions (thread name, object, symbol) ==="
    perf report -i "$data" --no-children --sort comm,dso,sym -g none --stdio --percent-limit 0.7 2>/dev/null |
      grep '%' | head -30 || true
    echo
  done >"$PROFILE_OUT"
  log "profile: $PROFILE_OUT"
}

# ---------------------------------------------------------------- results

write_results() {  # the JSON of every path (BENCH_OUT) and the table on stdout
ESPGW_BIN=${ESPGW:-$ROOT/build/s2sbench/daemon/espgw}
"$PYTHON" - "$RESULTS" "$BENCH_OUT" <<EOF
import json, os, re, statistics, subprocess, sys, datetime, platform

results_dir, out_path = sys.argv[1], sys.argv[2]
paths = "$BENCH_PATHS".split()
seconds, cc = int("$BENCH_SECONDS"), "$BENCH_CC"
clk_tck = os.sysconf("SC_CLK_TCK")

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return ""

def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()

def cpu_clock():
    """(MHz, source): "cpu MHz" of processor 0 in /proc/cpuinfo (perf's cycle counter is not
    available in this VM), else cpufreq's current frequency of cpu0; (None, None) if neither."""
    processor = None
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "processor":
                processor = value.strip()
            elif key == "cpu MHz" and processor == "0":
                return float(value), "/proc/cpuinfo: cpu MHz of processor 0"
    except (OSError, ValueError):
        pass
    try:
        khz = int(open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").read())
        return khz / 1000.0, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"
    except (OSError, ValueError):
        return None, None

CPU_MHZ, CPU_MHZ_SOURCE = cpu_clock()

def parse_ping(path):
    if not os.path.exists(path):
        return None
    text = open(path).read()
    rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", text)]
    m = re.search(r"(\d+) packets transmitted, (\d+) received", text)
    sent, received = (int(m.group(1)), int(m.group(2))) if m else (None, len(rtts))
    if not rtts:
        return {"sent": sent, "received": received, "median_ms": None}
    return {"sent": sent, "received": received, "median_ms": round(statistics.median(rtts), 3),
            "min_ms": min(rtts), "max_ms": max(rtts), "mean_ms": round(statistics.mean(rtts), 3)}

def parse_cpu(path):
    try:
        first, second = [l.split() for l in open(path).read().splitlines()[:2]]
    except Exception:
        return None
    elapsed = float(second[0]) - float(first[0])
    busy = int(second[1]) - int(first[1])
    total = int(second[2]) - int(first[2])
    out = {"elapsed_s": round(elapsed, 2),
           "machine_busy_pct": round(100.0 * busy / total, 1) if total > 0 else None,
           "gateways_pct_of_one_cpu": {}, "gateways_cpu_s": {}}
    for a, b in zip(first[3:], second[3:]):
        name, t0 = a.split(":"); _, t1 = b.split(":")
        if int(t0) >= 0 and int(t1) >= 0 and elapsed > 0:
            out["gateways_pct_of_one_cpu"][name] = round(100.0 * (int(t1) - int(t0)) / clk_tck / elapsed, 1)
            out["gateways_cpu_s"][name] = round((int(t1) - int(t0)) / clk_tck, 3)
    return out

def parse_esp(path, cpu):
    """Per espgw gateway: the ESP packets its SAs sent (outbound SAs) and received (inbound
    SAs) during the run, from the espgwctl --json sas readings before and after it, and its
    CPU cycles per ESP packet: CPU time (utime + stime) x CPU_MHZ / (sent + received).
    None for a path without espgw (no readings)."""
    try:
        lines = open(path).read().splitlines()
        before, after = json.loads(lines[0]), json.loads(lines[1])
    except Exception:
        return None
    if not after:
        return None
    out = {}
    for gw, sas_after in after.items():
        sas_before = before.get(gw)
        if sas_after is None or sas_before is None:
            out[gw] = {"error": "espgwctl --json sas gave no answer " + ("before" if sas_before is None else "after") + " the run",
                       "cycles_per_esp_packet": None}
            continue
        count = {"out": 0, "in": 0}
        for name, (direction, packets) in sas_after.items():
            # An SA installed during the run (a rekey) counts from zero.
            old = sas_before.get(name, [direction, 0])[1]
            count[direction] += packets - old if packets >= old else packets
        gw_out = {"esp_packets_sent": count["out"], "esp_packets_received": count["in"]}
        gone = [n for n in sas_before if n not in sas_after]
        if gone:  # removed during the run: their last packets are not counted
            gw_out["sas_removed_during_run"] = len(gone)
        cpu_s = ((cpu or {}).get("gateways_cpu_s") or {}).get(gw)
        packets = count["out"] + count["in"]
        gw_out["cpu_s"] = cpu_s
        gw_out["cycles_per_esp_packet"] = (round(cpu_s * CPU_MHZ * 1e6 / packets)
                                           if cpu_s is not None and CPU_MHZ and packets > 0 else None)
        out[gw] = gw_out
    return out

def parse_iperf(base):
    entry = {}
    try:
        data = json.load(open(base + ".json"))
    except Exception as e:
        err = open(base + ".err").read().strip() if os.path.exists(base + ".err") else ""
        return {"error": f"no iperf3 JSON ({e}) {err}".strip()}
    if "error" in data:
        entry["error"] = data["error"]
    end = data.get("end", {})
    recv, sent = end.get("sum_received", {}), end.get("sum_sent", {})
    if recv.get("bits_per_second"):
        entry["gbit_s"] = round(recv["bits_per_second"] / 1e9, 4)
    if sent.get("bits_per_second"):
        entry["sender_gbit_s"] = round(sent["bits_per_second"] / 1e9, 4)
    if "retransmits" in sent:
        entry["retransmits"] = sent["retransmits"]
    entry["bytes_received"] = recv.get("bytes")
    entry["sender_congestion_control"] = end.get("sender_tcp_congestion")
    start = data.get("start", {}).get("test_start", {})
    entry["streams"] = start.get("num_streams")
    entry["reverse"] = bool(start.get("reverse"))
    entry["seconds"] = start.get("duration")
    cpu = end.get("cpu_utilization_percent")
    if cpu:
        entry["iperf3_cpu_pct"] = {k: round(v, 1) for k, v in cpu.items() if k in ("host_total", "remote_total")}
    c = parse_cpu(base + ".cpu")
    if c:
        entry["cpu"] = c
    esp = parse_esp(base + ".esp", c)
    # Beside gbit_s: {"gwA": N, "gwB": N} for espgw's paths, null for the others.
    entry["cycles_per_esp_packet"] = {gw: v.get("cycles_per_esp_packet") for gw, v in esp.items()} if esp else None
    if esp:
        entry["esp"] = esp
    return entry

def parse_vici_raw(text):
    """swanctl --list-sas --raw: 'list-sa event {s2s {k=v ... child-sas {net-1 {...}}}}'
    as nested dicts (lists 'k [a b]' as Python lists); one dict per event or reply."""
    tokens = re.findall(r"[^\s{}\[\]=]+=[^\s{}\[\]]*|[^\s{}\[\]]+|[{}\[\]]", text)
    pos = 0
    def section():
        nonlocal pos
        out = {}
        while pos < len(tokens) and tokens[pos] != "}":
            tok = tokens[pos]; pos += 1
            if "=" in tok:
                k, _, v = tok.partition("=")
                out[k] = v
            elif pos < len(tokens) and tokens[pos] == "{":
                pos += 1
                out[tok] = section()
                pos += 1  # the closing brace
            elif pos < len(tokens) and tokens[pos] == "[":
                pos += 1
                items = []
                while pos < len(tokens) and tokens[pos] != "]":
                    items.append(tokens[pos]); pos += 1
                pos += 1
                out[tok] = items
        return out
    events = []
    while pos < len(tokens):
        # an event or reply: '<name words> {' ... '}'
        while pos < len(tokens) and tokens[pos] != "{":
            pos += 1
        if pos >= len(tokens):
            break
        pos += 1
        events.append(section())
        pos += 1
    return events

def charon_sa(path):
    """The IKE_SA and CHILD_SA charon reports, from a saved swanctl --list-sas --raw."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    for event in parse_vici_raw(text):
        for ike_name, ike in event.items():
            if not isinstance(ike, dict) or "child-sas" not in ike:
                continue
            children = [c for c in ike["child-sas"].values() if isinstance(c, dict)]
            child = next((c for c in children if c.get("state") == "INSTALLED"), children[0] if children else {})
            def alg(d):
                a = d.get("encr-alg")
                return f"{a}-{d['encr-keysize']}" if a and d.get("encr-keysize") else a
            def num(v):
                return int(v) if isinstance(v, str) and v.isdigit() else v
            return {
                "ike_sa": {"name": ike_name, "state": ike.get("state"), "version": num(ike.get("version")),
                           "proposal": "/".join(x for x in (alg(ike), ike.get("prf-alg"), ike.get("dh-group")) if x),
                           "local": f"{ike.get('local-host')}[{ike.get('local-port')}]",
                           "remote": f"{ike.get('remote-host')}[{ike.get('remote-port')}]",
                           "nat_any": ike.get("nat-any"), "spi_i": ike.get("initiator-spi"),
                           "spi_r": ike.get("responder-spi")},
                "child_sa": {"name": child.get("name"), "state": child.get("state"), "reqid": num(child.get("reqid")),
                             "mode": child.get("mode"), "protocol": child.get("protocol"),
                             "encap": child.get("encap", "no"), "esp_proposal": alg(child),
                             "spi_in": child.get("spi-in"), "spi_out": child.get("spi-out"),
                             "local_ts": child.get("local-ts"), "remote_ts": child.get("remote-ts"),
                             "bytes_in": num(child.get("bytes-in")), "packets_in": num(child.get("packets-in")),
                             "bytes_out": num(child.get("bytes-out")), "packets_out": num(child.get("packets-out"))},
                "child_sas_listed": len(children),
            }
    return {"error": "no IKE_SA with a CHILD_SA in swanctl --list-sas", "raw": text.strip()[:500]}

def espgwctl_status(path):
    """espgwctl --json status, with its drop counters summed (SAs and engine)."""
    if not os.path.exists(path):
        return None
    try:
        status = json.load(open(path))
    except Exception as e:
        err = path[:-5] + ".err"
        return {"error": f"espgwctl --json status: {e} {open(err).read().strip() if os.path.exists(err) else ''}".strip()}
    sas = (status.get("list-sas") or {}).get("sas") or {}
    sa_drops = {}
    for name, sa in sas.items():
        for reason, v in (sa.get("drops") or {}).items():
            if str(v).isdigit() and int(v):
                sa_drops[f"{name}/{reason}"] = int(v)
    stats = status.get("stats") or {}
    def nonzero(d, only=lambda k: True):
        return {k: int(v) for k, v in (d or {}).items() if only(k) and str(v).isdigit() and int(v)}
    engine, gateway = nonzero(stats.get("engine-drops")), nonzero(stats.get("gateway-drops"))
    wan = nonzero(stats.get("wan"), lambda k: k.endswith("kernel-drops"))  # the socket's receive buffer
    return {"drops_total": sum(sa_drops.values()) + sum(engine.values()) + sum(gateway.values()) + sum(wan.values()),
            "sa_drops": sa_drops, "engine_drops": engine, "gateway_drops": gateway, "wan_kernel_drops": wan,
            "sa_packets": {name: {k: sa.get(k) for k in ("direction", "spi", "packets", "bytes", "origin") if k in sa}
                           for name, sa in sas.items()},
            "status": status}

tests = ["a_to_b_P1", "a_to_b_P4", "b_to_a_P1", "b_to_a_P4"]
report = {
    "benchmark": "site_to_site",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "host": platform.node(),
    "kernel": platform.release(),
    "cpu_model": cpu_model(),
    "cpus": os.cpu_count(),
    "congestion_control": cc,
    "default_congestion_control": sh("cat /proc/sys/net/ipv4/tcp_congestion_control"),
    "duration_s": seconds,
    "ping_interval_s": 0.2,
    "ping_under_load": "ping -i 0.2 lanA→lanB during the a_to_b_P4 run, from 1 s after its start",
    "topology": "lanA 10.1.0.2 — gwA 192.0.2.1 — WAN veth 192.0.2.0/24 — gwB 192.0.2.2 — lanB 10.2.0.2, one netns each, " + f"LAN MTU {os.environ.get('BENCH_LAN_MTU', '1500')}, WAN MTU {os.environ.get('BENCH_WAN_MTU', '1500')}",
    "throughput": "iperf3 TCP receiver-side Gbit/s (end.sum_received); a_to_b = lanA→lanB, b_to_a = lanB→lanA (-R)",
    "cycles_per_esp_packet": "per espgw gateway and run: the espgw process's CPU time (utime + stime, /proc/PID/stat) "
                             "x cpu_clock_mhz / the ESP packets it sent plus received (its SAs' packet counters, "
                             "espgwctl --json sas before and after the run); null for paths without espgw",
    "cpu_clock_mhz": CPU_MHZ,
    "cpu_clock_source": CPU_MHZ_SOURCE,
    "versions": {
        "iperf3": sh("iperf3 --version | head -1"),
        "strongswan": sh("$CHARON --version 2>&1 | head -1"),
        "wireguard_go": sh("wireguard-go --version | head -1"),
        "espgw_git": sh("git -C '$ROOT' rev-parse --short HEAD") + (" (dirty)" if sh("git -C '$ROOT' status --porcelain --untracked-files=no") else ""),
    },
    "espgw": {"binary": "$ESPGW_BIN", "workers": int("$ESPGW_WORKERS") if "$ESPGW_WORKERS".isdigit() else "$ESPGW_WORKERS", "tun_queues": int("$ESPGW_TUN_QUEUES"),
              "espgwctl": "$ESPGWCTL", "charon_plugin": "$PLUGIN"},
    "paths": {},
}
for p in paths:
    d = os.path.join(results_dir, p)
    entry = {"status": open(os.path.join(d, "status")).read().strip() if os.path.exists(os.path.join(d, "status")) else "not run"}
    if os.path.exists(os.path.join(d, "error.txt")):
        entry["error"] = open(os.path.join(d, "error.txt")).read().strip()
    if os.path.exists(os.path.join(d, "meta.txt")):
        for line in open(os.path.join(d, "meta.txt")):
            k, _, v = line.rstrip("\n").partition("=")
            entry[k] = int(v) if k == "tunnel_mtu" and v.isdigit() else v
    entry["ping_idle"] = parse_ping(os.path.join(d, "ping-idle.txt"))
    entry["ping_under_load"] = parse_ping(os.path.join(d, "ping-load.txt"))
    for side in ("gwA", "gwB"):
        f = os.path.join(d, f"counters-{side}.txt")
        if os.path.exists(f):
            entry.setdefault("espgw_counters", {})[side] = [l.split(": ", 1)[-1] for l in open(f).read().splitlines()]
    for side in ("gwA", "gwB"):
        before = charon_sa(os.path.join(d, f"list-sas-before-{side}.raw"))
        if before is not None:
            after = charon_sa(os.path.join(d, f"list-sas-after-{side}.raw"))
            entry.setdefault("charon_sas", {})[side] = {"after_setup": before, "after_run": after}
        st = espgwctl_status(os.path.join(d, f"espgwctl-status-{side}.json"))
        if st is not None:
            entry.setdefault("espgwctl_after_run", {})[side] = st
    cs = entry.get("charon_sas", {})
    if "gwA" in cs and "gwB" in cs:
        a = (cs["gwA"]["after_setup"] or {}).get("child_sa", {})
        b = (cs["gwB"]["after_setup"] or {}).get("child_sa", {})
        entry["charon_spis_match"] = bool(a.get("spi_out")) and a.get("spi_out") == b.get("spi_in") and a.get("spi_in") == b.get("spi_out")
    entry["tests"] = {t: parse_iperf(os.path.join(d, t)) for t in tests if os.path.exists(os.path.join(d, t + ".json"))}
    report["paths"][p] = entry

def gbit(p, t):
    return report["paths"].get(p, {}).get("tests", {}).get(t, {}).get("gbit_s")

def ratio(a, b):
    return round(a / b, 3) if a and b else None

summary = {}
# (path, key prefix): espgw with static SAs, espgw managed by charon, and its ECMP paths
MINE = [("espgw", "espgw"), ("espgw-charon", "espgw_charon")] + [
    (p, p.replace("-", "_")) for p in paths if p.startswith("espgw-charon-ecmp")]
RATIO_OTHERS = (("libipsec", "kernel_libipsec"), ("wireguard-go", "wireguard_go"), ("plain", "plain"))
for mine, prefix in MINE:
    for other, name in RATIO_OTHERS + ((("espgw", "espgw_static"),) if mine.startswith("espgw-charon") else ()):
        summary[f"{prefix}_over_{name}"] = {t: ratio(gbit(mine, t), gbit(other, t)) for t in tests}
lat = lambda p, k: (report["paths"].get(p, {}).get(k) or {}).get("median_ms")
p_idle = lat("plain", "ping_idle")
for mine, prefix in MINE:
    load = lat(mine, "ping_under_load")
    summary[f"{prefix}_added_latency_under_load_ms"] = round(load - p_idle, 3) if load is not None and p_idle is not None else None
summary["targets"] = {
    "espgw >= 10x kernel-libipsec (a_to_b_P4)": summary["espgw_over_kernel_libipsec"]["a_to_b_P4"],
    "espgw >= 0.5x plain (a_to_b_P4)": summary["espgw_over_plain"]["a_to_b_P4"],
    "espgw > wireguard-go (a_to_b_P4)": summary["espgw_over_wireguard_go"]["a_to_b_P4"],
    "added latency under load <= 1 ms": summary["espgw_added_latency_under_load_ms"],
    "espgw-charon >= 10x kernel-libipsec (a_to_b_P4)": summary["espgw_charon_over_kernel_libipsec"]["a_to_b_P4"],
    "espgw-charon >= 0.5x plain (a_to_b_P4)": summary["espgw_charon_over_plain"]["a_to_b_P4"],
    "espgw-charon > wireguard-go (a_to_b_P4)": summary["espgw_charon_over_wireguard_go"]["a_to_b_P4"],
    "espgw-charon added latency under load <= 1 ms": summary["espgw_charon_added_latency_under_load_ms"],
}
report["summary"] = summary
with open(out_path, "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")

# ---- table
def fmt(v, spec="{:.2f}"):
    return spec.format(v) if isinstance(v, (int, float)) else "-"
def cycles(p, t):  # "3712/3650": gwA/gwB cycles per ESP packet of a run, "-" without espgw
    c = report["paths"].get(p, {}).get("tests", {}).get(t, {}).get("cycles_per_esp_packet")
    return "/".join(fmt(c.get(g), "{:.0f}") for g in ("gwA", "gwB")) if c else "-"
print()
print(f"site-to-site, {report['date']}, {report['cpu_model']}, {report['cpus']} CPUs, kernel {report['kernel']}")
print(f"iperf3 TCP -C {cc}, {seconds} s per run; Gbit/s at the receiver; ping median ms (load: during A→B -P4)")
hdr = f"{'path':<18} {'A→B P1':>8} {'A→B P4':>8} {'B→A P1':>8} {'B→A P4':>8} {'idle ms':>8} {'load ms':>8} {'mtu':>5}  {'gw CPU% A/B (A→B P4)':<22} {'cyc/ESP A/B (A→B P4)':<22} status"
print(hdr)
print("-" * len(hdr))
for p in paths:
    e = report["paths"][p]
    cpu = e.get("tests", {}).get("a_to_b_P4", {}).get("cpu", {}).get("gateways_pct_of_one_cpu", {})
    cpu_s = "/".join(fmt(cpu.get(g), "{:.0f}") for g in ("gwA", "gwB")) if cpu else "-"
    status = e["status"] + (": " + e["error"] if e.get("error") else "")
    print(f"{p:<18} " + " ".join(f"{fmt(gbit(p, t)):>8}" for t in tests)
          + f" {fmt(lat(p, 'ping_idle'), '{:.3f}'):>8} {fmt(lat(p, 'ping_under_load'), '{:.3f}'):>8} {fmt(e.get('tunnel_mtu'), '{}'):>5}  {cpu_s:<22} {cycles(p, 'a_to_b_P4'):<22} {status}")
print()
# Cycles per ESP packet for every run of espgw's paths, beside the Gbit/s of the run.
esp_paths = [p for p in paths if any(report["paths"][p].get("tests", {}).get(t, {}).get("cycles_per_esp_packet") for t in tests)]
if esp_paths:
    print(f"CPU cycles per ESP packet, gwA/gwB: espgw's CPU time x {fmt(CPU_MHZ, '{:.0f}')} MHz / ESP packets it sent + received (its SA counters)")
    hdr2 = f"{'path':<18} " + " ".join(f"{t.replace('a_to_b_', 'A→B ').replace('b_to_a_', 'B→A '):<29}" for t in tests)
    print(hdr2)
    print(f"{'':<18} " + " ".join(f"{'Gbit/s':>6}  {'cyc/ESP A/B':<21}" for t in tests))
    print("-" * len(hdr2))
    for p in esp_paths:
        print(f"{p:<18} " + " ".join(f"{fmt(gbit(p, t)):>6}  {cycles(p, t):<21}" for t in tests))
    print()
def ratio_line(key, label):
    print(f"{label:<37} " + "  ".join(f"{t.replace('a_to_b_', 'A→B ').replace('b_to_a_', 'B→A ')} {fmt(summary[key][t]):>5}" for t in tests))
for mine, prefix in MINE:
    if mine not in paths:
        continue
    for key, label in ((f"{prefix}_over_kernel_libipsec", f"{mine} / kernel-libipsec"), (f"{prefix}_over_plain", f"{mine} / plain"),
                       (f"{prefix}_over_wireguard_go", f"{mine} / wireguard-go")):
        ratio_line(key, label)
    if mine.startswith("espgw-charon"):
        ratio_line(f"{prefix}_over_espgw_static", f"{mine} / espgw (static)")
    print(f"{mine + ' added latency':<37} {fmt(summary[prefix + '_added_latency_under_load_ms'], '{:.3f}')} ms ({mine} ping under load − plain idle ping)")
ec = report["paths"].get("espgw-charon")
if ec and ec.get("charon_sas"):
    for side, sa in ec["charon_sas"].items():
        child = ((sa.get("after_setup") or {}).get("child_sa")) or {}
        after = ((sa.get("after_run") or {}).get("child_sa")) or {}
        st = ec.get("espgwctl_after_run", {}).get(side) or {}
        drops = ", ".join(f"{k} {v}" for part in ("sa_drops", "engine_drops", "gateway_drops", "wan_kernel_drops")
                          for k, v in (st.get(part) or {}).items()) or "none"
        drops = f"{st.get('drops_total', '-')} ({drops})" if st.get("drops_total") else drops
        print(f"espgw-charon {side}: CHILD_SA {child.get('protocol')} {child.get('esp_proposal')} {child.get('mode')} encap={child.get('encap')} "
              f"spi in {child.get('spi_in')} out {child.get('spi_out')}; after the run: {after.get('packets_in', '-')} pkts in, "
              f"{after.get('packets_out', '-')} out (charon's query_sa); espgw drops {drops}")
    print(f"espgw-charon SPIs of gwA and gwB match: {ec.get('charon_spis_match')}")
print(f"results: {out_path}")
EOF
}
