#!/usr/bin/python3
"""Real topo-agent processes under the operations of a real cluster, next to a
real topo-scheduler on loopback.

  collisions  two agents on this one host (n0 and n1, as the agent's --help
              shows) share one cgroup root: a job whose ranks end on n1 while
              its ranks on n0 run on leaves those running (each agent's job
              cgroup has its own name: job-ID.NODE.SCHEDULER); a restarted n0
              agent adopts its ranks by their cgroup, and the cancel ends them.
  endpoint    the scheduler restarts on a new agent port: an agent started with
              --scheduler-state-dir reads the new endpoint from the state
              directory when its reconnects fail, and its node comes back up.
  pids        a job's spec.pids_max reaches its cgroup's pids.max on its node
              through the scheduler's start; a job without one gets the agent's
              --job-pids-max, and a larger one is lowered to it.
  recoveries  ordinary recoveries leave the scheduler's refused-message counter
              (/metrics topo_agent_messages_refused_total) where it was: an agent
              restarted on a node whose ranks died with it while the job moved
              on does not report their exits; a node-mode launcher that fails
              is reported once, not once per rank; a checkpoint staged onto the
              node a job restarts on is not reported again.
  version     topo-agent --version, topo-scheduler --version and topo --version
              answer 0 with one version, the project's (CMakeLists.txt); the
              agent's settings out of range are refused at the command line
              (no daemon needed).

usage: test_node_ops.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
       [collisions|endpoint|pids|recoveries|version]
Standard library only (/usr/bin/python3); run as root.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import (Agent, agent_cluster, cgroup_mount, job, nodes, run_jobs_as,  # noqa: E402
                    setup, wait_for)

CONFIG = "heartbeat_interval_ms = 200\n"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def rank_pids(agent, jid):
    """(pids, cgroup dirs) the agent's supervisor records for the job."""
    try:
        with open(os.path.join(agent.state_dir, "supervisor", "jobs", "%d.json" % jid)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return [], []
    return sorted(int(r["pid"]) for r in doc.get("ranks", [])), doc.get("cgroup", {}).get("dirs", [])


def test_collisions(d, agent_bin, topo_bin, work, agents):
    if cgroup_mount() is None:
        print("skipped: no cgroups on this kernel")
        sys.exit(77)
    certs = setup(d, work, ["n0", "n1"])
    script = os.path.join(work, "half.sh")
    with open(script, "w") as f:
        # The ranks of node 1 end at once, those of node 0 run on.
        f.write('#!/bin/sh\nif [ "$GROUP_RANK" = 1 ]; then exit 0; fi\nexec sleep 120\n')
    command = "/bin/sh " + script
    shared = None
    for n in ("n0", "n1"):
        a = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], command)
        # One cgroup root for both, as two agents on one host find by default.
        shared = shared or a.cgroup_root
        a.cgroup_root = shared
        a.args[a.args.index("--cgroup-root") + 1] = shared
        agents[n] = a.start()
    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0, n1 to come up")
    j = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "halves", "parallelism": {"tp": 8}},
                                   "command": ["/bin/sh", "-c", command]}, expect=201)
    jid = j["id"]
    check(j["state"] == "running", "the job starts: %s" % j)
    by_node = {}
    for r in job(d, jid)["ranks"]:
        by_node.setdefault(r["node"], []).append(r["rank"])
    runner = [n for n, ranks in by_node.items() if 0 in ranks][0]  # group rank 0: sleeps
    ender = [n for n in by_node if n != runner][0]
    wait_for(lambda: len(rank_pids(agents[runner], jid)[0]) == 8, 10, "8 ranks on " + runner)
    pids, dirs = rank_pids(agents[runner], jid)
    # The ranks on the other node end; its agent cleans up its own cgroup.
    finished = "job %d: every local rank has exited" % jid
    wait_for(lambda: finished in agents[ender].log(), 15, ender + " to see its ranks end")
    _, ender_dirs = rank_pids(agents[ender], jid)
    check(all(alive(p) for p in pids),
          "the ranks on %s outlive the end of those on %s (same host, same cgroup root):\n%s"
          % (runner, ender, agents[ender].log()[-2000:]))
    check(dirs and ender_dirs and not set(dirs) & set(ender_dirs),
          "the two nodes' cgroups of job %d differ: %s, %s" % (jid, dirs, ender_dirs))
    check(all(os.path.basename(p).startswith("job-%d.%s." % (jid, runner)) for p in dirs),
          "the cgroup names the job and the node: %s" % dirs)
    check(all(os.path.isdir(p) for p in dirs), "%s's cgroup is there: %s" % (runner, dirs))

    # A restarted agent finds its ranks by their cgroup.
    before = len(agents[runner].log())
    check(agents[runner].terminate() == 0, "agent %s exits 0 on SIGTERM" % runner)
    agents[runner].start()
    wait_for(lambda: "registered;" in agents[runner].log()[before:], 15, runner + " to register")
    check("adopted 8 running rank(s)" in agents[runner].log()[before:],
          "the restarted agent adopts its 8 ranks:\n" + agents[runner].log()[before:])
    check(all(alive(p) for p in pids), "the adopted ranks run on")
    rc = subprocess.run([topo_bin, "cancel", str(jid)], env=dict(
        os.environ, HOME=os.path.join(d.state_dir, "home"), TOPO_SERVER=d.url,
        TOPO_CA=os.path.join(d.state_dir, "ca.pem"), TOPO_TOKEN=d.admin_token),
        capture_output=True, text=True, timeout=30)
    check(rc.returncode == 0, "topo cancel: %s %s" % (rc.returncode, rc.stderr))
    wait_for(lambda: not any(alive(p) for p in pids), 15, "the cancelled ranks to end")
    wait_for(lambda: not any(os.path.isdir(p) for p in dirs), 15, "the job's cgroup to go")
    print("ok: two agents on one host and one cgroup root keep their job cgroups apart (%s); "
          "the restarted agent adopted its ranks by theirs"
          % sorted({os.path.basename(p) for p in dirs + ender_dirs}))


