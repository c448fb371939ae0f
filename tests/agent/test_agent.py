#!/usr/bin/python3
"""Real topo-agent processes against a real topo-scheduler on loopback.

  cluster     four agents (simulated 8 x H100 each) bring n0..n3 up; a 16-GPU
              tp-8 job runs its ranks through the agents and completes; a long
              job checkpoints (step 1 stored by the scheduler, persisted by the
              agent) and survives `kill -9` of one of its agents (the node goes
              down within about a second, the job restarts on other nodes from
              step 1); a SIGTERMed agent says `leaving`, its node stays suspect
              for the second it is away, and its ranks are adopted by its
              successor (the job kept there, no restart); an XID
              79 injected through another agent's FIFO fails that GPU; every
              agent stops on SIGTERM with status 0.
  wrong_cert  an agent presenting another node's certificate never brings its
              node up and logs the refusal.
  restart     the scheduler restarts under two agents running a job: they
              reconnect, the ranks keep running and are adopted (no restart);
              a cancel then stops them; a node whose agent does not come back
              after a restart goes down.
  drain       `topo checkpoint` stores a step; a graceful drain checkpoints,
              stops and restarts the job on another node from that step; an
              immediate drain restarts it from the stored step; resume;
              `topo logs --follow` follows rank 0 across its nodes.

  staging     a restart onto a node without the step stages a 1 GiB checkpoint
              from the persistent tier while the node keeps its heartbeats and
              stays up; the ranks start from the step.

usage: test_agent.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
       [cluster|wrong_cert|restart|drain|staging]
Standard library only (/usr/bin/python3).
"""

import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import Agent, agent_cluster, job, nodes, run_jobs_as, setup, wait_for  # noqa: E402

CONFIG = "heartbeat_interval_ms = 200\n"
JOB_UID = [0]  # the uid of the account the admin's jobs run as (set by main)


