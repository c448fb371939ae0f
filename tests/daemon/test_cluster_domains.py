#!/usr/bin/python3
"""GET /v1/cluster?by=domain and GET /v1/nodes?domain=NAME against a real daemon.

The per-domain counts must add up to the cluster's and agree with the nodes they cover; job
ids on a domain only for jobs in the caller's scope (another tenant's GPUs are counted in
other_tenants_gpus, never named); a drained node is counted under its domains; the node
filter returns exactly the nodes under the domain.

usage: test_cluster_domains.py TOPO_SCHEDULER_BIN [TOPO_BIN]
"""

import sys

from harness import Daemon, Failure, check, run, serving, setup_tiny

STATES = ("total", "allocated", "free", "failed", "unavailable")


def by_tier(domains, tier):
    return [d for d in domains if d["tier"] == tier]


def main():
    d = Daemon(sys.argv[1]).start()
    with serving(d):
        setup_tiny(d)  # spine0 > leaf0 (n0 n1), leaf1 (n2 n3); spine1 > leaf2, leaf3; 8 GPUs a node
        for t in ("org/a", "org/b"):
            d.api("PUT", "/v1/tenants/" + t, {"guaranteed_gpus": 0, "borrow_limit_gpus": -1}, expect=201)
        d.api("POST", "/v1/users", {"name": "alice", "tenant": "org/a", "role": "user"}, expect=201)
        d.api("POST", "/v1/users", {"name": "bob", "tenant": "org/b", "role": "user"}, expect=201)
        alice = d.api("POST", "/v1/tokens", {"user": "alice"}, expect=201)["token"]
        bob = d.api("POST", "/v1/tokens", {"user": "bob"}, expect=201)["token"]
        a_job = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "a16"}, "command": ["/bin/true"]}, token=alice, expect=201)
        b_job = d.api("POST", "/v1/jobs", {"spec": {"gpus": 4, "name": "b4"}, "command": ["/bin/true"]}, token=bob, expect=201)
        check(a_job["state"] == "running" and b_job["state"] == "running",
              "both jobs should start at once: %s %s" % (a_job, b_job))
        a_id, b_id = a_job["id"], b_job["id"]
        nodes = {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}
        free_node = next(n for n in sorted(nodes) if all(j == 0 for j in nodes[n]["gpu_jobs"]))
        d.api("POST", "/v1/nodes/drain", {"nodes": free_node, "reason": "test"}, expect=200)
        nodes = {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}

        # Admin: every job named; counts agree with the nodes and add up to the cluster.
        c = d.api("GET", "/v1/cluster?by=domain", expect=200)
        plain = d.api("GET", "/v1/cluster", expect=200)
        check("domains" not in plain, "GET /v1/cluster without by= grew a domains list")
        check(c["gpus"] == plain["gpus"], "by=domain changed the cluster counts: %s vs %s" % (c["gpus"], plain["gpus"]))
        doms = c["domains"]
        check([x["tier"] for x in doms] == ["spine"] * 2 + ["leaf"] * 4,
              "domains should be listed top tier first, spines then leaves: %s" % [x["name"] for x in doms])
        for tier in ("spine", "leaf"):
            for s in STATES:
                total = sum(x["gpus"][s] for x in by_tier(doms, tier))
                check(total == c["gpus"][s], "%s: %ss' %s GPUs add to %d, the cluster says %d" % (s, tier, s, total, c["gpus"][s]))
        for x in by_tier(doms, "leaf"):
            under = [n for n in nodes.values() if n["leaf"] == x["name"]]
            check(x["nodes"] == len(under), "%s: nodes %d, GET /v1/nodes has %d" % (x["name"], x["nodes"], len(under)))
            check(x["parent"] in ("spine0", "spine1"), "%s: parent %r" % (x["name"], x["parent"]))
            alloc = sum(1 for n in under for j in n["gpu_jobs"] if j != 0)
            check(x["gpus"]["allocated"] == alloc, "%s: allocated %d, its nodes hold %d" % (x["name"], x["gpus"]["allocated"], alloc))
            want_jobs = {}
            for n in under:
                for j in n["gpu_jobs"]:
                    if j:
                        want_jobs[j] = want_jobs.get(j, 0) + 1
            got = {j["id"]: j["gpus"] for j in x["jobs"]}
            check(got == want_jobs, "%s: jobs %s, its nodes hold %s" % (x["name"], got, want_jobs))
            check(x["job_count"] == len(want_jobs), "%s: job_count %d" % (x["name"], x["job_count"]))
            check(x["other_tenants_gpus"] == 0, "the admin sees every job, yet %s has other_tenants_gpus" % x["name"])
            drained = sum(1 for n in under if n["state"] == "drained")
            check(x["node_states"].get("drained", 0) == drained,
                  "%s: node_states %s, %d drained node(s) under it" % (x["name"], x["node_states"], drained))
            check(sum(x["node_states"].values()) == x["nodes"], "%s: node_states %s do not add to %d nodes" % (x["name"], x["node_states"], x["nodes"]))
        for x in by_tier(doms, "spine"):
            check(x["parent"] is None, "a top-tier domain's parent should be null: %s" % x)

        # A user: the same counts; their own job by id, the other tenant's only as GPUs.
        ca = d.api("GET", "/v1/cluster?by=domain", token=alice, expect=200)
        for mine, theirs in zip(ca["domains"], doms):
            check(mine["gpus"] == theirs["gpus"] and mine["node_states"] == theirs["node_states"],
                  "a user sees other counts for %s: %s vs %s" % (mine["name"], mine, theirs))
            ids = {j["id"] for j in mine["jobs"]}
            check(b_id not in ids and -1 not in ids, "alice sees bob's job %d (or a -1) on %s: %s" % (b_id, mine["name"], mine["jobs"]))
            want_other = next((j["gpus"] for j in theirs["jobs"] if j["id"] == b_id), 0)
            check(mine["other_tenants_gpus"] == want_other,
                  "%s: alice's other_tenants_gpus %d, bob's job holds %d there" % (mine["name"], mine["other_tenants_gpus"], want_other))
            check(mine["job_count"] == len(ids), "%s: alice's job_count %d counts jobs she cannot see" % (mine["name"], mine["job_count"]))
        check(sum(j["gpus"] for x in by_tier(ca["domains"], "spine") for j in x["jobs"] if j["id"] == a_id) == 16,
              "alice's 16-GPU job is not on her spines' lists in full: %s" % by_tier(ca["domains"], "spine"))

        # The node filter: exactly the nodes under the domain, in topology order, scoped like the list.
        for name, want in (("leaf1", ["n2", "n3"]), ("spine1", ["n4", "n5", "n6", "n7"]), ("n5", ["n5"])):
            got = [n["name"] for n in d.api("GET", "/v1/nodes?domain=" + name, expect=200)["nodes"]]
            check(got == want, "GET /v1/nodes?domain=%s lists %s, want %s" % (name, got, want))
        # Query values are percent-decoded (what the CLI sends for any name).
        got = [n["name"] for n in d.api("GET", "/v1/nodes?domain=%6Cea%66%31", expect=200)["nodes"]]
        check(got == ["n2", "n3"], "domain=%%6Cea%%66%%31 (leaf1) lists %s" % got)
        for n in d.api("GET", "/v1/nodes?domain=spine0", token=alice, expect=200)["nodes"]:
            check(n["gpu_jobs"] == [(-1 if j == b_id else j) for j in nodes[n["name"]]["gpu_jobs"]],
                  "alice's view of %s: %s" % (n["name"], n["gpu_jobs"]))
        print("ok: per-domain counts add up, are scoped, and the node filter selects the domain")


if __name__ == "__main__":
    run(main)
