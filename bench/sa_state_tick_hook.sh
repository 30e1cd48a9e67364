#!/bin/bash
# A CONTROL_BENCH_HOOK for bench/control_install_bench.cpp (bench/scaling_bench.sh's
# control load): at "installed", the sa-state thread's CPU time per reservation tick over
# 5 s with every SA installed and idle, from /proc/PID/task/TID/schedstat (ns on CPU and
# timeslices: one per tick, as the thread sleeps between ticks); at "removed", espgw's RSS
# then and 5 s later. Appends a JSON row to SA_STATE_HOOK_OUT, labelled SA_STATE_HOOK_LABEL.
#   CONTROL_BENCH_HOOK=bench/sa_state_tick_hook.sh SCALE_CHILDREN= SCALE_PAIRS= \
#     SCALE_TUNNELS= SCALE_CONTROL=5000 SCALE_PLOT= bench/scaling_bench.sh
p=$PPID
for _ in 1 2 3 4 5; do
  tr '\0' '\n' </proc/"$p"/cmdline | head -1 | grep -q control_install_bench && break
  p=$(awk '{print $4}' /proc/"$p"/stat)
done
pid=$(tr '\0' '\n' </proc/"$p"/cmdline | sed -n 4p)
if [[ $1 == removed ]]; then
  r0=$(awk '/^VmRSS:/ {print $2}' /proc/"$pid"/status); sleep 5
  r5=$(awk '/^VmRSS:/ {print $2}' /proc/"$pid"/status)
  echo "{\"label\": \"${SA_STATE_HOOK_LABEL:-}\", \"rss_kib_at_removal\": $r0, \"rss_kib_5s_later\": $r5}" >>"${SA_STATE_HOOK_OUT:-/tmp/sa_state_tick.jsonl}"
  exit 0
fi
[[ $1 == installed ]] || exit 0
tid=$(grep -lx 'sa-state' /proc/"$pid"/task/*/comm | head -1 | cut -d/ -f5)
sleep 1
read -r cpu0 wait0 slices0 </proc/"$pid"/task/"$tid"/schedstat
t0=$(date +%s%N)
sleep 5
read -r cpu1 wait1 slices1 </proc/"$pid"/task/"$tid"/schedstat
t1=$(date +%s%N)
python3 -c "
import json,sys
cpu,wait,slices,wall=$((cpu1-cpu0)),$((wait1-wait0)),$((slices1-slices0)),$((t1-t0))
print(json.dumps({'label':'${SA_STATE_HOOK_LABEL:-}','sa_state_cpu_ms':round(cpu/1e6,2),'runqueue_wait_ms':round(wait/1e6,2),'ticks':slices,'wall_s':round(wall/1e9,2),'cpu_us_per_tick':round(cpu/1e3/max(slices,1),2),'cpu_share':round(cpu/wall,4)}))" >>"${SA_STATE_HOOK_OUT:-/tmp/sa_state_tick.jsonl}"
