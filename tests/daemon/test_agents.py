#!/usr/bin/python3
"""Node agents over mutual TLS against a real daemon, with test agents that
speak the protocol from its schema (agent_protocol.py): who may connect,
registration, liveness (silence, a closed connection: suspect at once, down
after the grace), a GPU count that differs from the topology, starts that
carry every node's GROUP_RANK and local ranks, node-scoped authority (no node
may report on another node's jobs or GPUs), and a table of hostile messages
generated from the schema: every one refused with an `error` naming its
field, on a connection that stays open, with the daemon up and its event log
unchanged.

usage: test_agents.py TOPO_SCHEDULER_BIN [TOPO_BIN]
"""

import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time

from agent_client import AgentConnection
from agent_protocol import Protocol
from harness import Daemon, Failure, check, run, serving, tiny_topology

CONFIG = ("heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\nlog_format = json\n"
          "agent_restart_grace_ms = 3000\n")
P = Protocol()


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
        time.sleep(0.02)
    raise Failure("timed out waiting for " + what)


def gpus(n=8):
    return [{"index": i, "model": "H100", "uuid": "GPU-test-%d" % i, "memory_mb": 81559}
            for i in range(n)]


def register(node, n_gpus=8, protocol=None):
    return P.agent("register", node=node, addr="127.0.0.1", gpus=gpus(n_gpus), ranks=[],
                   agent="test-agent", protocol=protocol or P.version)


class Agent:
    """A registered test agent; with beat=True a thread heartbeats every 50 ms."""

    def __init__(self, port, ca, cert, node, n_gpus=8, beat=False):
        self.node = node
        self.c = AgentConnection(port, ca, *cert)
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.c.send(register(node, n_gpus))
        self.registered = P.check_scheduler(self.c.recv())
        check(self.registered["type"] == "registered", "%s: %s" % (node, self.registered))
        if beat:
            threading.Thread(target=self._beat, daemon=True).start()

    def _beat(self):
        seq = 0
        while not self.stopped.wait(0.05):
            seq += 1
            try:
                self.send(P.agent("heartbeat", seq=seq))
            except OSError:
                return

    def send(self, message):
        with self.lock:
            self.c.send(message)

    def recv(self, timeout=10):
        """The next message; raises TimeoutError when none comes in time. The
        lock is taken per short read, so the heartbeat thread keeps beating."""
        deadline = time.time() + timeout
        while True:
            with self.lock:
                try:
                    return P.check_scheduler(self.c.recv(timeout=0.02))
                except TimeoutError:
                    pass
            if time.time() >= deadline:
                raise TimeoutError("%s: no message within %s s" % (self.node, timeout))
            time.sleep(0.005)

    def refused(self, message, field, what):
        """Sends a message that must be refused naming field."""
        self.send(message)
        reply = self.recv()
        check(reply["type"] == "error", "%s: expected an error, got %s" % (what, reply))
        check(reply["field"] == field,
              "%s: the error names %r, expected %r (%s)" % (what, reply["field"], field,
                                                            reply["message"]))
        return reply

    def close(self):
        self.stopped.set()
        with self.lock:
            self.c.close()


def last_seq(d):
    return d.api("GET", "/v1/cluster", expect=200)["last_seq"]


