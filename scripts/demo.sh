#!/usr/bin/env bash
# What `make demo` runs: topo-scheduler on its embedded default (no
# configuration file; a fresh state directory so the demo can be run again),
# a demo topology of 16 NVL72-style racks, node agents on loopback (one real
# topo-agent that runs a real job's ranks, and one `topo-agent --simulate`
# process for the other 287 nodes), a few jobs from two tenants, then the
# queue, the placements, a real job's log and the dashboard's address. The
# daemon and the agents keep running afterwards so the dashboard can be
# looked at; the last lines say how to stop them.
#
# Jobs run as their submitter's Unix account, never as root: as root the demo
# creates two unprivileged accounts (topo-demo-alice, topo-demo-bob; kept for
# the next run, remove them with userdel) and maps its users ada and grace to
# them. The real agent's state and the job's script live in
# /var/tmp/topo-demo (TOPO_DEMO_AGENT_DIR), which those accounts can reach
# whatever the permissions of the source tree. Run as another user, both demo
# users map to that user (the agent can only run jobs as itself then).
#
#   scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TOPO=$BUILD/cli/topo
SCHED=$BUILD/scheduler/topo-scheduler
AGENT=$BUILD/node-agent/agent/topo-agent
STATE=${TOPO_DEMO_STATE:-$PWD/$BUILD/demo-state}
AGENT_DIR=${TOPO_DEMO_AGENT_DIR:-/var/tmp/topo-demo}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# A daemon left by an earlier demo holds the state directory's lock; its
# agents' pids are in demo-agents.pid.
if [ -f "$STATE/lock" ]; then
  old=$(cat "$STATE/lock" 2>/dev/null || true)
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then kill "$old" && sleep 0.5; fi
fi
if [ -f "$STATE/demo-agents.pid" ]; then
  for old in $(cat "$STATE/demo-agents.pid"); do kill "$old" 2>/dev/null || true; done
  # The real agent stops its job's ranks before it exits.
  for old in $(cat "$STATE/demo-agents.pid"); do
    for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
  done
fi
rm -rf "$STATE" "$AGENT_DIR"
mkdir -p "$STATE" "$AGENT_DIR/jobs"
chmod 0711 "$AGENT_DIR"
chmod 0755 "$AGENT_DIR/jobs"

# The Unix accounts the demo users' jobs run as: ordinary accounts, since
# no job runs as a system account (uid below min_job_uid, 1000).
if [ "$(id -u)" = 0 ]; then
  for account in topo-demo-alice topo-demo-bob; do
    uid=$(id -u "$account" 2>/dev/null || echo none)
    if [ "$uid" != none ] && [ "$uid" -lt 1000 ]; then
      userdel "$account" && uid=none  # an older demo made it a system account
    fi
    [ "$uid" != none ] ||
      useradd --user-group --no-create-home --shell /bin/sh "$account"
  done
  ada_account=topo-demo-alice
  grace_account=topo-demo-bob
else
  ada_account=$(id -un)
  grace_account=$(id -un)
fi

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

