# Shared by tests/charon/charon_site_to_site.sh and tools/site_to_site_demo.sh: two charons
# and two espgw gateways in the four-namespace topology of tests/netns/lib.sh, the tunnel
# managed with swanctl. The caller sets ESPGW, ESPGWCTL and PLUGIN (libstrongswan-espgw.so)
# and sources tests/netns/lib.sh first.
#
# Each charon runs in its gateway's network namespace and in a private mount namespace
# with its own /run (charon's pid file path is compiled in). The espgw plugin is loaded
# with LD_PRELOAD, so nothing is installed on the system: charon finds a plugin's create
# function in the process before it searches the plugin directory.

CHARON=/usr/lib/ipsec/charon
# The shipped example configurations, which the psk-config and x509 scenarios run.
CONFIGS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../configs" && pwd)
# Set by a caller: espgw.conf and strongswan.conf built from the shipped examples
# (configs/espgw.conf, configs/strongswan.conf) instead of the settings below.
ESPGW_CONF_FROM_EXAMPLE=${ESPGW_CONF_FROM_EXAMPLE:-}
STRONGSWAN_CONF_BASE=${STRONGSWAN_CONF_BASE:-}
PSK=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
declare -A CHARON_PID=() ESPGW_PID=()
# Set by a scenario, per side (a, b): the WAN address charon uses (SIDE_ADDR), espgw's
# local-address line when it differs (LOCAL_ADDRESSES: several), swanctl's remote_addrs
# when not the other side's address (REMOTE_ADDRS: %any behind a NAT), lines for
# strongswan.conf's charon section (CHARON_EXTRA) and for the connection (SWANCTL_EXTRA).
declare -A SIDE_ADDR=() LOCAL_ADDRESSES=() REMOTE_ADDRS=() CHARON_EXTRA=() SWANCTL_EXTRA=()

side_ns() { [[ $1 == a ]] && echo "$GWA" || echo "$GWB"; }
side_addr() {
  if [[ $1 == a ]]; then echo "${SIDE_ADDR[a]:-192.0.2.1}"; else echo "${SIDE_ADDR[b]:-192.0.2.2}"; fi
}
other_side() { [[ $1 == a ]] && echo b || echo a; }
vici_uri() { echo "unix://$WORK/charon-$1.vici"; }
swan() { local side=$1; shift; swanctl "$@" --uri "$(vici_uri "$side")"; }
espgwctl_on() { local side=$1; shift; "$ESPGWCTL" --socket "$WORK/espgw-$side.ctl" "$@"; }

wait_until() {  # wait_until SECONDS CMD...: true once CMD succeeds
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}

# write_espgw_charon_conf SIDE: espgw.conf for a gateway run by charon. With
# ESPGW_CONF_FROM_EXAMPLE set, configs/espgw.conf with only this side's address and
# control socket put in.
write_espgw_charon_conf() {
  local side=$1
  if [[ -n $ESPGW_CONF_FROM_EXAMPLE ]]; then
    sed -e "s#^local-address = .*#local-address = $(side_addr "$side")#" \
        -e "s#^control-socket = .*#control-socket = $WORK/espgw-$side.ctl#" \
        -e "s#^\(\# \)\?state-dir = .*#state-dir = $WORK/state-$side#" \
        "$CONFIGS_DIR/espgw.conf" >"$WORK/espgw-$side.conf"
    grep -qx "control-socket = $WORK/espgw-$side.ctl" "$WORK/espgw-$side.conf" ||
      { log "configs/espgw.conf has no control-socket line to substitute"; return 1; }
    return 0
  fi
  cat >"$WORK/espgw-$side.conf" <<EOS
tun-name = espgw0
local-address = ${LOCAL_ADDRESSES[$side]:-$(side_addr "$side")}
control-socket = $WORK/espgw-$side.ctl
state-dir = $WORK/state-$side
workers = 2
crypto-backend = ${CRYPTO_BACKEND_SIDE[$side]:-ipsec-mb}
log-level = ${ESPGW_LOG_LEVEL:-info}
$(eval "echo \"\${ESPGW_EXTRA_CONF_$side:-}\"")
EOS
}

