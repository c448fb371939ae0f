#!/usr/bin/python3
"""Both launch modes with real PyTorch (docs/jobs.md "Launch modes").

Two real topo-agent processes (8 simulated GPUs each) next to a real
topo-scheduler on loopback; jobs of 4 GPUs, 2 per node, run as an
unprivileged account the test creates:
  - launch "rank": the agent starts one process per GPU (launch_worker.py),
    with the job's own variable (env), working directory (chdir) and output
    files (output "out-%j-%r.txt", relative to chdir); the ranks form a gloo
    group and all-reduce; every rank's RESULT line is in its own file,
    written as the account, and `GET .../logs` says where the output went;
  - launch "node": the agent starts one process per node (launch_node.py,
    in torchrun's place), which starts LOCAL_WORLD_SIZE workers with RANK =
    GROUP_RANK * LOCAL_WORLD_SIZE + i; they form one gloo group across the
    nodes and all-reduce; the node's RANKs are the placement's
    (TOPO_NODE_RANKS) and each node has one log.
Exit 77 (ctest skip) without torch.

usage: test_launch_modes.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
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
WORKER = os.path.join(HERE, "launch_worker.py")
NODE = os.path.join(HERE, "launch_node.py")


def has_torch():
    return subprocess.run([PYTHON, "-c", "import torch, torch.distributed"],
                          capture_output=True).returncode == 0


def results(text):
    return [json.loads(line[len("RESULT "):]) for line in text.splitlines()
            if line.startswith("RESULT ")]


def finish(d, jid):
    def done():
        v = job(d, jid)
        if v["state"] in ("failed", "cancelled"):
            raise Failure("job %d %s: %s" % (jid, v["state"], v.get("reason")))
        return v["state"] == "completed"
    wait_for(done, 240, "job %d to finish" % jid)


def main():
    if not has_torch():
        print("skip: %s has no torch (apt-get install python3-torch)" % PYTHON)
        sys.exit(77)
    sched_bin, agent_bin, _topo_bin = sys.argv[1:4]
    # Its own MASTER_PORT range (the other PyTorch tests use 24000- and 25000-).
    d = Daemon(sched_bin, config="heartbeat_interval_ms = 200\nmaster_ports = 26000-26999\n").start()
    with agent_cluster(d, "topo-torch-launch-") as cluster:
        work, agents = cluster
        certs = setup(d, work, ["n0", "n1"])
        account = cluster.account("launch")
        uid = pwd.getpwnam(account).pw_uid
        run_jobs_as(d, account)
        out = os.path.join(work, "out")
        os.mkdir(out)
        os.chmod(out, 0o1777)
        for n in ("n0", "n1"):
            agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], "false").start()
        wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0, n1 up")
        spec = {"gpus": 4, "gpus_per_node": 2}

        # ---- rank mode, with env, chdir and output
        j = d.api("POST", "/v1/jobs", {
            "spec": dict(spec, name="rank-mode"), "command": [PYTHON, WORKER],
            "env": {"JOB_VALUE": "forty-two"}, "chdir": out, "output": "out-%j-%r.txt"},
            expect=201)
        jid = j["id"]
        placed = {r["rank"]: r["node"] for r in job(d, jid)["ranks"]}
        check(set(placed.values()) == {"n0", "n1"}, "4 ranks on n0 and n1: %s" % placed)
        finish(d, jid)
        for r in range(4):
            path = os.path.join(out, "out-%d-%d.txt" % (jid, r))
            check(os.path.isfile(path), "rank %d's output file %s" % (r, path))
            check(os.stat(path).st_uid == uid, "%s is the account's" % path)
            with open(path) as f:
                got = results(f.read())
            check(len(got) == 1, "one RESULT in %s: %s" % (path, got))
            g = got[0]
            check(g["rank"] == r and g["world"] == 4 and g["sum"] == 10.0,
                  "rank %d all-reduced 1+2+3+4: %s" % (r, g))
            check(g["job_value"] == "forty-two" and g["cwd"] == out and g["uid"] == uid,
                  "rank %d's env, working directory and account: %s" % (r, g))
        log = d.api("GET", "/v1/jobs/%d/logs?rank=3" % jid, expect=200)["data"]
        check("standard output goes to out-%d-3.txt (in %s)" % (jid, out) in log
              and "RESULT" not in log, "rank 3's log says where its output went: %r" % log)

        # ---- node mode: one launcher per node starts the workers
        j = d.api("POST", "/v1/jobs", {
            "spec": dict(spec, name="node-mode"), "command": [PYTHON, NODE, WORKER],
            "launch": "node"}, expect=201)
        jid = j["id"]
        placed = job(d, jid)["ranks"]
        finish(d, jid)
        seen = {}
        for n in ("n0", "n1"):
            logs = os.path.join(agents[n].state_dir, "logs", str(jid))
            names = sorted(os.listdir(logs))
            check(len(names) == 1 and names[0].startswith("node-"),
                  "one log for the node on %s: %s" % (n, names))
            with open(os.path.join(logs, names[0])) as f:
                text = f.read()
            check(text.count("start job %d node " % jid) == 1, "one process on %s:\n%s" % (n, text))
            mine = sorted(r["rank"] for r in placed if r["node"] == n)
            check("ranks=%s" % ",".join(map(str, mine)) in text,
                  "TOPO_NODE_RANKS on %s is the placement's %s:\n%s" % (n, mine, text))
            for g in results(text):
                check(g["world"] == 4 and g["sum"] == 10.0 and g["uid"] == uid,
                      "a worker on %s all-reduced 1+2+3+4 as the account: %s" % (n, g))
                check(g["rank"] == g["env_rank"] == g["group_rank"] * 2 + g["local_rank"],
                      "RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK: %s" % g)
                # --node-rank $GROUP_RANK keeps the placement's rank order.
                check(g["rank"] in mine, "rank %d runs on %s, as placed: %s" % (g["rank"], n, mine))
                seen[g["rank"]] = n
        check(sorted(seen) == [0, 1, 2, 3], "the 4 workers reported: %s" % seen)
        print("ok: rank mode (4 processes, env/chdir/output) and node mode (2 launchers, 4 "
              "workers) all-reduced 10 as %s" % account)


if __name__ == "__main__":
    run(main)
