#!/usr/bin/env python3
"""A topology change under running jobs, on a real daemon: `topo topology
import` of a new version applies by node name. Jobs keep running on their
nodes, the queue and fairshare carry over, added nodes start down, a change
that removes a node a job holds is refused naming the job (with --drain, its
nodes drain for a later import), --dry-run changes nothing, and after a kill -9 the restarted daemon has the same state (the
epoch's base snapshot and the events after it).

    test_topology_change.py TOPO_SCHEDULER TOPO
"""

import copy
import json
import os
import sys
import tempfile

from harness import Cli, Daemon, check, run, serving, setup_tiny, tiny_topology

CONFLICT = 6


def jobs(d):
    return {j["id"]: j for j in d.api("GET", "/v1/jobs?all=true", expect=200)["jobs"]}


def nodes(d):
    return {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}


def ranks(d, job):
    detail = d.api("GET", "/v1/jobs/%d" % job, expect=200)
    return sorted((r["node"], r["gpu"]) for r in detail["ranks"])


def main():
    sched, topo_bin = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="topo-topochange-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    d = Daemon(sched).start()
    with serving(d, work):
        cli = Cli(d, topo_bin, home)
        setup_tiny(d)  # n0..n7: four leaves of two 8-GPU nodes
        d.api("POST", "/v1/nodes/drain", {"nodes": "n7", "reason": "to be removed"}, expect=200)
        a = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "parallelism": {"tp": 8}},
                                       "command": ["sleep", "600"]}, expect=201)["id"]
        b = d.api("POST", "/v1/jobs", {"spec": {"gpus": 24, "parallelism": {"tp": 8}},
                                       "command": ["sleep", "600"]}, expect=201)["id"]
        c = d.api("POST", "/v1/jobs", {"spec": {"gpus": 48, "parallelism": {"tp": 8}},
                                       "command": ["sleep", "600"]}, expect=201)["id"]
        before = jobs(d)
        check(before[a]["state"] == "running" and before[b]["state"] == "running",
              "two jobs run: %s" % before)
        check(before[c]["state"] == "queued", "the third waits: %s" % before[c])
        held = set(n for n, _ in ranks(d, a) + ranks(d, b))
        check("n7" not in held, "the drained node holds nothing: %s" % held)
        ranks_before = {j: ranks(d, j) for j in (a, b)}

        # Version 2: a new leaf with n8, n9 under spine1, n7 gone.
        v2 = copy.deepcopy(tiny_topology())
        leaf3 = v2["domains"][1]["children"][1]
        leaf3["nodes"] = [n for n in leaf3["nodes"] if n != "n7"]
        v2["domains"][1]["children"].append({"name": "leaf4", "nodes": ["n8", "n9"]})
        v2_file = os.path.join(work, "v2.json")
        with open(v2_file, "w") as f:
            json.dump(v2, f)

        # A dry run says what would change, and changes nothing.
        p = cli.run(["topology", "import", v2_file, "--dry-run"])
        check("2 added (n[8-9])" in p.stdout and "1 removed (n7)" in p.stdout, p.stdout)
        check("would apply now" in p.stdout, p.stdout)
        check(set(nodes(d)) == set("n%d" % i for i in range(8)), "dry run changed nothing")

        # A version that removes a node a running job holds is refused,
        # naming the job; nothing changes.
        victim = sorted(held)[0]
        v3 = copy.deepcopy(tiny_topology())
        for spine in v3["domains"]:
            for leaf in spine["children"]:
                leaf["nodes"] = [n for n in leaf["nodes"] if n != victim]
        status, out = d.request("PUT", "/v1/topology",
                                {"format": "json", "content": json.dumps(v3)}, d.admin_token)
        check(status == 409, "removing a held node: %s %s" % (status, out))
        check(("on %s" % victim) in json.dumps(out) and "drain those nodes first" in json.dumps(out),
              str(out))
        dry = d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(v3),
                                             "dry_run": True}, expect=200)
        check(dry["applies"] is False and victim in dry["reason"], str(dry))
        check(set(nodes(d)) == set("n%d" % i for i in range(8)), "the refusal changed nothing")
        # --drain: still refused, and the node the change removes is draining now, so an
        # import once its job has moved goes through; resumed here to go on.
        v3_file = os.path.join(work, "v3.json")
        with open(v3_file, "w") as f:
            json.dump(v3, f)
        p = cli.run(["topology", "import", v3_file, "--drain"], expect=CONFLICT)
        check("draining 1 node(s)" in p.stderr + p.stdout, p.stderr + p.stdout)
        check(nodes(d)[victim]["state"] in ("draining", "drained"),
              "%s after --drain: %s" % (victim, nodes(d)[victim]["state"]))
        check(set(nodes(d)) == set("n%d" % i for i in range(8)), "--drain changed no topology")
        cli.run(["topology", "import", v3_file, "--drain", "--dry-run"], expect=1)
        # --wait: only with --drain, a duration with its unit; a job that never leaves
        # (no agent here) keeps it refused until the wait ends, with exit 6.
        for bad, says in ((["--wait", "1m"], "--drain"), (["--drain", "--wait", "5"], "--wait 5"),
                          (["--drain", "--wait", "-1h"], "--wait -1h"),
                          (["--drain", "--wait", "x" * 300], "--wait x")):
            p = cli.run(["topology", "import", v3_file] + bad, expect=1)
            check(says in p.stderr, "topology import %s: %s" % (bad[:3], p.stderr[-300:]))
        p = cli.run(["topology", "import", v3_file, "--drain", "--wait", "1s"], expect=CONFLICT)
        check("still refused after 1s" in p.stderr, p.stderr)
        check(set(nodes(d)) == set("n%d" % i for i in range(8)), "--wait changed no topology")
        d.api("POST", "/v1/nodes/resume", {"nodes": victim}, expect=200)

        # The change itself.
        p = cli.run(["topology", "import", v2_file])
        check("Changed under the running jobs" in p.stdout, p.stdout)
        after = jobs(d)
        for j in (a, b):
            check(after[j]["state"] == "running", "job %d still runs: %s" % (j, after[j]))
            check(ranks(d, j) == ranks_before[j], "job %d keeps its GPUs" % j)
        check(after[c]["state"] == "queued", "the queued job still waits: %s" % after[c])
        n = nodes(d)
        check("n7" not in n and n["n8"]["state"] == "down" and n["n9"]["state"] == "down",
              "n7 gone, n8 and n9 down: %s" % {k: v["state"] for k, v in n.items()})
        check(all(n["n%d" % i]["state"] == "up" for i in range(7)), "the others stay up")
        check(n["n8"]["leaf"] == "leaf4", "n8 under its new leaf: %s" % n["n8"])
        # topo nodes: by GPU type (case-insensitive), by domain, and summed up.
        typed = cli.json(["nodes", "--gpu-type", "h100"])["nodes"]
        check(len(typed) == 9 and all(x["gpu_model"] == "H100" for x in typed),
              "topo nodes --gpu-type h100: %s" % [x["name"] for x in typed])
        under = cli.json(["nodes", "--domain", "leaf4"])["nodes"]
        check(sorted(x["name"] for x in under) == ["n8", "n9"], "--domain leaf4: %s" % under)
        summary = cli.json(["nodes", "--summary"])
        check(summary["by_gpu_type"] == [{"name": "H100", "nodes": 9, "up": 7, "draining": 0,
                                          "drained": 0, "down": 2, "suspect": 0, "gpus": 72,
                                          "free": 7 * 8 - 40}],
              "topo nodes --summary: %s" % summary["by_gpu_type"])
        cli.run(["nodes", "--gpu-type", "B300"], expect=4)

        # The added nodes take work once up: the queued job starts.
        d.api("POST", "/v1/nodes/resume", {"nodes": "n[8-9]"}, expect=200)
        check(jobs(d)[c]["state"] in ("running", "queued"), "job c: %s" % jobs(d)[c])
        state = {j: (v["state"], v["nodes"]) for j, v in jobs(d).items()}
        ranks_now = {j: ranks(d, j) for j, v in jobs(d).items() if v["state"] == "running"}

        # kill -9: the restarted daemon has the same jobs and nodes, from the
        # state the change carried over and the events after it.
        d.kill9()
        d.start()
        check("restored the state carried over by the topology change" in d.log(),
              "the restart starts from the change's base state")
        again = {j: (v["state"], v["nodes"]) for j, v in jobs(d).items()}
        check(again == state, "after kill -9: %s, before: %s" % (again, state))
        for j, r in ranks_now.items():
            check(ranks(d, j) == r, "job %d's GPUs after the restart" % j)
        n = nodes(d)
        check("n7" not in n and "n9" in n, "the new topology after the restart")
        print("ok: a topology change under running jobs")


if __name__ == "__main__":
    run(main)
