#!/usr/bin/env bash
# Where the server's CPU goes during one `streamforge send`, by thread.
#
#   benches/send_threads.sh BIN WORKLOAD PIPELINE   (PORT=18700 by default)
#
# Starts BIN serve on a fresh database with PIPELINE, sends WORKLOAD (the
# NDJSON that benches/gen_workload.py writes) with BIN send, and prints the
# wall time, the client's CPU (/usr/bin/time) and the server's CPU per
# thread name, from /proc/PID/task/*/stat before and after the send.
set -euo pipefail
BIN=$1 WORKLOAD=$2 PIPELINE=$3
ADDR=127.0.0.1:${PORT:-18700}
dir=$(mktemp -d)
trap 'kill "$SP" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$BIN" serve --addr $ADDR --db "$dir/s.db" --pipeline "$PIPELINE" > "$dir/server.log" 2>&1 &
SP=$!
for _ in $(seq 100); do curl -sf http://$ADDR/readyz > /dev/null && break; sleep 0.1; done
# Ready, and ours (not another server on the port).
kill -0 "$SP" 2> /dev/null || { cat "$dir/server.log" >&2; exit 1; }
snap() {
  for t in /proc/$SP/task/*; do
    echo "$(basename "$t") $(tr ' ' _ < "$t/comm") $(awk '{print $14+$15}' "$t/stat")"
  done | sort
}
snap > "$dir/before"
t0=$(date +%s.%N)
/usr/bin/time -f "client %U s user %S s system" "$BIN" send "$WORKLOAD" --url http://$ADDR > "$dir/send.out" 2> "$dir/time.out"
t1=$(date +%s.%N)
snap > "$dir/after"
tail -1 "$dir/send.out"
cat "$dir/time.out"
echo "wall $(echo "$t1 - $t0" | bc) s"
tck=$(getconf CLK_TCK)
join -a2 -e 0 -o 2.2,1.3,2.3 "$dir/before" "$dir/after" |
  awk -v tck="$tck" '{d = $3 - $2; if (d > 0) { s[$1] += d; t += d } }
    END { for (k in s) printf "%-16s %6.2f s\n", k, s[k] / tck; printf "%-16s %6.2f s\n", "server total", t / tck }' |
  sort -k2 -nr
