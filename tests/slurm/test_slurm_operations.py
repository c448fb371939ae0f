"""Slurm mode under a Slurm site's everyday operations, against real Slurm
(slurmctld + 16 slurmd + munged on loopback, slurm_cluster.py), the real
job_submit/topo and a real topo-scheduler, with a real Unix account as the
jobs' user:

  1. a placed job's AdminComment carries its rank map once (`ranks=` was
     written twice), and the checkpoint signal it declared (--signal);
  2. a graceful `topo drain` of a node under a plain batch job (no --signal)
     lets the job run to its end (COMPLETED, never requeued) while the node
     drains in Slurm; the checkpoint signal used to kill it (FAILED);
  3. a job held for capacity cannot be released by its user (the hold is an
     operator's); a release by an operator is undone (the job is held again,
     its AdminComment says why) and the job later runs on toposched's nodes
     with its rank map;
  4. a job's name and comment are its user's text: a comment reading
     " AdminComment=toposched:N" no longer makes a job look like toposched's
     (its node counted as free);
  5. a preempted job that declared no checkpoint signal is requeued at the
     grace deadline and runs again (SIGUSR1 used to kill it: FAILED).

Usage: test_slurm_operations.py TOPO_SCHEDULER PLUGIN_SO
Exit 77 (skip) only when Slurm is not installed.
"""

import json
import os
import pwd
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))

import slurm_cluster  # noqa: E402
from harness import Daemon, check, run  # noqa: E402
from slurm_cluster import running, SlurmCluster, ask  # noqa: E402

GRACE_S = 2


def wait_for(what, pred, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def text_of(path):
    """The file's text; "" while the job has not created it yet (slurmd opens
    a batch job's output when its step starts, after squeue says RUNNING)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def squeue(cluster):
    """Slurm's jobs by id, as `squeue --json` shows them (the AdminComment
    whole: scontrol's one-liner splits it at its tokens)."""
    return {j["job_id"]: j for j in json.loads(cluster.run(["squeue", "--json"]).stdout)["jobs"]}


def topo_id(job):
    comment = job["admin_comment"]
    check(comment.startswith("toposched:"), "AdminComment %r is not toposched:ID" % comment)
    return int(comment.split(":", 1)[1].split()[0])


def rank_nodes(daemon, tid):
    out = []
    for r in daemon.api("GET", "/v1/jobs/%d" % tid, expect=200)["ranks"]:
        if r["node"] not in out:
            out.append(r["node"])
    return out


def synced(sock, times=2):
    """`times` polls of Slurm, each started after the previous, applied."""
    for _ in range(times):
        check(ask(sock, {"op": "refresh"}, timeout=30).startswith("OK"), "no sync")


def slurm_node(cluster, name):
    return slurm_cluster.parse_kv(cluster.run(["scontrol", "show", "node", "-o", name]).stdout)


class Account:
    """A real Unix account for the jobs' user, removed afterwards."""

    def __init__(self, cluster):
        self.name = "toposlurm%d" % (os.getpid() % 100000)
        subprocess.run(["userdel", self.name], capture_output=True)
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", self.name], check=True,
                       capture_output=True)
        self.uid = pwd.getpwnam(self.name).pw_uid
        self.dir = cluster.path("user-" + self.name)
        os.makedirs(self.dir)
        os.chown(self.dir, self.uid, -1)
        self.cluster = cluster

    def run(self, args, check_rc=False):
        r = self.cluster.run(["runuser", "-u", self.name, "--"] + list(args), check=False)
        if check_rc and r.returncode != 0:
            raise AssertionError("%s as %s failed: %s%s" % (" ".join(args), self.name, r.stdout, r.stderr))
        return r

    def sbatch(self, *args):
        r = self.run(["sbatch", "--parsable", "-D", self.dir] + list(args))
        job = int(r.stdout.strip().split(";")[0].splitlines()[-1]) if r.returncode == 0 else None
        return job, r

    def remove(self):
        self.cluster.run(["scancel", "--user", self.name], check=False)
        wait_for("%s's jobs to end" % self.name,
                 lambda: not self.cluster.run(["squeue", "-h", "-u", self.name], check=False).stdout.strip())
        subprocess.run(["userdel", self.name], capture_output=True)


