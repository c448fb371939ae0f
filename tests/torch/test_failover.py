#!/usr/bin/python3
"""A real PyTorch job survives a lost node and a failed GPU, bit for bit.

train_ddp.py (gloo, CPU, deterministic) runs as a 4-rank job over real
topo-agent processes next to a real topo-scheduler on loopback. The cluster
is 5 one-GPU nodes in 2 HBDs (hbd0: n0 n1 n2, hbd1: n3 n4), so the job's two
TP-2 groups fill hbd1 and two nodes of hbd0, and hbd0 keeps a spare. The
job checkpoints only when the scheduler asks (`POST /v1/jobs/ID/checkpoint`,
the agents send SIGUSR1); the agents copy each step to a shared persistent
tier.

  reference  the job runs undisturbed; rank 0 writes its final parameters.
  kill       mid-run, after a checkpoint and a few more steps, the agent of a
             node in hbd0 and that node's rank are SIGKILLed (the node is
             lost). The scheduler sees the node go down, restarts every rank
             from the stored step with the spare taking the lost node's
             place (the TP group stays inside hbd0), and the job finishes.
  xid        the same, but an XID 79 is injected into the node's GPU through
             its agent's FIFO (the agent and the node stay up).

Each fault run's final parameters must equal the reference's, byte for byte;
rank 0 must have resumed from the stored step; `topo show` must list the
incident. Exit 0 on success, 1 on failure, 77 (ctest skip) without torch.

usage: test_failover.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN [kill|xid|all]
Standard library only besides the job itself (/usr/bin/python3).
"""