def test_endpoint(d, agent_bin, topo_bin, work, agents):
    certs = setup(d, work, ["n0"])
    agents["n0"] = Agent(agent_bin, d, work, "n0", certs["n0"][0], certs["n0"][1], "true").start()
    wait_for(lambda: nodes(d)["n0"]["state"] == "up", 20, "n0 to come up")
    endpoint = os.path.join(d.state_dir, "agent-endpoint")
    old = read(endpoint).strip()
    registrations = agents["n0"].log().count("registered;")
    # The agents' port is an ephemeral one (agent_listen's default): a
    # restarted daemon listens elsewhere.
    for _ in range(5):
        d.stop()
        d.start()
        new = read(endpoint).strip()
        if new and new != old:
            break
    check(new != old, "the restarted daemon listens for agents elsewhere: %s, %s" % (old, new))
    wait_for(lambda: agents["n0"].log().count("registered;") > registrations, 30,
             "n0's agent to register with the daemon at %s:\n%s" % (new, agents["n0"].log()[-2000:]))
    wait_for(lambda: nodes(d)["n0"]["state"] == "up", 10, "n0 up again")
    log = agents["n0"].log()
    check(("the scheduler's agent endpoint is now %s" % new) in log,
          "the agent says where it dials now:\n" + log[-2000:])
    print("ok: the agent followed the daemon from %s to %s" % (old, new))


def metric(d, name):
    status, text = d.request("GET", "/metrics", token=d.admin_token)
    check(status == 200, "/metrics: %s" % status)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise Failure("%s not in /metrics:\n%s" % (name, text[-2000:]))


def refused(d):
    return metric(d, "topo_agent_messages_refused_total")


def submit(d, name, command, **extra):
    body = dict({"spec": {"gpus": 8, "name": name, "parallelism": {"tp": 8}},
                 "command": ["/bin/sh", "-c", command]}, **extra)
    return d.api("POST", "/v1/jobs", body, expect=201)["id"]


def node_of(d, jid):
    ranks = job(d, jid)["ranks"]
    return ranks[0]["node"] if ranks else None


def barrier(d, name):
    """A job that runs and completes: every agent message sent before its start
    has been read by the daemon once it completes (one connection per node,
    read in order)."""
    jid = submit(d, name, "true")
    wait_for(lambda: job(d, jid)["state"] == "completed", 20, "job %s to complete" % name)
    return jid