def rank_map_once_and_drain_lets_plain_job_finish(cluster, daemon, sock):
    # 1. The AdminComment of placed jobs: ranks= once; the declared signal.
    a, r = cluster.sbatch("-J", "declares", "-N", "2", "--comment", "topo: tp=8", "--signal=B:USR1@60",
                          "--wrap", "sleep 300")
    check(a is not None, "sbatch failed: %s" % r.stderr)
    cluster.wait_job(a, {"RUNNING"})
    comment = squeue(cluster)[a]["admin_comment"]
    check(comment.count("ranks=") == 1, "AdminComment holds ranks= %d times: %r" % (comment.count("ranks="), comment))
    check(" signal=B:10 " in comment, "AdminComment lacks the job's --signal=B:USR1: %r" % comment)
    print("placed: AdminComment %s" % comment)

    # 2. A plain batch script (no --signal) on a node drained gracefully.
    go = cluster.path("go")
    out = cluster.path("plain.out")
    script = cluster.path("plain.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho started\nwhile [ ! -e %s ]; do sleep 0.1; done\necho finished\n" % go)
    b, r = cluster.sbatch("-J", "plain", "-N", "2", "--comment", "topo: tp=8", "-o", out, script)
    check(b is not None, "sbatch failed: %s" % r.stderr)
    cluster.wait_job(b, {"RUNNING"})
    comment = squeue(cluster)[b]["admin_comment"]
    check("signal=" not in comment and comment.count("ranks=") == 1, "AdminComment %r" % comment)
    tid = topo_id(squeue(cluster)[b])
    node = rank_nodes(daemon, tid)[1]
    t_drain = time.time()
    daemon.api("POST", "/v1/nodes/drain", {"nodes": node, "reason": "bad optic"}, expect=200)
    # Past the grace, with polls after it: the job still runs there.
    synced(sock)
    while time.time() < t_drain + GRACE_S + 1:
        synced(sock, 1)
    info = cluster.show_job(b)
    check(info["JobState"] == "RUNNING" and info["Restarts"] == "0",
          "the plain job is %s (restarts %s) %.1f s after a graceful drain of %s; its output: %r"
          % (info["JobState"], info["Restarts"], time.time() - t_drain, node, open(out).read()))
    check(daemon.api("GET", "/v1/jobs/%d" % tid, expect=200)["state"] == "running", "toposched's job stopped")
    state = slurm_node(cluster, node)["State"]
    check("DRAIN" in state, "%s is %s in Slurm while it drains" % (node, state))
    check(daemon.api("GET", "/v1/nodes/" + node, expect=200)["state"] == "draining", "not draining")
    # The job ends on its own: COMPLETED, and the node is drained.
    open(go, "w").close()
    info = cluster.wait_job(b, {"COMPLETED", "FAILED", "CANCELLED"})
    check(info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0" and "finished" in open(out).read(),
          "the plain job ended %s %s: %r" % (info["JobState"], info["ExitCode"], open(out).read()))
    wait_for("toposched's job to complete",
             lambda: daemon.api("GET", "/v1/jobs/%d" % tid, expect=200)["state"] == "completed")
    wait_for("%s drained" % node, lambda: daemon.api("GET", "/v1/nodes/" + node, expect=200)["state"] == "drained")
    state = wait_for("%s drained in Slurm" % node,
                     lambda: (lambda s: s if "DRAIN" in s and "IDLE" in s else None)(slurm_node(cluster, node)["State"]))
    print("drain: a plain job ran to its end on %s (graceful drain, no --signal); the node is %s" % (node, state))
    daemon.api("POST", "/v1/nodes/resume", {"nodes": node}, expect=200)
    cluster.run(["scancel", str(a)])
    cluster.cancel_all()
    synced(sock)


