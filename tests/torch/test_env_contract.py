#!/usr/bin/python3
"""The rank environment is torchrun's contract, checked by real PyTorch.

A tp 4 x pp 2 x dp 2 job (16 ranks) on two real topo-agent processes with 8
simulated GPUs each, next to a real topo-scheduler on loopback, ranks running
as an unprivileged account the test creates. Every rank (env_contract.py)
checks its own variables and runs gloo all-reduces over the world and over
its TP group built from those variables; the test then checks across ranks,
against the scheduler's placement (GET /v1/jobs/ID):
  - one GROUP_RANK per node, distinct between the two nodes;
  - ranks 0..15 once each, LOCAL_RANK 0..7 once on each node;
  - CUDA_VISIBLE_DEVICES[LOCAL_RANK] is the GPU the scheduler gave the rank;
  - RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK;
  - TOPO_TP/PP/DP_RANK follow Megatron's tp-cp-ep-dp-pp order;
  - every rank ran as the account.
Debian's /usr/bin/torchrun crashes on start, so the contract is tested
directly (notes/pytorch-here.md). Exit 77 (ctest skip) without torch.

usage: test_env_contract.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
"""

import json
import os
import pwd
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
sys.path.insert(0, os.path.join(HERE, "..", "agent"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import Agent, agent_cluster, job, nodes, run_jobs_as, setup, wait_for  # noqa: E402

PYTHON = "/usr/bin/python3"
SCRIPT = os.path.join(HERE, "env_contract.py")


def has_torch():
    return subprocess.run([PYTHON, "-c", "import torch, torch.distributed"],
                          capture_output=True).returncode == 0


def rank_lines(agent, jid, prefix):
    out = {}
    logs = os.path.join(agent.state_dir, "logs", str(jid))
    for name in os.listdir(logs) if os.path.isdir(logs) else []:
        with open(os.path.join(logs, name), errors="replace") as f:
            for line in f:
                if line.startswith(prefix + " "):
                    out[name] = json.loads(line[len(prefix) + 1:])
    return out


def main():
    if not has_torch():
        print("skip: %s has no torch (apt-get install python3-torch)" % PYTHON)
        sys.exit(77)
    sched_bin, agent_bin, _topo_bin = sys.argv[1:4]
    # Its own MASTER_PORT range: every agent of every test is on this host,
    # and a rendezvous holds its port for the whole run.
    d = Daemon(sched_bin, config="heartbeat_interval_ms = 200\nmaster_ports = 24000-24999\n").start()
    with agent_cluster(d, "topo-torch-env-") as cluster:
        work, agents = cluster
        certs = setup(d, work, ["n0", "n1"])
        account = cluster.account("env")
        run_jobs_as(d, account)
        for n in ("n0", "n1"):
            agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], "false").start()
        wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0, n1 up")

        j = d.api("POST", "/v1/jobs", {
            "spec": {"gpus": 16, "name": "env-contract",
                     "parallelism": {"tp": 4, "pp": 2, "dp": 2}},
            "command": [PYTHON, SCRIPT]}, expect=201)
        jid = j["id"]
        check(j["state"] == "running", "the job starts at once: %s" % j)
        placed = job(d, jid)["ranks"]
        by_rank = {r["rank"]: (r["node"], r["gpu"]) for r in placed}
        check(sorted(by_rank) == list(range(16)) and {n for n, _ in by_rank.values()} == {"n0", "n1"},
              "16 ranks on n0 and n1: %s" % placed)

        def done():
            v = job(d, jid)
            if v["state"] in ("failed", "cancelled"):
                raise Failure("job %d %s: %s" % (jid, v["state"], v.get("reason")))
            return v["state"] == "completed"
        wait_for(done, 240, "the 16 ranks to check their contract and finish")

        uid = pwd.getpwnam(account).pw_uid
        seen = {}
        for n in ("n0", "n1"):
            for log, c in rank_lines(agents[n], jid, "CONTRACT").items():
                check(not c["problems"], "rank %s on %s: %s" % (c["rank"], n, c["problems"]))
                check(c["uid"] == uid, "rank %s ran as uid %s, not the account's %d"
                      % (c["rank"], c["uid"], uid))
                check(log == "rank-%d.log" % c["rank"], "%s holds rank %s" % (log, c["rank"]))
                seen[c["rank"]] = dict(c, node=n)
        check(sorted(seen) == list(range(16)), "every rank reported: %s" % sorted(seen))
        for n in ("n0", "n1"):
            mine = [c for c in seen.values() if c["node"] == n]
            check(sorted(c["local_rank"] for c in mine) == list(range(8)),
                  "LOCAL_RANK 0..7 once on %s: %s" % (n, mine))
            check(len({c["group_rank"] for c in mine}) == 1, "one GROUP_RANK on %s" % n)
        check({seen[r]["group_rank"] for r in seen if seen[r]["node"] == "n0"} !=
              {seen[r]["group_rank"] for r in seen if seen[r]["node"] == "n1"},
              "the nodes' GROUP_RANKs differ")
        for r, c in seen.items():
            node, gpu = by_rank[r]
            check(c["node"] == node and c["gpu"] == str(gpu),
                  "rank %d: CUDA_VISIBLE_DEVICES[LOCAL_RANK] = %s on %s; scheduled GPU %d on %s"
                  % (r, c["gpu"], c["node"], gpu, node))
            check(c["rank"] == c["group_rank"] * 8 + c["local_rank"], "RANK formula for %d" % r)
            check(c["tp_rank"] == r % 4 and c["dp_rank"] == (r // 4) % 2 and c["pp_rank"] == r // 8,
                  "Megatron coordinates of rank %d: %s" % (r, c))
        world = rank_lines(agents[by_rank[0][0]], jid, "WORLD")
        check(len(world) == 1 and len(list(world.values())[0]) == 16, "rank 0 saw all 16 ranks")
        print("ok: tp4 x pp2 x dp2 on 2 x 8 GPUs: GROUP_RANK %s, every rank's contract held, world and "
              "TP all-reduces agreed, ranks ran as %s"
              % ({n: seen[min(r for r in seen if seen[r]["node"] == n)]["group_rank"]
                  for n in ("n0", "n1")}, account))


if __name__ == "__main__":
    run(main)
