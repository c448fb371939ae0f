#!/usr/bin/env bash
# What `make demo` runs: topo-scheduler on its embedded default (no
# configuration file; a fresh state directory so the demo can be run again),
# a demo topology of 16 NVL72-style racks, a few jobs from two tenants, then
# the queue, the placements and the dashboard's address. The daemon keeps
# running afterwards so the dashboard can be looked at; the last lines say how
# to stop it.
#
#   scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TOPO=$BUILD/cli/topo
SCHED=$BUILD/scheduler/topo-scheduler
STATE=${TOPO_DEMO_STATE:-$PWD/$BUILD/demo-state}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# A daemon left by an earlier demo holds the state directory's lock.
if [ -f "$STATE/lock" ]; then
  old=$(cat "$STATE/lock" 2>/dev/null || true)
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then kill "$old" && sleep 0.5; fi
fi
rm -rf "$STATE"
mkdir -p "$STATE"

listen=127.0.0.1:8443
if (exec 3<>/dev/tcp/127.0.0.1/8443) 2>/dev/null; then
  listen=127.0.0.1:0   # 8443 is taken: let the kernel pick a port
fi
say "Starting topo-scheduler (state in $STATE)"
nohup "$SCHED" --state-dir "$STATE" --listen "$listen" >"$STATE/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ -s "$STATE/endpoint" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$STATE/daemon.log"; exit 1; }
  sleep 0.1
done
cat "$STATE/daemon.log"
export TOPO_SERVER TOPO_CA TOPO_TOKEN
TOPO_SERVER=$(cat "$STATE/endpoint")
TOPO_CA=$STATE/ca.pem
TOPO_TOKEN=$(cat "$STATE/admin-token")

say "Importing the demo topology and bringing its nodes up"
"$TOPO" topology import packaging/demo-topology.json
"$TOPO" resume 'gb[000-287]' >/dev/null
"$TOPO" quota set lab/llm --guaranteed 768 --shares 3
"$TOPO" quota set lab/vision --guaranteed 256 --shares 1
"$TOPO" users create ada --tenant lab/llm --role user
"$TOPO" users create grace --tenant lab/vision --role user
ada=$("$TOPO" token create --user ada --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
grace=$("$TOPO" token create --user grace --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')

say "Submitting jobs as ada (lab/llm) and grace (lab/vision)"
TOPO_TOKEN=$ada "$TOPO" submit --name llama-405b --gpus 512 --tp 8 --pp 8 --time 12h
TOPO_TOKEN=$ada "$TOPO" submit --name moe-235b --gpus 256 --tp 4 --ep 8 --pp 2 --time 6h
TOPO_TOKEN=$grace "$TOPO" submit --name vit-22b --gpus 128 --tp 4 --time 4h
TOPO_TOKEN=$grace "$TOPO" submit --name clip-sweep --gpus 8 --time 1h
TOPO_TOKEN=$ada "$TOPO" submit --name llama-70b --gpus 512 --tp 8 --pp 4 --time 8h

say "The queue (as the cluster admin)"
"$TOPO" queue
say "What ada sees: only lab/llm"
TOPO_TOKEN=$ada "$TOPO" queue
say "Where job 1 runs"
"$TOPO" show 1
say "Tenants"
"$TOPO" tenants

say "Dashboard"
echo "  $TOPO_SERVER/#token=$TOPO_TOKEN"
echo "  (the browser needs to trust $TOPO_CA, or accept the certificate once)"
echo
echo "topo-scheduler keeps running as pid $pid. Try, with the same settings:"
echo "  export TOPO_SERVER=$TOPO_SERVER TOPO_CA=$TOPO_CA TOPO_TOKEN=\$(cat $STATE/admin-token)"
echo "  $TOPO queue --all; $TOPO nodes; $TOPO events --limit 5"
echo "Stop it with: kill $pid"