def comment_cannot_claim_a_job(cluster, daemon, sock, user):
    # 4. A job of the user that is not toposched's (a job array, on the node
    #    it names) claims, in its own comment and name, to carry a running
    #    toposched job.
    v, r = cluster.sbatch("-J", "victim", "-N", "2", "--comment", "topo: tp=8", "--wrap", "sleep 300")
    check(v is not None, "sbatch failed: %s" % r.stderr)
    cluster.wait_job(v, {"RUNNING"})
    tid = topo_id(squeue(cluster)[v])
    taken = set(rank_nodes(daemon, tid))
    free = [slurm_cluster.node_name(i) for i in range(1, 17) if slurm_cluster.node_name(i) not in taken][0]
    x, r = user.sbatch("-J", "y JobState=COMPLETED", "--array=0", "-w", free, "--comment",
                       "x AdminComment=toposched:%d" % tid, "--wrap", "sleep 300")
    check(x is not None, "the user's sbatch failed: %s" % r.stderr)
    cluster.wait_job(x, {"RUNNING"})
    synced(sock)
    view = daemon.api("GET", "/v1/nodes/" + free, expect=200)
    check(view["state"] == "drained" and "Slurm job %d" % x in view.get("reason", ""),
          "%s runs Slurm job %d (not toposched's) but toposched shows it %s (%s)"
          % (free, x, view["state"], view.get("reason")))
    cluster.run(["scancel", str(x)])
    cluster.wait_job(x, {"CANCELLED"})
    synced(sock)
    check(daemon.api("GET", "/v1/jobs/%d" % tid, expect=200)["state"] == "running",
          "the end of the user's job %d ended toposched job %d" % (x, tid))
    print("injection: job %d's comment claiming toposched:%d changed nothing; %s counted busy" % (x, tid, free))
    cluster.cancel_all()
    synced(sock)


def held_job_stays_held(cluster, daemon, sock, user):
    # 3. Ten nodes busy, two running with two spares that toposched keeps and
    #    Slurm sees idle: a 4-node job of the user is held for capacity.
    f, r = cluster.sbatch("-J", "filler", "-N", "10", "--comment", "topo: tp=8", "--wrap", "sleep 300")
    check(f is not None, "sbatch failed: %s" % r.stderr)
    cluster.wait_job(f, {"RUNNING"})
    s, r = cluster.sbatch("-J", "spares", "-N", "2", "--comment", "topo: tp=8,spares=2", "--wrap", "sleep 300")
    check(s is not None, "sbatch failed: %s" % r.stderr)
    cluster.wait_job(s, {"RUNNING"})
    out = os.path.join(user.dir, "held.out")
    u, r = user.sbatch("-J", "held", "-N", "4", "--comment", "topo: tp=8", "-o", out,
                       "--wrap", "echo ran on $SLURM_JOB_NODELIST; sleep 300")
    check(u is not None and "held until capacity frees" in r.stderr, "sbatch: %r %r" % (u, r.stderr))
    job = wait_for("the hold to become an operator's",
                   lambda: (lambda j: j if j["state_reason"] == "JobHeldAdmin" else None)(squeue(cluster)[u]))
    check(job["job_state"] == "PENDING" and job["priority"] == 0, "held job: %s" % job)
    # Its user cannot release it.
    r = user.run(["scontrol", "release", str(u)])
    synced(sock)
    job = squeue(cluster)[u]
    check(r.returncode != 0 and job["job_state"] == "PENDING" and job["priority"] == 0,
          "the user released held job %d (rc %d %r): it is %s, priority %s, on %r"
          % (u, r.returncode, r.stderr.strip(), job["job_state"], job["priority"], job["nodes"]))
    print("hold: the user's release of job %d was refused: %s" % (u, r.stderr.strip().splitlines()[0]))
    # An operator's release (or the user's, before the hold became one):
    # Slurm may start it on its own idle nodes; toposched holds it again.
    cluster.run(["scontrol", "release", str(u)])
    job = wait_for("the job held again",
                   lambda: (lambda j: j if j["job_state"] == "PENDING" and j["priority"] == 0
                            and j["state_reason"] == "JobHeldAdmin"
                            and "waits for capacity" in j["admin_comment"] else None)(squeue(cluster)[u]))
    check("waits for capacity" in job["admin_comment"], "AdminComment: %r" % job["admin_comment"])
    print("hold: after a release by hand job %d is held again: %s" % (u, job["admin_comment"]))
    tid = topo_id(job)
    check(daemon.api("GET", "/v1/jobs/%d" % tid, expect=200)["state"] == "queued", "toposched's job is not queued")
    # Capacity frees: it runs on toposched's nodes, with its rank map.
    cluster.run(["scancel", str(f)])
    cluster.wait_job(u, {"RUNNING"}, timeout=30)
    job = squeue(cluster)[u]
    want = rank_nodes(daemon, tid)
    check(cluster.expand(job["nodes"]) == sorted(want), "job %d runs on %s, toposched chose %s"
          % (u, job["nodes"], want))
    check(job["admin_comment"].count("ranks=") == 1 and "ranks=" + ",".join(want) in job["admin_comment"]
          and " map=" in job["admin_comment"], "AdminComment: %r" % job["admin_comment"])
    print("hold: job %d runs on toposched's %s" % (u, ",".join(want)))
    cluster.run(["scancel", str(u)])
    cluster.cancel_all()
    synced(sock)


