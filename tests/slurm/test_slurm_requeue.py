"""Recovery and preemption carried out through real Slurm (the requeue
check): slurmctld + 16 slurmd + munged on loopback (slurm_cluster.py),
job_submit/topo, topo-slurm-task as TaskProlog, a real topo-scheduler in
Slurm mode, and an agent connection beside slurmd that reports GPU health.

  1. XID 79 on a node of a running Slurm job that has a spare: the node is
     drained in Slurm, the job is requeued (`scontrol requeuehold`), released
     onto toposched's new nodes (the spare in place of the failed node) and
     runs again there, resuming from its newest checkpoint
     (TOPO_RESTART_STEP), and completes;
  2. preemption: a job of a tenant under its guarantee needs the nodes a
     borrowing job holds: the victim gets the checkpoint signal it declared
     (--signal=B:USR1: SIGUSR1 to its batch shell through `scancel
     --signal=10 --batch`), is requeued after the grace period, the
     preemptor runs, and the victim runs again and finishes when capacity frees;
  3. an immediate drain (`topo drain --mode immediate`) of a node under a
     running Slurm job moves it the same way.
  4. a graceful drain (the default mode) of a node under a running job that
     declared a checkpoint signal sends it that signal; after preempt_grace_s
     the job moves off the node and resumes from the checkpoint it wrote
     (step 7). (A job that declared none runs to its end:
     test_slurm_operations.py.)

Usage: test_slurm_requeue.py TOPO_SCHEDULER PLUGIN_SO TOPO_SLURM_TASK
Exit 77 (skip) only when Slurm is not installed.
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))

import slurm_cluster  # noqa: E402
from agent_client import AgentConnection  # noqa: E402
from agent_protocol import Protocol  # noqa: E402
from harness import Daemon, check, run  # noqa: E402
from slurm_cluster import running, SlurmCluster, ask  # noqa: E402

# One run of the job (submitted with --signal=B:USR1@60: its batch shell
# handles SIGUSR1): says what it resumed from, writes checkpoint step 5
# (step-5/COMPLETE last), then works until stopped; a restarted run that
# resumed from a checkpoint finishes at once.
JOB_SCRIPT = """#!/bin/sh
echo "run restart=${SLURM_RESTART_COUNT:-0} step=${TOPO_RESTART_STEP:-none} signal=${TOPO_CHECKPOINT_SIGNAL:-none} nodes=$(tr '\\n' ',' < $TOPO_NODEFILE)"
mkdir -p "$TOPO_CHECKPOINT_DIR/step-5" && touch "$TOPO_CHECKPOINT_DIR/step-5/COMPLETE"
if [ -n "$TOPO_RESTART_STEP" ]; then echo done; exit 0; fi
trap 'echo "checkpoint signal"; mkdir -p "$TOPO_CHECKPOINT_DIR/step-7" && touch "$TOPO_CHECKPOINT_DIR/step-7/COMPLETE"' USR1
while :; do sleep 1; done
"""


def wait_for(what, pred, timeout=45):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def toposched_job(daemon, info):
    topo_id = int(info["AdminComment"].split(":", 1)[1].split()[0])
    return topo_id, daemon.api("GET", "/v1/jobs/%d" % topo_id, expect=200)


def job_nodes(tjob):
    out = []
    for r in tjob["ranks"]:
        if r["node"] not in out:
            out.append(r["node"])
    return out


def start_trainer(cluster, daemon, tag, name):
    """Submits JOB_SCRIPT as a 2-node tp=8,pp=2 job with one spare node,
    checkpointing into its own directory; returns (checkpoint dir, output
    file, Slurm job id, toposched job id, toposched's job view) once it runs."""
    ckpt = cluster.path("ckpt-" + tag)
    out = cluster.path(tag + ".out")
    script = cluster.path(tag + ".sh")
    with open(script, "w") as f:
        f.write(JOB_SCRIPT)
    env = dict(cluster.env, TOPO_CHECKPOINT_DIR=ckpt)
    job, r = cluster.sbatch("-J", name, "-N", "2", "--comment", "topo: tp=8,pp=2,spares=1",
                            "--signal=B:USR1@60", "--open-mode=append", "-o", out, script, env=env)
    check(job is not None, "sbatch failed: %s" % r.stderr)
    info = cluster.wait_job(job, {"RUNNING"})
    topo_id, tjob = toposched_job(daemon, info)
    return ckpt, out, job, topo_id, tjob


def xid_requeue(cluster, daemon, scheduler_bin, sock):
    ckpt, out, job, topo_id, tjob = start_trainer(cluster, daemon, "a", "trainer")
    before = job_nodes(tjob)
    spares = tjob.get("spares") or []
    check(len(spares) == 1, "toposched job %d holds spares %s, not one" % (topo_id, spares))
    wait_for("the first run's checkpoint", lambda: os.path.exists(os.path.join(ckpt, "step-5", "COMPLETE")))
    victim = before[1]
    print("requeue: Slurm job %d (toposched %d) runs on %s, spare %s; XID 79 on %s"
          % (job, topo_id, ",".join(before), spares[0], victim))

    certs = cluster.path("agent-certs")
    subprocess.run([scheduler_bin, "--state-dir", daemon.state_dir, "ca", "issue", "--node", victim,
                    "--out", certs], check=True, capture_output=True)
    with open(os.path.join(daemon.state_dir, "agent-endpoint")) as f:
        agent_port = int(f.read().strip().rsplit(":", 1)[1].split("/")[0])
    agent = AgentConnection(agent_port, os.path.join(daemon.state_dir, "ca.pem"),
                            os.path.join(certs, victim + ".pem"), os.path.join(certs, victim + "-key.pem"))
    try:
        protocol = Protocol()
        gpus = [{"index": i, "model": "H100", "uuid": "GPU-%d" % i, "memory_mb": 81559} for i in range(8)]
        agent.send(protocol.agent("register", node=victim, addr="127.0.0.1", gpus=gpus, ranks=[],
                                  agent="test-agent", protocol=protocol.version))
        check(agent.recv()["type"] == "registered", "the agent did not register")
        agent.send(protocol.agent("gpu_event", gpu=3, kind="xid", code=79))

        try:
            text = wait_for("the job's second run",
                            lambda: "restart=1" in read(out) and "done" in read(out) and read(out))
        except AssertionError:
            print(cluster.run(["scontrol", "show", "job", str(job)]).stdout, read(out))
            raise
    finally:
        agent.close()
    info = cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=30)
    check(info["JobState"] == "COMPLETED", "Slurm job %d ended %s:\n%s" % (job, info["JobState"], text))
    second = [l for l in text.splitlines() if l.startswith("run restart=1")][0]
    nodes = second.split("nodes=", 1)[1].strip(",").split(",")
    check(victim not in nodes and spares[0] in nodes,
          "requeue: the second run's nodes %s should hold the spare %s instead of %s" % (nodes, spares[0], victim))
    check("step=5" in second, "requeue: the second run did not resume from checkpoint 5: %r" % second)
    check(" signal=10 " in second, "requeue: TOPO_CHECKPOINT_SIGNAL is not the job's --signal: %r" % second)
    check(cluster.expand(info["NodeList"]) == sorted(nodes),
          "requeue: Slurm ran the second run on %s, its rank map names %s" % (info["NodeList"], nodes))
    node = slurm_cluster.parse_kv(cluster.run(["scontrol", "show", "node", "-o", victim]).stdout)
    check("DRAIN" in node["State"], "requeue: %s is %s in Slurm, not drained" % (victim, node["State"]))
    tjob = wait_for("toposched's job to complete",
                    lambda: (lambda j: j if j["state"] == "completed" else None)(
                        daemon.api("GET", "/v1/jobs/%d" % topo_id, expect=200)))
    print("requeue: job %d ran again on %s (spare %s for %s) from checkpoint step 5 and completed"
          % (job, ",".join(nodes), spares[0], victim))


