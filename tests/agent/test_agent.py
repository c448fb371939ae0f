#!/usr/bin/python3
"""Real topo-agent processes against a real topo-scheduler on loopback.

  cluster     four agents (simulated 8 x H100 each) bring n0..n3 up; a 16-GPU
              tp-8 job runs its ranks through the agents and completes; a long
              job checkpoints (step 1 stored by the scheduler, persisted by the
              agent) and survives `kill -9` of one of its agents (the node goes
              down within about a second, the job restarts on other nodes from
              step 1); a SIGTERMed agent's ranks are adopted by its successor; an XID
              79 injected through another agent's FIFO fails that GPU; every
              agent stops on SIGTERM with status 0.
  wrong_cert  an agent presenting another node's certificate never brings its
              node up and logs the refusal.

usage: test_agent.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN [cluster|wrong_cert]
Standard library only (/usr/bin/python3).
"""

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, tiny_topology  # noqa: E402

CONFIG = "heartbeat_interval_ms = 200\n"


def issue(binary, state_dir, node, out):
    subprocess.run([binary, "--state-dir", state_dir, "ca", "issue", "--node", node, "--out", out],
                   check=True, capture_output=True)
    return os.path.join(out, node + ".pem"), os.path.join(out, node + "-key.pem")


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return time.time()
        time.sleep(0.05)
    raise Failure("timed out after %ss waiting for %s" % (timeout, what))


class Agent:
    def __init__(self, binary, daemon, work, node, cert, key, job_command):
        self.node = node
        self.state_dir = os.path.join(work, "agent-" + node)
        self.log_path = os.path.join(work, "agent-%s.log" % node)
        self.args = [binary, "--node", node, "--scheduler-state-dir", daemon.state_dir,
                     "--cert", cert, "--key", key, "--state-dir", self.state_dir,
                     "--gpu-backend", "simulated", "--gpus", "8", "--gpu-model", "H100",
                     "--stop-grace-ms", "1000", "--job-command", job_command,
                     "--persistent-checkpoint-dir", os.path.join(work, "persistent")]
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=log)
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout=10):
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise Failure("agent %s did not stop on SIGTERM" % self.node)

    def inject(self, line):
        fifo = os.path.join(self.state_dir, "inject")
        subprocess.run(["timeout", "5", "sh", "-c", 'printf "%s\\n" "$1" > "$2"', "sh", line, fifo],
                       check=True)


def kill_leftover_ranks(work):
    """Ranks outlive their agents on purpose (adoption); end them at cleanup."""
    for path in glob.glob(os.path.join(work, "agent-*", "supervisor", "jobs", "*.json")):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        for r in doc.get("ranks", []):
            try:
                os.killpg(int(r["pid"]), signal.SIGKILL)
            except (OSError, KeyError, ValueError):
                pass


def nodes(d):
    out = d.api("GET", "/v1/nodes", expect=200)
    return {n["name"]: n for n in out["nodes"]}


def job(d, jid):
    return d.api("GET", "/v1/jobs/%d" % jid, expect=200)


def setup(d, work, names):
    d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())}, expect=200)
    certs = os.path.join(work, "certs")
    os.makedirs(certs, exist_ok=True)
    return {n: issue(d.binary, d.state_dir, n, certs) for n in names}


