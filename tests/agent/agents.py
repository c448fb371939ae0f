"""Real topo-agent processes next to a real topo-scheduler on loopback: the
pieces the agent tests share (tests/agent, tests/torch).

Standard library only (/usr/bin/python3).
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
    """One topo-agent process with simulated GPUs; its log in WORK/agent-NODE.log."""

    def __init__(self, binary, daemon, work, node, cert, key, job_command, gpus=8, extra=()):
        self.node = node
        self.state_dir = os.path.join(work, "agent-" + node)
        self.log_path = os.path.join(work, "agent-%s.log" % node)
        self.args = [binary, "--node", node, "--scheduler-state-dir", daemon.state_dir,
                     "--cert", cert, "--key", key, "--state-dir", self.state_dir,
                     "--gpu-backend", "simulated", "--gpus", str(gpus), "--gpu-model", "H100",
                     "--stop-grace-ms", "1000", "--job-command", job_command,
                     "--persistent-checkpoint-dir", os.path.join(work, "persistent")] + list(extra)
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
    """Imports the topology (tiny by default) and issues a certificate per node."""
    d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(topology or tiny_topology())},
          expect=200)
    certs = os.path.join(work, "certs")
    os.makedirs(certs, exist_ok=True)
    return {n: issue(d.binary, d.state_dir, n, certs) for n in names}


@contextlib.contextmanager
def agent_cluster(daemon, prefix):
    """Yields (work dir, {node: Agent}) for a test to fill; afterwards kills
    every agent and the ranks they left, prints the daemon's and the agents'
    logs when the block failed, stops the daemon and removes the work dir."""
    work = tempfile.mkdtemp(prefix=prefix)
    agents = {}
    ok = False
    try:
        yield work, agents
        ok = True
    finally:
        for a in agents.values():
            a.kill9()
        kill_leftover_ranks(work)
        if not ok:
            print("---- daemon log\n" + daemon.log(), file=sys.stderr)
            for n, a in agents.items():
                print("---- agent %s log\n%s" % (n, a.log()[-4000:]), file=sys.stderr)
        daemon.cleanup()
        shutil.rmtree(work, ignore_errors=True)
