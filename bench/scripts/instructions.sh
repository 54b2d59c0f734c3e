#!/usr/bin/env bash
# User-space instructions per proxied request, counted by valgrind's callgrind: the same
# figure, within 1–2 %, on every run of the same build, where CPU time on this VM moves
# by ±20 %.
# For A/B work on the data plane's own code; it does not count kernel work, cache misses
# or waits, so confirm a gain in time with ab.sh / dataplane_probe before believing it.
#
#   bench/scripts/instructions.sh [WISP_BIN ...]      (default: target/release/wisp)
#   BARE=1 bench/scripts/instructions.sh ...          (also target/release/bare_proxy)
#
# Each WISP_BIN runs `serve` under callgrind with a fresh data dir and one Service
# (min-scale 1, containerConcurrency 0, the `hello` sample); after a warm-up of 3 s the
# counters are zeroed, `wrk -t1 -c8 -dSECS` (SECS, default 8) runs, and the counters are
# dumped: instructions of the whole wisp process, less its idle rate over that time,
# ÷ requests wrk completed. Needs valgrind,
# wrk and `cargo build --release -p wisp -p wisp-samples -p wisp-bench`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${SECS:-8}
hello=$root/target/release/hello
for tool in valgrind callgrind_control wrk; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
[ -x "$hello" ] || { echo "$hello is missing: build wisp-samples (release)" >&2; exit 1; }
[ $# -gt 0 ] || set -- "$root/target/release/wisp"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT

# counted PID OUT N CMD...: zero the counters of PID, run CMD (its output to OUT.N.out),
# dump, and print the instructions of dump number N (callgrind writes OUT.N).
counted() {
  local pid=$1 file=$2.$3 ir=""
  shift 3
  callgrind_control -z "$pid" >/dev/null 2>&1
  "$@" >"$file.out"
  callgrind_control -d "$pid" >/dev/null 2>&1
  for _ in $(seq 50); do
    ir=$(awk '/^(summary|totals):/{print $2; exit}' "$file" 2>/dev/null || true)
    [ -n "$ir" ] && break
    sleep 0.2
  done
  echo "${ir:-}"
}

# measure NAME URL HOST PID OUT: warm up; count the idle process for 3 s (timers, the
# autoscaler's ticks: work that does not scale with requests) and then the loaded one, and
# print (loaded − idle rate × load time) ÷ requests.
measure() {
  local name=$1 url=$2 host=$3 pid=$4 out=$5 idle loaded reqs
  wrk -t1 -c8 -d3s ${host:+-H "Host: $host"} "$url" >/dev/null
  idle=$(counted "$pid" "$out" 1 sleep 3)
  loaded=$(counted "$pid" "$out" 2 wrk -t1 -c8 -d"${secs}s" ${host:+-H "Host: $host"} "$url")
  reqs=$(awk '/requests in/{print $1}' "$out.2.out")
  [ -n "$idle" ] && [ -n "$loaded" ] && [ "${reqs:-0}" -gt 0 ] ||
    { echo "$name: no figure (callgrind output in $out.*)" >&2; return 1; }
  printf '%-40s %8d requests  %8d instructions/request  (idle: %d per second)\n' "$name" \
    "$reqs" $(((loaded - idle * secs / 3) / reqs)) $((idle / 3))
}

# answering URL HOST WHAT: waits (up to 150 s) until URL answers 200, else fails naming WHAT.
answering() {
  local code=""
  for _ in $(seq 300); do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' ${2:+-H "Host: $2"} "$1" || true)
    [ "$code" = 200 ] && return 0
    sleep 0.5
  done
  echo "$3 never answered 200 at $1" >&2
  return 1
}

# wait_for PATTERN FILE: the first match of an address line, within 120 s.
wait_for() {
  local line
  for _ in $(seq 600); do
    line=$(grep -m1 -o "$1 http://[0-9.:]*" "$2" 2>/dev/null || true)
    [ -n "$line" ] && { echo "${line##* }"; return 0; }
    sleep 0.2
  done
  echo "timed out waiting for '$1' in $2" >&2
  return 1
}

cat >"$work/svc.yaml" <<EOF
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: probe
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "1"
    spec:
      containerConcurrency: 0
      containers:
        - command: ["$hello"]
EOF

i=0
for bin in "$@"; do
  i=$((i + 1))
  dir=$work/wisp$i
  mkdir -p "$dir"
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$bin" serve --data-dir "$dir/data" \
    --apply "$work/svc.yaml" --api-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
    --local-addr 127.0.0.1:0 >"$dir/log" 2>&1 </dev/null &
  pid=$!
  pids+=("$pid")
  url=$(wait_for "wisp: ingress listening on" "$dir/log")/
  answering "$url" probe.default.example.com "$bin (log: $dir/log)"
  measure "$bin (ingress + queue)" "$url" probe.default.example.com "$pid" "$dir/cg"
  kill -TERM "$pid"
done

if [ -n "${BARE:-}" ]; then
  dir=$work/bare
  mkdir -p "$dir"
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  app=$(free_port) front=$(free_port)
  PORT=$app "$hello" >"$dir/hello.log" 2>&1 &
  pids+=("$!")
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$root/target/release/bare_proxy" \
    --listen "127.0.0.1:$front" --upstream "127.0.0.1:$app" >"$dir/log" 2>&1 &
  pid=$!
  pids+=("$pid")
  url=http://127.0.0.1:$front/
  answering "$url" "" "bare_proxy (log: $dir/log)"
  measure "bare_proxy (reference)" "$url" "" "$pid" "$dir/cg"
fi
