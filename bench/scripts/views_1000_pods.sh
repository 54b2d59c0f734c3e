#!/bin/bash
# Issue #24's figure: `kubectl get pods -A` with 1,000 running replicas (10 services with
# min-scale 100, the hello sample), its wall time and wisp's CPU for one list. Needs a
# release build (`cargo build --release -p wisp -p wisp-samples`; TARGET= its target dir).
set -e
B=${TARGET:-target}/release
D=${DIR:-/tmp/wisp-views-fig}
rm -rf $D; mkdir -p $D
$B/wisp serve --api-addr 127.0.0.1:17270 --http-addr 127.0.0.1:18280 --local-addr 127.0.0.1:18281 --data-dir $D/data --container-bridge wvf0 --container-subnet 10.203.0.0/24 > $D/serve.log 2>&1 &
PID=$!
echo $PID > $D/pid
sleep 3
$B/wisp kubeconfig --data-dir $D/data > $D/kubeconfig
export KUBECONFIG=$D/kubeconfig
for i in $(seq 1 10); do
cat <<Y | kubectl apply -f - 2>/dev/null
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: s$i
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "100"
    spec:
      containers:
      - command: [$B/hello]
Y
done
for t in $(seq 1 120); do
  n=$(kubectl get pods -A --no-headers 2>/dev/null | grep -c " 1/1 *Running" || true)
  echo "$(date +%T) running=$n"
  [ "$n" -ge 1000 ] && break
  sleep 5
done

# Then measure:
D=${DIR:-/tmp/wisp-views-fig}
PID=$(cat $D/pid)
export KUBECONFIG=$D/kubeconfig
TOKEN=$(cat $D/data/token)
URL=$(cat $D/data/api-url)
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
TCK=$(getconf CLK_TCK)
kubectl get pods -A > /dev/null   # warm the discovery cache
# Idle rate (probes of 1,000 replicas, the KPA ticks), over 10 s.
c0=$(cpu); sleep 10; c1=$(cpu)
idle=$(echo "scale=4; ($c1-$c0)/$TCK/10" | bc)
echo "idle CPU: ${idle} s/s"
run() { # name, N, command...
  local name=$1 n=$2; shift 2
  local c0=$(cpu) t0=$(date +%s.%N)
  for i in $(seq 1 $n); do "$@" > /dev/null; done
  local t1=$(date +%s.%N) c1=$(cpu)
  local wall=$(echo "scale=4; ($t1-$t0)/$n" | bc)
  local busy=$(echo "scale=4; (($c1-$c0)/$TCK - $idle*($t1-$t0))/$n" | bc)
  echo "$name: wall ${wall} s per call, wisp CPU ${busy} s per call (over $n calls)"
}
run "kubectl get pods -A" 10 kubectl get pods -A
run "kubectl get pods -A -o json" 10 kubectl get pods -A -o json
run "GET /api/v1/pods (Table)" 10 curl -s --cacert $D/data/ca.crt -H "Authorization: Bearer $TOKEN" -H 'Accept: application/json;as=Table;v=v1;g=meta.k8s.io' $URL/api/v1/pods
run "GET /api/v1/pods (JSON)" 10 curl -s --cacert $D/data/ca.crt -H "Authorization: Bearer $TOKEN" $URL/api/v1/pods
echo "pods: $(kubectl get pods -A --no-headers | grep -c ' 1/1 *Running')"
curl -s --cacert $D/data/ca.crt -H "Authorization: Bearer $TOKEN" $URL/api/v1/pods | wc -c
kill $PID
