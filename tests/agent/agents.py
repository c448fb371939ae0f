"""Real topo-agent processes next to a real topo-scheduler on loopback: the
pieces the agent tests share (tests/agent, tests/torch).

Ranks run as real Unix accounts the tests create (useradd) in real cgroups,
each job with its own /tmp (so the work directory is under /var/tmp):
each agent gets its own cgroup root (--cgroup-root MOUNT/topo-test-PID-NODE)
so tests never touch another agent's jobs, and agent_cluster removes the
accounts, the cgroups, the rank processes and the work directory afterwards,
also when the test failed. The work directory is 0711 (the ranks, as their
accounts, must reach their log and checkpoint directories below it) and
holds the certificates in a 0700 directory.

Standard library only (/usr/bin/python3); run as root.
"""

import contextlib
import glob
import json
import os
import signal
import subprocess
import shutil
import sys
import tempfile
import time

from harness import Failure, tiny_topology


# Where a cluster's work directory goes: not under /tmp, which each job has
# its own of (topo-agent --job-scratch, on where the agent is root), so that
# ranks reach the scripts, logs and checkpoint directories the test puts there.
WORK_ROOT = "/var/tmp"


def issue(binary, state_dir, node, out):
    subprocess.run([binary, "--state-dir", state_dir, "ca", "issue", "--node", node, "--out", out],
                   check=True, capture_output=True)
    return os.path.join(out, node + ".pem"), os.path.join(out, node + "-key.pem")


def cgroup_mount():
    """Where job cgroups can go: the cgroup v2 mount (pure or hybrid), else the
    v1 freezer hierarchy; None when the kernel has neither."""
    v2 = freezer = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            fstype, mount, opts = parts[sep + 1], parts[4], parts[sep + 3].split(",")
            if fstype == "cgroup2" and v2 is None:
                v2 = mount
            elif fstype == "cgroup" and "freezer" in opts and freezer is None:
                freezer = mount
    return v2 or freezer