say "Importing the demo topology"
"$TOPO" topology import packaging/demo-topology.json
"$TOPO" quota set lab/llm --guaranteed 768 --shares 3
"$TOPO" quota set lab/vision --guaranteed 256 --shares 1
# A user and the Unix account their jobs run as: the CLI's --unix-user where
# it has one, else the API (POST /v1/users with unix_user).
create_user() {  # NAME TENANT ACCOUNT
  if "$TOPO" users create --help 2>/dev/null | grep -q -- --unix-user; then
    "$TOPO" users create "$1" --tenant "$2" --role user --unix-user "$3"
  else
    curl -sS --fail --cacert "$TOPO_CA" -H "Authorization: Bearer $TOPO_TOKEN" \
      -H 'Content-Type: application/json' \
      -d "{\"name\": \"$1\", \"tenant\": \"$2\", \"role\": \"user\", \"unix_user\": \"$3\"}" \
      "$TOPO_SERVER/v1/users" >/dev/null
    echo "created user $1 (tenant $2), whose jobs run as the Unix account $3"
  fi
}
create_user ada lab/llm "$ada_account"
create_user grace lab/vision "$grace_account"
ada=$("$TOPO" token create --user ada --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
grace=$("$TOPO" token create --user grace --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')

say "Starting a real node agent for gb000 (mutual TLS, simulated GPUs)"
mkdir -p "$STATE/agents"
"$SCHED" --state-dir "$STATE" ca issue --node gb000 --out "$STATE/agents" >/dev/null
nohup "$AGENT" --node gb000 --scheduler-state-dir "$STATE" --cert "$STATE/agents/gb000.pem" \
  --key "$STATE/agents/gb000-key.pem" --state-dir "$AGENT_DIR/gb000" \
  --persistent-checkpoint-dir "$AGENT_DIR/checkpoints" --gpu-backend simulated --gpus 4 \
  --gpu-model GB200 --stop-ranks-on-exit >"$STATE/agent-gb000.log" 2>&1 &
echo $! >"$STATE/demo-agents.pid"
for _ in $(seq 100); do
  "$TOPO" nodes gb000 --json 2>/dev/null | grep -q '"state": "up"' && break
  sleep 0.1
done
"$TOPO" nodes gb000 | head -3

# The only node up: the real job lands there, submitted the way a user
# would: a batch script with #TOPO lines. PyTorch when Debian's is installed
# (make deps installs it), else a shell loop that checkpoints the same way
# (node-agent/supervisor/CHECKPOINTS.md).
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  # Where the job's account can read it.
  install -m 0644 tests/torch/train_ddp.py "$AGENT_DIR/jobs/train_ddp.py"
  body="exec /usr/bin/python3 $AGENT_DIR/jobs/train_ddp.py --steps 100000 --step-sleep 0.5 --checkpoint-every 100"
else
  body='s=0; trap '"'"'s=$((s+1)); mkdir -p "$TOPO_CHECKPOINT_DIR/step-$s"; echo $s >"$TOPO_CHECKPOINT_DIR/step-$s/COMPLETE"'"'"' USR1
i=0; while :; do i=$((i+1)); echo "rank $RANK step $i"; sleep 1; done'
fi
cat >"$STATE/ddp-demo.sh" <<SCRIPT
#!/bin/sh
#TOPO --name ddp-demo --gpus 4 --tp 4 --time 24h
echo "rank \$RANK of \$WORLD_SIZE runs as: \$(id)"
$body
SCRIPT
say "Submitting a real 4-rank job as ada (a #TOPO batch script): its ranks run on gb000"
cat "$STATE/ddp-demo.sh"
TOPO_TOKEN=$ada "$TOPO" submit "$STATE/ddp-demo.sh"

say "Starting 287 simulated node agents in one process (gb001..gb287)"
seq -f 'gb%03g' 1 287 >"$STATE/agents/simulated-nodes"
nohup "$AGENT" --simulate 287 --simulate-nodes "$STATE/agents/simulated-nodes" \
  --scheduler-state-dir "$STATE" --gpus 4 --gpu-model GB200 </dev/null >"$STATE/agents-simulated.log" 2>&1 &
echo $! >>"$STATE/demo-agents.pid"
for _ in $(seq 300); do
  up=$("$TOPO" nodes --state up --json 2>/dev/null | grep -c '"name"' || true)
  [ "$up" -ge 288 ] && break
  sleep 0.2
done
echo "$up of 288 nodes up"

say "Submitting jobs as ada (lab/llm) and grace (lab/vision)"
TOPO_TOKEN=$ada "$TOPO" submit --name llama-405b --gpus 512 --tp 8 --pp 8 --time 12h -- python train.py --model llama3-405b
TOPO_TOKEN=$ada "$TOPO" submit --name moe-235b --gpus 256 --tp 4 --ep 8 --pp 2 --time 6h -- python train.py --model moe
TOPO_TOKEN=$grace "$TOPO" submit --name vit-22b --gpus 128 --tp 4 --time 4h -- python train_vit.py
TOPO_TOKEN=$grace "$TOPO" submit --name clip-sweep --gpus 8 --time 1h --wrap "python sweep.py --trial 1"
TOPO_TOKEN=$ada "$TOPO" submit --name llama-70b --gpus 512 --tp 8 --pp 4 --time 8h -- python train.py --model llama3-70b

say "The queue (as the cluster admin)"
"$TOPO" queue
say "What ada sees: only lab/llm"
TOPO_TOKEN=$ada "$TOPO" queue
say "Where job 2 runs"
"$TOPO" show 2
say "The real job's rank 0, read from gb000 through the scheduler (note its account)"
for _ in $(seq 100); do
  "$TOPO" logs 1 >"$STATE/job1-rank0.log" 2>/dev/null && grep -q "runs as:" "$STATE/job1-rank0.log" && break
  sleep 0.1
done
sleep 2
"$TOPO" logs 1 >"$STATE/job1-rank0.log"
head -n 12 "$STATE/job1-rank0.log"
grep -q "runs as: uid=.*($ada_account)" "$STATE/job1-rank0.log" ||
  echo "warning: the job's log does not show the account $ada_account"
say "Tenants"
"$TOPO" tenants

say "Dashboard"
echo "  $TOPO_SERVER/#token=$TOPO_TOKEN"
echo "  (the browser needs to trust $TOPO_CA, or accept the certificate once)"
echo
echo "topo-scheduler keeps running as pid $pid, the agents as $(tr '\n' ' ' <"$STATE/demo-agents.pid")."
echo "Try, with the same settings:"
echo "  export TOPO_SERVER=$TOPO_SERVER TOPO_CA=$TOPO_CA TOPO_TOKEN=\$(cat $STATE/admin-token)"
echo "  $TOPO queue --all; $TOPO nodes; $TOPO events --limit 5; $TOPO logs 1 --follow"
echo "  $TOPO drain gb000 --reason demo     # job 1 checkpoints and moves (to a simulated node)"
echo "Stop them with: kill $pid \$(cat $STATE/demo-agents.pid)"