start_espgw() {  # start_espgw SIDE
  local side=$1 ns
  ns=$(side_ns "$side")
  write_espgw_charon_conf "$side"
  ip netns exec "$ns" "$ESPGW" -c "$WORK/espgw-$side.conf" >>"$WORK/espgw-$side.log" 2>&1 &
  ESPGW_PID[$side]=$!
  PIDS+=($!)
  wait_until 10 test -S "$WORK/espgw-$side.ctl" || { log "espgw $side did not open its control socket"; cat "$WORK/espgw-$side.log"; return 1; }
}

# write_strongswan_conf SIDE BACKEND: BACKEND is espgw or libipsec (strongSwan's own
# userspace ESP, the interop peer). With STRONGSWAN_CONF_BASE set (espgw only), that file
# is included first and supplies the plugin list and install_routes; only the sockets and
# logging are set here.
write_strongswan_conf() {
  local side=$1 backend=$2 load="" base=""
  if [[ $backend == espgw && -n $STRONGSWAN_CONF_BASE ]]; then
    base="include $STRONGSWAN_CONF_BASE"
  elif [[ $backend == espgw ]]; then
    # espgw provides kernel_ipsec and the socket; kernel-netlink stays for kernel_net
    # (addresses and routes to find the source address).
    load="random nonce aesni gcm openssl pem pkcs1 x509 pubkey sha1 sha2 hmac kdf espgw kernel-netlink vici"
  else
    load="random nonce aesni gcm openssl pem pkcs1 x509 pubkey sha1 sha2 hmac kdf kernel-libipsec kernel-netlink socket-default vici"
  fi
  local settings="# load and install_routes from $STRONGSWAN_CONF_BASE"
  [[ -z $base ]] && settings="load = $load
  install_routes = $([[ $backend == espgw ]] && echo no || echo yes)"
  cat >"$WORK/strongswan-$side.conf" <<EOS
$base
charon {
  $settings
  reuse_ikesa = ${CHARON_REUSE_IKESA:-yes}
  ${CHARON_EXTRA[$side]:-}
  routing_table = 220
  routing_table_prio = 220
  plugins {
    espgw {
      socket = unix://$WORK/espgw-$side.ctl
    }
    vici {
      socket = $(vici_uri "$side")
    }
  }
  filelog {
    charon {
      path = $WORK/charon-$side.log
      time_format = %H:%M:%S
      default = 1
      knl = 2
      chd = ${CHARON_LOG_CHD:-1}
      flush_line = yes
    }
  }
  syslog {
    daemon {
      default = -1
    }
  }
}
EOS
}

start_charon() {  # start_charon SIDE BACKEND
  local side=$1 backend=$2 ns preload=""
  ns=$(side_ns "$side")
  write_strongswan_conf "$side" "$backend"
  [[ $backend == espgw ]] && preload=$PLUGIN
  rm -f "$WORK/charon-$side.vici"
  ip netns exec "$ns" unshare -m --propagation private \
    sh -c 'mount -t tmpfs charon-run /run && exec env STRONGSWAN_CONF="$1" LD_PRELOAD="$2" "$3"' \
    sh "$WORK/strongswan-$side.conf" "$preload" "$CHARON" >>"$WORK/charon-$side.out" 2>&1 &
  CHARON_PID[$side]=$!
  PIDS+=($!)
  wait_until 10 test -S "$WORK/charon-$side.vici" || { log "charon $side did not open its VICI socket"; tail -20 "$WORK/charon-$side.log"; return 1; }
}

# write_swanctl_children SIDE ENCAP CHILDREN [CHILDREN...]: swanctl.conf for SIDE, a PSK
# connection "s2s" whose children section holds the text CHILDREN (SWANCTL_UNIQUE: unique
# policy). Each further CHILDREN text makes one more connection, "s2s-2", "s2s-3", ...,
# with identities of its own (gwa-2.espgw.test, ...) so that the responder tells them
# apart: one IKE_SA each, as separate site pairs would have.
write_swanctl_children() {
  local side=$1 encap=$2 other k=0 suffix ids=""
  shift 2
  other=$(other_side "$side")
  {
    echo "connections {"
    for children in "$@"; do
      k=$((k + 1))
      suffix=""
      ((k > 1)) && suffix="-$k"
      ids+="    id-a$k = gwa$suffix.espgw.test
    id-b$k = gwb$suffix.espgw.test
"
      cat <<EOS
  s2s$suffix {
    version = 2
    local_addrs = $(side_addr "$side")
    remote_addrs = ${REMOTE_ADDRS[$side]:-$(side_addr "$other")}
    encap = $encap
    mobike = no
    ${SWANCTL_EXTRA[$side]:-}
    unique = ${SWANCTL_UNIQUE:-replace}
    proposals = aes128gcm16-prfsha256-x25519
    local {
      auth = psk
      id = gw$side$suffix.espgw.test
    }
    remote {
      auth = psk
      id = gw$other$suffix.espgw.test
    }
    children {
$children
    }
  }
EOS
    done
    cat <<EOS
}
secrets {
  ike-s2s {
$ids    secret = 0x$PSK
  }
}
EOS
  } >"$WORK/swanctl-$side.conf"
  chmod 600 "$WORK/swanctl-$side.conf"
}

