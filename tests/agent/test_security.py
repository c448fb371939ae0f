#!/usr/bin/python3
"""Jobs on a shared cluster, tried as an attacker would: real topo-agent
processes, real Unix accounts made by the test, real cgroups, a real daemon.

  accounts   two researchers (alice in tenant lab-a, bob in lab-b), each an API
             user mapped to a Unix account the test creates (POST /v1/users
             with unix_user). Each one's job runs as their account (`id -u` in
             the log, read through the logs route with their own token). A
             probe job of each tries to read and write the other's checkpoint
             (node-local and persistent) and log files, the agent's key, the
             supervisor's state, the inject FIFO, to list the agent's state
             dir and read the agent's environment, and prints what it got:
             every try is denied and the files are unchanged. A job that
             replaces its own log with a link to the agent's key gets nothing
             of the key through `GET /v1/jobs/ID/logs`.
  root       a user is not mapped to root (403, allow_root_jobs); a user mapped to
             a name the scheduler host did not know yet, made another name for
             uid 0 (useradd -o -u 0) while the job waited, passes the daemon,
             and the agent refuses the start for good (the job fails, the
             reason says why).
  escape     a rank that forks a child which calls setsid and forks again (a
             daemon escaping its process group) leaves nothing behind after a
             cancel, a preemption and an immediate drain: every pid the rank
             and its escapee recorded is gone from /proc (a zombie counts as
             gone).

Skips (77) only when the kernel has no cgroups. Needs root (useradd).
usage: test_security.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN [accounts|root|escape|all]
Standard library only (/usr/bin/python3).
"""

import json
import os
import pwd
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import (Agent, agent_cluster, cgroup_mount, job, nodes, run_jobs_as,  # noqa: E402
                    setup, wait_for)

CONFIG = "heartbeat_interval_ms = 200\npreemption = true\npreempt_grace_s = 1\n"
NODES = ["n0", "n1", "n2"]

# Every rank: its account, then what the job asked for. $1: what to do.
OWNER = r'''
echo "uid=$(id -u) user=$(id -un)"
mkdir -p "$TOPO_CHECKPOINT_DIR/step-1"
echo "secret of $(id -un)" > "$TOPO_CHECKPOINT_DIR/step-1/data"
echo 1 > "$TOPO_CHECKPOINT_DIR/.c" && mv "$TOPO_CHECKPOINT_DIR/.c" "$TOPO_CHECKPOINT_DIR/step-1/COMPLETE"
echo "wrote my checkpoint"
exec sleep 600
'''

# Tries every path given; prints what it got.
PROBE = r'''
echo "uid=$(id -u) user=$(id -un)"
for f in "$@"; do
  if got=$(head -c 40 "$f" 2>&1); then echo "READ-OK $f: $got"; else echo "READ-DENIED $f"; fi
  if timeout 2 sh -c 'echo intruder >> "$1"' sh "$f" 2>/dev/null; then echo "WRITE-OK $f";
  else echo "WRITE-DENIED $f"; fi
done
for d in $PROBE_DIRS; do
  if ls "$d" >/dev/null 2>&1; then echo "LIST-OK $d: $(ls "$d" | head -3 | tr '\n' ' ')";
  else echo "LIST-DENIED $d"; fi
  if touch "$d/planted" 2>/dev/null; then echo "CREATE-OK $d"; else echo "CREATE-DENIED $d"; fi
done
echo "probe done"
'''

# Replaces its own log (fd 1's file) with a link to the agent's key.
PLANTER = r'''
echo "about to plant"
log=$(readlink /proc/$$/fd/1)
rm -f "$log" && ln -s "$1" "$log" && echo "planted $log -> $1" >&2
'''

# A rank that leaves a daemon behind: setsid (new session, new process
# group), then a fork; both pids go to the rank's log. It ignores the
# checkpoint signal, so a preemption has to stop it.
ESCAPE = r'''
trap '' USR1
echo "rank-pid $$"
setsid sh -c 'sleep 600 & echo "escaped $!"; echo "session-leader $$"' < /dev/null
exec sleep 600
'''


def token_for(d, user):
    return d.api("POST", "/v1/tokens", {"user": user}, expect=201)["token"]


