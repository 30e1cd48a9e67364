# shellcheck shell=bash
# Sourced by bench/site_to_site_bench.sh: the processes and namespaces it started, and their cleanup.
# ---------------------------------------------------------------- process bookkeeping

start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || true; }

track() {  # track PID: remember a process we started, so cleanup stops it
  local t
  t=$(start_time "$1")
  [[ -n $t ]] && echo "$1 $t" >>"$PID_FILE"
  return 0
}

ours() {  # ours PID STARTTIME: still the process we started (not a reused PID)
  [[ -n $1 && "$(start_time "$1")" == "$2" ]]
}

stop_tracked() {
  local pid t alive=()
  while read -r pid t; do
    if ours "$pid" "$t"; then kill -TERM "$pid" 2>/dev/null || true; alive+=("$pid $t"); fi
  done <"$PID_FILE"
  for _ in $(seq 1 30); do  # up to 3 s for a clean exit (espgw removes its routes)
    local left=()
    for entry in "${alive[@]}"; do
      read -r pid t <<<"$entry"
      ours "$pid" "$t" && left+=("$entry")
    done
    alive=("${left[@]}")
    ((${#alive[@]} == 0)) && break
    sleep 0.1
  done
  for entry in "${alive[@]}"; do
    read -r pid t <<<"$entry"
    ours "$pid" "$t" && kill -KILL "$pid" 2>/dev/null || true
  done
  for entry in "${alive[@]}"; do read -r pid t <<<"$entry"; wait "$pid" 2>/dev/null || true; done
  : >"$PID_FILE"
}

teardown_path() {
  stop_tracked
  local ns
  while read -r ns; do [[ -n $ns ]] && ip netns del "$ns" 2>/dev/null || true; done <"$NS_FILE"
  : >"$NS_FILE"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  teardown_path
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
