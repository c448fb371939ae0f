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
  version     topo-agent --version, topo-scheduler --version and topo --version
              answer 0 with one version, the project's (CMakeLists.txt); the
              agent's settings out of range are refused at the command line
              (no daemon needed).

usage: test_node_ops.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
       [collisions|endpoint|pids|version]
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
                               ("--job-shm-size", "1gb", "percentage of the node's RAM")):
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
        tests = {"collisions": test_collisions, "endpoint": test_endpoint, "pids": test_pids}
        tests[which](d, agent_bin, topo_bin, work, agents)


if __name__ == "__main__":
    run(main)