# The protected subnets as SIDE sees them: "LOCAL REMOTE".
side_subnets() { [[ $1 == a ]] && echo "10.1.0.0/16 10.2.0.0/16" || echo "10.2.0.0/16 10.1.0.0/16"; }

# write_swanctl_conf SIDE ESP_PROPOSAL ENCAP REKEY_TIME: one child "net" between the LANs
# (CHILD_EXTRA: more lines for the child).
write_swanctl_conf() {
  local side=$1 esp=$2 encap=$3 rekey=$4 local_ts remote_ts
  read -r local_ts remote_ts <<<"$(side_subnets "$side")"
  write_swanctl_children "$side" "$encap" "      net {
        local_ts = $local_ts
        remote_ts = $remote_ts
        esp_proposals = $esp
        rekey_time = $rekey
        start_action = none
        dpd_action = none
        ${CHILD_EXTRA:-}
      }"
}

# start_ecmp_pair N: gwA's espgw keeps N CHILD_SAs of "net" up (parallel-child), each on
# its own IKE_SA (reuse_ikesa = no on gwA, unique = no on both); gwB's configuration is
# loaded, gwA's is left for the caller to load (and time).
start_ecmp_pair() {
  ESPGW_EXTRA_CONF_a="charon-vici = $(vici_uri a)
parallel-child = net $1" start_espgw a
  start_espgw b
  CHARON_REUSE_IKESA=no start_charon a espgw
  start_charon b espgw
  SWANCTL_UNIQUE=no write_swanctl_conf a aes128gcm16 yes 1h
  SWANCTL_UNIQUE=no write_swanctl_conf b aes128gcm16 yes 1h
  load_swanctl b
}

# write_swanctl_from_example SIDE EXAMPLE: $WORK/swanctl-SIDE/swanctl.conf from one of
# configs/swanctl/ (gwA's side, in this topology's addresses): verbatim for gwA, the mirror
# image for gwB (addresses, subnets and gwa/gwb swapped). start_action = start becomes
# none on both sides, so that the test brings the tunnel up with swanctl --initiate.
# Credentials go into the x509ca/, x509/ and private/ directories next to it, where
# swanctl --load-all --file looks for them.
write_swanctl_from_example() {
  local side=$1 example=$2 dir="$WORK/swanctl-$1"
  mkdir -p "$dir/x509ca" "$dir/x509" "$dir/private"
  local mirror=()
  if [[ $side == b ]]; then
    mirror=(-e 's/192\.0\.2\.1/@ADDR@/g; s/192\.0\.2\.2/192.0.2.1/g; s/@ADDR@/192.0.2.2/g'
            -e 's#10\.1\.0\.0/16#@NET@#g; s#10\.2\.0\.0/16#10.1.0.0/16#g; s#@NET@#10.2.0.0/16#g'
            -e 's/gwa/@GW@/g; s/gwb/gwa/g; s/@GW@/gwb/g')
  fi
  sed "${mirror[@]}" -e 's/^\([[:space:]]*start_action = \)start\b/\1none/' "$example" >"$dir/swanctl.conf"
  chmod 600 "$dir/swanctl.conf"
  grep -q 'start_action = none' "$dir/swanctl.conf" ||
    { log "$example: no start_action = start to replace"; return 1; }
  if [[ -d $WORK/pki ]]; then
    cp "$WORK/pki/espgw-ca.crt" "$dir/x509ca/"
    cp "$WORK/pki/gw$side.crt" "$dir/x509/"
    install -m 600 "$WORK/pki/gw$side.key" "$dir/private/"
  fi
}

