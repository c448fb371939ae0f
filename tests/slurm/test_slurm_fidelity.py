"""Baseline fidelity: the core's `slurm-tree` policy against real Slurm's
topology/tree on the same topology and the same busy nodes.

One cluster (slurm_cluster.py: 1,024 nodes, 16 real, leaf/spine/pod/top
switches; no job_submit plugin) and one topo-scheduler in Slurm mode with
stack = slurm-tree. For each seeded scenario some real nodes are made busy by
a real running job (`sbatch -w NODES --wrap 'sleep 600'`), topo-scheduler
syncs its view from scontrol, and then for each request size
`sbatch --test-only -N n` shows the nodes Slurm picks, while the daemon's
`test` op shows what slurm-tree picks on its view. The node sets must be
equal. docs/slurm.md explains how the policy follows Slurm.

Usage: test_slurm_fidelity.py TOPO_SCHEDULER [SCENARIOS]
Exit 77 (skip) only when Slurm is not installed.
"""

import os
import random
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))

import slurm_cluster  # noqa: E402
from harness import Daemon, check, run  # noqa: E402
from slurm_cluster import running, SlurmCluster, ask, node_name  # noqa: E402

TEST_ONLY = re.compile(r"on nodes (\S+) in partition")


def slurm_pick(cluster, n):
    r = cluster.run(["sbatch", "--test-only", "-N", str(n), "--wrap", "true"], check=False)
    m = TEST_ONLY.search(r.stderr + r.stdout)
    if not m:
        return None, (r.stderr + r.stdout).strip()
    return cluster.expand(m.group(1)), ""


def toposched_pick(sock, n):
    answer = ask(sock, {"v": 1, "op": "test", "uid": 0, "name": "fidelity", "min_nodes": n, "max_nodes": n,
                        "env": {}})
    if not answer.startswith("PLACE 0 "):
        return None, answer
    return sorted(answer.split(" ", 2)[2].split(",")), ""


def scenarios(count, seed=20261122):
    """(busy node list, request sizes): three requests per busy state."""
    rng = random.Random(seed)
    real = [node_name(i) for i in range(1, slurm_cluster.REAL_NODES + 1)]
    out = []
    while sum(len(s[1]) for s in out) < count:
        k = rng.randint(0, 11)
        busy = sorted(rng.sample(real, k))
        free = len(real) - k
        sizes = sorted(rng.sample(range(1, free + 1), min(3, free)))
        out.append((busy, sizes))
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: test_slurm_fidelity.py TOPO_SCHEDULER [SCENARIOS]")
    scheduler_bin = sys.argv[1]
    wanted = int(sys.argv[2]) if len(sys.argv) == 3 else 24
    if not slurm_cluster.have_slurm():
        print("SKIP: Slurm is not installed (apt-get install slurm-wlm munge)")
        sys.exit(77)
    t0 = time.time()
    cluster = SlurmCluster()
    sock = cluster.path("topo.sock")
    os.environ["SLURM_CONF"] = cluster.conf
    daemon = Daemon(scheduler_bin, config="\n".join([
        "agent_listen = off",
        "slurm_socket = " + sock,
        "slurm_topology = " + cluster.path("topology.conf"),
        "slurm_poll_interval_ms = 1000",
        "stack = slurm-tree",
    ]) + "\n")
    with running(daemon, cluster):
        cluster.start()
        daemon.start()
        slurm_cluster.wait_socket(sock)
        results = []
        for busy, sizes in scenarios(wanted):
            holder = None
            if busy:
                holder, r = cluster.sbatch("-J", "busy", "-w", ",".join(busy), "-N", str(len(busy)),
                                           "-o", "/dev/null", "--wrap", "sleep 600")
                check(holder is not None, "sbatch -w failed: %s" % r.stderr)
                info = cluster.wait_job(holder, {"RUNNING"})
                check(cluster.expand(info["NodeList"]) == busy, "the busy job runs on %s" % info["NodeList"])
            check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "no sync")
            for n in sizes:
                slurm, why_s = slurm_pick(cluster, n)
                topo, why_t = toposched_pick(sock, n)
                results.append((busy, n, slurm, topo))
                same = slurm is not None and slurm == topo
                print("%-4s busy=%-40s N=%-2d slurm=%s toposched=%s" % (
                    "ok" if same else "DIFF", ",".join(b[3:] for b in busy) or "-", n,
                    ",".join(x[3:] for x in slurm) if slurm else why_s,
                    ",".join(x[3:] for x in topo) if topo else why_t))
            if holder is not None:
                cluster.run(["scancel", str(holder)])
                cluster.wait_idle(slurm_cluster.REAL_NODES)
        agree = sum(1 for _, _, s, t in results if s is not None and s == t)
        print("slurm-tree agrees with Slurm on %d of %d scenarios (%.1f s)" % (agree, len(results), time.time() - t0))
        check(len(results) >= 20, "only %d scenarios" % len(results))
        check(agree == len(results), "slurm-tree picked other nodes than Slurm in %d scenarios (above)"
              % (len(results) - agree))


if __name__ == "__main__":
    run(main)