def preempt_requeue(cluster, daemon):
    daemon.api("PUT", "/v1/tenants/low", {"guaranteed_gpus": 0}, expect=201)
    daemon.api("PUT", "/v1/tenants/high", {"guaranteed_gpus": 128}, expect=201)
    ckpt = cluster.path("ckpt-v")
    out = cluster.path("v.out")
    script = cluster.path("v.sh")
    with open(script, "w") as f:
        f.write(JOB_SCRIPT)
    env = dict(cluster.env, TOPO_CHECKPOINT_DIR=ckpt)
    victim, r = cluster.sbatch("-J", "borrower", "-A", "low", "-N", "8", "--comment", "topo: tp=8",
                               "--signal=B:USR1@60", "--open-mode=append", "-o", out, script, env=env)
    check(victim is not None, "sbatch failed: %s" % r.stderr)
    info = cluster.wait_job(victim, {"RUNNING"})
    v_id, vjob = toposched_job(daemon, info)
    check(vjob.get("tenant") == "low", "the victim's tenant is %r, not low" % vjob.get("tenant"))
    wait_for("the victim's first checkpoint", lambda: os.path.exists(os.path.join(ckpt, "step-5", "COMPLETE")))

    hout = cluster.path("h.out")
    head, r = cluster.sbatch("-J", "guaranteed", "-A", "high", "-N", "12", "--comment", "topo: tp=8",
                             "-o", hout, "--wrap", "echo preemptor ran; sleep 2")
    check(head is not None, "sbatch failed: %s" % r.stderr)
    wait_for("the checkpoint signal in the victim", lambda: "checkpoint signal" in read(out))
    print("requeue: the victim (Slurm job %d) got SIGUSR1 through scancel --signal" % victim)
    info = cluster.wait_job(head, {"COMPLETED"}, timeout=45)
    check("preemptor ran" in read(hout), "the preemptor's output: %r" % read(hout))
    text = wait_for("the victim's second run",
                    lambda: "restart=1" in read(out) and "done" in read(out) and read(out), timeout=60)
    info = cluster.wait_job(victim, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=30)
    check(info["JobState"] == "COMPLETED", "the victim ended %s:\n%s" % (info["JobState"], text))
    second = [l for l in text.splitlines() if l.startswith("run restart=1")][0]
    check("step=7" in second, "requeue: the preempted job did not resume from its checkpoint 7: %r" % second)
    wait_for("toposched's victim to complete",
             lambda: daemon.api("GET", "/v1/jobs/%d" % v_id, expect=200)["state"] == "completed")
    print("requeue: the preempted job requeued, ran again from checkpoint step 7 after the preemptor, "
          "and finished")