# make_x509_pki: a CA and a certificate for each gateway (ECDSA P-256, subjectAltName
# DNS:gwa.espgw.test / DNS:gwb.espgw.test, the ids the swanctl example uses), in $WORK/pki.
make_x509_pki() {
  local pki="$WORK/pki" side
  mkdir -p "$pki"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/espgw-ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/espgw-ca.key" -subj "/O=espgw test/CN=espgw test CA" \
    -days 2 -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$pki/espgw-ca.crt" 2>/dev/null
  for side in a b; do
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/gw$side.key" 2>/dev/null
    openssl req -new -key "$pki/gw$side.key" -subj "/O=espgw test/CN=gw$side.espgw.test" \
      -out "$pki/gw$side.csr" 2>/dev/null
    printf '%s\n' "subjectAltName = DNS:gw$side.espgw.test" "basicConstraints = critical,CA:FALSE" \
      "keyUsage = critical,digitalSignature" >"$pki/gw$side.ext"
    openssl x509 -req -in "$pki/gw$side.csr" -CA "$pki/espgw-ca.crt" -CAkey "$pki/espgw-ca.key" \
      -set_serial "0x$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')" -days 2 \
      -extfile "$pki/gw$side.ext" -out "$pki/gw$side.crt" 2>/dev/null
  done
  openssl verify -CAfile "$pki/espgw-ca.crt" "$pki/gwa.crt" "$pki/gwb.crt" >/dev/null
}

load_swanctl() {  # load_swanctl SIDE [SWANCTL_CONF]: default $WORK/swanctl-SIDE.conf
  local file=${2:-$WORK/swanctl-$1.conf}
  swan "$1" --load-all --file "$file" >"$WORK/swanctl-load-$1.log" 2>&1 ||
    { log "swanctl --load-all failed on $1:"; cat "$WORK/swanctl-load-$1.log"; return 1; }
}

initiate() {  # initiate SIDE: brings the tunnel up through swanctl
  swan "$1" --initiate --child net --timeout 20 >"$WORK/swanctl-initiate.log" 2>&1
}

# The bytes and packets charon reports (from query_sa) for the installed CHILD_SA "net",
# as "BYTES_IN PACKETS_IN BYTES_OUT PACKETS_OUT".
child_counters() {
  swan "$1" --list-sas --raw 2>/dev/null | /usr/bin/python3 -c '
import re, sys
text = sys.stdin.read()
def value(key):
    found = re.findall(r"\b" + key + r"=(\d+)", text)
    return sum(int(v) for v in found)
print(value("bytes-in"), value("packets-in"), value("bytes-out"), value("packets-out"))'
}

# An espgwctl --json answer's top-level section as Python data, for checks.
espgw_json() {  # espgw_json SIDE COMMAND PY_EXPR  (the answer is `d`)
  espgwctl_on "$1" --json "$2" | /usr/bin/python3 -c "import json, sys; d = json.load(sys.stdin); print($3)"
}

# Stops the charons before anything else. charon 5.9.8 can hang in its own shutdown
# (libcharon_deinit waiting on a lock) when a VICI client such as espgw's parallel-child
# watcher disappears while charon is still tearing down; charon goes first, with espgw
# still answering its del_sa calls, and gets SIGKILL if it is not gone after 5 s.
stop_charons() {
  local pid
  for pid in "${CHARON_PID[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${CHARON_PID[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  CHARON_PID=()
}

iperf_ok() {  # iperf_ok CLIENT_NS SERVER_NS ADDRESS [-R]: 2 s of TCP, some data through
  local client=$1 server=$2 address=$3 reverse=${4:-}
  in_ns "$server" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$server' ss -Hltn 'sport = :5201' | grep -q ."
  local ok=0
  if in_ns "$client" timeout 20 iperf3 -c "$address" -t 2 -C cubic -J $reverse >"$WORK/iperf.json" 2>&1; then
    local mbps
    mbps=$(/usr/bin/python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e6))' "$WORK/iperf.json")
    log "iperf3 $address ${reverse:-}: $mbps Mbit/s"
    ((mbps > 0)) && ok=1
  fi
  [[ -f $WORK/iperf.pid ]] && kill "$(cat "$WORK/iperf.pid")" 2>/dev/null || true
  rm -f "$WORK/iperf.pid"
  ((ok == 1))
}
