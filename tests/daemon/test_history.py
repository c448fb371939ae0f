#!/usr/bin/python3
"""Accounting and history (issue 14) through the real CLI against a real daemon
with test agents on every node: jobs run to completion, to failure (an exit
status) and to cancellation; then `topo history`, `topo report usage`,
`topo show` and `topo queue --all` keep where each ran, how it ended and its
GPU-hours, scoped between two tenants and paged. A daemon restart keeps it all.

usage: test_history.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import sys
import tempfile

from harness import Cli, Daemon, check, run, serving, setup_tiny
from test_agents import P, Agent, issue, wait_for

OK, USAGE = 0, 1
CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"
NODES = ["n%d" % i for i in range(8)]


def main():
    d = Daemon(sys.argv[1], config=CONFIG).start()
    topo_bin = sys.argv[2]
    work = tempfile.mkdtemp(prefix="topo-history-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    agents = {}
    cli = Cli(d, topo_bin, home)
    topo, js = cli.run, cli.json

    def submit(token, gpus, name):
        return js(["submit", "--gpus", str(gpus), "--time", "1h", "--name", name, "--",
                   "python", "train.py"], token)["id"]

    def ranks_by_node(job):
        out = {}
        for r in js(["show", str(job)])["ranks"]:
            out.setdefault(r["node"], []).append(r["rank"])
        return out

    def exit_ranks(job, code_of_rank):
        for node, ranks in ranks_by_node(job).items():
            for r in ranks:
                agents[node].send(P.agent("rank_exited", job=job, rank=r, restart_count=0,
                                          exit_code=code_of_rank(r), signal=0, status_known=True))

    def state(job):
        return js(["show", str(job)])["state"]

    with serving(d, work):
        try:
            setup_tiny(d)
            for t in ("org", "org/a", "org/b"):
                topo(["quota", "set", t, "--guaranteed", "0"])
            topo(["users", "create", "alice", "--tenant", "org/a", "--role", "user"])
            topo(["users", "create", "carol", "--tenant", "org", "--role", "tenant-admin"])
            topo(["users", "create", "bob", "--tenant", "org/b", "--role", "user"])
            alice = js(["token", "create", "--user", "alice"])["token"]
            carol = js(["token", "create", "--user", "carol"])["token"]
            bob = js(["token", "create", "--user", "bob"])["token"]
            # One application failure fails a job (no restart backoff to wait out).
            d.api("PUT", "/v1/config/max_app_failures", {"value": 1}, expect=200)
            port, ca = d.agent_port(), os.path.join(d.state_dir, "ca.pem")
            for n in NODES:
                agents[n] = Agent(port, ca, issue(sys.argv[1], d.state_dir, n, work), n, beat=True)

            # ---- three jobs: completed on two nodes, failed with status 3, cancelled
            j1 = submit(alice, 16, "two-nodes")
            j1_nodes = sorted(ranks_by_node(j1))
            check(len(j1_nodes) == 2, "j1 runs on two nodes: %s" % j1_nodes)
            exit_ranks(j1, lambda r: 0)
            wait_for(lambda: state(j1) == "completed", 5, "j1 to complete")
            j2 = submit(alice, 8, "fails")
            exit_ranks(j2, lambda r: 3 if r == 0 else 0)
            wait_for(lambda: state(j2) == "failed", 5, "j2 to fail")
            j3 = submit(bob, 8, "cancelled")
            check(state(j3) == "running", "j3 runs")
            topo(["cancel", str(j3)], bob)

            # ---- history keeps where each ran and how it ended
            hist = js(["history"])
            jobs = {j["id"]: j for j in hist["jobs"]}
            check(sorted(jobs) == [j1, j2, j3] and hist["next_after"] is None,
                  "the admin's history: %s" % hist)
            h1, h2, h3 = jobs[j1], jobs[j2], jobs[j3]
            check(h1["state"] == "completed" and h1["exit_code"] == 0 and
                  h1["nodes"] == len(j1_nodes) and sorted(h1["node_names"]) == j1_nodes and
                  h1["gpus"] == 16 and h1["user"] == "alice",
                  "j1: %s" % h1)
            check(len(h1["runs"]) == 1 and h1["runs"][0]["end_reason"] == "completed" and
                  h1["runs"][0]["nodes"] == len(j1_nodes) and
                  sorted(h1["runs"][0]["node_names"]) == j1_nodes and h1["runs"][0]["gpus"] == 16,
                  "j1's run: %s" % h1["runs"])
            for h in (h1, h2, h3):
                r = h["runs"][-1]
                want = (r["end_ms"] - r["start_ms"]) * r["gpus"] / 3.6e6
                check(abs(h["gpu_hours"] - want) < 1e-9 and abs(r["gpu_hours"] - want) < 1e-9,
                      "GPU-hours are (end - start) x GPUs: %s" % h)
                check(h["start_ms"] == r["start_ms"] and h["end_ms"] == r["end_ms"] and
                      h["queue_wait_s"] == (h["start_ms"] - h["submit_ms"]) / 1000.0, str(h))
            check(h2["state"] == "failed" and h2["exit_code"] == 3 and
                  h2["runs"][0]["exit_code"] == 3 and "status 3" in h2["runs"][0]["end_reason"],
                  "j2: %s" % h2)
            check(h3["state"] == "cancelled" and h3["exit_code"] is None and
                  h3["runs"][0]["end_reason"] == "cancelled", "j3: %s" % h3)
            check([j["id"] for j in js(["history", "--state", "failed"])["jobs"]] == [j2],
                  "--state failed")
            check([j["id"] for j in js(["history", "--user", "bob"])["jobs"]] == [j3], "--user bob")
            check(len(js(["history", "--since", "2000-01-01"])["jobs"]) == 3, "--since a date")
            check(len(js(["history", "--since", "1h"])["jobs"]) == 3, "--since 1h")
            check(js(["history", "--until", "2000-01-02"])["jobs"] == [], "--until long ago")
            table = topo(["history"]).stdout
            head = table.splitlines()[0].split()
            check(head == ["ID", "USER", "TENANT", "STATE", "GPUS", "NODES", "SUBMIT", "START",
                           "END", "GPU-H", "EXIT"], "the table's columns: %r" % table)
            check("No jobs match" in topo(["history", "--until", "2000-01-02"]).stdout, "empty")
            p = topo(["history", "--since", "yesterday"], expect=USAGE)
            check("--since" in p.stderr and "7d" in p.stderr, p.stderr)

            # ---- paging: one job a page, by id
            page = js(["history", "--limit", "1"])
            check([j["id"] for j in page["jobs"]] == [j1] and page["next_after"] == j1, str(page))
            p = topo(["history", "--limit", "1"])
            check("--after %d" % j1 in p.stderr, "the hint for the next page: %r" % p.stderr)
            page = js(["history", "--limit", "1", "--after", str(j1)])
            check([j["id"] for j in page["jobs"]] == [j2] and page["next_after"] == j2, str(page))
            page = js(["history", "--limit", "2", "--after", str(j2)])
            check([j["id"] for j in page["jobs"]] == [j3] and page["next_after"] is None, str(page))

            # ---- scope: a researcher sees their tenant, a tenant-admin their subtree
            check(sorted(j["id"] for j in js(["history"], alice)["jobs"]) == [j1, j2], "alice")
            check([j["id"] for j in js(["history"], bob)["jobs"]] == [j3], "bob")
            check(js(["history", "--tenant", "org/b"], alice)["jobs"] == [], "alice --tenant org/b")
            check(js(["history", "--user", "bob"], alice)["jobs"] == [], "alice --user bob")
            check(sorted(j["id"] for j in js(["history"], carol)["jobs"]) == [j1, j2, j3],
                  "carol (tenant-admin of org) sees org/a and org/b")
            seen = json.dumps(js(["history"], bob))
            check("alice" not in seen and "two-nodes" not in seen, "bob sees nothing of alice's")

            # ---- usage per tenant and user
            usage = js(["report", "usage", "--by", "tenant"])
            rows = {r["name"]: r for r in usage["rows"]}
            check(sorted(rows) == ["org/a", "org/b"], "tenants: %s" % usage)
            a = rows["org/a"]
            check(a["jobs"] == 2 and a["completed"] == 1 and a["failed"] == 1 and
                  a["cancelled"] == 0 and a["started"] == 2, "org/a: %s" % a)
            check(abs(a["gpu_hours"] - h1["gpu_hours"] - h2["gpu_hours"]) < 1e-9,
                  "org/a's GPU-hours are j1's and j2's: %s" % a)
            check(a["queue_wait_max_s"] == max(h1["queue_wait_s"], h2["queue_wait_s"]), str(a))
            b = rows["org/b"]
            check(b["jobs"] == 1 and b["cancelled"] == 1 and
                  abs(b["gpu_hours"] - h3["gpu_hours"]) < 1e-9, "org/b: %s" % b)
            check([r["name"] for r in js(["report", "usage"], alice)["rows"]] == ["org/a"],
                  "alice's report covers org/a only")
            check([r["name"] for r in js(["report", "usage", "--by", "user"], bob)["rows"]] ==
                  ["bob"], "bob's report by user")
            check([r["name"] for r in js(["report", "usage", "--by", "user"])["rows"]] ==
                  ["alice", "bob"], "the admin's report by user")
            check(js(["report", "usage", "--until", "2000-01-02"])["rows"] == [], "long ago")
            page = d.api("GET", "/v1/reports/usage?by=tenant&limit=1", expect=200)
            check([r["name"] for r in page["rows"]] == ["org/a"] and page["next_after"] == "org/a",
                  str(page))
            page = d.api("GET", "/v1/reports/usage?by=tenant&limit=1&after=org/a", expect=200)
            check([r["name"] for r in page["rows"]] == ["org/b"] and page["next_after"] is None,
                  str(page))
            text = topo(["report", "usage", "--by", "tenant"]).stdout
            check("GPU-H" in text and "org/a" in text and "WAIT-MEAN" in text, text)
            # No --since: the window has no start, and the header says so
            # (never the epoch as a date).
            check(text.startswith("Usage by tenant, all time to ") and "1970" not in text, text)
            text = topo(["report", "usage", "--by", "tenant", "--since", "1h"]).stdout
            check(text.startswith("Usage by tenant from ") and "1970" not in text, text)
            topo(["report", "usage", "--by", "node"], expect=USAGE)

            # ---- show and queue --all keep the placement of finished jobs
            shown = js(["show", str(j1)], alice)
            check(shown["nodes"] == 2 and len(shown["runs"]) == 1 and
                  abs(shown["gpu_hours"] - h1["gpu_hours"]) < 1e-9, "show j1: %s" % shown)
            text = topo(["show", str(j1)], alice).stdout
            runs_part = text.split("\nRuns (")[-1]
            check("GPU-hours" in runs_part and "completed" in runs_part and
                  ("n[" in runs_part or j1_nodes[0] in runs_part),
                  "topo show prints the runs: %r" % text)
            listed = {j["id"]: j for j in js(["queue", "--all"])["jobs"]}
            check(listed[j1]["nodes"] == 2 and listed[j2]["nodes"] == 1, "queue --all: %s" % listed)
            # "nodes" is one thing in every view of a job (a count; the names are
            # "node_names"), and the job list, the whole view and the history's
            # row carry the summary's keys alike.
            for j in (j1, j2, j3):
                whole = js(["show", str(j)])
                views = {"queue --all": listed[j], "show": whole, "history": jobs[j]}
                for where, v in views.items():
                    check(v["nodes"] == whole["nodes"] and isinstance(v["nodes"], int),
                          "job %d: nodes in %s is %r, in show %r" % (j, where, v["nodes"],
                                                                     whole["nodes"]))
                    check(set(listed[j]) <= set(v), "job %d: %s lacks the list's %s" %
                          (j, where, sorted(set(listed[j]) - set(v))))
                check(whole["node_names"] == jobs[j]["node_names"] and
                      len(whole["node_names"]) == whole["nodes"],
                      "job %d: node_names %r (show) %r (history)" %
                      (j, whole["node_names"], jobs[j]["node_names"]))

            # ---- a restart of the daemon keeps it (the store, not memory)
            d.stop()
            d.start()
            again = {j["id"]: j for j in js(["history"])["jobs"]}
            check(again == jobs, "history after a restart: %s" % again)
            print("ok: history (%d jobs, %.6f GPU-h), usage by tenant and user, paging, scope, "
                  "show and queue --all keep placements, restart" %
                  (len(jobs), sum(j["gpu_hours"] for j in jobs.values())))
        finally:
            for a in agents.values():
                a.close()


if __name__ == "__main__":
    run(main)