def preempted_plain_job_is_requeued(cluster, daemon, sock):
    # 5. Preemption of a job that declared no checkpoint signal: no signal
    #    (it used to get SIGUSR1 and die, FAILED); at the grace deadline it
    #    is requeued, and runs again once the preemptor is done.
    daemon.api("PUT", "/v1/tenants/low", {"guaranteed_gpus": 0}, expect=201)
    daemon.api("PUT", "/v1/tenants/high", {"guaranteed_gpus": 128}, expect=201)
    out = cluster.path("victim.out")
    script = cluster.path("victim.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho run ${SLURM_RESTART_COUNT:-0}\n"
                "if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]; then echo done; exit 0; fi\n"
                "while :; do sleep 0.2; done\n")
    v, r = cluster.sbatch("-J", "borrower", "-A", "low", "-N", "8", "--comment", "topo: tp=8",
                          "--open-mode=append", "-o", out, script)
    check(v is not None, "sbatch failed: %s" % r.stderr)
    cluster.wait_job(v, {"RUNNING"})
    wait_for("the victim's first run", lambda: "run 0" in text_of(out))
    h, r = cluster.sbatch("-J", "guaranteed", "-A", "high", "-N", "12", "--comment", "topo: tp=8", "--wrap", "true")
    check(h is not None, "sbatch failed: %s" % r.stderr)
    info = cluster.wait_job(h, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
    check(info["JobState"] == "COMPLETED", "the preemptor ended %s" % info["JobState"])
    info = cluster.wait_job(v, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
    text = open(out).read()
    check(info["JobState"] == "COMPLETED" and "run 1" in text and "done" in text,
          "the preempted plain job ended %s (restarts %s): %r" % (info["JobState"], info["Restarts"], text))
    print("preemption: plain job %d was requeued, not signalled, and ran again: %r" % (v, text.split()))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: test_slurm_operations.py TOPO_SCHEDULER PLUGIN_SO")
    scheduler_bin, plugin = sys.argv[1:3]
    slurm_cluster.require(plugin)
    t0 = time.time()
    cluster = SlurmCluster(plugin_dir=os.path.dirname(os.path.abspath(plugin)), job_submit_plugins="topo")
    sock = cluster.path("topo.sock")
    slurm_cluster.write_plugin_conf(cluster, sock, timeout_ms=10000)
    os.environ["SLURM_CONF"] = cluster.conf
    daemon = Daemon(scheduler_bin, config="\n".join([
        "agent_listen = 127.0.0.1:0",
        "preemption = true",
        "slurm_socket = " + sock,
        "slurm_topology = " + cluster.path("topology.conf"),
        "slurm_poll_interval_ms = 300",
        "slurm_job_grace_s = 30",
        "stack = toposched",
        "preempt_grace_s = %d" % GRACE_S,
    ]) + "\n")
    user = None
    with running(daemon, cluster):
        cluster.start()
        daemon.start()
        slurm_cluster.wait_socket(sock)
        synced(sock, 1)
        user = Account(cluster)
        try:
            rank_map_once_and_drain_lets_plain_job_finish(cluster, daemon, sock)
            comment_cannot_claim_a_job(cluster, daemon, sock, user)
            held_job_stays_held(cluster, daemon, sock, user)
            preempted_plain_job_is_requeued(cluster, daemon, sock)
        finally:
            user.remove()
        print("ok in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    run(main)
