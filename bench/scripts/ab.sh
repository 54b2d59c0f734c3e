#!/usr/bin/env bash
# Interleaved A/B of proxies already running on this machine: CPU per request, split into
# user and system time, for changes too small for one `dataplane_probe` run to see.
#
#   bench/scripts/ab.sh ROUNDS SECONDS NAME=PIDS,URL[,HOST] ...
#
# Each round runs `wrk -t2 -c50 -dSECONDS` against every target in turn (so machine noise
# hits them alike) and reads utime/stime of the target's processes (PIDS: space-separated,
# quoted) from /proc before and after. Prints each run, then the mean per target.
# Example (two wisp builds serving the same Service, and bare_proxy):
#   bench/scripts/ab.sh 6 4 "old=4242,http://127.0.0.1:18080/,probe.default.example.com" \
#     "new=4343,http://127.0.0.1:28080/,probe.default.example.com" "bare=4444,http://127.0.0.1:18120/"
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0" >&2; exit 2; }
rounds=$1 secs=$2; shift 2
command -v wrk >/dev/null || { echo "wrk is not installed" >&2; exit 1; }
ticks=$(getconf CLK_TCK)
cpu() { # PIDS -> "utime stime" in clock ticks, summed
  local u=0 s=0 p a b
  for p in $1; do read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat"); u=$((u + a)); s=$((s + b)); done
  echo "$u $s"
}
declare -A sum_rps sum_usr sum_sys
for ((r = 1; r <= rounds; r++)); do
  for t in "$@"; do
    name=${t%%=*} rest=${t#*=}
    IFS=, read -r pids url host <<<"$rest"
    read -r u0 s0 < <(cpu "$pids")
    out=$(wrk -t2 -c50 -d"${secs}s" ${host:+-H "Host: $host"} "$url")
    read -r u1 s1 < <(cpu "$pids")
    reqs=$(awk '/requests in/{print $1}' <<<"$out")
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
    usr=$(echo "($u1 - $u0) * 1000000 / $ticks / $reqs" | bc -l)
    sys=$(echo "($s1 - $s0) * 1000000 / $ticks / $reqs" | bc -l)
    printf 'round %d  %-10s %9.0f req/s  user %6.2f µs/req  sys %6.2f µs/req\n' "$r" "$name" "$rps" "$usr" "$sys"
    sum_rps[$name]=$(echo "${sum_rps[$name]:-0} + $rps" | bc -l)
    sum_usr[$name]=$(echo "${sum_usr[$name]:-0} + $usr" | bc -l)
    sum_sys[$name]=$(echo "${sum_sys[$name]:-0} + $sys" | bc -l)
  done
done
echo "mean of $rounds rounds:"
for t in "$@"; do
  name=${t%%=*}
  printf '  %-10s %9.0f req/s  user %6.2f µs/req  sys %6.2f µs/req\n' "$name" \
    "$(echo "${sum_rps[$name]} / $rounds" | bc -l)" "$(echo "${sum_usr[$name]} / $rounds" | bc -l)" \
    "$(echo "${sum_sys[$name]} / $rounds" | bc -l)"
done