def test_cluster(d, agent_bin, work, agents):
    certs = setup(d, work, ["n0", "n1", "n2", "n3"])
    duration = os.path.join(work, "duration")
    with open(duration, "w") as f:
        f.write("1\n")
    script = os.path.join(work, "rank.sh")
    with open(script, "w") as f:
        # Rank 0 writes checkpoint step 1 at once (CHECKPOINTS.md), every rank
        # says which step it was restarted from, then sleeps.
        f.write('#!/bin/sh\n'
                'if [ "$RANK" = 0 ]; then\n'
                '  mkdir -p "$TOPO_CHECKPOINT_DIR/step-1" && echo w > "$TOPO_CHECKPOINT_DIR/step-1/w"\n'
                '  echo 1 > "$TOPO_CHECKPOINT_DIR/.c" && mv "$TOPO_CHECKPOINT_DIR/.c" '
                '"$TOPO_CHECKPOINT_DIR/step-1/COMPLETE"\n'
                'fi\n'
                'echo "restart_step=${TOPO_RESTART_STEP:-none} restart=$TOPO_RESTART_COUNT"\n'
                'sleep "$(cat %s 2>/dev/null || echo 1)"\nexit 0\n' % duration)
    command = "/bin/sh " + script
    for n in ("n0", "n1", "n2", "n3"):
        agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], command).start()

    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0..n3 to come up")
    for n, a in agents.items():
        check(a.alive(), "agent %s exited:\n%s" % (n, a.log()))
        check("registered; heartbeat every 200 ms" in a.log(), "agent %s log:\n%s" % (n, a.log()))
    check(all(nodes(d)[n]["state"] != "up" for n in ("n4", "n5", "n6", "n7")),
          "nodes without an agent stay down")

    # A 16-GPU tp-8 job: 2 nodes x 8 ranks, each `sleep 1`, every rank exits 0.
    short = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "short",
                                                "parallelism": {"tp": 8}}}, expect=201)
    check(short["state"] == "running", "the short job starts at once: %s" % short)
    wait_for(lambda: job(d, short["id"])["state"] == "completed", 30, "the 16-GPU job to complete")
    ran_on = [n for n, a in agents.items() if ("job %d restart 0: started ranks" % short["id"]) in a.log()]
    check(len(ran_on) == 2, "the short job ran on two agents: %s" % ran_on)
    for n in ran_on:
        logs = glob.glob(os.path.join(agents[n].state_dir, "logs", str(short["id"]), "rank-*.log"))
        check(len(logs) == 8, "8 rank logs on %s: %s" % (n, logs))

    # A long job; kill -9 one of its agents.
    with open(duration, "w") as f:
        f.write("120\n")
    long = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "long",
                                               "parallelism": {"tp": 8}}}, expect=201)
    check(long["state"] == "running", "the long job starts: %s" % long)
    placed = sorted({r["node"] for r in job(d, long["id"])["ranks"]})
    check(len(placed) == 2, "long job on two nodes: %s" % placed)
    marker = "job %d restart 0: started ranks" % long["id"]
    wait_for(lambda: all(marker in agents[n].log() for n in placed), 10, "the long job's ranks to start")
    # Rank 0's checkpoint: complete locally, copied to the persistent tier,
    # stored by the scheduler.
    wait_for(lambda: job(d, long["id"])["checkpoint_step"] == 1, 10, "checkpoint step 1 to be stored")
    check(os.path.isfile(os.path.join(work, "persistent", str(long["id"]), "step-1", "COMPLETE")),
          "step 1 persisted")
    victim = placed[1]
    agents[victim].kill9()
    t0 = time.time()
    t_down = wait_for(lambda: nodes(d)[victim]["state"] == "down", 5, victim + " to go down")
    detect = t_down - t0
    check(detect < 1.5, "%s down after %.2f s (3 x 200 ms heartbeats)" % (victim, detect))
    wait_for(lambda: job(d, long["id"])["restarts"] >= 1 and job(d, long["id"])["state"] == "running",
             10, "the long job to restart")
    after = job(d, long["id"])
    moved = sorted({r["node"] for r in after["ranks"]})
    check(victim not in moved and len(moved) == 2, "restarted on %s (victim %s)" % (moved, victim))
    events = json.dumps(d.api("GET", "/v1/events?job=%d" % long["id"], expect=200))
    check("restart_job" in events, "events show restart_job: %s" % events[:2000])
    marker1 = "job %d restart %d: started ranks" % (long["id"], after["restarts"])
    wait_for(lambda: all(marker1 in agents[n].log() for n in moved), 15,
             "the restarted ranks to start on %s" % moved)

    def resumed():
        for n in moved:
            for p in glob.glob(os.path.join(agents[n].state_dir, "logs", str(long["id"]), "rank-*.log")):
                with open(p, errors="replace") as f:
                    if "restart_step=1 restart=%d" % after["restarts"] in f.read():
                        return True
        return False
    wait_for(resumed, 5, "ranks restarted with TOPO_RESTART_STEP=1")

    # An XID 79 through the FIFO of another agent fails its GPU 3.
    other = [n for n in agents if n != victim and n not in moved][0]  # runs no job
    t1 = time.time()
    agents[other].inject("xid 3 79")
    wait_for(lambda: nodes(d)[other]["gpu_health"][3] == "failed", 3, "GPU 3 of %s to fail" % other)
    check("gpu_health" in nodes(d)[other], "gpu health listed")
    fault = time.time() - t1

    # SIGTERM leaves the ranks running; an agent started again adopts them and
    # reports them when it registers (the scheduler keeps the job there).
    keeper = moved[0]
    before = len(agents[keeper].log())
    rc = agents[keeper].terminate()
    check(rc == 0, "agent %s exited %s on SIGTERM" % (keeper, rc))
    agents[keeper].start()
    wait_for(lambda: "registered;" in agents[keeper].log()[before:], 10, keeper + " to register again")
    relog = agents[keeper].log()[before:]
    check("adopted 8 running rank(s)" in relog, "the restarted agent adopts its ranks:\n" + relog)
    kept = ("keep [%d]" % long["id"]) in relog
    if kept:
        time.sleep(0.5)
        check("not in the scheduler's keep list" not in agents[keeper].log()[before:],
              "kept ranks must not be stopped:\n" + relog)
        check(job(d, long["id"])["restarts"] == after["restarts"], "no restart after the adoption")

    # SIGTERM: each remaining agent exits 0 (its ranks keep running).
    for n, a in agents.items():
        if n == victim:
            continue
        rc = a.terminate()
        check(rc == 0, "agent %s exited %s on SIGTERM:\n%s" % (n, rc, a.log()[-3000:]))
    print("ok: 4 agents up, 16-GPU job completed, checkpoint persisted, node lost detected in %.2f s and the job "
          "restarted on %s, XID 79 reported in %.2f s, ranks adopted by a restarted agent (%s), "
          "agents stop on SIGTERM" % (detect, moved, fault,
                                      "kept" if kept else "node went down meanwhile"))


