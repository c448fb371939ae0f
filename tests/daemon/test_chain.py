#!/usr/bin/python3
"""Job dependencies and arrays (issue 14) against a real daemon with test
agents on every node: afterok waits with its reason and starts when its job
succeeds, a dependency that becomes impossible cancels the job (and what
depends on it), one that can never be met is refused at submission, another
tenant's job is not a dependency anyone may name, and an array's throttle
bounds its running tasks. A daemon restart (snapshot or replay) keeps what
each job still waits on.

usage: test_chain.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import sys
import tempfile

from harness import Cli, Daemon, check, run, serving, setup_tiny
from test_agents import P, Agent, issue, wait_for

CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\nmax_queued_jobs_per_user = 20\n"
NODES = ["n%d" % i for i in range(8)]


def main():
    d = Daemon(sys.argv[1], config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-chain-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    agents = {}
    cli = Cli(d, sys.argv[2], home)
    topo, js = cli.run, cli.json

    def submit(token, gpus, expect=201, **fields):
        body = {"spec": {"gpus": gpus}, "time_limit_s": 3600, "command": ["python", "train.py"]}
        body.update(fields)
        return d.api("POST", "/v1/jobs", body, token=token, expect=expect)

    def refused(field, **fields):
        e = submit(alice, 8, expect=400, **fields)["error"]
        check(e.get("field") == field, "%s: %s" % (fields, e))
        return e["message"]

    def job(j, token=None):
        return d.api("GET", "/v1/jobs/%d" % j, token=token, expect=200)

    def finish(j, code):
        by_node = {}
        for r in job(j)["ranks"]:
            by_node.setdefault(r["node"], []).append(r["rank"])
        for node, ranks in by_node.items():
            for r in ranks:
                agents[node].send(P.agent("rank_exited", job=j, rank=r, restart_count=0,
                                          exit_code=code if r == 0 else 0, signal=0,
                                          status_known=True))

    with serving(d, work):
        try:
            setup_tiny(d)
            for t in ("org/a", "org/b"):
                topo(["quota", "set", t, "--guaranteed", "0"])
            topo(["users", "create", "alice", "--tenant", "org/a", "--role", "user"])
            topo(["users", "create", "bob", "--tenant", "org/b", "--role", "user"])
            alice = js(["token", "create", "--user", "alice"])["token"]
            bob = js(["token", "create", "--user", "bob"])["token"]
            d.api("PUT", "/v1/config/max_app_failures", {"value": 1}, expect=200)
            port, ca = d.agent_port(), os.path.join(d.state_dir, "ca.pem")
            for n in NODES:
                agents[n] = Agent(port, ca, issue(sys.argv[1], d.state_dir, n, work), n, beat=True)

            # ---- afterok: waits with its reason, starts when the job succeeds
            first = submit(alice, 8)["id"]
            second = submit(alice, 8, dependency="afterok:%d" % first)["id"]
            third = submit(alice, 8, dependency="afternotok:%d" % second)["id"]
            j2 = job(second)
            check(j2["state"] == "queued" and j2["reason"] == "waiting for job %d to succeed" % first
                  and j2["dependency"] == "afterok:%d" % first, "second waits: %s" % j2)
            check(job(third)["reason"] == "waiting for job %d to fail" % second, str(job(third)))

            finish(first, 0)
            wait_for(lambda: job(second)["state"] == "running", 5, "second to start")
            # second succeeds: third's afternotok can never be met, so it ends.
            finish(second, 0)
            wait_for(lambda: job(third)["state"] == "cancelled", 5, "third to be cancelled")
            check(job(third)["reason"] == "dependency never satisfied: job %d completed "
                  "(afternotok)" % second, str(job(third)))

            # ---- refused at submission: never met, unknown, another tenant's, malformed
            m = refused("dependency", dependency="afternotok:%d" % first)
            check("can never be met" in m, m)
            m = refused("dependency", dependency="afterok:99999")
            check("does not exist" in m, m)
            theirs = submit(bob, 8)["id"]
            m = refused("dependency", dependency="afterany:%d" % theirs)
            check("does not exist (or is not yours to see)" in m,
                  "another tenant's job reads as absent: %s" % m)
            for bad in ("afterok", "after:1", "afterok:1?afterok:2", 12, "x" * 5000):
                refused("dependency", dependency=bad)
            # A met dependency is dropped: the job starts at once.
            met = submit(alice, 8, dependency="afterok:%d" % first)["id"]
            check(job(met)["state"] == "running" and job(met)["dependency"] is None, str(job(met)))
            topo(["cancel", str(met)])
            topo(["cancel", str(theirs)])

            # ---- the CLI names the flag the daemon refused, and where it was given
            # (more GPUs than the cluster has: infeasible, exit 3)
            p = topo(["submit", "--gpus", "100000", "--", "/bin/true"], alice, expect=3)
            check("topo: --gpus 100000: " in p.stderr, "the flag, not the field: %r" % p.stderr)
            script = os.path.join(work, "job.sh")
            with open(script, "w") as f:
                f.write("#!/bin/sh\n#SBATCH -N 2 --gpus-per-node=8 -t 30 -J sb\n"
                        "#SBATCH --qos=high\n#TOPO --dependency afterok:%d\ntrue\n" % first)
            p = topo(["submit", "--json", script], alice)
            sub = json.loads(p.stdout)
            shown = job(sub["id"])
            check(shown["gpus"] == 16 and shown["name"] == "sb" and shown["time_limit_s"] == 1800,
                  "#SBATCH -N 2 --gpus-per-node=8 -t 30 -J sb: %s" % shown)
            check("--qos=high (" in p.stderr and "not honoured" in p.stderr, p.stderr)
            topo(["cancel", str(sub["id"])], alice)
            # #SBATCH -p is the job's partition: one the cluster lacks is refused
            # (exit 4), naming the line that gave it.
            with open(script, "w") as f:
                f.write("#!/bin/sh\n#SBATCH -N 2 --gpus-per-node=8\n#SBATCH -p gpu\ntrue\n")
            p = topo(["submit", script], alice, expect=4)
            check("job.sh:3 (#SBATCH -p gpu)" in p.stderr and "no partition 'gpu'" in p.stderr,
                  p.stderr)

            # ---- an array with a throttle
            out = submit(alice, 8, array="0-5%2")
            ids = out["ids"]
            check(len(ids) == 6 and out["id"] == ids[0] and ids == list(range(ids[0], ids[0] + 6))
                  and out["tasks"] == [0, 1, 2, 3, 4, 5] and out["array"]["throttle"] == 2
                  and out["array"] == {"job": ids[0], "task": 0, "throttle": 2},
                  "the array's answer: %s" % out)
            states = [job(i)["state"] for i in ids]
            check(states.count("running") == 2, "two tasks run: %s" % states)
            waiting = job(ids[2])
            check(waiting["reason"] == "array throttle: 2 tasks of array %d running (at most 2 at "
                  "once)" % ids[0] and waiting["array"] == {"job": ids[0], "task": 2, "throttle": 2},
                  str(waiting))
            # The tasks' starts say which array and task they are (the agent
            # sets TOPO_ARRAY_JOB_ID / TOPO_ARRAY_TASK_ID from them).
            starts = {}
            for a in agents.values():
                while True:
                    try:
                        m = a.recv(timeout=0.2)
                    except TimeoutError:
                        break
                    if m["type"] == "start":
                        starts[m["job"]] = m
            check(starts[ids[0]].get("array_job") == ids[0] and
                  starts[ids[0]].get("array_task") == 0 and
                  starts[ids[1]].get("array_task") == 1, "the tasks' starts: %s" %
                  {i: (s.get("array_job"), s.get("array_task")) for i, s in starts.items()})
            check("array_job" not in starts[first] and "array_task" not in starts[first],
                  "a job outside an array: %s" % starts[first])
            finish(ids[0], 0)
            wait_for(lambda: job(ids[2])["state"] == "running", 5, "the third task to start")
            for bad in ("5-1", "0-9%0", "0-5000", 7):
                refused("array", array=bad)
            # The cap on a user's waiting jobs counts every task.
            e = submit(alice, 8, expect=409, array="0-29")["error"]
            check(e.get("field") == "array" and "30 tasks would take user alice" in e["message"],
                  "an array past max_queued_jobs_per_user: %s" % e)
            d.api("GET", "/v1/jobs/%d" % ids[1], token=bob, expect=404)

            # ---- a restart keeps what a job still waits on, and the throttle
            last = submit(alice, 8, dependency="afterok:%d" % ids[5])["id"]
            for a in agents.values():
                a.close()
            agents.clear()
            d.stop()
            d.start()
            check(job(last)["reason"] == "waiting for job %d to succeed" % ids[5] and
                  job(last)["dependency"] == "afterok:%d" % ids[5], "after a restart: %s" % job(last))
            check(job(ids[5])["state"] == "queued" and job(ids[5])["reason"].startswith(
                "array throttle: 2 tasks"), "after a restart: %s" % job(ids[5]))
            print("ok: afterok/afternotok wait, start and cancel with their reasons across a "
                  "restart; never-met, unknown and foreign dependencies refused; an array of 6 "
                  "runs 2 at a time")
        finally:
            for a in agents.values():
                a.close()


if __name__ == "__main__":
    run(main)