def main():
    binary = sys.argv[1]
    d = Daemon(binary, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-agents-")
    with serving(d, work):
        port = d.agent_port()
        ca = os.path.join(d.state_dir, "ca.pem")
        d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
              expect=200)
        certs = {n: issue(binary, d.state_dir, n, work) for n in ("n0", "n1", "n2", "n3")}
        other_state = os.path.join(work, "other-ca")
        os.makedirs(other_state)
        foreign = issue(binary, other_state, "n0", os.path.join(work, "foreign"))

        # ---- who may connect
        for name, cert in (("no certificate", None), ("another CA's certificate", foreign)):
            try:
                c = AgentConnection(port, ca, *(cert or (None, None)))
                c.send(register("n0"))
                reply = c.recv()
                raise Failure("%s: the daemon accepted the agent (%s)" % (name, reply))
            except (ssl.SSLError, ConnectionError, OSError):
                pass
        # A refused registration closes the connection.
        refusals = [
            ("another node's certificate", certs["n1"], register("n0"), "n1"),
            ("another protocol version", certs["n0"], register("n0", protocol=P.version + 1),
             "protocol"),
            ("a wrong type", certs["n0"], dict(register("n0"), gpus="eight"), "register.gpus"),
            ("an unknown node", issue(binary, d.state_dir, "n99", work), register("n99"),
             "not in the topology"),
        ]
        for what, cert, message, needle in refusals:
            c = AgentConnection(port, ca, *cert)
            c.send(message)
            reply = P.check_scheduler(c.recv())
            check(reply["type"] == "error" and needle in reply["message"],
                  "%s: %s" % (what, reply))
            check(c.recv() is None, "%s: the connection closes after the refusal" % what)
            c.close()
        check(node_state(d, "n0")["state"] == "down", "n0 must stay down")

        # ---- liveness: silence takes a registered node down
        a0 = Agent(port, ca, certs["n0"], "n0")
        check(a0.registered["heartbeat_interval_ms"] == 200, str(a0.registered))
        check(node_state(d, "n0")["state"] == "up", "n0 up after registering")
        t0 = time.time()
        wait_for(lambda: node_state(d, "n0")["state"] == "down", 5, "n0 to go down")
        silent = time.time() - t0
        check(silent < 0.6 + 0.6, "down after %.2f s; the limit is 3 x 200 ms" % silent)
        a0.close()

        # A closed connection: suspect at once (no restart target), down after
        # the grace of 2 intervals.
        a0 = Agent(port, ca, certs["n0"], "n0")
        check(node_state(d, "n0")["state"] == "up", "n0 up again")
        a0.close()
        wait_for(lambda: node_state(d, "n0")["state"] == "suspect", 1, "n0 suspect at once")
        wait_for(lambda: node_state(d, "n0")["state"] == "down", 2, "n0 down after the grace")

        # An agent that says `leaving` first (a restart that leaves its ranks
        # running): suspect at once, still suspect well past 2 intervals,
        # down only after agent_restart_grace_ms (3 s here) without a
        # register, with a reason that says so.
        a0 = Agent(port, ca, certs["n0"], "n0")
        a0.send(P.agent("leaving"))
        a0.close()
        t0 = time.time()
        wait_for(lambda: node_state(d, "n0")["state"] == "suspect", 1, "n0 suspect at once")
        time.sleep(max(0.0, t0 + 1.0 - time.time()))
        check(node_state(d, "n0")["state"] == "suspect",
              "n0 leaving: still suspect after 1 s (5 intervals): %s" % node_state(d, "n0"))
        wait_for(lambda: node_state(d, "n0")["state"] == "down", 6, "n0 down after the restart grace")
        check(time.time() - t0 >= 2.9, "down after %.2f s, before the 3-s grace" % (time.time() - t0))
        check("after it said it was leaving" in node_state(d, "n0").get("reason", ""),
              "the reason: %s" % node_state(d, "n0"))
        # Back within the grace: up again, and it stays up (it beats).
        a0 = Agent(port, ca, certs["n0"], "n0")
        a0.send(P.agent("leaving"))
        a0.close()
        wait_for(lambda: node_state(d, "n0")["state"] == "suspect", 1, "n0 suspect at once")
        a0 = Agent(port, ca, certs["n0"], "n0", beat=True)
        check(node_state(d, "n0")["state"] == "up", "n0 up again: %s" % node_state(d, "n0"))
        time.sleep(3.5)
        check(node_state(d, "n0")["state"] == "up",
              "n0 stays up past the grace: %s" % node_state(d, "n0"))
        a0.close()
        # Without `leaving` on the new connection, a close is the short grace again.
        wait_for(lambda: node_state(d, "n0")["state"] == "down", 2, "n0 down after 2 intervals")
        # A heartbeat after `leaving` takes it back: the agent stayed.
        a0 = Agent(port, ca, certs["n0"], "n0")
        a0.send(P.agent("leaving"))
        a0.send(P.agent("heartbeat", seq=1))
        a0.close()
        wait_for(lambda: node_state(d, "n0")["state"] == "down", 2,
                 "n0 down after 2 intervals: a heartbeat took the leaving back")

        # An agent whose GPU count differs from the topology leaves its node
        # drained with that reason.
        a2 = Agent(port, ca, certs["n2"], "n2", n_gpus=4)
        n2 = node_state(d, "n2")
        check(n2["state"] == "drained" and "4 GPUs" in n2.get("reason", ""), "n2: %s" % n2)
        a2.close()

        # ---- starts carry each node's part; a job finishes when every rank exits 0
        agents = {n: Agent(port, ca, certs[n], n, beat=True) for n in ("n0", "n1", "n3")}

        job = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "one-node"},
                                         "command": ["/bin/sh", "-c", "exec torchrun"],
                                         "launch": "node", "env": {"NCCL_DEBUG": "INFO"},
                                         "chdir": "/srv/run", "output": "out-%j-%r.log"},
                    expect=201)
        check(job["state"] == "running", "job starts: %s" % job)
        # The node that runs it gets exactly one start.
        starts = {}
        for name, a in agents.items():
            try:
                starts[name] = a.recv(timeout=0.5)
            except TimeoutError:
                pass
        check(len(starts) == 1, "one start for a one-node job: %s" % starts)
        (runner, start), = starts.items()
        check(start["type"] == "start" and start["job"] == job["id"], str(start))
        check(start["group_rank"] == 0 and start["group_world_size"] == 1, str(start))
        check([r["local_rank"] for r in start["ranks"]] == list(range(8)), str(start))
        check([r["rank"] for r in start["ranks"]] == list(range(8)), str(start))
        check(start["unix_user"] == "admin", "the submitter's account: %s" % start["unix_user"])
        # How the processes start travels as submitted (docs/agent-protocol.md).
        check(start["command"] == ["/bin/sh", "-c", "exec torchrun"] and start["launch"] == "node"
              and start["env"] == {"NCCL_DEBUG": "INFO"} and start["working_dir"] == "/srv/run"
              and start["output"] == "out-%j-%r.log" and start["error"] == "", str(start))
        check(20000 <= start["master_port"] < 32000, "master port %d" % start["master_port"])
        for r in range(8):
            agents[runner].send(P.agent("rank_exited", job=job["id"], rank=r, restart_count=0,
                                        exit_code=0, signal=0, status_known=True))
        wait_for(lambda: d.api("GET", "/v1/jobs/%d" % job["id"], expect=200)["state"] ==
                 "completed", 5, "the job to complete")

        # A two-node job: distinct GROUP_RANKs, contiguous ranks per node.
        big = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "two-nodes",
                                                  "parallelism": {"tp": 4, "pp": 2}},
                                         "command": ["true"]},
                    expect=201)
        check(big["state"] == "running", "two-node job starts: %s" % big)
        starts = {}
        for name, a in agents.items():
            try:
                starts[name] = a.recv(timeout=0.5)
            except TimeoutError:
                pass
        check(len(starts) == 2, "two starts: %s" % list(starts))
        by_group = sorted(starts.values(), key=lambda m: m["group_rank"])
        check([m["group_rank"] for m in by_group] == [0, 1], "GROUP_RANK 0 and 1")
        for g, m in enumerate(by_group):
            check(m["group_world_size"] == 2 and m["world_size"] == 16, str(m))
            check([r["rank"] for r in m["ranks"]] == list(range(8 * g, 8 * g + 8)),
                  "node %d holds ranks %d-%d: %s" % (g, 8 * g, 8 * g + 7, m["ranks"]))
            check(m["master_port"] == by_group[0]["master_port"], "one master port")
        (on_a, on_b) = [n for n, m in sorted(starts.items(), key=lambda kv: kv[1]["group_rank"])]
        outsider = [n for n in agents if n not in starts][0]
        jid = big["id"]
        before_job = d.api("GET", "/v1/jobs/%d" % jid, expect=200)

        # ---- node-scoped authority: refused, audited, nothing changes
        seq0 = last_seq(d)
        o = agents[outsider]
        o.refused(P.agent("rank_exited", job=jid, rank=0, restart_count=0, exit_code=1, signal=0,
                          status_known=True), "rank_exited.job", "exit of another node's job")
        o.refused(P.agent("checkpoint", job=jid, step=2000000, tier="persistent"),
                  "checkpoint.job", "checkpoint of another node's job")
        o.refused(P.agent("launch_failed", job=jid, restart_count=0, reason="x", permanent=True),
                  "launch_failed.job", "launch failure of another node's job")
        agents[on_b].refused(P.agent("rank_exited", job=jid, rank=0, restart_count=0, exit_code=1,
                                     signal=0, status_known=True),
                             "rank_exited.rank", "exit of a rank that runs on the other node")
        o.refused(P.agent("gpu_event", gpu=8, kind="xid", code=79), "gpu_event.gpu",
                  "a GPU the node does not have")
        o.refused(P.agent("rank_exited", job=987654, rank=0, restart_count=0, exit_code=0, signal=0,
                          status_known=True), "rank_exited.job", "an unknown job")
        o.refused(P.agent("logs", req=424242, offset=0, next_offset=0, size=0, data_base64=""),
                  "logs.req", "an answer to no request")
        check(last_seq(d) == seq0, "authority refusals logged no event")
        after_job = d.api("GET", "/v1/jobs/%d" % jid, expect=200)
        check(after_job["state"] == "running" and
              after_job.get("checkpoint_step") == before_job.get("checkpoint_step"),
              "the job is untouched: %s" % after_job)
        audit = d.api("GET", "/v1/audit?after=0&limit=1000", expect=200)["audit"]
        refused = [a for a in audit if a["action"] == "agent.refused" and
                   a["actor"] == "agent:" + outsider]
        check(refused, "the outsider's refusals are audited")

        # ---- the hostile table, generated from the schema
        bases = [
            P.agent("heartbeat", seq=1),
            P.agent("gpu_event", gpu=3, kind="xid", code=79),
            P.agent("rank_exited", job=jid, rank=0, restart_count=0, exit_code=0, signal=0,
                    status_known=True),
            P.agent("checkpoint", job=jid, step=5, tier="persistent"),
            P.agent("drained"),
            P.agent("leaving"),
            P.agent("logs", req=1, offset=0, next_offset=1, size=1, data_base64="eA=="),
            P.agent("launch_failed", job=jid, restart_count=0, reason="no account",
                    permanent=True),
            P.agent("started", job=jid, restart_count=0),
            P.agent("start_waiting", job=jid, restart_count=0, wait_ms=60000,
                    reason="copying checkpoint step 5 onto the node"),
        ]
        a = agents[on_a]
        seq0 = last_seq(d)
        cases = 0
        for base in bases:
            for what, message, field in P.hostile(base):
                a.refused(message, field, what)
                cases += 1
        for raw, what in (("not json", "not JSON"), ("[1, 2]", "an array"),
                          ('{"type": "warp"}', "an unknown type"), ('{"seq": 1}', "no type")):
            reply = a.refused(raw, "type" if "type" in raw or "seq" in raw else "", what)
            cases += 1
        check(last_seq(d) == seq0, "hostile messages changed the event log")
        check(d.api("GET", "/v1/jobs/%d" % jid, expect=200)["state"] == "running",
              "the job still runs")
        check(node_state(d, on_a)["state"] == "up", "the node is still up")
        status, _ = d.request("GET", "/healthz")
        check(status == 200 and d.proc.poll() is None, "the daemon still serves")
        metrics = d.request("GET", "/metrics", token=d.admin_token)[1]
        check("topo_agent_messages_refused_total" in metrics, "refusals are counted in /metrics")

        # ---- a permanent launch failure fails the job with the reason
        agents[on_a].send(P.agent("launch_failed", job=jid, restart_count=0,
                                  reason="no Unix account 'admin' on node " + on_a,
                                  permanent=True))
        wait_for(lambda: d.api("GET", "/v1/jobs/%d" % jid, expect=200)["state"] == "failed", 5,
                 "the job to fail")
        failed = d.api("GET", "/v1/jobs/%d" % jid, expect=200)
        check("no Unix account" in failed["reason"], "the reason says why: %s" % failed["reason"])
        # ---- a failed GPU keeps its node drained through `topo resume`, which says why
        agents[on_a].send(P.agent("gpu_event", gpu=2, kind="xid", code=79))
        wait_for(lambda: node_state(d, on_a)["state"] in ("drained", "draining"), 5,
                 "the node with a failed GPU to drain")
        env = dict(os.environ, HOME=work, TOPO_SERVER=d.url,
                   TOPO_CA=os.path.join(d.state_dir, "ca.pem"), TOPO_TOKEN=d.admin_token)
        p = subprocess.run([sys.argv[2], "resume", on_a], env=env, capture_output=True,
                           text=True, timeout=30)
        check(p.returncode == 6 and ("%s stays drain" % on_a) in p.stderr
              and "GPU 2 failed" in p.stderr, "topo resume of a node with a failed GPU: %d %r"
              % (p.returncode, p.stderr))
        for x in agents.values():
            x.close()
        # The daemon's log has one line per state change (log_format = json
        # in this test's config: every line is one JSON object).
        records = []
        for line in d.log_all().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        msgs = [r.get("msg", "") for r in records]
        for needle in ("agent n0 registered", "node n0 suspect: agent disconnected",
                       "node n0 down: agent", "job %d started on 1 node" % job["id"],
                       "job %d failed: cannot start" % jid, "node n2 drained: agent reports 4 GPUs"):
            check(any(needle in m for m in msgs), "the log says %r" % needle)
        check(all(r.get("level") in ("debug", "info", "warn", "error") for r in records),
              "levels on every record")
        print("ok: mTLS and registration refusals, liveness in %.2f s, suspect on close, GPU "
              "count drain, starts with GROUP_RANKs, authority refusals audited, %d hostile "
              "messages refused by field, permanent launch failure" % (silent, cases))


if __name__ == "__main__":
    run(main)