def test_wrong_cert(d, agent_bin, work, agents):
    certs = setup(d, work, ["n4"])
    # n5's agent with n4's certificate.
    a = Agent(agent_bin, d, work, "n5", certs["n4"][0], certs["n4"][1], "true").start()
    agents["n5"] = a
    wait_for(lambda: "refused" in a.log() and "retrying" in a.log(), 10, "the refusal in the agent log")
    time.sleep(1.5)
    check(a.alive(), "the agent keeps retrying:\n" + a.log())
    state = nodes(d)
    check(state["n5"]["state"] != "up" and state["n4"]["state"] != "up",
          "n4 and n5 must stay down: %s %s" % (state["n4"]["state"], state["n5"]["state"]))
    log = a.log()
    check("certificate is node n4's, not n5's" in log, "the refusal names the certificate:\n" + log)
    check("registered;" not in log, "never registered:\n" + log)
    attempts = log.count("connection attempt")
    check(attempts >= 2, "retries with backoff (%d attempts):\n%s" % (attempts, log))
    rc = a.terminate()
    check(rc == 0, "exit status %s on SIGTERM" % rc)
    print("ok: wrong certificate refused, %d attempts logged, node stays down" % attempts)


def main():
    sched_bin, agent_bin = sys.argv[1], sys.argv[2]
    which = sys.argv[3] if len(sys.argv) > 3 else "cluster"
    d = Daemon(sched_bin, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-agent-test-")
    agents = {}
    ok = False
    try:
        {"cluster": test_cluster, "wrong_cert": test_wrong_cert}[which](d, agent_bin, work, agents)
        ok = True
    finally:
        for a in agents.values():
            a.kill9()
        kill_leftover_ranks(work)
        if not ok:
            print("---- daemon log\n" + d.log(), file=sys.stderr)
            for n, a in agents.items():
                print("---- agent %s log\n%s" % (n, a.log()[-4000:]), file=sys.stderr)
        d.cleanup()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
