#!/usr/bin/env bash
# First pull to an answer (issue #22): the `hello` sample as an image in Debian's
# docker-registry on loopback; a fresh `wisp serve` (empty image store) each run; the time
# from `wisp apply` of an image-only Service to the first 200 through the ingress: digest
# resolution, pull, unpack, sandbox, start, readiness. Needs root, runc, docker-registry.
#
# Usage: bench/scripts/first_pull.sh [RUNS] [TARGET_DIR]   (default 5, target/release)
set -euo pipefail
runs=${1:-5}
bin=${2:-target/release}
wisp="$bin/wisp"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ms() { date +%s%3N; }

port=$(free_port)
cat >"$work/registry.yml" <<EOF
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$port}
EOF
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done

"$wisp" image pack --data-dir "$work/pack" --binary "$bin/hello" --tag hello:1 --env HOST=0.0.0.0 >/dev/null
"$wisp" image push --data-dir "$work/pack" hello:1 "127.0.0.1:$port/hello:1"
size=$(du -sk "$work/registry" | cut -f1)
echo "image in the registry: ${size} KiB (registry storage)"

times=()
for run in $(seq "$runs"); do
  data="$work/data$run"
  api=$(free_port); http=$(free_port); local_port=$(free_port)
  "$wisp" serve --data-dir "$data" --api-addr "127.0.0.1:$api" --http-addr "127.0.0.1:$http" \
    --local-addr "127.0.0.1:$local_port" --container-bridge wfp$run --container-subnet "10.215.$run.0/24" \
    2>"$work/serve$run.log" &
  pid=$!
  for _ in $(seq 200); do grep -q "API listening" "$work/serve$run.log" && break; sleep 0.05; done
  export WISP_DATA_DIR="$data" WISP_SERVER="https://127.0.0.1:$api"
  start=$(ms)
  "$wisp" apply -f - >/dev/null 2>&1 <<EOF
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: hello}
spec:
  template:
    spec:
      containers:
      - image: 127.0.0.1:$port/hello:1
EOF
  until [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: hello.default.example.com' "http://127.0.0.1:$http/")" = 200 ]; do
    if [ $(( $(ms) - start )) -gt 60000 ]; then echo "run $run: no answer after 60 s" >&2; tail -20 "$work/serve$run.log" >&2; exit 1; fi
    sleep 0.005
  done
  took=$(( $(ms) - start ))
  times+=("$took")
  echo "run $run: apply → first answer ${took} ms"
  kill -TERM $pid; wait $pid 2>/dev/null || true
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "apply → first 200, image pulled from the loopback registry into an empty store:"
echo "  runs $runs, min $(echo "$sorted" | head -1) ms, median $(echo "$sorted" | sed -n "$(( (runs + 1) / 2 ))p") ms, max $(echo "$sorted" | tail -1) ms"