def cli(d, topo_bin, *args, timeout=30):
    """The real `topo` CLI against the daemon, as the admin: (exit code, stdout, stderr)."""
    env = dict(os.environ, HOME=os.path.join(d.state_dir, "home"), TOPO_SERVER=d.url,
               TOPO_CA=os.path.join(d.state_dir, "ca.pem"), TOPO_TOKEN=d.admin_token)
    p = subprocess.run([topo_bin] + list(args), env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_cluster(d, agent_bin, topo_bin, work, agents):
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
                'echo "restart_step=${TOPO_RESTART_STEP:-none} restart=$TOPO_RESTART_COUNT uid=$(id -u)"\n'
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
                                                "parallelism": {"tp": 8}},
                                       "command": ["/bin/sh", "-c", command]}, expect=201)
    check(short["state"] == "running", "the short job starts at once: %s" % short)
    wait_for(lambda: job(d, short["id"])["state"] == "completed", 30, "the 16-GPU job to complete")
    ran_on = [n for n, a in agents.items() if ("job %d restart 0: started ranks" % short["id"]) in a.log()]
    check(len(ran_on) == 2, "the short job ran on two agents: %s" % ran_on)
    for n in ran_on:
        logs = glob.glob(os.path.join(agents[n].state_dir, "logs", str(short["id"]), "rank-*.log"))
        check(len(logs) == 8, "8 rank logs on %s: %s" % (n, logs))
    # `topo logs`: rank 9's output, read by its node's agent through the scheduler.
    rc, out, err = cli(d, topo_bin, "logs", str(short["id"]), "--rank", "9")
    check(rc == 0 and "restart_step=none restart=0 uid=%d" % JOB_UID[0] in out,
          "topo logs --rank 9 shows the rank ran as the job's account: %s %r %r" % (rc, out, err))
    whole = out
    for n in (1, 2, 3):
        rc, out, err = cli(d, topo_bin, "logs", str(short["id"]), "--rank", "9", "--tail", str(n))
        want = "".join(whole.splitlines(keepends=True)[-n:])
        check(rc == 0 and out == want, "--tail %d gives the last %d lines: %r, not %r (%s)" %
              (n, n, out, want, err))
    rc, out, err = cli(d, topo_bin, "logs", str(short["id"]), "--rank", "9", "--tail-bytes", "4",
                       "--json")
    piece = json.loads(out) if rc == 0 else {}
    check(piece.get("data") == ("uid=%d\n" % JOB_UID[0])[-4:]
          and piece.get("next_offset") == piece.get("size"),
          "--tail-bytes 4 gives the last 4 bytes: %s %r %r" % (rc, out, err))
    rc, out, err = cli(d, topo_bin, "logs", str(short["id"]), "--rank", "16")
    check(rc == 8 and "rank" in err, "rank 16 of a 16-rank job is refused: %s %r" % (rc, err))

    # A long job; kill -9 one of its agents.
    with open(duration, "w") as f:
        f.write("120\n")
    long = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "long",
                                               "parallelism": {"tp": 8}},
                                      "command": ["/bin/sh", "-c", command]}, expect=201)
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
                    if "restart_step=1 restart=%d " % after["restarts"] in f.read():
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

    # SIGTERM leaves the ranks running and says `leaving`: the node stays
    # suspect (not down) while no agent runs there, well past the 2 intervals
    # of a killed agent; an agent started again adopts the ranks and reports
    # them when it registers, and the scheduler keeps the job there.
    keeper = moved[0]
    before = len(agents[keeper].log())
    rc = agents[keeper].terminate()
    check(rc == 0, "agent %s exited %s on SIGTERM" % (keeper, rc))
    time.sleep(1.0)  # 5 intervals
    away = nodes(d)[keeper]
    check(away["state"] == "suspect", "%s while its agent restarts: %s" % (keeper, away))
    check(job(d, long["id"])["state"] == "running", "the job runs on meanwhile")
    t_start = time.time()
    agents[keeper].start()
    wait_for(lambda: "registered;" in agents[keeper].log()[before:], 10, keeper + " to register again")
    back = time.time() - t_start
    relog = agents[keeper].log()[before:]
    check("adopted 8 running rank(s)" in relog, "the restarted agent adopts its ranks:\n" + relog)
    check(("keep [%d]" % long["id"]) in relog, "the scheduler keeps the job there:\n" + relog)
    time.sleep(0.5)
    check("not in the scheduler's keep list" not in agents[keeper].log()[before:],
          "kept ranks must not be stopped:\n" + relog)
    check(job(d, long["id"])["restarts"] == after["restarts"], "no restart after the adoption")
    check(nodes(d)[keeper]["state"] == "up", "%s up again" % keeper)

    # SIGTERM: each remaining agent exits 0 (its ranks keep running).
    for n, a in agents.items():
        if n == victim:
            continue
        rc = a.terminate()
        check(rc == 0, "agent %s exited %s on SIGTERM:\n%s" % (n, rc, a.log()[-3000:]))
    print("ok: 4 agents up, 16-GPU job completed, checkpoint persisted, node lost detected in %.2f s and the job "
          "restarted on %s, XID 79 reported in %.2f s, ranks adopted by a restarted agent (%s), "
          "agents stop on SIGTERM" % (detect, moved, fault,
                                      "kept through 1 s away; registered %.2f s after its start"
                                      % back))


def test_wrong_cert(d, agent_bin, topo_bin, work, agents):
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