def second_run(cluster, job, out, what):
    """Waits for the job's second run to finish and the job to complete;
    returns that run's first output line and the nodes it ran on."""
    text = wait_for(what + "'s second run",
                    lambda: "restart=1" in read(out) and "done" in read(out) and read(out))
    info = cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=30)
    check(info["JobState"] == "COMPLETED", "%s ended %s:\n%s" % (what, info["JobState"], text))
    second = [l for l in text.splitlines() if l.startswith("run restart=1")][0]
    return second, second.split("nodes=", 1)[1].strip(",").split(",")


def drain_requeue(cluster, daemon, mode):
    """Drains a node under a running trainer: `immediate` moves it at once,
    from checkpoint 5; `graceful` first signals it (it writes checkpoint 7)
    and moves it when the grace ends, leaving the node drained."""
    ckpt, out, job, topo_id, tjob = start_trainer(cluster, daemon, mode[0], "drained-" + mode)
    node = job_nodes(tjob)[0 if mode == "immediate" else 1]
    wait_for("the first run's checkpoint", lambda: os.path.exists(os.path.join(ckpt, "step-5", "COMPLETE")))
    daemon.api("POST", "/v1/nodes/drain", {"nodes": node, "reason": "bad optic", "mode": mode}, expect=200)
    step = "step=5"
    if mode == "graceful":
        wait_for("the checkpoint signal in the drained job", lambda: "checkpoint signal" in read(out))
        step = "step=7"
    second, nodes = second_run(cluster, job, out, "the job drained (%s)" % mode)
    check(node not in nodes and step in second,
          "requeue: after the %s drain of %s the job ran on %s (%r)" % (mode, node, nodes, second))
    state = daemon.api("GET", "/v1/nodes/" + node, expect=200)["state"]
    check(state == "drained", "the node drained (%s) is %s" % (mode, state))
    print("requeue: a%s %s drain of %s moved job %d to %s, from checkpoint %s"
          % ("n" if mode == "immediate" else "", mode, node, job, ",".join(nodes), step))


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: test_slurm_requeue.py TOPO_SCHEDULER PLUGIN_SO TOPO_SLURM_TASK")
    scheduler_bin, plugin, task_bin = sys.argv[1:4]
    slurm_cluster.require(plugin)
    t0 = time.time()
    cluster = SlurmCluster(plugin_dir=os.path.dirname(os.path.abspath(plugin)), job_submit_plugins="topo",
                           extra_conf=["TaskProlog=%s" % os.path.abspath(task_bin)])
    sock = cluster.path("topo.sock")
    slurm_cluster.write_plugin_conf(cluster, sock, timeout_ms=10000)
    os.environ["SLURM_CONF"] = cluster.conf
    daemon = Daemon(scheduler_bin, config="\n".join([
        "agent_listen = 127.0.0.1:0",
        "slurm_socket = " + sock,
        "slurm_topology = " + cluster.path("topology.conf"),
        "slurm_poll_interval_ms = 300",
        "slurm_job_grace_s = 30",
        "stack = toposched",
        "preemption = true",
        "preempt_grace_s = 3",
    ]) + "\n")
    with running(daemon, cluster):
        cluster.start()
        daemon.start()
        slurm_cluster.wait_socket(sock)
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "the first sync did not finish")
        xid_requeue(cluster, daemon, scheduler_bin, sock)
        preempt_requeue(cluster, daemon)
        drain_requeue(cluster, daemon, "immediate")
        drain_requeue(cluster, daemon, "graceful")
        print("ok in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    run(main)