def test_recoveries(d, agent_bin, topo_bin, work, agents):
    certs = setup(d, work, ["n0", "n1"])
    for n in ("n0", "n1"):
        agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], "true").start()
    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in agents), 20, "n0, n1 to come up")
    base = refused(d)

    # (a) A node whose agent and ranks die: the job restarts on the other node;
    # the node's next agent finds the dead ranks in its state files and says
    # nothing of them (the scheduler's keep list does not name the job).
    a = submit(d, "lost", "exec sleep 120")
    x = node_of(d, a)
    y = "n1" if x == "n0" else "n0"
    wait_for(lambda: len(rank_pids(agents[x], a)[0]) == 8, 10, "8 ranks on " + x)
    pids, dirs = rank_pids(agents[x], a)
    agents[x].kill9()
    for p in pids:
        try:
            os.kill(p, 9)
        except OSError:
            pass
    wait_for(lambda: not any(alive(p) for p in pids), 10, "the ranks on %s to die" % x)
    wait_for(lambda: job(d, a)["restarts"] >= 1 and node_of(d, a) == y and
             job(d, a)["state"] == "running", 20, "job %d to restart on %s" % (a, y))
    before = len(agents[x].log())
    agents[x].start()
    wait_for(lambda: "registered;" in agents[x].log()[before:], 15, x + " to register again")
    wait_for(lambda: ("job %d: every local rank has exited" % a) in agents[x].log()[before:], 10,
             "%s's agent to see the dead ranks of job %d" % (x, a))
    barrier(d, "after-a")
    check(refused(d) == base, "no agent message refused after the restarted agent's "
          "registration (%d before, %d now):\n%s" % (base, refused(d), agents[x].log()[before:]))
    check("the scheduler refused" not in agents[x].log()[before:],
          "the restarted agent heard no refusal:\n" + agents[x].log()[before:])

    # (b) Node mode: the node's one process fails; that is one failure.
    c = submit(d, "launcher", "exit 3", launch="node")
    wait_for(lambda: job(d, c)["state"] != "running" or job(d, c)["restarts"] > 0, 20,
             "job %d's launcher to fail" % c)
    barrier(d, "after-b")
    check(refused(d) == base, "no agent message refused after a failed node-mode launcher "
          "(%d before, %d now):\n%s" % (base, refused(d), d.log()))
    d.api("POST", "/v1/jobs/%d/cancel" % c, {}, expect=200)
    d.api("POST", "/v1/jobs/%d/cancel" % a, {}, expect=200)
    wait_for(lambda: job(d, a)["state"] == "cancelled" and job(d, c)["state"] == "cancelled",
             10, "jobs %d and %d to be cancelled" % (a, c))

    # (c) A checkpoint staged onto the node a job restarts on is the step it
    # starts from, not a new one.
    script = os.path.join(work, "ckpt.sh")
    with open(script, "w") as f:
        f.write('#!/bin/sh\n'
                'if [ "$RANK" = 0 ] && [ -z "$TOPO_RESTART_STEP" ]; then\n'
                '  mkdir -p "$TOPO_CHECKPOINT_DIR/step-1" && echo w > "$TOPO_CHECKPOINT_DIR/step-1/w"\n'
                '  echo 1 > "$TOPO_CHECKPOINT_DIR/.c" && mv "$TOPO_CHECKPOINT_DIR/.c" '
                '"$TOPO_CHECKPOINT_DIR/step-1/COMPLETE"\n'
                'fi\n'
                'exec sleep 120\n')
    e = submit(d, "staged", "/bin/sh " + script)
    first = node_of(d, e)
    other = "n1" if first == "n0" else "n0"
    persisted = os.path.join(work, "persistent", str(e), "step-1", "COMPLETE")
    wait_for(lambda: job(d, e)["checkpoint_step"] == 1 and os.path.isfile(persisted), 20,
             "step 1 of job %d to be stored and persisted" % e)
    before = len(agents[other].log())
    agents[first].kill9()
    started = "job %d restart 1: started ranks" % e
    wait_for(lambda: started in agents[other].log()[before:], 30,
             "job %d to restart on %s" % (e, other))
    log = agents[other].log()[before:]
    check("job %d: staged checkpoint step 1 from the persistent tier" % e in log,
          "the step was staged onto %s:\n%s" % (other, log))
    # The supervisor's first poll of the new run (which would report the
    # staged step) comes before the start is logged.
    check("job %d: checkpoint step 1 complete (local)" % e not in log,
          "the staged step is not reported as a new checkpoint:\n" + log)
    # Its answer comes after anything the agent sent before on the connection.
    d.api("GET", "/v1/jobs/%d/logs?rank=0" % e, expect=200)
    events = json.dumps(d.api("GET", "/v1/events?job=%d" % e, expect=200))
    check(events.count("checkpoint_completed") == 1,
          "one checkpoint_completed event for job %d: %s" % (e, events[-3000:]))
    check(refused(d) == base, "no agent message refused (%d before, %d now)" % (base, refused(d)))
    print("ok: a restarted agent kept quiet about ranks that died with its node, a failed "
          "node-mode launcher was one failure, a staged checkpoint was not reported again; "
          "nothing refused")