def read(path):
    """A file's text; "" while it does not exist yet (a rank not started yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_pids(agent, jid):
    """The pids the agent's supervisor records for the job's ranks there."""
    path = os.path.join(agent.state_dir, "supervisor", "jobs", "%d.json" % jid)
    try:
        with open(path) as f:
            return sorted(int(r["pid"]) for r in json.load(f).get("ranks", []))
    except (OSError, ValueError, KeyError):
        return []


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:  # reaped between the two looks: no file, or ESRCH on reading it
        return False


def counting_script(work):
    """Each rank prints a line every 0.2 s until stopped; on SIGUSR1 rank 0
    writes the next checkpoint step (node-agent/supervisor/CHECKPOINTS.md)."""
    path = os.path.join(work, "count.sh")
    with open(path, "w") as f:
        f.write('#!/bin/sh\n'
                'step=${TOPO_RESTART_STEP:-0}; [ "$step" -ge 0 ] 2>/dev/null || step=0\n'
                'checkpoint() {\n'
                '  step=$((step + 1))\n'
                '  if [ "$RANK" = 0 ]; then\n'
                '    mkdir -p "$TOPO_CHECKPOINT_DIR/step-$step"\n'
                '    echo "$step" > "$TOPO_CHECKPOINT_DIR/step-$step/state"\n'
                '    echo "$step" > "$TOPO_CHECKPOINT_DIR/.c" && '
                'mv "$TOPO_CHECKPOINT_DIR/.c" "$TOPO_CHECKPOINT_DIR/step-$step/COMPLETE"\n'
                '  fi\n'
                '}\n'
                'trap checkpoint USR1\n'
                'echo "start restart=$TOPO_RESTART_COUNT from=${TOPO_RESTART_STEP:-none}"\n'
                'i=0\n'
                'while :; do i=$((i + 1)); echo "tick $i"; sleep 0.2; done\n')
    # exec: the rank process is the script's shell, which traps the signal.
    return "exec /bin/sh " + path


def test_restart(d, agent_bin, topo_bin, work, agents):
    """The scheduler restarts under running agents: they reconnect, their ranks
    keep running and are adopted (no restart); then a cancel stops them."""
    certs = setup(d, work, ["n0", "n1"])
    command = counting_script(work)
    for n in ("n0", "n1"):
        agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], command).start()
    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0, n1 to come up")
    j = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "long", "parallelism": {"tp": 8}},
                                   "command": ["/bin/sh", "-c", command]}, expect=201)
    check(j["state"] == "running", "the job starts: %s" % j)
    jid = j["id"]
    wait_for(lambda: all(len(rank_pids(a, jid)) == 8 for a in agents.values()), 10, "16 ranks to start")
    pids = {n: rank_pids(a, jid) for n, a in agents.items()}
    registrations = {n: a.log().count("registered;") for n, a in agents.items()}

    d.stop()
    time.sleep(1.0)  # the agents lose the connection and retry with backoff
    check(all(alive(p) for ps in pids.values() for p in ps), "ranks outlive the scheduler")
    d.start()
    wait_for(lambda: all(a.log().count("registered;") > registrations[n] for n, a in agents.items()),
             30, "both agents to register with the restarted scheduler")
    for n, a in agents.items():
        check(("keep [%d]" % jid) in a.log(), "%s is told to keep job %d:\n%s" % (n, jid, a.log()[-2000:]))
        check("not in the scheduler's keep list" not in a.log(), "%s stopped nothing:\n%s" % (n, a.log()))
    time.sleep(1.0)  # longer than 3 heartbeats: a node whose agent is back stays up
    after = job(d, jid)
    check(after["state"] == "running" and after["restarts"] == 0,
          "the job runs on, never restarted: %s" % {k: after[k] for k in ("state", "restarts", "reason")})
    check({n: rank_pids(a, jid) for n, a in agents.items()} == pids, "the same rank processes")
    check(all(alive(p) for ps in pids.values() for p in ps), "ranks still alive after the restart")
    check(all(nodes(d)[n]["state"] == "up" for n in agents), "nodes up after the restart")

    # The scheduler reconciles: a cancel stops the adopted ranks.
    rc, out, err = cli(d, topo_bin, "cancel", str(jid))
    check(rc == 0, "topo cancel: %s %r %r" % (rc, out, err))
    wait_for(lambda: not any(alive(p) for ps in pids.values() for p in ps), 10,
             "the cancelled job's adopted ranks to stop")

    # An agent that does not come back after a restart: its node goes down
    # within the heartbeat grace.
    agents["n1"].kill9()
    d.stop()
    # (after the reconnect grace of a restart: 10 s, twice the agents' longest backoff,
    # counted from the daemon's start: t0 before it, since a slow start on a loaded
    # machine would otherwise eat into the 8 s checked below)
    t0 = time.time()
    d.start()
    wait_for(lambda: nodes(d)["n1"]["state"] == "down", 20, "n1 (no agent) to go down after the restart")
    check(time.time() - t0 > 8, "n1 kept its reconnect grace: down after %.1f s" % (time.time() - t0))
    check(nodes(d)["n0"]["state"] == "up", "n0 (agent back) stays up")
    print("ok: 16 ranks kept running through a scheduler restart and were adopted (no restart); "
          "cancel stopped them; a node whose agent never came back went down")


def test_drain(d, agent_bin, topo_bin, work, agents):
    """Graceful drain: checkpoint, stop, restart elsewhere from that step.
    Immediate drain: stop now, restart from the last stored step. Resume."""
    names = ["n0", "n1", "n2", "n3"]
    certs = setup(d, work, names)
    command = counting_script(work)
    for n in names:
        agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], command,
                          extra=["--drain-checkpoint-ms", "5000"]).start()
    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0..n3 to come up")
    j = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "drainee", "parallelism": {"tp": 8}},
                                   "command": ["/bin/sh", "-c", command]}, expect=201)
    jid = j["id"]
    first = job(d, jid)["ranks"][0]["node"]
    wait_for(lambda: len(rank_pids(agents[first], jid)) == 8, 10, "8 ranks on " + first)
    # A checkpoint signal before the job's handler is in place would end the
    # rank (CHECKPOINTS.md): wait for every rank's first line.
    logdir = os.path.join(agents[first].state_dir, "logs", str(jid))
    wait_for(lambda: all("tick 1" in read(p) for p in glob.glob(logdir + "/rank-*.log"))
             and len(glob.glob(logdir + "/rank-*.log")) == 8, 10, "the ranks to run")

    # `topo checkpoint`: the scheduler asks, rank 0 writes step 1, it is stored.
    rc, out, err = cli(d, topo_bin, "checkpoint", str(jid))
    check(rc == 0 and "to checkpoint" in out, "topo checkpoint: %s %r %r" % (rc, out, err))
    wait_for(lambda: job(d, jid)["checkpoint_step"] == 1, 10, "checkpoint step 1 to be stored")
    # `topo logs --follow` follows rank 0 while it runs.
    follow = subprocess.Popen([topo_bin, "logs", str(jid), "--follow", "--interval", "0.1"],
                              env=dict(os.environ, HOME=os.path.join(d.state_dir, "home"),
                                       TOPO_SERVER=d.url, TOPO_CA=os.path.join(d.state_dir, "ca.pem"),
                                       TOPO_TOKEN=d.admin_token),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # Graceful: the agent asks for a checkpoint (step 2), waits until it is
    # persisted, stops the ranks; the job restarts elsewhere from step 2.
    rc, out, err = cli(d, topo_bin, "drain", first, "--reason", "maintenance")
    check(rc == 0, "topo drain: %s %r %r" % (rc, out, err))
    wait_for(lambda: job(d, jid)["restarts"] == 1 and job(d, jid)["state"] == "running", 15,
             "the job to restart off the drained node")
    after = job(d, jid)
    second = after["ranks"][0]["node"]
    check(second != first, "moved off %s: %s" % (first, second))
    check(after["checkpoint_step"] == 2, "the drain's checkpoint (step 2) was stored: %s" % after)
    wait_for(lambda: nodes(d)[first]["state"] == "drained", 10, first + " to be drained")
    check(not rank_pids(agents[first], jid) or not any(alive(p) for p in rank_pids(agents[first], jid)),
          "no rank left on " + first)
    wait_for(lambda: "start restart=1 from=2" in read(os.path.join(
        agents[second].state_dir, "logs", str(jid), "rank-0.log")), 10,
        "rank 0 restarted from step 2 on " + second)
    check("drained: no rank runs here" in agents[first].log(), "the agent drained:\n" + agents[first].log())
    ev = json.dumps(d.api("GET", "/v1/events?job=%d" % jid, expect=200))
    check("node_evacuated" in ev, "the evacuation is in the job's events: %s" % ev[-1500:])
    check("was drained" in after["reason"] and "checkpoint step 2" in after["reason"],
          "the job's reason names the drain and the step: %s" % after["reason"])

    # Immediate: no checkpoint; the job restarts from step 2 again.
    rc, out, err = cli(d, topo_bin, "drain", second, "--reason", "now", "--mode", "immediate")
    check(rc == 0, "topo drain --mode immediate: %s %r %r" % (rc, out, err))
    wait_for(lambda: job(d, jid)["restarts"] == 2 and job(d, jid)["state"] == "running", 15,
             "the job to restart after the immediate drain")
    final = job(d, jid)
    third = final["ranks"][0]["node"]
    check(third not in (first, second) and final["checkpoint_step"] == 2,
          "restarted on a third node from step 2: %s" % final)
    wait_for(lambda: "start restart=2 from=2" in read(os.path.join(
        agents[third].state_dir, "logs", str(jid), "rank-0.log")), 10,
        "rank 0 restarted from step 2 on " + third)
    wait_for(lambda: nodes(d)[second]["state"] == "drained", 10, second + " to be drained")

    # Resume: both nodes take work again.
    rc, out, err = cli(d, topo_bin, "resume", first + "," + second)
    check(rc == 0, "topo resume: %s %r %r" % (rc, out, err))
    check(all(nodes(d)[n]["state"] == "up" for n in (first, second)), "resumed nodes are up")

    # --follow polls every 0.1 s: let it read the third run's first lines
    # before the job ends.
    wait_for(lambda: "tick 2" in read(os.path.join(agents[third].state_dir, "logs", str(jid),
                                                  "rank-0.log")), 10, "the third run to tick")
    time.sleep(1.0)
    rc, out, err = cli(d, topo_bin, "cancel", str(jid))
    check(rc == 0, "cancel: %s %r" % (rc, err))
    try:
        fout, ferr = follow.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        follow.kill()
        raise Failure("topo logs --follow did not end with the job")
    check(follow.returncode == 0, "logs --follow exit %s: %r" % (follow.returncode, ferr))
    check("start restart=0 from=none" in fout and "start restart=2 from=2" in fout
          and "tick 1" in fout,
          "--follow printed the first run and followed rank 0 to its new nodes:\n%s\n%s"
          % (fout[:500], ferr))
    print("ok: checkpoint on request stored step 1; graceful drain checkpointed step 2 and the job "
          "restarted on %s from it; immediate drain restarted it on %s from step 2; resume; "
          "logs --follow followed rank 0 across nodes" % (second, third))


def test_staging(d, agent_bin, topo_bin, work, agents):
    """A restart onto a node without the step copies 1 GiB of checkpoint from the
    persistent tier on a thread of its own: the node keeps its heartbeats (200 ms,
    down after 600 ms of silence) and stays up, the launch waits for the copy,
    and the ranks start from the step."""
    certs = setup(d, work, ["n0", "n1"])
    script = os.path.join(work, "big.sh")
    with open(script, "w") as f:
        # Rank 0 of the first run writes step 1 with a 1 GiB file (sparse
        # here; its copies are not), then every rank sleeps.
        f.write('#!/bin/sh\n'
                'if [ "$RANK" = 0 ] && [ -z "$TOPO_RESTART_STEP" ]; then\n'
                '  mkdir -p "$TOPO_CHECKPOINT_DIR/step-1"\n'
                '  truncate -s 1G "$TOPO_CHECKPOINT_DIR/step-1/state"\n'
                '  echo 1 > "$TOPO_CHECKPOINT_DIR/.c" && mv "$TOPO_CHECKPOINT_DIR/.c" '
                '"$TOPO_CHECKPOINT_DIR/step-1/COMPLETE"\n'
                'fi\n'
                'echo "start from=${TOPO_RESTART_STEP:-none}"\n'
                'exec sleep 120\n')
    command = "/bin/sh " + script
    for n in ("n0", "n1"):
        agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], command).start()
    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0, n1 to come up")
    j = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "big", "parallelism": {"tp": 8}},
                                   "command": ["/bin/sh", "-c", command]}, expect=201)
    jid = j["id"]
    first = job(d, jid)["ranks"][0]["node"]
    other = "n1" if first == "n0" else "n0"
    persisted = os.path.join(work, "persistent", str(jid), "step-1", "COMPLETE")
    wait_for(lambda: job(d, jid)["checkpoint_step"] == 1 and os.path.isfile(persisted), 60,
             "step 1 to be stored and persisted")
    agents[first].kill9()
    wait_for(lambda: job(d, jid)["restarts"] == 1, 10, "the job to restart on " + other)
    check(job(d, jid)["ranks"][0]["node"] == other, "restarted on %s: %s" % (other, job(d, jid)))
    # While the copy runs, the node must stay up.
    marker = "job %d restart 1: started ranks" % jid
    deadline = time.time() + 120
    while marker not in agents[other].log():
        check(nodes(d)[other]["state"] == "up",
              "%s stayed up while it copied the checkpoint:\n%s" % (other, agents[other].log()))
        check(time.time() < deadline, "the restart did not start:\n" + agents[other].log())
        time.sleep(0.05)
    log = agents[other].log()
    check("job %d restart 1: launch waits: copying checkpoint step 1 from the persistent tier "
          "to this node" % jid in log, "the launch waited for the copy:\n" + log)
    check("job %d: staged checkpoint step 1 from the persistent tier" % jid in log,
          "the agent says it staged the step:\n" + log)
    staged = os.path.join(agents[other].state_dir, "checkpoints", str(jid), "step-1", "state")
    check(os.path.getsize(staged) == 1 << 30, "1 GiB staged on %s" % other)
    check(nodes(d)[other]["state"] == "up", "%s is up" % other)
    check("node %s down" % other not in open(d.log_path, errors="replace").read(),
          "the daemon never took %s down" % other)
    wait_for(lambda: "start from=1" in read(os.path.join(agents[other].state_dir, "logs", str(jid),
                                                          "rank-0.log")), 10,
             "rank 0 to start from step 1")
    rc, out, err = cli(d, topo_bin, "cancel", str(jid))
    check(rc == 0, "cancel: %s %r" % (rc, err))
    print("ok: a 1 GiB checkpoint was staged onto %s while its heartbeats went on; the ranks "
          "started from step 1" % other)


def main():
    sched_bin, agent_bin, topo_bin = sys.argv[1], sys.argv[2], sys.argv[3]
    which = sys.argv[4] if len(sys.argv) > 4 else "cluster"
    config = CONFIG
    if which == "restart":  # agents must find the restarted daemon where it was
        config += "agent_listen = 127.0.0.1:%d\n" % free_port()
    d = Daemon(sched_bin, config=config).start()
    with agent_cluster(d, "topo-agent-test-") as cluster:
        work, agents = cluster
        # The admin's jobs run as an ordinary account, as every job does.
        account = cluster.account("jobs")
        run_jobs_as(d, account)
        JOB_UID[0] = int(subprocess.run(["id", "-u", account], capture_output=True, text=True,
                                        check=True).stdout)
        tests = {"cluster": test_cluster, "wrong_cert": test_wrong_cert, "restart": test_restart,
                 "drain": test_drain, "staging": test_staging}
        tests[which](d, agent_bin, topo_bin, work, agents)


if __name__ == "__main__":
    run(main)
