#!/usr/bin/python3
"""A tenant's limits per partition against a real daemon (docs/api.md, Tenants
and quotas, Limits per partition; docs/cli.md, topo quota set --partition-limit):

  set       PUT /v1/tenants/{name} {"partitions": ...} and `topo quota set
            --partition-limit` set them; each partition named changes only the
            fields given, null or all-0 removes its limits, others keep theirs;
            a partition that does not exist yet is taken with a warning.
  hold      a tenant holding its max_gpus in partition a has its next job
            there wait, the reason naming the partition and the limit, while
            its job in partition b runs and another tenant's job in a runs;
            the TENANT view's partition_usage, `topo quota show` and `topo
            tenants` show what it holds against its limits.
  restart   after a kill -9 and a restart (the log and the snapshots) the
            limits, the usage and the waiting job's reason are as they were,
            and a stop in partition a lets the waiting job start.

usage: test_partition_quotas.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import sys
import tempfile

from harness import Cli, Daemon, check, run, serving, setup_tiny, wait_for


def main():
    d = Daemon(sys.argv[1]).start()
    home = tempfile.mkdtemp(prefix="topo-pq-home-")
    cli = Cli(d, sys.argv[2], home)
    with serving(d, home):
        setup_tiny(d)  # n0..n7 of 8 GPUs
        d.api("POST", "/v1/partitions", {"name": "a", "nodes": "n[0-3]", "default": True},
              expect=201)
        d.api("POST", "/v1/partitions", {"name": "b", "nodes": "n[4-7]"}, expect=201)

        def tenant(name):
            return d.api("GET", "/v1/tenants/" + name, expect=200)

        # ---- set
        t = d.api("PUT", "/v1/tenants/org/a", {"partitions": {"a": {"max_gpus": 16}}}, expect=201)
        check(t["partitions"] == {"a": {"max_gpus": 16, "max_job_gpus": 0, "max_running_jobs": 0}}
              and t["warnings"] == [] and t["partition_usage"] == {}, "set by the API: %s" % t)
        # A partition that does not exist yet: taken, with a warning.
        t = d.api("PUT", "/v1/tenants/org/a", {"partitions": {"later": {"max_running_jobs": 1}}},
                  expect=200)
        check(sorted(t["partitions"]) == ["a", "later"] and
              any("partition later does not exist (yet)" in w for w in t["warnings"]),
              "an unknown partition is kept and warned of: %s" % t)
        # The CLI: fields of one partition change alone; none removes them.
        p = cli.run(["quota", "set", "org/a", "--partition-limit", "b:max_running_jobs=2",
                     "--partition-limit", "later:none"])
        check("Partition b:" in p.stdout and "0 of max 2 running" in p.stdout,
              "topo quota set shows the limits: %r" % p.stdout)
        cli.run(["quota", "set", "org/a", "--partition-limit", "b:max_job_gpus=16"])
        t = tenant("org/a")
        check(t["partitions"] == {
            "a": {"max_gpus": 16, "max_job_gpus": 0, "max_running_jobs": 0},
            "b": {"max_gpus": 0, "max_job_gpus": 16, "max_running_jobs": 2}},
            "only the fields given changed, later removed: %s" % t["partitions"])
        p = cli.run(["quota", "set", "org/a", "--partition-limit", "b:max_gpus"], expect=1)
        check("--partition-limit 'b:max_gpus': give PART:max_gpus=N" in p.stderr,
              "a malformed flag is refused before sending: %r" % p.stderr)
        p = cli.run(["quota", "set", "org/a", "--partition-limit", "a/b:max_gpus=1"], expect=1)
        check("has a character outside" in p.stderr, "a bad name is refused: %r" % p.stderr)
        # Past the API's bound: the daemon's answer names the field.
        p = cli.run(["quota", "set", "org/a", "--partition-limit", "a:max_gpus=100000001"],
                    expect=8)
        check("partitions.a.max_gpus" in p.stderr, "the bound names the field: %r" % p.stderr)
        d.api("PUT", "/v1/tenants/org/b", {}, expect=201)

        # ---- hold
        def submit(tenant_name, gpus, partition=None):
            body = {"spec": {"gpus": gpus}, "command": ["sleep", "600"], "tenant": tenant_name}
            if partition:
                body["partition"] = partition
            return d.api("POST", "/v1/jobs", body, expect=201)

        first = submit("org/a", 8)  # the default partition, a
        second = submit("org/a", 8, "a")
        check(first["state"] == "running" and second["state"] == "running",
              "within the limit: %s %s" % (first, second))
        held = submit("org/a", 8, "a")
        want = ("quota: tenant 'org/a' holds 16 of its 16 GPUs in partition 'a' (max_gpus); "
                "the job would hold 8 more")
        check(held["state"] == "queued" and held["reason"].startswith(want),
              "held back in a, though a has free GPUs: %s" % held)
        other = submit("org/a", 8, "b")
        check(other["state"] == "running", "partition b runs its job: %s" % other)
        big = submit("org/a", 24, "b")
        check(big["state"] == "queued" and "over tenant 'org/a' max_job_gpus 16 in partition 'b'"
              in big["reason"], "max_job_gpus in b waits (as the cluster-wide one): %s" % big)
        bob = submit("org/b", 8, "a")
        check(bob["state"] == "running", "another tenant is not held in a: %s" % bob)
        usage = {"a": {"usage_gpus": 16, "running_jobs": 2}, "b": {"usage_gpus": 8, "running_jobs": 1}}
        t = tenant("org/a")
        check(t["partition_usage"] == usage, "partition_usage: %s" % t["partition_usage"])
        check(tenant("org/b")["partition_usage"] == {"a": {"usage_gpus": 8, "running_jobs": 1}},
              "org/b's usage in a alone")
        shown = cli.run(["quota", "show", "org/a"]).stdout
        check("16 of max 16 GPUs, 2 running" in shown and
              "8 GPUs, 1 of max 2 running, max 16 GPUs per job" in shown,
              "topo quota show: %r" % shown)
        table = cli.run(["tenants"]).stdout
        row = [line for line in table.splitlines() if line.startswith("org/a ")]
        check(row and "a: 16/16 GPUs; b: 1/2 jobs <=16 per job" in row[0],
              "topo tenants: %r" % table)
        listed = {x["name"]: x for x in cli.json(["tenants"])["tenants"]}
        check(listed["org/a"]["partitions"] == t["partitions"], "topo tenants --json")

        # ---- restart: the limits and what counts where come back
        d.kill9()
        d.start()
        t = tenant("org/a")
        check(t["partitions"]["a"]["max_gpus"] == 16 and t["partition_usage"] == usage,
              "after a restart: %s" % t)
        again = d.api("GET", "/v1/jobs/%d" % held["id"], expect=200)
        check(again["state"] == "queued" and again["reason"].startswith(want),
              "still held back after a restart: %s" % again)
        # A stop in a frees its GPUs there: the waiting job starts.
        d.api("POST", "/v1/jobs/%d/cancel" % first["id"], {"reason": "done"}, expect=200)
        wait_for(lambda: d.api("GET", "/v1/jobs/%d" % held["id"], expect=200)["state"] == "running",
                 10, "the held job to start once org/a holds 8 GPUs in a")
        check(tenant("org/a")["partition_usage"]["a"] == {"usage_gpus": 16, "running_jobs": 2},
              "the stop freed 8 in a, the start took 8")
        print("ok: per-partition limits: set by API and CLI, a job held in one partition while "
              "another partition runs, shown in the views, and kept through a kill -9")


if __name__ == "__main__":
    run(main)
