#!/usr/bin/python3
"""Node agents over mutual TLS against a real daemon: who may connect,
registration bringing nodes up, liveness (a silent node goes down within the
configured heartbeat intervals), start/finish of a job through agent
messages, a GPU fault reported at once, and malformed messages refused
without affecting anything else.

usage: test_agents.py TOPO_SCHEDULER_BIN [TOPO_BIN]
"""

import json
import os
import ssl
import subprocess
import sys
import tempfile
import time

from agent_client import AgentConnection
from harness import Daemon, Failure, check, run, serving, tiny_topology

CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"


def issue(binary, state_dir, node, out):
    subprocess.run([binary, "--state-dir", state_dir, "ca", "issue", "--node", node, "--out", out],
                   check=True, capture_output=True)
    return os.path.join(out, node + ".pem"), os.path.join(out, node + "-key.pem")


def node_state(d, name):
    return d.api("GET", "/v1/nodes/" + name, expect=200)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise Failure("timed out waiting for " + what)


def main():
    binary = sys.argv[1]
    d = Daemon(binary, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-agents-")
    with serving(d, work):
        with open(os.path.join(d.state_dir, "agent-endpoint")) as f:
            port = int(f.read().strip().rsplit(":", 1)[1].split("/")[0])
        ca = os.path.join(d.state_dir, "ca.pem")
        d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())}, expect=200)
        n0 = issue(binary, d.state_dir, "n0", work)
        n1 = issue(binary, d.state_dir, "n1", work)
        other_state = os.path.join(work, "other-ca")
        os.makedirs(other_state)
        foreign = issue(binary, other_state, "n0", os.path.join(work, "foreign"))

        # Who may connect.
        for name, cert in (("no certificate", None), ("another CA's certificate", foreign)):
            try:
                c = AgentConnection(port, ca, *(cert or (None, None)))
                c.send({"type": "register", "node": "n0"})
                reply = c.recv()
                raise Failure("%s: the daemon accepted the agent (%s)" % (name, reply))
            except (ssl.SSLError, ConnectionError, OSError):
                pass
        c = AgentConnection(port, ca, *n1)
        c.send({"type": "register", "node": "n0", "gpus": [], "ranks": []})
        reply = c.recv()
        check(reply is not None and reply["type"] == "error" and "n1" in reply["message"],
              "another node's certificate: %s" % reply)
        check(c.recv() is None, "the connection closes after the refusal")
        check(node_state(d, "n0")["state"] == "down", "n0 must stay down")

        # Registration brings the node up; silence takes it down again.
        a0 = AgentConnection(port, ca, *n0)
        a0.send({"type": "register", "node": "n0", "addr": "127.0.0.1", "gpus": [], "ranks": []})
        reply = a0.recv()
        check(reply["type"] == "registered" and reply["heartbeat_interval_ms"] == 200, str(reply))
        check(node_state(d, "n0")["state"] == "up", "n0 up after registering")
        t0 = time.time()
        wait_for(lambda: node_state(d, "n0")["state"] == "down", 5, "n0 to go down")
        silent = time.time() - t0
        check(silent < 0.6 + 0.6, "down after %.2f s; the limit is 3 x 200 ms (+ the check period)" % silent)
        a0.close()

        # A live agent: heartbeats keep it up, a job starts on it and finishes
        # when every rank has exited 0.
        a0 = AgentConnection(port, ca, *n0)
        a0.send({"type": "register", "node": "n0", "addr": "127.0.0.1", "gpus": [], "ranks": []})
        check(a0.recv()["type"] == "registered", "re-register")
        job = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "on-n0"}}, expect=201)
        check(job["state"] == "running", "job starts on the only up node: %s" % job)
        start = a0.recv()
        check(start["type"] == "start" and start["job"] == job["id"] and len(start["ranks"]) == 8,
              "start message: %s" % start)
        check(start["master_addr"] == "127.0.0.1" and start["world_size"] == 8, str(start))
        for _ in range(5):
            a0.send({"type": "heartbeat"})
            time.sleep(0.1)
        check(node_state(d, "n0")["state"] == "up", "heartbeats keep n0 up")
        for r in range(8):
            a0.send({"type": "rank_exited", "job": job["id"], "rank": r, "exit_code": 0,
                     "restart_count": 0})
        wait_for(lambda: d.api("GET", "/v1/jobs/%d" % job["id"], expect=200)["state"] == "completed", 5,
                 "the job to complete")

        # A GPU fault is reported at once and acted on.
        a0.send({"type": "gpu_event", "gpu": 3, "kind": "xid", "code": 79})
        wait_for(lambda: node_state(d, "n0")["gpu_health"][3] == "failed", 2, "GPU 3 to fail")

        # Malformed and hostile messages: refused, the connection closed,
        # nothing else affected.
        before = d.api("GET", "/v1/jobs?all=1", expect=200)
        for bad in ("not json", {"type": "warp"}, {"type": "rank_exited", "job": 999999, "rank": 0},
                    {"type": "gpu_event", "gpu": 99, "kind": "xid", "code": 79}):
            a = AgentConnection(port, ca, *n0)
            a.send({"type": "register", "node": "n0", "gpus": [], "ranks": []})
            check(a.recv()["type"] == "registered", "register")
            a.send(bad)
            reply = a.recv()
            check(reply is not None and reply["type"] == "error", "bad message %r: %s" % (bad, reply))
            check(a.recv() is None, "closed after %r" % (bad,))
            a.close()
        check(d.api("GET", "/v1/jobs?all=1", expect=200) == before, "bad messages changed jobs")
        status, _ = d.request("GET", "/healthz")
        check(status == 200, "the daemon still serves")
        print("ok: mTLS refusals, registration, liveness in %.2f s, job start/finish, GPU fault, "
              "bad messages refused" % silent)


if __name__ == "__main__":
    run(main)
