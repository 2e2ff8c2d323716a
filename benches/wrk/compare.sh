#!/bin/bash
# Single-event POST /events measured with wrk (the load generator of
# issue 35's own figures), old binary beside new in alternating rounds:
# requests/s, latency, server CPU per request (from /proc/PID/stat),
# calls per commit (from /metrics) and the box's idle share.
#
#   benches/wrk/compare.sh OLD_BIN NEW_BIN [CONNECTIONS] [SECONDS] [ROUNDS]
#
# Needs wrk (apt-get install wrk). The servers run with the default log
# level (one access line per request) unless RUST_LOG is set.
# RESEND_AFTER=N makes every other request a retry of the event sent N
# requests before it (benches/wrk/single_event.lua); WATERMARK=1 gives the
# partition a watermark that follows the events, so windows close.
set -euo pipefail
OLD=$1; NEW=$2; C=${3:-64}; D=${4:-8}; R=${5:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=${PORT:-18080}
export WRK_THREADS=1
HZ=$(getconf CLK_TCK)
one() {
  local bin=$1 dir; dir=$(mktemp -d)
  if [ -n "${WATERMARK:-}" ]; then
    # the watermark follows the events (5 s out of order): windows close as
    # the run goes, and each close emits its changes
    echo '{"partitions":["events"],"windows":{"per_minute":{"kind":"fixed","size":60000}},"lateness":0,"watermarks":{"events":{"max_out_of_orderness":5000}}}' > "$dir/pipeline.json"
  else
    echo '{"partitions":["events"],"windows":{"per_minute":{"kind":"fixed","size":60000}},"lateness":0}' > "$dir/pipeline.json"
  fi
  "$bin" serve --addr 127.0.0.1:$PORT --db "$dir/db" --pipeline "$dir/pipeline.json" > "$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do curl -sf -o /dev/null http://127.0.0.1:$PORT/readyz && break; sleep 0.05; done
  wrk -t1 -c"$C" -d1s -s "$HERE/single_event.lua" http://127.0.0.1:$PORT > /dev/null  # warm-up
  groups() { curl -s http://127.0.0.1:$PORT/metrics | awk '/^streamforge_commit_group_calls_(sum|count)/ {printf "%s ", $2}'; }
  local g0 c0 b0 out g1 c1 b1
  g0=$(groups); c0=$(awk '{print $14+$15}' /proc/$pid/stat); b0=$(head -1 /proc/stat)
  out=$(wrk -t1 -c"$C" -d"${D}s" -s "$HERE/single_event.lua" http://127.0.0.1:$PORT)
  c1=$(awk '{print $14+$15}' /proc/$pid/stat); b1=$(head -1 /proc/stat); g1=$(groups)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  python3 - "$(echo "$out" | grep '^WRK')" "$(echo "$out" | awk '/requests in/ {print $1}')" \
    "$c0" "$c1" "$HZ" "$b0" "$b1" "$g0" "$g1" <<'PY'
import sys
line, req, c0, c1, hz, b0, b1, g0, g1 = sys.argv[1:]
req = int(req)
cpu = (int(c1) - int(c0)) / int(hz)
a = [int(x) for x in b0.split()[1:]]; b = [int(x) for x in b1.split()[1:]]
d = [y - x for x, y in zip(a, b)]
idle = (d[3] + d[4]) / sum(d)
g0 = [float(x) for x in g0.split()] or [0, 0]; g1 = [float(x) for x in g1.split()] or [0, 0]
per = (g1[0] - g0[0]) / max(g1[1] - g0[1], 1) if len(g1) == 2 and len(g0) == 2 else 0
print("%s server_cpu_us=%.1f calls_per_commit=%.1f box_idle=%.1f%%" % (line[4:], cpu / req * 1e6, per, idle * 100))
PY
}
for r in $(seq 1 "$R"); do
  echo "round $r old: $(one "$OLD")"
  echo "round $r new: $(one "$NEW")"
done
