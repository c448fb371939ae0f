#!/usr/bin/python3
"""A topology change under running jobs, through real simulated agents
(`topo-agent --simulate`) and a real topo-scheduler on loopback: one rack
(leaf) removed, one added, as an admin replaces hardware.

Two jobs run on the 64 simulated nodes of sim64. Version 2 of the topology
leaves out the leaf that holds the first job's ranks and adds leaf8 (m0..m7).
`topo topology import --drain --wait 1m` is refused, naming the job, and drains
that leaf: its agents checkpoint the job and stop it, and it restarts on other
nodes from that checkpoint (restart_count 1, the stored step); the second job
is untouched. Once the leaf is drained topo imports again and the change
applies: the leaf is gone,
m0..m7 come up when their agents (a second simulator) register, and a job runs
on them. No job fails; the tenant's held GPUs and its fairshare usage carry
over the change.

usage: test_topology_live.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
Standard library only (/usr/bin/python3).
"""

import copy
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from harness import Cli, check  # noqa: E402
from test_simulate import Simulator, run_simulated, topology, wait_for  # noqa: E402

CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"


def nodes(d):
    return {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}


def nodes_of(d, jid):
    return sorted({r["node"] for r in d.api("GET", "/v1/jobs/%d" % jid, expect=200)["ranks"]})


def tenant(d, name="default"):
    return next(t for t in d.api("GET", "/v1/tenants", expect=200)["tenants"]
                if t["name"] == name)


def put(d, topo, drain=False):
    return d.request("PUT", "/v1/topology", {"format": "json", "content": json.dumps(topo),
                                             "drain": drain}, d.admin_token)


