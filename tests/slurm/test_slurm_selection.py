"""Node selection through real Slurm: slurmctld + 16 slurmd + munged on
loopback (slurm_cluster.py) whose nodes have 8 GPUs of GRES type h100
(GresTypes=gpu, Gres=gpu:h100:8), job_submit/topo, and a real topo-scheduler
in Slurm mode whose topology.conf names the GPU model (`#toposched:
model=H100`, a comment to Slurm).

  1. sbatch --gres=gpu:h100:8 runs on toposched's nodes, and toposched's job
     spec has gpu_types ["h100"] (--gpus=h100:16 too, two nodes);
  2. a GPU type the cluster lacks is refused with the cluster's types;
  3. -w runs the job on exactly those nodes; -x keeps it off them;
  4. -C richer than an AND of features is refused by name; -C on a topology
     without features passes to Slurm (which places it on nodes that have
     them); with a JSON topology that names the features, -C nvme and
     -C ib&nvme run on toposched's nodes that have them, and an unknown
     feature is refused with the cluster's features.
  5. -p: with a toposched partition named as Slurm's (gpu, on gpu[0009-0016]),
     sbatch -p gpu runs on its nodes and toposched's job shows it; a -t past
     its max_time is refused naming it; a job naming no toposched partition
     (no default one) passes to Slurm.

Usage: test_slurm_selection.py TOPO_SCHEDULER PLUGIN_SO
Exit 77 (skip) only when Slurm is not installed.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))

import slurm_cluster  # noqa: E402
from harness import Daemon, check, run  # noqa: E402
from slurm_cluster import running, SlurmCluster, ask  # noqa: E402

NVME = ["gpu%04d" % i for i in range(9, 17)]  # ib and nvme; gpu0001-0008: ib only


def synced(sock):
    for _ in range(2):
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "no sync")


def toposched_job(cluster, daemon, job_id):
    """The Slurm job, running, and its toposched job (the nodes in rank order)."""
    info = cluster.wait_job(job_id, {"RUNNING"})
    comment = info.get("AdminComment", "").strip()
    check(comment.startswith("toposched:"), "job %d: AdminComment %r is not toposched:ID" % (job_id, comment))
    tjob = daemon.api("GET", "/v1/jobs/%d" % int(comment.split(":", 1)[1].split()[0]), expect=200)
    want = []
    for r in tjob["ranks"]:
        if r["node"] not in want:
            want.append(r["node"])
    got = cluster.expand(info["NodeList"])
    check(got == sorted(want), "job %d: NodeList %s, toposched chose %s" % (job_id, got, want))
    return tjob, got


def refused(cluster, what, *args):
    j, r = cluster.sbatch(*args, "--wrap", "true")
    check(j is None, "%s was accepted as job %s" % (what, j))
    check("toposched:" in r.stderr, "%s: the refusal is not toposched's: %r" % (what, r.stderr))
    print("refused: %s: %s" % (what, [l for l in r.stderr.splitlines() if "toposched:" in l][0].strip()))
    return r.stderr


def with_features(topology, features_of):
    """The topology JSON with features on the named nodes."""
    def walk(v):
        if isinstance(v, dict):
            if isinstance(v.get("nodes"), list):
                v["nodes"] = [node(n) for n in v["nodes"]]
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    def node(n):
        name = n if isinstance(n, str) else n["name"]
        if name not in features_of:
            return n
        out = {"name": name} if isinstance(n, str) else dict(n)
        out["features"] = features_of[name]
        return out

    walk(topology)
    return topology


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: test_slurm_selection.py TOPO_SCHEDULER PLUGIN_SO")
    scheduler_bin, plugin = sys.argv[1], sys.argv[2]
    slurm_cluster.require(plugin)
    t0 = time.time()
    cluster = SlurmCluster(plugin_dir=os.path.dirname(os.path.abspath(plugin)), job_submit_plugins="topo",
                           gpu_gres="h100:8", topology_header="#toposched: model=H100")
    sock = cluster.path("topo.sock")
    slurm_cluster.write_plugin_conf(cluster, sock, timeout_ms=2000)
    os.environ["SLURM_CONF"] = cluster.conf
    daemon = Daemon(scheduler_bin, config="\n".join([
        "agent_listen = off",
        "slurm_socket = " + sock,
        "slurm_topology = " + cluster.path("topology.conf"),
        "slurm_poll_interval_ms = 300",
        "slurm_job_grace_s = 30",
        "stack = toposched",
    ]) + "\n")
    with running(daemon, cluster):
        cluster.start()
        print("cluster up in %.1f s" % (time.time() - t0))
        cluster.run(["scontrol", "update", "NodeName=gpu[0001-0016]", "AvailableFeatures=ib", "ActiveFeatures=ib"])
        cluster.run(["scontrol", "update", "NodeName=gpu[0009-0016]", "AvailableFeatures=ib,nvme",
                     "ActiveFeatures=ib,nvme"])
        daemon.start()
        slurm_cluster.wait_socket(sock)
        synced(sock)

        # 1. The GRES type is toposched's gpu_types.
        a, r = cluster.sbatch("-J", "typed", "-N", "2", "--gres=gpu:h100:8", "--wrap", "sleep 300")
        check(a is not None, "sbatch --gres=gpu:h100:8 failed: %s" % r.stderr)
        tjob, nodes = toposched_job(cluster, daemon, a)
        check(tjob["spec"].get("gpu_types") == ["h100"], "toposched's spec: %s" % json.dumps(tjob["spec"]))
        check(tjob["spec"]["gpus"] == 16 and tjob["spec"]["gpus_per_node"] == 8, "spec: %s" % tjob["spec"])
        print("--gres=gpu:h100:8: job %d on %s, gpu_types %s" % (a, ",".join(nodes), tjob["spec"]["gpu_types"]))
        b, r = cluster.sbatch("-J", "typed-job", "--gpus=h100:16", "--wrap", "sleep 300")
        check(b is not None, "sbatch --gpus=h100:16 failed: %s" % r.stderr)
        tjob, nodes_b = toposched_job(cluster, daemon, b)
        check(tjob["spec"].get("gpu_types") == ["h100"] and tjob["spec"]["gpus"] == 16 and len(nodes_b) == 2,
              "--gpus=h100:16: %s on %s" % (tjob["spec"], nodes_b))
        cluster.cancel_all()
        synced(sock)

        # 2. A type the cluster lacks: refused with its types.
        err = refused(cluster, "--gres=gpu:a100:8", "-N", "1", "--gres=gpu:a100:8")
        check("no 'a100' GPUs" in err and "its GPU types are H100" in err, "the refusal: %r" % err)

        # 3. -w: exactly those nodes; -x: never those.
        c, r = cluster.sbatch("-J", "listed", "-w", "gpu[0006-0007]", "--wrap", "sleep 300")
        check(c is not None, "sbatch -w failed: %s" % r.stderr)
        tjob, nodes = toposched_job(cluster, daemon, c)
        check(nodes == ["gpu0006", "gpu0007"] and tjob["spec"].get("nodelist") == "gpu[0006-0007]",
              "-w gpu[0006-0007]: on %s, spec %s" % (nodes, tjob["spec"]))
        d, r = cluster.sbatch("-J", "excluded", "-N", "4", "-x", "gpu[0001-0005]", "--wrap", "sleep 300")
        check(d is not None, "sbatch -x failed: %s" % r.stderr)
        tjob, nodes = toposched_job(cluster, daemon, d)
        check(not set(nodes) & {"gpu%04d" % i for i in range(1, 8)} and tjob["spec"].get("exclude") == "gpu[0001-0005]",
              "-x gpu[0001-0005]: on %s, spec %s" % (nodes, tjob["spec"]))
        print("-w and -x: job %d on gpu0006,gpu0007; job %d on %s" % (c, d, ",".join(nodes)))
        err = refused(cluster, "-w of 1 node with -N 2", "-N", "2", "-w", "gpu0010")
        check("req_nodes (-w) names 1 node(s)" in err, "the refusal: %r" % err)
        cluster.cancel_all()
        synced(sock)

        # 4. -C: an AND of features, or refused by name.
        err = refused(cluster, "-C ib|nvme", "-N", "1", "-C", "ib|nvme")
        check("features (-C/--constraint)" in err and "more than an AND" in err, "the refusal: %r" % err)
        err = refused(cluster, "-C [ib*2&nvme*2]", "-N", "4", "-C", "[ib*2&nvme*2]")
        check("features (-C/--constraint)" in err, "the refusal: %r" % err)
        # topology.conf names no features: Slurm places the job, on nodes that have them.
        e, r = cluster.sbatch("-J", "slurms", "-N", "2", "-C", "nvme", "--wrap", "sleep 300")
        check(e is not None, "sbatch -C nvme failed: %s" % r.stderr)
        info = cluster.wait_job(e, {"RUNNING"})
        check(not info.get("AdminComment", "").startswith("toposched:"), "toposched placed -C nvme: %s" % info)
        check(set(cluster.expand(info["NodeList"])) <= set(NVME), "Slurm ran -C nvme on %s" % info["NodeList"])
        check("toposched's topology has none" in cluster.log_tail(chars=20000),
              "slurmctld's log does not say why the job passed")
        print("-C nvme without features in toposched's topology: Slurm placed job %d on %s" % (e, info["NodeList"]))
        cluster.cancel_all()
        synced(sock)
        # The same topology as JSON, with the nodes' features.
        exported = daemon.api("GET", "/v1/topology?format=json", expect=200)["content"]
        topology = exported if isinstance(exported, dict) else json.loads(exported)
        features = {n: ["ib", "nvme"] if n in NVME else ["ib"] for n in ["gpu%04d" % i for i in range(1, 17)]}
        daemon.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(with_features(topology, features))},
                   expect=200)
        synced(sock)
        for constraint in ("nvme", "ib&nvme"):
            f, r = cluster.sbatch("-J", "featured", "-N", "2", "-C", constraint, "--wrap", "sleep 300")
            check(f is not None, "sbatch -C %s failed: %s" % (constraint, r.stderr))
            tjob, nodes = toposched_job(cluster, daemon, f)
            check(set(nodes) <= set(NVME) and tjob["spec"].get("features") == constraint.split("&"),
                  "-C %s: on %s, spec %s" % (constraint, nodes, tjob["spec"]))
            print("-C %s: job %d on %s, features %s" % (constraint, f, ",".join(nodes), tjob["spec"]["features"]))
        err = refused(cluster, "-C gpu80g", "-N", "1", "-C", "gpu80g")
        check("no node has feature 'gpu80g'" in err and "ib, nvme" in err, "the refusal: %r" % err)
        cluster.cancel_all()
        synced(sock)

        # 5. -p: the toposched partition of Slurm's name.
        daemon.api("POST", "/v1/partitions", {"name": "gpu", "nodes": "gpu[0009-0016]",
                                              "max_time_s": 3600}, expect=201)
        g, r = cluster.sbatch("-J", "parted", "-p", "gpu", "-N", "2", "-t", "30", "--wrap",
                              "sleep 300")
        check(g is not None, "sbatch -p gpu failed: %s" % r.stderr)
        tjob, nodes = toposched_job(cluster, daemon, g)
        check(set(nodes) <= set(NVME) and tjob["partition"] == "gpu",
              "-p gpu: on %s, partition %s" % (nodes, tjob.get("partition")))
        print("-p gpu: job %d on %s, toposched partition %s" % (g, ",".join(nodes), tjob["partition"]))
        err = refused(cluster, "-p gpu -t 120", "-p", "gpu", "-N", "1", "-t", "120")
        check("partition 'gpu'" in err and "max_time" in err, "the refusal: %r" % err)
        h, r = cluster.sbatch("-J", "unparted", "-N", "2", "--wrap", "sleep 300")
        check(h is not None, "sbatch without -p failed: %s" % r.stderr)
        info = cluster.wait_job(h, {"RUNNING"})
        check(not info.get("AdminComment", "").startswith("toposched:"),
              "toposched placed a job of no partition of its own: %s" % info)
        print("no -p, no default toposched partition: Slurm placed job %d on %s" %
              (h, info["NodeList"]))
        cluster.cancel_all()
        print("ok in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    run(main)