def submit(d, token, name, gpus, script, args=(), parallelism=None, priority=None, expect=201,
           extra=None):
    spec = {"name": name, "gpus": gpus}
    if parallelism:
        spec["parallelism"] = parallelism
    body = {"spec": spec, "command": ["/bin/sh", "-c", script, "sh"] + list(args)}
    body.update(extra or {})
    if priority is not None:
        body["priority"] = priority
    status, out = d.request("POST", "/v1/jobs", body, token)
    check(status == expect, "submit %s: expected %d, got %d: %s" % (name, expect, status, out))
    return out


def api_log(d, token, jid, rank=0):
    status, out = d.request("GET", "/v1/jobs/%d/logs?rank=%d&offset=0&max=131072" % (jid, rank),
                            token=token)
    return status, out


def wait_state(d, jid, states, timeout=20):
    """The job's view once its state is one of states."""
    wait_for(lambda: job(d, jid)["state"] in states, timeout,
             "job %d to be %s" % (jid, "/".join(states)))
    return job(d, jid)


def where(d, jid):
    return sorted({r["node"] for r in job(d, jid)["ranks"]})


def gone(pid):
    """No such process, or a zombie waiting for its reaper."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_accounts(d, c, agents, work):
    alice, bob = c.account("alice"), c.account("bob")
    for tenant in ("lab-a", "lab-b"):
        d.api("PUT", "/v1/tenants/" + tenant, {"shares": 1}, expect=201)
    d.api("POST", "/v1/users", {"name": "alice", "tenant": "lab-a", "role": "user",
                                "unix_user": alice}, expect=201)
    d.api("POST", "/v1/users", {"name": "bob", "tenant": "lab-b", "role": "user",
                                "unix_user": bob}, expect=201)
    tok = {"alice": token_for(d, "alice"), "bob": token_for(d, "bob")}
    uid = {"alice": pwd.getpwnam(alice).pw_uid, "bob": pwd.getpwnam(bob).pw_uid}

    owner = {u: submit(d, tok[u], "owner-" + u, 1, OWNER)["id"] for u in ("alice", "bob")}
    for u, jid in owner.items():
        wait_state(d, jid, ("running",))
    paths = {}
    for u, jid in owner.items():
        node = where(d, jid)[0]
        state = agents[node].state_dir
        local = os.path.join(state, "checkpoints", str(jid), "step-1", "data")
        persistent = os.path.join(work, "persistent", str(jid), "step-1", "data")
        wait_for(lambda: os.path.isfile(os.path.join(os.path.dirname(persistent), "COMPLETE")), 15,
                 "%s's step 1 on the persistent tier" % u)
        paths[u] = {
            "node": node,
            "files": [local, persistent, os.path.join(state, "logs", str(jid), "rank-0.log"),
                      os.path.join(work, "certs", node + "-key.pem"),
                      os.path.join(state, "supervisor", "jobs", "%d.json" % jid),
                      os.path.join(state, "inject"), "/proc/%d/environ" % agents[node].proc.pid],
            "dirs": [state, os.path.join(state, "supervisor"), os.path.join(state, "logs"),
                     os.path.dirname(local), os.path.dirname(os.path.dirname(persistent)),
                     os.path.join(work, "certs")],
        }
        # The account owns what the agent made for it; nobody else can enter.
        for path in (os.path.dirname(os.path.dirname(local)),
                     os.path.dirname(os.path.dirname(persistent))):
            st = os.stat(path)
            check(st.st_uid == uid[u] and (st.st_mode & 0o777) == 0o700,
                  "%s is %s's, 0700: uid %d mode %o" % (path, u, st.st_uid, st.st_mode & 0o777))
        st = os.stat(persistent)
        check(st.st_uid == uid[u] and (st.st_mode & 0o777) == 0o600,
              "the persistent copy %s is %s's, 0600" % (persistent, u))
    st = os.stat(agents["n0"].state_dir)
    check(st.st_uid == 0 and (st.st_mode & 0o777) == 0o711, "the agent's state dir is root 0711")
    st = os.stat(os.path.join(agents["n0"].state_dir, "supervisor"))
    check(st.st_uid == 0 and (st.st_mode & 0o777) == 0o700, "its supervisor state is root 0700")
    before = {u: open(paths[u]["files"][0]).read() for u in paths}

    probes = {}
    for u, other in (("alice", "bob"), ("bob", "alice")):
        target = paths[other]
        script = "PROBE_DIRS='%s'\n%s" % (" ".join(target["dirs"]), PROBE)
        probes[u] = submit(d, tok[u], "probe-" + u, 1, script, target["files"])["id"]
    for u, jid in probes.items():
        wait_state(d, jid, ("completed", "failed"), 30)
        status, out = api_log(d, tok[u], jid)
        check(status == 200, "%s reads the probe's log with their own token: %s %s" % (u, status, out))
        text = out["data"]
        check("uid=%d user=%s" % (uid[u], alice if u == "alice" else bob) in text,
              "the probe ran as %s's account:\n%s" % (u, text))
        other = "bob" if u == "alice" else "alice"
        for f in paths[other]["files"]:
            check("READ-DENIED %s" % f in text and "WRITE-DENIED %s" % f in text,
                  "%s's job could not read or write %s:\n%s" % (u, f, text))
        for dpath in paths[other]["dirs"]:
            check("CREATE-DENIED %s" % dpath in text, "%s's job could not create in %s:\n%s"
                  % (u, dpath, text))
            # Listing: only the 0700 dirs refuse; the 0711 roots refuse too.
            check("LIST-DENIED %s" % dpath in text, "%s's job could not list %s:\n%s"
                  % (u, dpath, text))
        check(not re.search(r"^(READ|WRITE|LIST|CREATE)-OK", text, re.M),
              "nothing succeeded:\n%s" % text)
        check("probe done" in text, "the probe ran to its end:\n%s" % text)
        # Not the other's log either, through the API.
        status, _ = api_log(d, tok[other], jid)
        check(status in (403, 404), "%s cannot read %s's log through the API: %s" % (other, u, status))
    after = {u: open(paths[u]["files"][0]).read() for u in paths}
    check(after == before and all("intruder" not in v for v in after.values()),
          "checkpoints unchanged: %s" % after)

    # The job owns its log's directory and can swap the file for a link to
    # the agent's key: the agent reads the log without following it.
    key = paths["alice"]["files"][3]
    planter = submit(d, tok["alice"], "planter", 1, PLANTER, [key])["id"]
    wait_state(d, planter, ("completed", "failed"), 30)
    status, out = api_log(d, tok["alice"], planter)
    text = json.dumps(out)
    check(status == 404 and "symbolic link" in text and "PRIVATE KEY" not in text,
          "a planted link to the key is refused: %s %s" % (status, text))
    for jid in owner.values():
        d.api("POST", "/v1/jobs/%d/cancel" % jid, {}, expect=200)
    print("ok accounts: alice's and bob's jobs ran as their accounts; every cross read and write, "
          "the key, the state and the inject FIFO were denied; a planted log link read nothing")


def test_root(d, c, agents, work):
    d.api("PUT", "/v1/tenants/lab-r", {"shares": 1}, expect=201)
    status, out = d.request("POST", "/v1/users", {"name": "rooty", "tenant": "lab-r",
                                                  "role": "user", "unix_user": "root"},
                            token=d.admin_token)
    check(status == 403 and "allow_root_jobs" in json.dumps(out), "the refusal says why: %s" % out)

    # Another name for uid 0, made after the daemon took the mapping and the
    # submission (the scheduler host did not know the name then): the agent
    # refuses it. The job waits behind one that fills the nodes meanwhile.
    alias = "tt%d-toor" % (os.getpid() % 1000000)
    d.api("POST", "/v1/users", {"name": "sneaky", "tenant": "lab-r", "role": "user",
                                "unix_user": alias}, expect=201)
    admin = d.admin_token
    blocker = submit(d, admin, "fill", 8 * len(NODES), "exec sleep 600")["id"]
    wait_state(d, blocker, ("running",))
    jid = submit(d, token_for(d, "sneaky"), "as-uid0", 1, "id > /tmp/uid0-ran")["id"]
    subprocess.run(["useradd", "-o", "-u", "0", "-g", "0", "-M", "-N", "-s", "/bin/sh", alias],
                   check=True, capture_output=True)
    try:
        d.api("POST", "/v1/jobs/%d/cancel" % blocker, {}, expect=200)
        v = wait_state(d, jid, ("failed",), 20)
        check("jobs may not run as root" in v.get("reason", "") and "cannot start" in v["reason"],
              "the job failed with the agent's reason: %s" % v.get("reason"))
        check(v["restarts"] == 0, "a permanent refusal is not retried: %s" % v)
        check(not os.path.exists("/tmp/uid0-ran"), "nothing ran as uid 0")
    finally:
        # Never remove_account: its processes are every root process.
        subprocess.run(["userdel", "-f", alias], capture_output=True)
    print("ok root: root refused at mapping (403); uid 0 under another name refused by the "
          "agent for good")


def escape_pids(agent, jid):
    """The pids the job's ranks and their escapees printed in their current
    run (a log holds every run on its node, each after the agent's header)."""
    pids = []
    logs = os.path.join(agent.state_dir, "logs", str(jid))
    for log in os.listdir(logs) if os.path.isdir(logs) else []:
        with open(os.path.join(logs, log), errors="replace") as f:
            last = f.read().split("=== topo-agent ")[-1]
        pids += [int(p) for p in re.findall(r"(?:rank-pid|escaped|session-leader) (\d+)", last)]
    return pids


def run_escapee(d, agents, token, name, gpus, priority=None):
    jid = submit(d, token, name, gpus, ESCAPE, parallelism={"tp": 8}, priority=priority)["id"]
    wait_state(d, jid, ("running",))
    placed = where(d, jid)
    ranks = gpus
    wait_for(lambda: sum(len(escape_pids(agents[n], jid)) for n in placed) == 3 * ranks, 20,
             "every rank of job %d to record its escapee" % jid)
    pids = [p for n in placed for p in escape_pids(agents[n], jid)]
    # A session leader prints its pid and then exits: wait for the exits,
    # as one read can come between the print and the exit (seen under the
    # sanitizers). The escapees and ranks sleep 600 s, so the count cannot
    # drop below them while they run.
    running = lambda: [p for p in pids if not gone(p)]
    wait_for(lambda: len(running()) <= len(pids) - ranks, 10,
             "the session leaders of job %d to exit" % jid)
    escaped = running()
    check(len(escaped) == len(pids) - ranks,
          "the escapees run before the stop: %d of %d" % (len(escaped), len(pids)))
    # They left the rank's session but not the job's cgroup.
    for p in escaped[:2]:
        with open("/proc/%d/cgroup" % p) as f:
            check("/job-%d." % jid in f.read(), "escapee %d is in job %d's cgroup" % (p, jid))
    return jid, placed, pids


def test_escape(d, c, agents, work):
    acct = c.account("esc")
    d.api("PUT", "/v1/tenants/lab-e", {"shares": 1}, expect=201)
    d.api("POST", "/v1/users", {"name": "eve", "tenant": "lab-e", "role": "user",
                                "unix_user": acct}, expect=201)
    tok = token_for(d, "eve")
    results = []

    # Cancel.
    jid, _, pids = run_escapee(d, agents, tok, "escape-cancel", 8)
    status, out = d.request("POST", "/v1/jobs/%d/cancel" % jid, {}, tok)
    check(status == 200, "cancel: %s %s" % (status, out))
    wait_for(lambda: all(gone(p) for p in pids), 15, "every process of job %d to be gone" % jid)
    results.append("cancel (%d pids)" % len(pids))

    # Preemption: the admin's priority job needs the victim's GPUs.
    jid, placed, pids = run_escapee(d, agents, tok, "escape-preempted", 16)
    high = d.api("POST", "/v1/jobs", {"spec": {"name": "urgent", "gpus": 24,
                                               "parallelism": {"tp": 8}},
                                      "command": ["/bin/sh", "-c", "exec sleep 600"],
                                      "priority": 50}, expect=201)
    wait_for(lambda: job(d, jid)["state"] in ("queued", "preempting") and
             job(d, jid)["state"] != "running", 15, "job %d to be preempted" % jid)
    wait_for(lambda: all(gone(p) for p in pids), 20, "every process of preempted job %d to be gone" % jid)
    wait_state(d, high["id"], ("running",), 20)
    # The victim first, or it restarts when the urgent job ends.
    d.request("POST", "/v1/jobs/%d/cancel" % jid, {}, tok)
    d.api("POST", "/v1/jobs/%d/cancel" % high["id"], {}, expect=200)
    results.append("preemption (%d pids)" % len(pids))

    # An immediate drain of the job's node.
    wait_for(lambda: all(n["state"] == "up" and n["free"] == n["gpus"]
                         for name, n in nodes(d).items() if name in NODES), 20,
             "the nodes free again")
    jid, placed, pids = run_escapee(d, agents, tok, "escape-drained", 8)
    d.api("POST", "/v1/nodes/drain", {"nodes": placed[0], "mode": "immediate",
                                      "reason": "test"}, expect=200)
    wait_for(lambda: all(gone(p) for p in pids), 15, "every process of job %d on the drained node" % jid)
    wait_for(lambda: nodes(d)[placed[0]]["state"] == "drained", 15, placed[0] + " drained")
    d.request("POST", "/v1/jobs/%d/cancel" % jid, {}, tok)
    results.append("drain (%d pids)" % len(pids))
    print("ok escape: a setsid double fork left nothing after " + ", ".join(results))


def job_cgroup_limits(jid):
    """The limit files of job jid's cgroups in every mounted hierarchy, read
    by the test itself (as root), so what is checked is what the kernel holds."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        mounts = [l.split()[4] for l in f if l.split(" - ")[1].split()[0] in ("cgroup", "cgroup2")]
    for mount in mounts:
        for dirpath, dirs, files in os.walk(mount):
            # job-ID.NODE.SCOPE (docs/jobs.md, "Containment").
            if not os.path.basename(dirpath).startswith("job-%d." % jid):
                continue
            dirs[:] = []
            for name in ("memory.max", "memory.limit_in_bytes", "cpu.max", "cpu.cfs_quota_us"):
                if name in files:
                    with open(os.path.join(dirpath, name)) as lf:
                        found[name] = lf.read().strip()
    return found


def test_limits(d, c, agents, work):
    """A job's memory and CPU limits reach its cgroup on the node."""
    d.api("PUT", "/v1/tenants/lab-l", {"shares": 1}, expect=201)
    d.api("POST", "/v1/users", {"name": "lima", "tenant": "lab-l", "role": "user",
                                "unix_user": c.account("lima")}, expect=201)
    tok = token_for(d, "lima")
    jid = submit(d, tok, "limited", 1, "sleep 60",
                 extra={"memory_mb_per_node": 256, "cpus_per_node": 0.5})["id"]
    wait_state(d, jid, ("running",))
    wait_for(lambda: job_cgroup_limits(jid), 15, "job %d's cgroup" % jid)
    lim = job_cgroup_limits(jid)
    mem = lim.get("memory.max", lim.get("memory.limit_in_bytes"))
    check(mem == str(256 << 20), "the memory limit in the job's cgroup: %s" % lim)
    cpu = lim.get("cpu.max", lim.get("cpu.cfs_quota_us", "")).split()
    check(cpu[:1] == ["50000"], "half a CPU in the job's cgroup: %s" % lim)
    check(job(d, jid)["limits"] == {"memory_mb_per_node": 256, "cpus_per_node": 0.5}, str(job(d, jid)))
    d.request("POST", "/v1/jobs/%d/cancel" % jid, {}, tok)
    wait_state(d, jid, ("cancelled",))
    print("ok limits: %s" % lim)


def main():
    if os.geteuid() != 0:
        raise Failure("run as root: the test creates Unix accounts (useradd)")
    if cgroup_mount() is None:
        print("skip: this kernel has no cgroups (neither cgroup2 nor a v1 freezer)")
        sys.exit(77)
    sched_bin, agent_bin, topo_bin = sys.argv[1:4]
    which = sys.argv[4] if len(sys.argv) > 4 else "all"
    cases = {"accounts": test_accounts, "root": test_root, "escape": test_escape,
             "limits": test_limits}
    chosen = list(cases) if which == "all" else [which]
    d = Daemon(sched_bin, config=CONFIG).start()
    with agent_cluster(d, "topo-security-test-") as c:
        work, agents = c
        certs = setup(d, work, NODES)
        run_jobs_as(d, c.account("admin"))
        for n in NODES:
            agents[n] = Agent(agent_bin, d, work, n, certs[n][0], certs[n][1], "false").start()
        wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in NODES), 20, "n0..n2 up")
        for name in chosen:
            cases[name](d, c, agents, work)


if __name__ == "__main__":
    run(main)