PIDS_MAX = r'''
p=$(grep ':pids:' /proc/self/cgroup | cut -d: -f3)
if [ -n "$p" ]; then f=/sys/fs/cgroup/pids$p/pids.max
else f=$(grep -m1 cgroup2 /proc/self/mounts | cut -d' ' -f2)$(grep '^0::' /proc/self/cgroup | cut -d: -f3)/pids.max
fi
echo "pids.max=$(cat "$f")"
'''


def test_pids(d, agent_bin, topo_bin, work, agents):
    if cgroup_mount() is None:
        print("skipped: no cgroups on this kernel")
        sys.exit(77)
    certs = setup(d, work, ["n0"])
    script = os.path.join(work, "pids.sh")
    with open(script, "w") as f:
        f.write(PIDS_MAX)
    agents["n0"] = Agent(agent_bin, d, work, "n0", certs["n0"][0], certs["n0"][1], "true",
                         extra=["--job-pids-max", "2000"]).start()
    wait_for(lambda: nodes(d)["n0"]["state"] == "up", 20, "n0 to come up")
    seen = {}
    for name, spec in (("own", {"pids_max": 50}), ("node", {}), ("above", {"pids_max": 5000})):
        body = {"spec": dict({"gpus": 8, "name": name, "parallelism": {"tp": 8}}, **spec),
                "command": ["/bin/sh", script]}
        jid = d.api("POST", "/v1/jobs", body, expect=201)["id"]
        wait_for(lambda: job(d, jid)["state"] == "completed", 20, "job %s to complete" % name)
        log = read(os.path.join(agents["n0"].state_dir, "logs", str(jid), "rank-0.log"))
        seen[name] = log.split("pids.max=")[-1].split()[0] if "pids.max=" in log else log
    check(seen == {"own": "50", "node": "2000", "above": "2000"},
          "pids.max of each job's cgroup: %s" % seen)
    check("pids_max 5000 lowered to this node's 2000 (--job-pids-max)" in agents["n0"].log(),
          "the agent says it lowered the job's pids_max:\n" + agents["n0"].log()[-2000:])
    print("ok: pids.max %s" % seen)


def test_version(sched_bin, agent_bin, topo_bin):
    import re
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "CMakeLists.txt")) as f:
        project = re.search(r"project\(toposched VERSION ([0-9.]+)", f.read()).group(1)
    seen = {}
    for name, binary in (("topo-agent", agent_bin), ("topo-scheduler", sched_bin),
                         ("topo", topo_bin)):
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        check(p.returncode == 0, "%s --version exits %d: %r" % (name, p.returncode, p.stderr))
        seen[name] = p.stdout.strip()
        check(seen[name] == "%s %s" % (name, project),
              "%s --version says %r, not %r" % (name, seen[name], "%s %s" % (name, project)))
    # The agent's new settings are checked at the command line: exit 2 and
    # the flag named, before anything else happens.
    for flag, value, words in (("--min-job-uid", "0", "--min-job-uid"),
                               ("--min-job-uid", "-5", "--min-job-uid"),
                               ("--job-pids-max", "-1", "--job-pids-max"),
                               ("--job-pids-max", "4194305", "--job-pids-max"),
                               ("--job-scratch", "yes", "--job-scratch"),
                               ("--job-tmp-size", "0%", "percentage of the node's RAM"),
                               ("--job-shm-size", "1gb", "percentage of the node's RAM"),
                               ("--keep-checkpoints", "1", "0 (keep all) or 2..99999")):
        p = subprocess.run([agent_bin, flag, value, "--node", "n0", "--server",
                            "wss://127.0.0.1:1/v1/agent", "--ca", "/dev/null", "--cert", "x",
                            "--key", "x", "--state-dir", "/nonexistent"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode != 0 and words in p.stderr + p.stdout,
              "topo-agent %s %s is refused naming it (exit %d): %r" % (flag, value, p.returncode,
                                                                     (p.stderr + p.stdout)[-500:]))
    print("ok: %s; bad agent settings refused" % ", ".join(seen.values()))


def main():
    sched_bin, agent_bin, topo_bin = sys.argv[1], sys.argv[2], sys.argv[3]
    which = sys.argv[4] if len(sys.argv) > 4 else "collisions"
    if which == "version":
        test_version(sched_bin, agent_bin, topo_bin)
        return
    d = Daemon(sched_bin, config=CONFIG).start()
    with agent_cluster(d, "topo-node-ops-test-") as cluster:
        work, agents = cluster
        run_jobs_as(d, cluster.account("jobs"))
        tests = {"collisions": test_collisions, "endpoint": test_endpoint,
                 "pids": test_pids, "recoveries": test_recoveries}
        tests[which](d, agent_bin, topo_bin, work, agents)


if __name__ == "__main__":
    run(main)