import json
import os
import pwd
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
sys.path.insert(0, os.path.join(HERE, "..", "agent"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import Agent, agent_cluster, job, nodes, run_jobs_as, setup, wait_for  # noqa: E402

PYTHON = "/usr/bin/python3"
SCRIPT = os.path.join(HERE, "train_ddp.py")
STEPS = 60
NODES = ["n0", "n1", "n2", "n3", "n4"]
ACCOUNT_UID = [0]  # the account the ranks run as (set by main)


def topology():
    return {"version": 1, "name": "torch-2hbd", "tiers": ["node", "hbd", "leaf"], "hbd": "hbd",
            "gpus_per_node": 1, "gpu_model": "H100",
            "domains": [{"name": "leaf0", "children": [
                {"name": "hbd0", "nodes": ["n0", "n1", "n2"]},
                {"name": "hbd1", "nodes": ["n3", "n4"]}]}]}


def has_torch():
    return subprocess.run([PYTHON, "-c", "import torch, torch.distributed"],
                          capture_output=True).returncode == 0


def rank_log(agents, node, jid, rank):
    try:
        with open(os.path.join(agents[node].state_dir, "logs", str(jid), "rank-%d.log" % rank),
                  errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def node_of(view, rank):
    return [r["node"] for r in view["ranks"] if r["rank"] == rank][0]


def submit(d, out):
    """The job runs as the test's Unix account (not root); out is in a
    directory that account owns."""
    return d.api("POST", "/v1/jobs", {
        "spec": {"gpus": 4, "name": "ddp", "parallelism": {"tp": 2}},
        "command": [PYTHON, SCRIPT, "--steps", str(STEPS), "--step-sleep", "0.1",
                    "--checkpoint-every", "0", "--out", out]}, expect=201)


def wait_done(d, jid, agents, timeout=150):
    def done():
        v = job(d, jid)
        if v["state"] in ("failed", "cancelled", "rejected"):
            raise Failure("job %d ended %s: %s" % (jid, v["state"], v.get("reason")))
        return v["state"] == "completed"
    wait_for(done, timeout, "job %d to complete" % jid)


def run_reference(d, agents, work):
    out = os.path.join(work, "out", "reference.bin")
    j = submit(d, out)
    check(j["state"] == "running", "the reference job starts at once: %s" % j)
    wait_done(d, j["id"], agents)
    check(os.path.getsize(out) > 0, "the reference run wrote its parameters")
    check(os.stat(out).st_uid == ACCOUNT_UID[0],
          "rank 0 ran as the job's account (uid %d), not as the agent" % ACCOUNT_UID[0])
    rank0 = [n for n in agents if "(uid %d)" % ACCOUNT_UID[0] in rank_log(agents, n, j["id"], 0)]
    check(len(rank0) == 1, "rank 0's log names its account's uid")
    with open(out, "rb") as f:
        return f.read()


def kill_node(agent):
    """A lost node: its agent and every rank process it started, SIGKILLed."""
    agent.kill9()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"TOPO_CHECKPOINT_DIR=" + agent.state_dir.encode()) for e in env):
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except OSError:
                pass


def run_fault(d, agents, work, case, reference):
    out = os.path.join(work, "out", "%s.bin" % case)
    j = submit(d, out)
    jid = j["id"]
    check(j["state"] == "running", "the job starts: %s" % j)
    view = job(d, jid)
    used = {r["node"] for r in view["ranks"]}
    hbd0 = {"n0", "n1", "n2"}
    check(len(used) == 4 and len(used & hbd0) == 2 and {"n3", "n4"} <= used,
          "one TP group per HBD, one spare in hbd0: %s" % sorted(used))
    spare = (hbd0 - used).pop()
    # The victim: rank 0's node when it is in hbd0 (its restart must read the
    # checkpoint from the persistent tier), else the other node of hbd0.
    master = node_of(view, 0)
    victim = master if master in hbd0 else sorted(used & hbd0)[0]

    wait_for(lambda: "step 10 " in rank_log(agents, master, jid, 0), 60, "rank 0 to reach step 10")
    asked = d.api("POST", "/v1/jobs/%d/checkpoint" % jid, {"reason": "test"}, expect=202)
    check(asked["nodes"] == 4, "the checkpoint request went to the job's 4 nodes: %s" % asked)
    wait_for(lambda: job(d, jid)["checkpoint_step"] > 0, 30, "a checkpoint to be stored")
    step = job(d, jid)["checkpoint_step"]
    check(os.path.isfile(os.path.join(work, "persistent", str(jid), "step-%d" % step, "COMPLETE")),
          "step %d is on the persistent tier" % step)
    # Some work after the checkpoint, which the fault loses.
    wait_for(lambda: "step %d " % (step + 5) in rank_log(agents, master, jid, 0), 60,
             "rank 0 to pass step %d" % (step + 5))
    # The ranks all-reduce the signal's flag every step, so a signal that
    # reaches one node a step later than another makes a second checkpoint
    # (step 10, then 11): the restart uses the newest, so wait until every
    # checkpoint rank 0 wrote is stored and take that one.
    def newest_written():
        steps = re.findall(r"rank 0: checkpoint step-(\d+) complete",
                           rank_log(agents, master, jid, 0))
        return max(int(n) for n in steps) if steps else -1
    wait_for(lambda: job(d, jid)["checkpoint_step"] == newest_written(), 30,
             "the newest checkpoint rank 0 wrote to be stored")
    step = job(d, jid)["checkpoint_step"]
    check(job(d, jid)["restarts"] == 0, "no restart before the fault")

    t0 = time.time()
    if case == "kill":
        kill_node(agents[victim])
        wait_for(lambda: nodes(d)[victim]["state"] == "down", 10, victim + " to go down")
    else:
        agents[victim].inject("xid 0 79")
        wait_for(lambda: nodes(d)[victim]["gpu_health"][0] == "failed", 5, victim + " GPU 0 to fail")
    detected = time.time() - t0
    wait_for(lambda: job(d, jid)["restarts"] >= 1, 20, "the job to restart")
    after = job(d, jid)
    moved = {r["node"] for r in after["ranks"]}
    check(victim not in moved and spare in moved,
          "the spare %s replaced %s: now on %s" % (spare, victim, sorted(moved)))
    check(len(moved & hbd0) == 2, "the TP group stays inside hbd0: %s" % sorted(moved))
    wait_done(d, jid, agents)
    final = job(d, jid)
    check(final["restarts"] == 1, "one restart: %s" % json.dumps(final.get("incidents")))
    restarted_from = "restart 1, starting at step %d" % step
    new_master = node_of(after, 0)
    check(restarted_from in rank_log(agents, new_master, jid, 0),
          "rank 0 resumed from step %d on %s:\n%s" % (step, new_master,
                                                       rank_log(agents, new_master, jid, 0)[-1500:]))
    with open(out, "rb") as f:
        got = f.read()
    check(got == reference, "final parameters differ from the uninterrupted run (%d vs %d bytes)"
          % (len(got), len(reference)))
    incidents = final.get("incidents", [])
    check(len(incidents) >= 1 and incidents[0]["checkpoint_step"] == step
          and incidents[0]["lost_work_s"] > 0,
          "topo show lists the incident: %s" % json.dumps(incidents))
    print("ok %s: %s lost (detected in %.2f s), %s took its place, restarted from step %d, "
          "finished bit-identical to the uninterrupted run; incident %s"
          % (case, victim, detected, spare, step, json.dumps(incidents[0])))
    return victim


def main():
    if not has_torch():
        print("skip: %s has no torch (apt-get install python3-torch)" % PYTHON)
        sys.exit(77)
    sched_bin, agent_bin, topo_bin = sys.argv[1:4]
    which = sys.argv[4] if len(sys.argv) > 4 else "all"
    cases = ["kill", "xid"] if which == "all" else [which]
    # Its own MASTER_PORT range: every agent of every test is on this host,
    # and a rendezvous holds its port for the whole run.
    d = Daemon(sched_bin, config="heartbeat_interval_ms = 200\nmaster_ports = 25000-25999\n").start()
    with agent_cluster(d, "topo-torch-failover-") as cluster:
        work, agents = cluster
        certs = setup(d, work, NODES, topology())
        # The ranks run as an ordinary account, which owns only its output
        # directory here.
        account = cluster.account("ddp")
        run_jobs_as(d, account)
        entry = pwd.getpwnam(account)
        uid = entry.pw_uid
        os.makedirs(os.path.join(work, "out"))
        os.chown(os.path.join(work, "out"), uid, entry.pw_gid)
        os.chmod(os.path.join(work, "out"), 0o700)
        ACCOUNT_UID[0] = uid

        def start_all():
            for n in NODES:
                if n not in agents or not agents[n].alive():
                    agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], "false",
                                      gpus=1).start()
            wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in NODES), 20, "every node up")

        start_all()
        reference = run_reference(d, agents, work)
        for case in cases:
            victim = run_fault(d, agents, work, case, reference)
            # Repair before the next case: the node back with a healthy GPU.
            if case == "xid":
                agents[victim].inject("clear 0")
            start_all()
            d.api("POST", "/v1/nodes/resume", {"nodes": victim}, expect=200)
            wait_for(lambda: nodes(d)[victim]["state"] == "up", 10, victim + " back up")


if __name__ == "__main__":
    run(main)
