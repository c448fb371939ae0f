"""Failover time of topo-scheduler on etcd: kill -9 of the leader to the standby answering
(docs/ha.md, issue 17).

    bench_ha_failover.py TOPO_SCHEDULER TOPO [--kills N] [--out bench/results/ha.json]

Runs tests/ha/test_failover.py's `kills` scenario (three TLS etcd members on loopback, two
replicas, ha_lease_ttl_s 2, concurrent submitters with client request ids) and merges
failover_p50_s, failover_p99_s and the single times into --out, keeping what
bench_ha_submit.py wrote there. A failover is the time from SIGKILL of the leader to the
other replica's 200 to GET /v1/jobs: the lease's TTL, then at most one campaign interval
(TTL/3), the catch-up, the core's rebuild and the listeners' start.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = os.path.join(HERE, "..", "..", "tests", "ha", "test_failover.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("topo_scheduler")
    ap.add_argument("topo")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--agents", type=int, default=0,
                    help="simulated agents (topo-agent --simulate, TOPO_AGENT_BIN or beside "
                         "topo-scheduler's build dir); a failover then lasts until every agent "
                         "re-registered with the new leader")
    ap.add_argument("--out", default="bench/results/ha.json")
    a = ap.parse_args()
    if not 1 <= a.kills <= 1000:
        ap.error("--kills must be 1..1000")
    with tempfile.TemporaryDirectory(prefix="topo-bench-failover-") as tmp:
        got = os.path.join(tmp, "failover.json")
        env = dict(os.environ)
        env.setdefault("TOPO_AGENT_BIN", os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(a.topo_scheduler))), "node-agent",
            "agent", "topo-agent"))
        extra = ["--agents", str(a.agents)] if a.agents else []
        p = subprocess.run([sys.executable, TEST, a.topo_scheduler, a.topo, "kills",
                            str(a.kills), "--json", got] + extra, env=env)
        if p.returncode != 0:
            return p.returncode
        with open(got) as f:
            failover = json.load(f)
    results = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            results = json.load(f)
    results["failover"] = failover
    results["failover_p50_s"] = failover["failover_p50_s"]
    results["failover_p99_s"] = failover["failover_p99_s"]
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"failover over {a.kills} kills: p50 {failover['failover_p50_s']} s, "
          f"p99 {failover['failover_p99_s']} s -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
