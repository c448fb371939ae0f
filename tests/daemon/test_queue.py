#!/usr/bin/python3
"""Queue and node conveniences through the real CLI against a real daemon
(issue 14): `topo queue --me/--user/--start` with the scheduler's estimated
start, `topo cancel` by filters with its --yes guard, `topo events --last,
--node, --type`, `topo audit`, and `topo gpu clear` after a test agent
reported an XID. Two tenants throughout: no filter shows a user of org/a
anything of org/b's jobs, nor lets them act on one.

usage: test_queue.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import sys
import tempfile
import time

from harness import Cli, Daemon, check, run, serving, setup_tiny
from test_agents import P, Agent, issue, wait_for

OK, USAGE, NOT_FOUND, AUTH, CONFLICT = 0, 1, 4, 5, 6
CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"
# Names only their owners may ever see.
ALICE_SECRET = "alpha-secret-ZQX"
BOB_SECRET = "bravo-secret-KWV"


def main():
    d = Daemon(sys.argv[1], config=CONFIG).start()
    topo_bin = sys.argv[2]
    work = tempfile.mkdtemp(prefix="topo-queue-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    agent = None

    cli = Cli(d, topo_bin, home)
    topo, js = cli.run, cli.json

    def submit(token, gpus, name, time_limit="1h"):
        return js(["submit", "--gpus", str(gpus), "--time", time_limit, "--name", name, "--",
                   "python", "train.py"], token)["id"]

    with serving(d, work):
        try:
            setup_tiny(d)
            for t in ("org/a", "org/b"):
                topo(["quota", "set", t, "--guaranteed", "0"])
            topo(["users", "create", "alice", "--tenant", "org/a", "--role", "user"])
            topo(["users", "create", "carol", "--tenant", "org/a", "--role", "tenant-admin"])
            topo(["users", "create", "bob", "--tenant", "org/b", "--role", "user"])
            alice = js(["token", "create", "--user", "alice"])["token"]
            carol = js(["token", "create", "--user", "carol"])["token"]
            bob = js(["token", "create", "--user", "bob"])["token"]

            # ---- queue --me / --user / --start
            a1 = submit(alice, 48, ALICE_SECRET)
            # Fairshare puts org/b (using nothing) first: bob's job is the
            # head that cannot start now; alice's a2 waits behind it.
            b1 = submit(bob, 24, BOB_SECRET, time_limit="2h")
            a2 = submit(alice, 64, ALICE_SECRET)
            jobs = {j["id"]: j for j in js(["queue", "--all"])["jobs"]}
            check(jobs[a1]["state"] == "running" and jobs[a2]["state"] == "queued" and
                  jobs[b1]["state"] == "queued" and jobs[b1]["queue_position"] == 1,
                  "states: %s" % jobs)
            # The head starts when a1 reaches its time limit; the job behind
            # it has no estimate, nor has a running one.
            est = jobs[b1]["estimated_start_ms"]
            check(est == jobs[a1]["start_ms"] + 3600 * 1000,
                  "b1's estimate %s is a1's start %s + 1 h" % (est, jobs[a1]["start_ms"]))
            check(jobs[a2]["estimated_start_ms"] is None and jobs[a1]["estimated_start_ms"] is None,
                  "only the head has an estimate: %s" % jobs)
            mine = js(["queue", "--me"], alice)["jobs"]
            check(sorted(j["id"] for j in mine) == sorted([a1, a2]), "alice --me: %s" % mine)
            check(js(["queue", "--user", "bob"], alice)["jobs"] == [],
                  "a user of org/a sees nothing of bob's through --user")
            check([j["id"] for j in js(["queue", "--all", "--user", "bob"])["jobs"]] == [b1],
                  "the admin's --user bob")
            check([j["id"] for j in js(["queue", "--user", "alice"], carol)["jobs"]] == [a1, a2],
                  "carol (tenant-admin of org/a) lists alice's jobs")
            table = topo(["queue", "--me", "--start"], bob).stdout
            at = time.localtime(est / 1000)
            clock = time.strftime("%H:%M", at)
            if time.strftime("%Y-%m-%d", at) != time.strftime("%Y-%m-%d"):
                clock = time.strftime("%Y-%m-%d %H:%M", at)
            row = [l for l in table.splitlines() if l.split()[:1] == [str(b1)]]
            check("START" in table.splitlines()[0] and len(row) == 1 and
                  ("~%s (est.)" % clock) in row[0], "the estimate, marked: %r" % table)
            row = [l for l in topo(["queue", "--me", "--start"], alice).stdout.splitlines()
                   if l.split()[:1] == [str(a2)]]
            check(len(row) == 1 and " - " in row[0] and "est." not in row[0],
                  "no estimate shows as -: %r" % row)
            check("est." not in topo(["queue"], bob).stdout, "START only with --start")
            p = topo(["queue", "--me", "--user", "bob"], alice, expect=USAGE)
            check("--me" in p.stderr and "--user" in p.stderr, p.stderr)

            # ---- cancel by filters
            # 24 GPUs each: more than are free, so they all wait.
            more = [submit(alice, 24, ALICE_SECRET) for _ in range(10)]
            p = topo(["cancel", "--me", "--state", "queued"], alice, expect=USAGE)
            check("11 jobs match" in p.stderr and "--yes" in p.stderr, p.stderr)
            check(len(js(["queue", "--me", "--state", "queued"], alice)["jobs"]) == 11,
                  "nothing was cancelled without --yes")
            p = topo(["cancel", "--user", "alice"], bob)
            check("No jobs match" in p.stdout, "bob cannot reach alice's jobs: %r" % p.stdout)
            p = topo(["cancel", "--tenant", "org/a", "--state", "running"], bob)
            check("No jobs match" in p.stdout, "nor through --tenant: %r" % p.stdout)
            check(len(js(["queue", "--me"], alice)["jobs"]) == 12, "alice's jobs are all there")
            p = topo(["cancel", "--user", "alice", "--state", "queued", "--yes", "--reason",
                      "cleanup"], carol)
            check("Cancelling 11 jobs (user alice, state queued)" in p.stdout, p.stdout)
            check(p.stdout.count("Cancelled job") == 11, p.stdout)
            left = js(["queue", "--all", "--me"], alice)["jobs"]
            states = {j["id"]: (j["state"], j["reason"]) for j in left}
            check(states[a1][0] == "running" and
                  all(states[i] == ("cancelled", "cleanup") for i in [a2] + more),
                  "carol cancelled alice's queued jobs only: %s" % states)
            check(js(["queue"], bob)["jobs"][0]["id"] == b1, "bob's job is untouched")
            # Exactly 10 need no --yes; --json keeps stdout JSON.
            ten = [submit(alice, 24, ALICE_SECRET) for _ in range(10)]
            p = topo(["cancel", "--me", "--state", "queued", "--json"], alice)
            check(sorted(j["id"] for j in json.loads(p.stdout)["jobs"]) == sorted(ten),
                  "ten cancelled: %s" % p.stdout)
            check("Cancelling 10 jobs" in p.stderr, p.stderr)
            p = topo(["cancel", "--me", "--state", "held"], alice)
            check("No jobs match (user alice, state held)" in p.stdout, p.stdout)
            p = topo(["cancel", str(a1), "--me"], alice, expect=USAGE)
            check("not both" in p.stderr, p.stderr)
            p = topo(["cancel"], alice, expect=USAGE)
            check("--me" in p.stderr and "job ids" in p.stderr, p.stderr)
            p = topo(["cancel", "--me", "--state", "completed"], alice, expect=USAGE)
            check("'completed' is not a state of jobs that can be cancelled" in p.stderr, p.stderr)

            # ---- events --last / --node / --type
            log = js(["events", "--limit", "10000"])["events"]
            last3 = js(["events", "--last", "3"])["events"]
            check([e["seq"] for e in last3] == [e["seq"] for e in log[-3:]],
                  "--last 3 is the newest three, oldest first")
            a1_nodes = {r["node"] for r in js(["show", str(a1)], alice)["ranks"]}
            node = sorted(a1_nodes)[0]
            on_node = js(["events", "--node", node])["events"]
            check(on_node and all(node in json.dumps(e) for e in on_node), "--node %s" % node)
            check(any(e["event"]["type"] == "node_state_requested" for e in on_node) and
                  any(e["event"].get("id") == a1 for e in on_node), "its resume and a1's start")
            subs = js(["events", "--type", "job_submitted,job_cancelled"])["events"]
            check(subs and all(e["event"]["type"] in ("job_submitted", "job_cancelled")
                               for e in subs), "--type")
            p = topo(["events", "--type", "job_started"], expect=USAGE)
            check("'job_started' is not an event type" in p.stderr and "gpu_event" in p.stderr,
                  p.stderr)
            # Scope: no filter shows bob anything of alice's jobs or alice
            # anything of bob's; node events are the admins'.
            for args in (["--last", "50"], ["--node", node], ["--type", "job_submitted"],
                         ["--node", node, "--last", "5"], ["--type", "job_submitted", "--last", "2"]):
                seen = json.dumps(js(["events"] + args, bob))
                check(ALICE_SECRET not in seen and "alice" not in seen,
                      "bob sees alice's through events %s: %s" % (args, seen[:500]))
                seen = json.dumps(js(["events"] + args, alice))
                check(BOB_SECRET not in seen and "bob" not in seen,
                      "alice sees bob's through events %s: %s" % (args, seen[:500]))
            check(js(["events", "--type", "node_state_requested"], alice)["events"] == [],
                  "node events are the admins'")
            topo(["events", "--job", str(a1), "--last", "1"], bob, expect=NOT_FOUND)

            # ---- gpu clear, after a test agent's XID
            topo(["cancel", "--state", "queued,held,running,preempting", "--yes"])
            check(js(["queue"])["jobs"] == [], "the admin's bulk cancel emptied the queue")
            port = d.agent_port()
            ca = os.path.join(d.state_dir, "ca.pem")
            agent = Agent(port, ca, issue(sys.argv[1], d.state_dir, "n7", work), "n7", beat=True)
            agent.send(P.agent("gpu_event", gpu=2, kind="xid", code=79))
            wait_for(lambda: js(["nodes", "n7"])["state"] == "drained", 5, "n7 drained by XID 79")
            check(js(["nodes", "n7"])["gpu_health"][2] == "failed", "GPU 2 failed")
            p = topo(["gpu", "clear", "n7:2"], alice, expect=AUTH)
            check("cluster-admin" in p.stderr, p.stderr)
            topo(["gpu", "clear", "n7:9"], expect=NOT_FOUND)
            topo(["gpu", "clear", "n99:1"], expect=NOT_FOUND)
            p = topo(["gpu", "clear", "n7:1"], expect=CONFLICT)
            check("is healthy" in p.stderr, p.stderr)
            p = topo(["gpu", "clear", "n7"], expect=USAGE)
            check("NODE:GPU" in p.stderr, p.stderr)
            p = topo(["gpu", "clear", "n7:2", "--reason", "reseated"])
            check("Cleared n7 GPU 2; n7 is up" in p.stdout, p.stdout)
            n7 = js(["nodes", "n7"])
            check(n7["state"] == "up" and n7["gpu_health"][2] == "healthy", "n7: %s" % n7)
            cleared = js(["events", "--type", "gpu_event", "--node", "n7", "--last", "1"])["events"]
            check(len(cleared) == 1 and cleared[0]["event"]["kind"] == "cleared" and
                  cleared[0]["actor"] == "user:admin", "the clear is logged: %s" % cleared)
            row = js(["audit", "--last", "1"])["audit"][0]
            check(row["action"] == "gpu.clear" and row["actor"] == "user:admin" and
                  row["detail"] == {"node": "n7", "gpu": 2, "was": "failed", "reason": "reseated"},
                  "audited: %s" % row)
            check("gpu.clear" in topo(["audit", "--last", "3"]).stdout, "topo audit shows it")
            topo(["audit"], alice, expect=AUTH)
            # Two failed GPUs: the node comes back only when both are cleared.
            for g in (5, 6):
                agent.send(P.agent("gpu_event", gpu=g, kind="xid", code=79))
            wait_for(lambda: js(["nodes", "n7"])["gpu_health"][6] == "failed", 5, "GPU 6 failed")
            p = topo(["gpu", "clear", "n7:5"])
            check("n7 is drained" in p.stdout and "n7 stays drained" in p.stderr and
                  "GPU" in p.stderr, "GPU 6 still keeps it out: %r %r" % (p.stdout, p.stderr))
            check("n7 is up" in topo(["gpu", "clear", "n7:6"]).stdout, "both cleared")
            # An admin's drain outlives the clear; resume ends it.
            agent.send(P.agent("gpu_event", gpu=4, kind="xid", code=79))
            wait_for(lambda: js(["nodes", "n7"])["gpu_health"][4] == "failed", 5, "GPU 4 failed")
            topo(["drain", "n7", "--reason", "PSU swap"])
            p = topo(["gpu", "clear", "n7:4"])
            check("n7 stays drained: PSU swap" in p.stderr, p.stderr)
            check(js(["nodes", "n7"])["gpu_health"][4] == "healthy", "GPU 4 cleared")
            topo(["resume", "n7"])
            check(js(["nodes", "n7"])["state"] == "up", "resumed")
            print("ok: queue --me/--user/--start (estimate %s), cancel by filters with --yes, "
                  "events --last/--node/--type, audit, gpu clear, all scoped" % clock)
        finally:
            if agent is not None:
                agent.close()



if __name__ == "__main__":
    run(main)
