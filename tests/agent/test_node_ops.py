#!/usr/bin/python3
"""Real topo-agent processes under the operations of a real cluster, next to a
real topo-scheduler on loopback.

  pids        a job's spec.pids_max reaches its cgroup's pids.max on its node
              through the scheduler's start; a job without one gets the agent's
              --job-pids-max, and a larger one is lowered to it.

usage: test_node_ops.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
       [pids]
Standard library only (/usr/bin/python3); run as root.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import (Agent, agent_cluster, cgroup_mount, job, nodes, run_jobs_as,  # noqa: E402
                    setup, wait_for)

CONFIG = "heartbeat_interval_ms = 200\n"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def rank_pids(agent, jid):
    """(pids, cgroup dirs) the agent's supervisor records for the job."""
    try:
        with open(os.path.join(agent.state_dir, "supervisor", "jobs", "%d.json" % jid)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return [], []
    return sorted(int(r["pid"]) for r in doc.get("ranks", [])), doc.get("cgroup", {}).get("dirs", [])


PIDS_MAX = r'''
p=$(grep ':pids:' /proc/self/cgroup | cut -d: -f3)
if [ -n "$p" ]; then f=/sys/fs/cgroup/pids$p/pids.max
else f=$(grep -m1 cgroup2 /proc/self/mounts | cut -d' ' -f2)$(grep '^0::' /proc/self/cgroup | cut -d: -f3)/pids.max
fi
echo "pids.max=$(cat "$f")"
'''


def test_pids(d, agent_bin, topo_bin, work, agents):
    if cgroup_mount() is None:
        print("skipped: no cgroups on this kernel")
        sys.exit(77)
    certs = setup(d, work, ["n0"])
    script = os.path.join(work, "pids.sh")
    with open(script, "w") as f:
        f.write(PIDS_MAX)
    agents["n0"] = Agent(agent_bin, d, work, "n0", certs["n0"][0], certs["n0"][1], "true",
                         extra=["--job-pids-max", "2000"]).start()
    wait_for(lambda: nodes(d)["n0"]["state"] == "up", 20, "n0 to come up")
    seen = {}
    for name, spec in (("own", {"pids_max": 50}), ("node", {}), ("above", {"pids_max": 5000})):
        body = {"spec": dict({"gpus": 8, "name": name, "parallelism": {"tp": 8}}, **spec),
                "command": ["/bin/sh", script]}
        jid = d.api("POST", "/v1/jobs", body, expect=201)["id"]
        wait_for(lambda: job(d, jid)["state"] == "completed", 20, "job %s to complete" % name)
        log = read(os.path.join(agents["n0"].state_dir, "logs", str(jid), "rank-0.log"))
        seen[name] = log.split("pids.max=")[-1].split()[0] if "pids.max=" in log else log
    check(seen == {"own": "50", "node": "2000", "above": "2000"},
          "pids.max of each job's cgroup: %s" % seen)
    check("pids_max 5000 lowered to this node's 2000 (--job-pids-max)" in agents["n0"].log(),
          "the agent says it lowered the job's pids_max:\n" + agents["n0"].log()[-2000:])
    print("ok: pids.max %s" % seen)


def main():
    sched_bin, agent_bin, topo_bin = sys.argv[1], sys.argv[2], sys.argv[3]
    which = sys.argv[4] if len(sys.argv) > 4 else "pids"
    d = Daemon(sched_bin, config=CONFIG).start()
    with agent_cluster(d, "topo-node-ops-test-") as cluster:
        work, agents = cluster
        run_jobs_as(d, cluster.account("jobs"))
        tests = {"pids": test_pids}
        tests[which](d, agent_bin, topo_bin, work, agents)


if __name__ == "__main__":
    run(main)