def v1_limit_roots(name):
    """The agent's v1 limit hierarchies for a cgroup root named `name`:
    MOUNT/<the agent's cgroup there>/NAME in every v1 controller mount
    (memory, cpu, pids, devices; node-agent/supervisor/.../cgroup.hpp)."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[parts.index("-") + 1] == "cgroup":
                mounts.append(parts[4])
    found = []
    for mount in mounts:
        for dirpath, dirs, _files in os.walk(mount):
            if dirpath[len(mount):].count("/") >= 6:
                dirs[:] = []
            elif os.path.basename(dirpath) == name:
                found.append(dirpath)
                dirs[:] = []
    return found


def kill_cgroup_tree(root):
    """SIGKILLs every process in the cgroups under root and removes them, and
    the v1 limit hierarchies the agent made beside root (v1_limit_roots)."""
    if not root:
        return
    if os.path.isdir(root):
        kill_one_cgroup_tree(root)
    for limits in v1_limit_roots(os.path.basename(root)):
        kill_one_cgroup_tree(limits)


def kill_one_cgroup_tree(root):
    if not os.path.isdir(root):
        return
    for _ in range(50):
        pids = set()
        for dirpath, _dirs, files in os.walk(root):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(dirpath, "cgroup.procs")) as f:
                        pids.update(int(p) for p in f.read().split())
                except OSError:
                    pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
        if not os.path.isdir(root):
            return
        time.sleep(0.1)
    print("warning: cgroup %s could not be removed" % root, file=sys.stderr)


def unmount_under(path):
    """Detaches every mount at or below path, deepest first (an agent's job
    namespace pins and their private mount: topo-agent --job-scratch)."""
    path = os.path.realpath(path)
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == path or point.startswith(path + "/"):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def create_account(name):
    """A real, unprivileged Unix account without a home directory."""
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", "--user-group", name],
                   check=True, capture_output=True)
    return name


def remove_account(name):
    """Ends every process of the account, then removes it (and its group)."""
    try:
        uid = int(subprocess.run(["id", "-u", name], capture_output=True, text=True,
                                 check=True).stdout)
    except (subprocess.CalledProcessError, ValueError):
        return
    for _ in range(20):
        left = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/status" % pid) as f:
                    owner = [l for l in f if l.startswith("Uid:")][0].split()[1]
            except (OSError, IndexError):
                continue
            if int(owner) == uid:
                left.append(int(pid))
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        if not left:
            break
        time.sleep(0.1)
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["groupdel", name], capture_output=True)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return time.time()
        time.sleep(0.05)
    raise Failure("timed out after %ss waiting for %s" % (timeout, what))


class Agent:
    """One topo-agent process with simulated GPUs (`gpus` H100s), or with NVML read
    from `nvml_library`; its log in WORK/agent-NODE.log."""

    def __init__(self, binary, daemon, work, node, cert, key, job_command, gpus=8, extra=(),
                 nvml_library=None):
        self.node = node
        self.state_dir = os.path.join(work, "agent-" + node)
        self.log_path = os.path.join(work, "agent-%s.log" % node)
        mount = cgroup_mount()
        # Its own cgroup root: job ids of this test's daemon never meet
        # another agent's cgroups on this machine.
        self.cgroup_root = (os.path.join(mount, "topo-test-%d-%s" % (os.getpid(), node))
                            if mount else None)
        backend = (["--gpu-backend", "nvml", "--nvml-library", nvml_library] if nvml_library else
                   ["--gpu-backend", "simulated", "--gpus", str(gpus), "--gpu-model", "H100"])
        self.args = [binary, "--node", node, "--scheduler-state-dir", daemon.state_dir,
                     "--cert", cert, "--key", key, "--state-dir", self.state_dir] + backend + [
                     "--stop-grace-ms", "1000", "--job-command", job_command,
                     "--persistent-checkpoint-dir", os.path.join(work, "persistent"),
                     "--cgroup-root", self.cgroup_root or "none"] + list(extra)
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


def setup(d, work, names, topology=None):
    """Imports the topology (tiny by default) and issues a certificate per node
    (WORK/certs, 0700: the keys are not the jobs' to read)."""
    d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(topology or tiny_topology())},
          expect=200)
    certs = os.path.join(work, "certs")
    os.makedirs(certs, exist_ok=True)
    os.chmod(certs, 0o700)
    return {n: issue(d.binary, d.state_dir, n, certs) for n in names}


def run_jobs_as(d, account, user="admin"):
    """The API user's jobs run as the Unix account (PATCH /v1/users/NAME)."""
    d.api("PATCH", "/v1/users/" + user, {"unix_user": account}, expect=200)


class Cluster:
    """What agent_cluster yields: the work dir, {node: Agent} for the test to
    fill, and account(tag) for real Unix accounts removed afterwards.
    Unpacks as (work, agents)."""

    def __init__(self, work):
        self.work = work
        self.agents = {}
        self.accounts = []

    def __iter__(self):
        return iter((self.work, self.agents))

    def account(self, tag):
        name = "tt%d-%s" % (os.getpid() % 1000000, tag)
        self.accounts.append(name)
        return create_account(name)


@contextlib.contextmanager
def agent_cluster(daemon, prefix):
    """Yields a Cluster (unpacks as (work dir, {node: Agent})); afterwards kills
    every agent, the ranks they left and their cgroups, removes the test's
    Unix accounts, prints the daemon's and the agents' logs when the block
    failed, stops the daemon and removes the work dir."""
    work = tempfile.mkdtemp(prefix=prefix, dir=WORK_ROOT)
    os.chmod(work, 0o711)
    cluster = Cluster(work)
    ok = False
    try:
        yield cluster
        ok = True
    finally:
        for a in cluster.agents.values():
            a.kill9()
        kill_leftover_ranks(work)
        for a in cluster.agents.values():
            kill_cgroup_tree(a.cgroup_root)
        for name in cluster.accounts:
            remove_account(name)
        if not ok:
            print("---- daemon log\n" + daemon.log(), file=sys.stderr)
            for n, a in cluster.agents.items():
                print("---- agent %s log\n%s" % (n, a.log()[-4000:]), file=sys.stderr)
        daemon.cleanup()
        unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