def test(d, agent_bin, work):
    topo_bin = sys.argv[3]
    v1 = topology()
    status, out = put(d, v1)
    check(status == 200, "first import: %s %s" % (status, out))
    sim = Simulator(agent_bin, d, os.path.join(work, "simulator.log"))
    added = None
    try:
        wait_for(lambda: sim.find(ev="ready"), 20, "the simulator to start:\n" + sim.log())
        wait_for(lambda: all(n["state"] == "up" for n in nodes(d).values()), 30,
                 "all 64 simulated nodes to come up")
        # Four nodes: the other nodes' drain reports may reach the scheduler before rank 0's
        # node reports the drain's checkpoint; the job moves at rank 0's node's report.
        a = d.api("POST", "/v1/jobs", {"spec": {"gpus": 32, "parallelism": {"tp": 8}},
                                       "command": ["true"], "time_limit_s": 3600},
                  expect=201)["id"]
        wait_for(lambda: len(sim.find(ev="start", job=a, restart_count=0)) == 4, 10,
                 "job %d's start on 4 nodes" % a)
        held = nodes_of(d, a)
        leaf = nodes(d)[held[0]]["leaf"]
        removed = sorted(n for n, v in nodes(d).items() if v["leaf"] == leaf)
        b = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "parallelism": {"tp": 8},
                                                "exclude": ",".join(removed)},
                                       "command": ["true"], "time_limit_s": 3600},
                  expect=201)["id"]
        wait_for(lambda: len(sim.find(ev="start", job=b, restart_count=0)) == 2, 10,
                 "job %d's start" % b)
        b_nodes = nodes_of(d, b)
        usage_before = tenant(d)
        check(usage_before["usage_gpus"] == 48, "48 GPUs held: %s" % usage_before)

        # Version 2: that leaf removed, leaf8 (m0..m7) added under spine1.
        v2 = copy.deepcopy(v1)
        v2["name"] = "sim64-v2"
        for spine in v2["domains"]:
            spine["children"] = [c for c in spine["children"] if c["name"] != leaf]
        v2["domains"][1]["children"].append({"name": "leaf8",
                                             "nodes": ["m%d" % i for i in range(8)]})
        # Let job a train a few steps (one each 100 ms), so the drain's checkpoint saves some.
        time.sleep(1.0)
        # `topo topology import --drain --wait`: refused naming the job, the leaf drains
        # (job a checkpoints, stops and restarts elsewhere from that step), and topo imports
        # again by itself once the leaf is empty.
        v2_file = os.path.join(work, "v2.json")
        with open(v2_file, "w") as f:
            json.dump(v2, f)
        home = os.path.join(work, "home")
        os.makedirs(home)
        p = Cli(d, topo_bin, home).run(["topology", "import", v2_file, "--drain", "--wait", "1m"])
        check(("job %d" % a) in p.stderr and "waiting up to 1m" in p.stderr,
              "refused naming job %d, then waiting: %s" % (a, p.stderr))
        check("Changed under the running jobs" in p.stdout, "then applied: %s" % p.stdout)
        ck = sim.find(ev="ckpt", job=a)
        check(ck, "the drain's checkpoint of job %d" % a)
        ck = ck[-1]
        check(ck["step"] > 0, "the drain's checkpoint saved some steps: %s" % ck)
        restarted = sim.find(ev="start", job=a, restart_count=1)
        check(len(restarted) == 4, "job %d restarted on 4 nodes: %s" % (a, restarted))
        moved = sorted(e["node"] for e in restarted)
        check(not set(moved) & set(removed), "restarted off leaf %s: %s" % (leaf, moved))
        check(all(e["checkpoint_step"] == ck["step"] for e in restarted),
              "from the drain's checkpoint, step %d: %s" % (ck["step"], restarted))
        check(nodes_of(d, b) == b_nodes and not sim.find(ev="start", job=b, restart_count=1),
              "job %d untouched" % b)
        n = nodes(d)
        check(not set(removed) & set(n), "leaf %s gone: %s" % (leaf, sorted(n)))
        check(all(n["m%d" % i]["state"] == "down" for i in range(8)), "m0..m7 start down")
        for jid, where in ((a, moved), (b, b_nodes)):
            view = d.api("GET", "/v1/jobs/%d" % jid, expect=200)
            check(view["state"] == "running" and nodes_of(d, jid) == where,
                  "job %d still runs on %s: %s" % (jid, where, view["state"]))
        usage_after = tenant(d)
        check(usage_after["usage_gpus"] == usage_before["usage_gpus"],
              "held GPUs carried: %s -> %s" % (usage_before, usage_after))
        # Fairshare usage keeps growing from where it was (48 GPUs held all along, seconds
        # against a 7-day half-life): carried, not reset.
        check(usage_after["own_fairshare_gpu_hours"] >= usage_before["own_fairshare_gpu_hours"] > 0,
              "fairshare usage carried, not reset: %s -> %s" % (
                  usage_before["own_fairshare_gpu_hours"], usage_after["own_fairshare_gpu_hours"]))

        # The new rack's agents register, and it takes a job.
        added = Simulator(agent_bin, d, os.path.join(work, "added.log"), count=8, prefix="m")
        wait_for(lambda: all(nodes(d)["m%d" % i]["state"] == "up" for i in range(8)), 30,
                 "m0..m7 up:\n" + added.log())
        c = d.api("POST", "/v1/jobs", {"spec": {"gpus": 64, "parallelism": {"tp": 8},
                                                "nodelist": "m[0-7]"},
                                       "command": ["true"], "time_limit_s": 3600},
                  expect=201)["id"]
        wait_for(lambda: len(added.find(ev="start", job=c, restart_count=0)) == 8, 10,
                 "job %d on the added rack" % c)
        for jid in (a, b, c):
            states = [e.get("state") for e in
                      d.api("GET", "/v1/jobs/%d" % jid, expect=200)["history"]]
            check("failed" not in states, "job %d never failed: %s" % (jid, states))
        for s in (sim, added):
            s.send("quit")
            s.proc.wait(timeout=10)
        print("ok: leaf %s removed under job %d (checkpoint step %d, restarted on %s), leaf8 "
              "added and used by job %d" % (leaf, a, ck["step"], moved, c))
    except Exception:
        print("---- simulator log\n" + sim.log(), file=sys.stderr)
        if added is not None:
            print("---- added rack's simulator log\n" + added.log(), file=sys.stderr)
        raise
    finally:
        sim.kill()
        if added is not None:
            added.kill()


if __name__ == "__main__":
    run_simulated(test, CONFIG, "topo-topology-live-test-")
