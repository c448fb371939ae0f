#!/usr/bin/python3
"""Partitions and reservations against a real daemon (docs/api.md, Partitions
and reservations; docs/cli.md, topo partition, topo reservation):

  crud        partitions and reservations are created (201), replaced (200),
              listed and shown (the API's views, by its schema) to every
              signed-in user, refused to non-admins (403), deleted; through the
              API and `topo partition` / `topo reservation`; a second default
              partition and overlapping reservations are refused (409) naming
              the other; a reservation by GPU count gets whole nodes of the
              partition asked for; every change is an audit row.
  placement   a job naming a partition runs only on its nodes (`topo submit
              -p`), one naming none in the default partition; the job view
              shows the partition; a tenant the partition does not admit, a
              time limit past max_time and GPUs past max_gpus are refused at
              submission naming the partition and the field, and nothing is
              logged; `topo nodes --partition`, the node view's partitions,
              and `topo nodes --summary` per partition.
  reservation a job whose time limit would run into a reservation does not
              take its nodes (it waits) while a short one that ends before the
              start does (backfill never runs into it); a job naming the
              reservation waits for its start and then runs on its nodes; the
              reservation cannot be deleted while that job names it (409
              naming the job), nor the partition while a job runs in it.
  maintenance a running job whose time limit would overrun a maintenance
              reservation on its nodes is checkpointed and requeued at its
              start and runs again on other nodes: it never fails.
  restart     the sets and the jobs' partitions survive a kill -9 and a
              restart (the log and the snapshots).

usage: test_node_sets.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import sys
import tempfile
import time

from api_schema import Api
from harness import Cli, Daemon, check, run, serving, setup_tiny, wait_for

API = Api()
INVALID, NOT_FOUND, CONFLICT = 8, 4, 6


def now_ms():
    return int(time.time() * 1000)


def job(d, jid):
    return API.check("job_view", d.api("GET", "/v1/jobs/%d" % jid, expect=200))


def job_nodes(d, jid):
    return sorted(set(r["node"] for r in job(d, jid)["ranks"]))


def submit(d, body, token=None, expect=201):
    body = dict({"command": ["sleep", "600"]}, **body)
    return d.api("POST", "/v1/jobs", body, token=token, expect=expect)


def error(d, method, path, body=None, token=None):
    status, out = d.request(method, path, body, token or d.admin_token)
    return status, out.get("error", {}) if isinstance(out, dict) else {"message": str(out)}


def main():
    d = Daemon(sys.argv[1]).start()
    home = tempfile.mkdtemp(prefix="topo-sets-home-")
    cli = Cli(d, sys.argv[2], home)
    with serving(d, home):
        setup_tiny(d)  # n0..n7 of 8 GPUs; leaves n[0-1], n[2-3], n[4-5], n[6-7]
        for t in ("org/a", "lab"):
            d.api("PUT", "/v1/tenants/" + t, {}, expect=201)
        d.api("POST", "/v1/users", {"name": "ada", "tenant": "org/a", "role": "user"}, expect=201)
        ada = d.api("POST", "/v1/tokens", {"user": "ada"}, expect=201)["token"]

        # ---- crud
        gpu = d.api("POST", "/v1/partitions",
                    {"name": "gpu", "nodes": "n[0-5]", "default": True, "max_time_s": 7200,
                     "default_time_s": 3600}, expect=201)
        API.check("partition_view", gpu)
        check((gpu["nodes"], gpu["node_count"], gpu["gpus"], gpu["up_nodes"], gpu["free_gpus"],
               gpu["default"], gpu["max_time_s"]) == ("n[0-5]", 6, 48, 6, 48, True, 7200),
              "the gpu partition's view: %s" % gpu)
        debug = d.api("POST", "/v1/partitions",
                      {"name": "debug", "nodes": ["n6", "n7"], "max_gpus": 8, "tenants": ["lab"],
                       "max_time_s": 600, "priority_tier": 10}, expect=201)
        check(debug["nodes"] == "n[6-7]" and debug["tenants"] == ["lab"] and not debug["default"],
              "an array of nodes reads back as a hostlist: %s" % debug)
        # Replacing one answers 200 with the new configuration.
        again = d.api("POST", "/v1/partitions",
                      {"name": "debug", "nodes": "n[6-7]", "max_gpus": 8, "tenants": ["lab"],
                       "max_time_s": 900, "priority_tier": 10}, expect=200)
        check(again["max_time_s"] == 900, "replaced: %s" % again)
        # Everyone signed in reads them; only cluster-admins change them.
        listed = API.check("partition_list", d.api("GET", "/v1/partitions", token=ada, expect=200))
        check([p["name"] for p in listed["partitions"]] == ["debug", "gpu"], "list: %s" % listed)
        check(d.api("GET", "/v1/partitions/gpu", token=ada, expect=200)["default"], "show gpu")
        status, e = error(d, "POST", "/v1/partitions", {"name": "x", "nodes": "n0"}, token=ada)
        check(status == 403 and "cluster-admin" in e["message"], "a user may not: %s %s" % (status, e))
        status, e = error(d, "GET", "/v1/partitions/nope")
        check(status == 404 and "no partition nope" in e["message"], "unknown: %s %s" % (status, e))
        status, e = error(d, "POST", "/v1/partitions", {"name": "second", "nodes": "n7",
                                                        "default": True})
        check(status == 409 and "gpu" in e["message"], "a second default names the first: %s" % e)
        status, e = error(d, "POST", "/v1/partitions", {"name": "ghost", "nodes": "n[7-9]"})
        check(status == 400 and e.get("field") == "nodes" and "n8" in e["message"],
              "an unknown node is refused naming it: %s %s" % (status, e))
        # The CLI: a table marking the default, --json, create and delete.
        table = cli.run(["partition", "list"]).stdout
        check(any(line.startswith("gpu* ") for line in table.splitlines()), table)
        check(cli.json(["partition", "show", "debug"])["max_time_s"] == 900, "show --json")
        p = cli.run(["partition", "create", "scratch", "--nodes", "n[4-5]", "--max-time", "1h",
                     "--tenants", "org/a,lab", "--preemptible"])
        check("Created partition scratch: 2 nodes, 16 GPUs" in p.stdout, p.stdout)
        shown = cli.json(["partition", "show", "scratch"])
        check(shown["max_time_s"] == 3600 and shown["preemptible"] and
              shown["tenants"] == ["org/a", "lab"], "created by the CLI: %s" % shown)
        # Past the API's bound: caught before sending (exit 1), naming the flag.
        p = cli.run(["partition", "create", "bad", "--nodes", "n1", "--max-time", "40d"], expect=1)
        check("--max-time" in p.stderr, "the error names the flag: %r" % p.stderr)
        cli.run(["partition", "delete", "scratch"])
        cli.run(["partition", "show", "scratch"], expect=NOT_FOUND)
        cli.run(["partition", "create", "x", "--nodes", "n0"], token=ada, expect=5)

        # Reservations: by nodes, by GPU count in a partition, overlapping.
        later = now_ms() + 3600 * 1000
        r = d.api("POST", "/v1/reservations",
                  {"name": "eval", "gpus": 8, "partition": "debug", "start_ms": later,
                   "duration_s": 3600, "tenants": ["lab"]}, expect=201)
        API.check("reservation_view", r)
        check(r["node_count"] == 1 and r["nodes"] in ("n6", "n7") and r["state"] == "planned" and
              r["end_ms"] == later + 3600 * 1000, "by GPU count, in the partition: %s" % r)
        status, e = error(d, "POST", "/v1/reservations",
                          {"name": "clash", "nodes": "n[6-7]", "start_ms": later + 600000,
                           "duration_s": 60})
        check(status == 409 and "eval" in e["message"], "overlapping names the other: %s" % e)
        status, e = error(d, "POST", "/v1/reservations",
                          {"name": "huge", "gpus": 1000, "duration_s": 60})
        check(status == 400 and e.get("field") == "gpus", "too many GPUs: %s %s" % (status, e))
        listed = API.check("reservation_list", d.api("GET", "/v1/reservations", token=ada,
                                                     expect=200))
        check([x["name"] for x in listed["reservations"]] == ["eval"], "list: %s" % listed)
        p = cli.run(["reservation", "create", "cli-made", "--nodes", "n[2-3]", "--start",
                     "now+3h", "--duration", "30m", "--maintenance"])
        check("Created reservation cli-made: n[2-3] (16 GPUs)" in p.stdout, p.stdout)
        check("maintenance" in cli.run(["reservation", "show", "cli-made"]).stdout, "show")
        check(cli.json(["reservation", "list"])["reservations"][0]["name"] == "cli-made", "list")
        p = cli.run(["reservation", "create", "past", "--nodes", "n1", "--start", "now",
                     "--end", "2020-01-01T00:00Z"], expect=1)
        check("--end" in p.stderr, "an end before the start, caught locally: %r" % p.stderr)
        cli.run(["reservation", "delete", "cli-made"])
        cli.run(["reservation", "delete", "eval"])
        check(d.api("GET", "/v1/reservations", expect=200)["reservations"] == [], "all deleted")
        audit = d.api("GET", "/v1/audit?last=100", expect=200)["audit"]
        actions = [a["action"] for a in audit]
        for want in ("partition.create", "partition.replace", "partition.delete",
                     "reservation.create", "reservation.delete"):
            check(want in actions, "audit has %s: %s" % (want, actions))

        # ---- placement
        lab_job = submit(d, {"spec": {"gpus": 8}, "tenant": "lab", "partition": "debug",
                             "time_limit_s": 300})
        check(lab_job["state"] == "running" and lab_job["partition"] == "debug",
              "a debug job runs: %s" % lab_job)
        check(set(job_nodes(d, lab_job["id"])) <= {"n6", "n7"}, "on debug's nodes")
        # Through the CLI's -p, and a job naming none in the default partition.
        out = cli.json(["submit", "-p", "debug", "--gpus", "8", "--tenant", "lab", "--time", "5m",
                        "--", "sleep", "600"])
        check(set(job_nodes(d, out["id"])) <= {"n6", "n7"}, "topo submit -p debug")
        big = submit(d, {"spec": {"gpus": 48}})
        check(big["state"] == "running" and big["partition"] == "gpu" and
              big["time_limit_s"] == 3600, "the default partition and its default time: %s" % big)
        check(set(job_nodes(d, big["id"])) == {"n%d" % i for i in range(6)}, "on gpu's nodes")
        # Refusals at submission, naming the partition and the field; nothing logged.
        seq = d.api("GET", "/v1/cluster", expect=200)["last_seq"]
        for what, body, token, field, text in (
                ("tenant not allowed", {"spec": {"gpus": 8}, "partition": "debug"}, ada,
                 "partition", "debug"),
                ("past max_time", {"spec": {"gpus": 8}, "partition": "debug", "tenant": "lab",
                                   "time_limit_s": 3600}, None, "time_limit_s", "debug"),
                ("past max_gpus", {"spec": {"gpus": 16}, "partition": "debug", "tenant": "lab"},
                 None, "spec.gpus", "debug"),
                ("an unknown partition", {"spec": {"gpus": 8}, "partition": "nope"}, None,
                 "partition", "nope"),
                ("an unknown reservation", {"spec": {"gpus": 8}, "reservation": "nope"}, None,
                 "reservation", "nope")):
            status, e = error(d, "POST", "/v1/jobs", dict(body, command=["true"]), token=token)
            check(status in (400, 403, 404) and e.get("field") == field and text in e["message"],
                  "%s: %s %s (wanted 400, 403 or 404 naming %s)" % (what, status, e, field))
        check(d.api("GET", "/v1/cluster", expect=200)["last_seq"] == seq, "nothing was logged")
        p = cli.run(["submit", "-p", "debug", "--tenant", "lab", "--gpus", "8", "--time", "1h",
                     "--", "true"], expect=INVALID)
        check("--time 1h" in p.stderr, "the CLI names the flag: %r" % p.stderr)
        # Nodes: the filter, the view's partitions, the summary.
        nodes = API.check("node_list", d.api("GET", "/v1/nodes?partition=debug", expect=200))
        check([n["name"] for n in nodes["nodes"]] == ["n6", "n7"] and
              nodes["nodes"][0]["partitions"] == ["debug"], "?partition=debug: %s" % nodes)
        status, e = error(d, "GET", "/v1/nodes?partition=nope")
        check(status == 404 and e.get("field") == "partition", "unknown filter: %s" % e)
        names = cli.json(["nodes", "--partition", "gpu"])["nodes"]
        check([n["name"] for n in names] == ["n%d" % i for i in range(6)], "topo nodes --partition")
        summary = cli.json(["nodes", "--summary"])["by_partition"]
        check([(row["name"], row["nodes"], row["free"]) for row in summary] ==
              [("gpu", 6, 0), ("debug", 2, 0)], "--summary per partition: %s" % summary)
        check("PARTITION" in cli.run(["nodes", "--summary"]).stdout, "the summary's table")
        # A partition with a running job in it is not deleted.
        status, e = error(d, "DELETE", "/v1/partitions/debug")
        check(status == 409 and str(lab_job["id"]) in e["message"],
              "delete refused naming the job: %s %s" % (status, e))
        for j in d.api("GET", "/v1/jobs", expect=200)["jobs"]:
            d.api("POST", "/v1/jobs/%d/cancel" % j["id"], expect=200)

        # ---- reservation: backfill never runs into one
        start = now_ms() + 25000
        d.api("POST", "/v1/reservations",
              {"name": "hold", "nodes": "n[4-5]", "start_ms": start, "duration_s": 3600},
              expect=201)
        check(d.api("GET", "/v1/nodes/n4", expect=200)["reservation"] == "hold", "n4's next")
        first = submit(d, {"spec": {"gpus": 32}, "time_limit_s": 3600})
        check(first["state"] == "running" and not set(job_nodes(d, first["id"])) & {"n4", "n5"},
              "a long job keeps off the reservation's nodes: %s" % job_nodes(d, first["id"]))
        long_job = submit(d, {"spec": {"gpus": 16}, "time_limit_s": 3600})
        check(long_job["state"] == "queued",
              "a job that would run into the reservation waits: %s" % long_job)
        short = submit(d, {"spec": {"gpus": 16}, "time_limit_s": 8})
        check(short["state"] == "running" and job_nodes(d, short["id"]) == ["n4", "n5"],
              "a job that ends before the start runs there: %s" % short)
        # A job naming the reservation waits for its start, then runs on its nodes.
        inside = submit(d, {"spec": {"gpus": 16}, "reservation": "hold", "time_limit_s": 600})
        check(inside["state"] == "queued" and inside["reservation"] == "hold", "waits: %s" % inside)
        wait_for(lambda: job(d, inside["id"])["state"] == "running", 60, "the reserved job to start")
        check(now_ms() >= start, "it started inside the window")
        check(job_nodes(d, inside["id"]) == ["n4", "n5"], "on the reservation's nodes")
        check(job(d, long_job["id"])["state"] == "queued", "the long job still waits")
        check(d.api("GET", "/v1/reservations/hold", expect=200)["state"] == "active", "active")
        status, e = error(d, "DELETE", "/v1/reservations/hold")
        check(status == 409 and str(inside["id"]) in e["message"],
              "a reservation a job runs in is not deleted: %s %s" % (status, e))
        for j in d.api("GET", "/v1/jobs", expect=200)["jobs"]:
            d.api("POST", "/v1/jobs/%d/cancel" % j["id"], expect=200)
        d.api("DELETE", "/v1/reservations/hold", expect=200)

        # ---- maintenance: the running job moves, never fails
        m = submit(d, {"spec": {"gpus": 16}, "time_limit_s": 3600})
        before = job_nodes(d, m["id"])
        check(m["state"] == "running" and len(before) == 2, "the job to move runs: %s" % m)
        start = now_ms() + 15000
        d.api("POST", "/v1/reservations",
              {"name": "maint", "nodes": ",".join(before), "start_ms": start, "duration_s": 3600,
               "maintenance": True}, expect=201)
        seen = set()

        def moved():
            v = job(d, m["id"])
            seen.add(v["state"])
            now = sorted(set(r["node"] for r in v["ranks"]))
            return v if v["state"] == "running" and now and not set(now) & set(before) else None

        moved_view = wait_for(moved, 60, "the job to move off the maintenance nodes")
        check("failed" not in seen and moved_view["state"] == "running",
              "it never failed: %s %s" % (seen, moved_view))
        events = d.api("GET", "/v1/events?job=%d&limit=1000" % m["id"], expect=200)["events"]
        commands = [c["type"] for e in events for c in e.get("commands", [])]
        last_start = max(i for i, c in enumerate(commands) if c in ("start_job", "restart_job"))
        check("request_checkpoint" in commands[:last_start],
              "asked to checkpoint before it moved: %s" % commands)

        # ---- restart: the sets and the jobs' partitions come back
        d.kill9()
        d.start()
        names = [p["name"] for p in d.api("GET", "/v1/partitions", expect=200)["partitions"]]
        check(names == ["debug", "gpu"], "partitions after a restart: %s" % names)
        check(d.api("GET", "/v1/reservations/maint", expect=200)["maintenance"], "maint is back")
        check(job(d, m["id"])["partition"] == "gpu", "the job's partition is back")
        check(job(d, lab_job["id"])["partition"] == "debug",
              "a job that ended shows its partition from the store: %s" % job(d, lab_job["id"]))
        print("ok: partitions and reservations: CRUD by API and CLI, placement in a partition and "
              "refusals naming the field, backfill kept out of a reservation, a reserved job in "
              "its window, a maintenance drain that moves a job, and a restart")


if __name__ == "__main__":
    run(main)
