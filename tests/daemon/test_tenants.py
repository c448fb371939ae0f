#!/usr/bin/python3
"""Tenant guarantees and usage against a real daemon (docs/api.md, Tenants and
quotas):

  warnings  guarantees adding up past the cluster's GPUs, a child's guarantee
            above its parent's, and children's adding up past their parent's
            are taken (an admin may mean to over-commit) and answered with
            "warnings" naming the tenants and numbers; `topo quota set` prints
            them on stderr; a PUT within bounds has none.
  rollup    a parent's usage includes its descendants' (GET /v1/tenants,
            `topo tenants`, `topo quota show`), with its own shown apart: a
            parent running nothing shows its child's GPUs, not 0.

usage: test_tenants.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import sys
import tempfile

from harness import Cli, Daemon, check, run, serving, setup_tiny, wait_for


def main():
    d = Daemon(sys.argv[1]).start()
    home = tempfile.mkdtemp(prefix="topo-tenants-home-")
    cli = Cli(d, sys.argv[2], home)
    with serving(d, home):
        setup_tiny(d)  # 8 nodes x 8 GPUs: 64

        def put(tenant, body, status):
            return d.api("PUT", "/v1/tenants/" + tenant, body, expect=status)

        # ---- warnings
        check(put("org", {"guaranteed_gpus": 16}, 201)["warnings"] == [], "within bounds: no warning")
        check(put("org/a", {"guaranteed_gpus": 8}, 201)["warnings"] == [], "a child within its parent")
        w = put("org/b", {"guaranteed_gpus": 12}, 201)["warnings"]
        check(w == ["the tenants under org are guaranteed 20 GPUs together, more than org's 16"],
              "children past their parent: %s" % w)
        w = put("org/a", {"guaranteed_gpus": 24}, 200)["warnings"]
        check(any("tenant org/a (24) is guaranteed more GPUs than its parent org (16)" in x for x in w),
              "a child above its parent: %s" % w)
        # Lowering the parent warns too, naming the child.
        w = put("org", {"guaranteed_gpus": 10}, 200)["warnings"]
        check(any("org/b (12) is guaranteed more GPUs than its parent org (10)" in x for x in w),
              "the parent lowered below a child: %s" % w)
        w = put("big", {"guaranteed_gpus": 40}, 201)["warnings"]
        check(any("the tenants' guarantees add up to 86 GPUs, more than the cluster's 64" in x
                  for x in w), "past the cluster: %s" % w)
        # Taken all the same: the guarantees are what was asked.
        check(d.api("GET", "/v1/tenants/big", expect=200)["guaranteed_gpus"] == 40, "big kept 40")
        # The CLI prints them on stderr, and keeps --json one value on stdout.
        p = cli.run(["quota", "set", "big", "--guaranteed", "48"])
        check("topo: warning: the tenants' guarantees add up to 94 GPUs" in p.stderr,
              "topo quota set prints the warning: %r" % p.stderr)
        p = cli.run(["quota", "set", "big", "--guaranteed", "0"])
        check("warning" not in p.stderr, "no warning once within bounds: %r" % p.stderr)

        # ---- rollup: org runs nothing itself; its children do.
        for tenant, gpus in (("org/a", 16), ("org/b", 8)):
            j = d.api("POST", "/v1/jobs", {"spec": {"gpus": gpus}, "command": ["true"],
                                           "tenant": tenant}, expect=201)
            check(j["state"] == "running", "job of %s runs: %s" % (tenant, j))
        d.api("POST", "/v1/jobs", {"spec": {"gpus": 64}, "command": ["true"], "tenant": "org/a"},
              expect=201)  # waits: the cluster is short
        tenants = {t["name"]: t for t in d.api("GET", "/v1/tenants", expect=200)["tenants"]}
        org = tenants["org"]
        check((org["usage_gpus"], org["running_jobs"], org["queued_jobs"]) == (24, 2, 1) and
              (org["own_usage_gpus"], org["own_running_jobs"], org["own_queued_jobs"]) == (0, 0, 0),
              "org rolls up its children, its own apart: %s" % org)
        a = tenants["org/a"]
        check((a["usage_gpus"], a["own_usage_gpus"], a["queued_jobs"]) == (16, 16, 1),
              "a leaf's totals are its own: %s" % a)
        check(tenants["big"]["usage_gpus"] == 0, "another tree is not counted: %s" % tenants["big"])
        # Fairshare usage grows with what the children hold, read now, and rolls up the
        # same way.
        def fairshare():
            ts = {t["name"]: t for t in d.api("GET", "/v1/tenants", expect=200)["tenants"]}
            return {n: (ts[n]["fairshare_gpu_hours"], ts[n]["own_fairshare_gpu_hours"])
                    for n in ("org", "org/a", "org/b", "big")}
        first = fairshare()
        fs = wait_for(lambda: (lambda f: f if f["org/a"][1] > first["org/a"][1] else None)(
            fairshare()), 10, "org/a's fairshare usage to grow")
        check(fs["org/a"][1] > 0 and fs["org/b"][1] > 0 and fs["org"][1] == 0,
              "own usage: %s" % fs)
        check(abs(fs["org"][0] - fs["org/a"][1] - fs["org/b"][1]) < 1e-9 and fs["big"][0] == 0,
              "org rolls up its children's fairshare usage: %s" % fs)
        check(fs["org/a"][1] / fs["org/b"][1] > 1.5, "16 GPUs count more than 8: %s" % fs)
        shown = d.api("GET", "/v1/tenants/org", expect=200)
        check(shown["usage_gpus"] == 24 and shown["own_usage_gpus"] == 0, "GET one: %s" % shown)
        table = cli.run(["tenants"]).stdout
        row = [line for line in table.splitlines() if line.startswith("org ")]
        check(row and "24 (own 0)" in row[0] and "2 (own 0)" in row[0],
              "topo tenants rolls up: %r" % table)
        quota = cli.run(["quota", "show", "org"]).stdout
        check("In use:            24 GPUs, 2 running, 1 queued" in quota and
              "Its own:           0 GPUs, 0 running, 0 queued" in quota,
              "topo quota show org: %r" % quota)
        print("ok: guarantee warnings (past the cluster, a child above its parent, children past "
              "their parent) and usage rolled up the tenant tree")


if __name__ == "__main__":
    run(main)
