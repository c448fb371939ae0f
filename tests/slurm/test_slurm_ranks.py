"""Ranks in toposched's order under real Slurm (the rank-order check):
slurmctld + 16 slurmd + munged on loopback (slurm_cluster.py), job_submit/topo
loaded from the build tree, topo-slurm-task as Slurm's TaskProlog, and a real
topo-scheduler in Slurm mode.

A job whose rank order is not node-name order (toposched puts the
pipeline's first stages on a leaf away from a busy one) runs `srun` in its
batch script; every task reports SLURM_PROCID, the node it runs on and its
CUDA_VISIBLE_DEVICES and TOPO_* variables, and each must equal toposched's
rank map (GET /v1/jobs/ID: rank -> node, GPU; the parallel groups of
core::RankLayout as the node agent exports them). A step of one task per
node (torchrun's shape, SLURM_HOSTFILE=$TOPO_NODEFILE) gets each node's GPUs
in rank order.

Usage: test_slurm_ranks.py TOPO_SCHEDULER PLUGIN_SO TOPO_SLURM_TASK
Exit 77 (skip) only when Slurm is not installed.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))

import slurm_cluster  # noqa: E402
from harness import Daemon, check, run  # noqa: E402
from slurm_cluster import running, SlurmCluster, ask  # noqa: E402

TASK_REPORT = ("echo \"task $SLURM_PROCID $SLURMD_NODENAME $SLURM_LOCALID gpu=$CUDA_VISIBLE_DEVICES "
               "order=$CUDA_DEVICE_ORDER "
               "tp=$TOPO_TP_RANK pp=$TOPO_PP_RANK dp=$TOPO_DP_RANK tpg=$TOPO_TP_GROUP ppg=$TOPO_PP_GROUP "
               "dpg=$TOPO_DP_GROUP sizes=$TOPO_TP_SIZE,$TOPO_PP_SIZE,$TOPO_DP_SIZE job=$TOPO_JOB_ID\"")
NODE_REPORT = ("echo \"node $SLURM_PROCID $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES "
               "order=$CUDA_DEVICE_ORDER nr=$TOPO_NODE_RANK\"")


def expected_groups(tp, pp, dp, rank):
    """core::RankLayout for order tp-cp-ep-dp-pp with cp = ep = 1: TP fastest,
    then DP, then PP."""
    tp_rank = rank % tp
    dp_rank = (rank // tp) % dp
    pp_rank = rank // (tp * dp)
    return {"tp": tp_rank, "pp": pp_rank, "dp": dp_rank,
            "tpg": rank // tp,                   # groups of consecutive tp ranks
            "ppg": rank % (tp * dp),             # ranks sharing tp and dp coordinates
            "dpg": pp_rank * tp + tp_rank}       # ranks sharing tp and pp coordinates


def wait_for_text(path, text, timeout=30):
    deadline = time.time() + timeout
    got = ""
    while time.time() < deadline:
        try:
            with open(path) as f:
                got = f.read()
        except OSError:
            got = ""
        if text in got:
            return got
        time.sleep(0.2)
    raise AssertionError("%s did not get %r in %ss: %r" % (path, text, timeout, got))


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: test_slurm_ranks.py TOPO_SCHEDULER PLUGIN_SO TOPO_SLURM_TASK")
    scheduler_bin, plugin, task_bin = sys.argv[1:4]
    slurm_cluster.require(plugin)
    t0 = time.time()
    cluster = SlurmCluster(plugin_dir=os.path.dirname(os.path.abspath(plugin)), job_submit_plugins="topo",
                           extra_conf=["TaskProlog=%s" % os.path.abspath(task_bin),
                                       "TaskEpilog=%s" % os.path.abspath(task_bin)])
    # toposched reads the cluster's tree as Slurm 25.05's topology.yaml
    # (slurm_topology = ....yaml), written from the same switches.
    topo_conf = os.path.join(cluster.dir, "topology.yaml")
    with open(topo_conf, "w") as f:
        f.write("---\n- topology: fabric\n  cluster_default: true\n  tree:\n    switches:\n")
        for line in slurm_cluster.topology_conf().splitlines():
            if line.startswith("SwitchName="):
                kv = dict(t.split("=", 1) for t in line.split())
                f.write("      - switch: %s\n        %s: %s\n" % (
                    kv["SwitchName"], "nodes" if "Nodes" in kv else "children", kv.get("Nodes", kv.get("Switches"))))
    sock = cluster.path("topo.sock")
    slurm_cluster.write_plugin_conf(cluster, sock, timeout_ms=10000)
    os.environ["SLURM_CONF"] = cluster.conf
    daemon = Daemon(scheduler_bin, config="\n".join([
        "agent_listen = 127.0.0.1:0",
        "slurm_socket = " + sock,
        "slurm_topology = " + topo_conf,
        "slurm_poll_interval_ms = 300",
        "slurm_job_grace_s = 30",
        "stack = toposched",
    ]) + "\n")
    with running(daemon, cluster):
        cluster.start()
        daemon.start()
        slurm_cluster.wait_socket(sock)
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "the first sync did not finish")
        # gpu0001, gpu0002 (leaf001) and gpu0009 busy with a job that names
        # them (-w: toposched places it there): a 6-node tp=8,pp=2 job (dp=3)
        # gets leaf001's two free nodes and leaf002, its pipeline stages
        # paired across neighbours.
        busy, r = cluster.sbatch("-J", "busy", "-w", "gpu0001,gpu0002,gpu0009", "--wrap", "sleep 300")
        check(busy is not None, "sbatch failed: %s" % r.stderr)
        cluster.wait_job(busy, {"RUNNING"})
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "no sync after the busy job started")

        out = cluster.path("ranks.out")
        script = cluster.path("ranks.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n"
                    "echo \"batch hostfile=$SLURM_HOSTFILE dist=$SLURM_DISTRIBUTION world=$TOPO_WORLD_SIZE\"\n"
                    "echo \"batch nodefile=$TOPO_NODEFILE\"\n"
                    "srun -O sh -c '%s'\n"
                    "SLURM_HOSTFILE=$TOPO_NODEFILE srun -O -n $SLURM_JOB_NUM_NODES sh -c '%s'\n"
                    "sbatch --array=0 -w gpu0016 -o %s --wrap 'echo nested hostfile=$SLURM_HOSTFILE "
                    "map=$TOPO_SLURM_MAP; srun true && echo nested srun ok'\n"
                    % (TASK_REPORT, NODE_REPORT, cluster.path("nested.out")))
        job, r = cluster.sbatch("-J", "ranks", "-N", "6", "--comment", "topo: tp=8,pp=2", "-o", out, script)
        check(job is not None, "sbatch failed: %s" % r.stderr)
        info = cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
        with open(out) as f:
            text = f.read()
        check(info["JobState"] == "COMPLETED", "job %d %s: %s" % (job, info["JobState"], text))
        topo_id = int(info["AdminComment"].split(":", 1)[1].split()[0])
        # toposched's rank map from its start command in the event log: the
        # job view of a finished job no longer lists its ranks, and the job may
        # have finished in toposched's view already.
        events = daemon.api("GET", "/v1/events?after=0&limit=1000&job=%d" % topo_id,
                            expect=200)["events"]
        starts = [c for e in events for c in e.get("commands", [])
                  if c.get("type") == "start_job" and c.get("id") == topo_id]
        check(starts, "no start of job %d in the event log" % topo_id)
        want = {r: (node, gpu) for r, (node, gpu) in enumerate(starts[-1]["ranks"])}
        order = []
        for r in sorted(want):
            if want[r][0] not in order:
                order.append(want[r][0])
        check(len(want) == 48, "toposched's job has %d ranks, not 48" % len(want))
        check(order != sorted(order), "the test needs a rank order unlike name order; toposched chose %s" % order)
        print("toposched's node order: %s (Slurm's: %s)" % (",".join(order), ",".join(sorted(order))))

        tasks = {}
        nodes = {}
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0] == "task":
                kv = dict(p.split("=", 1) for p in parts[4:])
                tasks[int(parts[1])] = (parts[2], kv)
            elif parts and parts[0] == "node":
                kv = dict(p.split("=", 1) for p in parts[3:])
                nodes[int(parts[1])] = (parts[2], kv)
        check(sorted(tasks) == list(range(48)), "srun ran tasks %s, not 0..47:\n%s" % (sorted(tasks), text))
        for rank in range(48):
            node, kv = tasks[rank]
            want_node, want_gpu = want[rank]
            check(node == want_node, "rank-order: SLURM_PROCID %d ran on %s, toposched placed rank %d on %s"
                  % (rank, node, rank, want_node))
            check(kv["gpu"] == str(want_gpu), "rank-order: rank %d has CUDA_VISIBLE_DEVICES=%s, toposched "
                  "gave it GPU %d" % (rank, kv["gpu"], want_gpu))
            check(kv["order"] == "PCI_BUS_ID", "rank %d: CUDA_DEVICE_ORDER=%s, not PCI_BUS_ID (the order "
                  "of toposched's GPU numbers)" % (rank, kv["order"]))
            g = expected_groups(8, 2, 3, rank)
            for key in ("tp", "pp", "dp", "tpg", "ppg", "dpg"):
                check(kv[key] == str(g[key]), "rank %d: TOPO_ %s is %s, the rank layout says %d"
                      % (rank, key, kv[key], g[key]))
            check(kv["sizes"] == "8,2,3" and kv["job"] == str(topo_id),
                  "rank %d: sizes %s, job %s" % (rank, kv["sizes"], kv["job"]))
        print("rank-order: all 48 ranks' SLURM_PROCID, node and GPU equal toposched's map")
        check(sorted(nodes) == list(range(6)), "the per-node step ran tasks %s:\n%s" % (sorted(nodes), text))
        for i in range(6):
            node, kv = nodes[i]
            want_gpus = ",".join(str(want[r][1]) for r in sorted(want) if want[r][0] == order[i])
            check(kv["order"] == "PCI_BUS_ID", "node task %d: CUDA_DEVICE_ORDER=%s" % (i, kv["order"]))
            check(node == order[i] and kv["gpus"] == want_gpus and kv["nr"] == str(i),
                  "rank-order: node task %d ran on %s with GPUs %s (TOPO_NODE_RANK %s); toposched's node %d "
                  "is %s with GPUs %s" % (i, node, kv["gpus"], kv["nr"], i, order[i], want_gpus))
        print("rank-order: the per-node step (torchrun's shape) follows toposched's node order")
        # A job submitted from inside the batch script (not toposched's: a job
        # array) inherits its variables; the TaskProlog unsets the layout ones.
        nested = wait_for_text(cluster.path("nested.out"), "nested srun ok")
        check("nested hostfile= map=\n" in nested,
              "a job submitted inside a placed job kept its rank layout: %r" % nested)
        # The TaskEpilog after the batch script removed the two files its
        # TaskProlog wrote (the script's second srun still read the nodefile:
        # the steps' task epilogs leave them).
        files = [line.split("=", 1)[1] for line in text.splitlines()
                 if line.startswith("batch hostfile=") or line.startswith("batch nodefile=")]
        files = [f.split()[0] for f in files]
        check(len(files) == 2 and all(os.path.basename(f).startswith("topo-%d-" % job) for f in files),
              "the batch script's hostfile and nodefile: %s" % files)
        deadline = time.time() + 15
        while time.time() < deadline and any(os.path.exists(f) for f in files):
            time.sleep(0.2)
        check(not any(os.path.exists(f) for f in files),
              "the TaskEpilog left the job's files: %s" % [f for f in files if os.path.exists(f)])
        print("task epilog: the batch script's hostfile and nodefile are gone after it")
        print("ok in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    run(main)
