#!/usr/bin/python3
"""Failures never fail healthy jobs, against a real daemon with test agents
that speak the protocol from its schema (issue 12).

mass loss   288 agents register; six 320-GPU jobs with a spare node each
            (246 nodes) run and each stores a checkpoint; the connections of
            287 agents close at once (the process holding them stopped). The
            nodes turn suspect, then go down in batches
            (node_states_requested); no start or restart in the log ever
            names a node that was not up at that point, no job fails, and
            each waits in the queue with the reason. When the agents register
            again every job starts again, restart_count 1, from its newest
            checkpoint.
rank 127    with max_app_failures = 3 and a backoff of 1 s doubling: a rank
            exiting 127, every node of its job up through its attribution
            window (500 ms here), requeues the job to restart after 1 s, then
            2 s (the logged start is never earlier); a lost node in between
            restarts it at once and does not count; the third exit fails it
            with the status.
take node   a gang on 287 of the 288 nodes and an 8-GPU job on the last:
            a lost node of the gang is replaced by the small job's node in
            the same step (the small job is preempted and waits), and the
            small job starts again when the lost node is back.

usage: test_failures.py TOPO_SCHEDULER_BIN [TOPO_BIN]
"""

import json
import os
import subprocess
import sys
import tempfile
import threading

from agent_client import AgentConnection
from agent_protocol import Protocol
from harness import Daemon, check, run, serving, wait_for

CONFIG = ("heartbeat_interval_ms = 500\nmissed_heartbeats_down = 3\n"
          "max_app_failures = 3\nrestart_backoff_initial_s = 1\nrestart_backoff_max_s = 4\n"
          "attribution_window_ms = 500\n")
P = Protocol()
NODES = 288


def topology():
    """6 spines x 6 leaves x 8 nodes of 8 GPUs: n0..n287."""
    domains = []
    for s in range(6):
        children = []
        for l in range(6):
            leaf = 6 * s + l
            children.append({"name": "leaf%d" % leaf,
                             "nodes": ["n%d" % (8 * leaf + i) for i in range(8)]})
        domains.append({"name": "spine%d" % s, "children": children})
    return {"version": 1, "name": "c288", "tiers": ["node", "leaf", "spine"], "hbd": "node",
            "gpus_per_node": 8, "gpu_model": "H100", "domains": domains}


class Fleet:
    """Registered test agents by node; one thread heartbeats them all and
    discards what the scheduler sends (starts, stops)."""

    def __init__(self, d, certs, interval_s):
        self.d, self.certs, self.interval_s = d, certs, interval_s
        self.conns, self.lock, self.stopped = {}, threading.Lock(), threading.Event()
        self.port = d.agent_port()
        self.ca = os.path.join(d.state_dir, "ca.pem")
        threading.Thread(target=self._beat, daemon=True).start()

    def connect(self, node):
        c = AgentConnection(self.port, self.ca, *self.certs[node])
        gpus = [{"index": i, "model": "H100", "uuid": "GPU-%s-%d" % (node, i), "memory_mb": 81559}
                for i in range(8)]
        c.send(P.agent("register", node=node, addr="127.0.0.1", gpus=gpus, ranks=[],
                       agent="test-agent", protocol=P.version))
        reply = P.check_scheduler(c.recv(timeout=10))
        check(reply["type"] == "registered", "%s: %s" % (node, reply))
        with self.lock:
            self.conns[node] = c

    def drop(self, nodes):
        with self.lock:
            for n in nodes:
                self.conns.pop(n).close()

    def send(self, node, message):
        with self.lock:
            self.conns[node].send(message)

    def stop(self):
        self.stopped.set()
        with self.lock:
            for c in self.conns.values():
                c.close()

    def _beat(self):
        seq = 0
        while not self.stopped.wait(self.interval_s):
            seq += 1
            beat = P.agent("heartbeat", seq=seq)  # checked once, sent to all
            with self.lock:
                for c in self.conns.values():
                    try:
                        c.send(beat)
                        c.sock.setblocking(False)
                        try:
                            while c.sock.recv(65536):
                                pass
                        except OSError:  # nothing more to read now
                            pass
                        c.sock.settimeout(10)
                    except OSError:
                        pass


def issue(binary, state_dir, node, out):
    subprocess.run([binary, "--state-dir", state_dir, "ca", "issue", "--node", node, "--out", out],
                   check=True, capture_output=True)
    return os.path.join(out, node + ".pem"), os.path.join(out, node + "-key.pem")


def nodes(d):
    return {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}


def jobs(d):
    return {j["id"]: j for j in d.api("GET", "/v1/jobs?all=1", expect=200)["jobs"]}


def events(d):
    return d.api("GET", "/v1/events?after=0&limit=10000", expect=200)["events"]


def starts_on_unhealthy_nodes(log):
    """Starts and restarts in the log that name a node whose last logged
    state before them was not up."""
    state, bad = {}, []
    for e in log:
        for c in e["commands"]:
            if c["type"] == "node_state_changed":
                state[c["node"]] = c["state"]
            elif c["type"] in ("start_job", "restart_job"):
                used = {n for n, _ in c["ranks"]} | set(c["spares"])
                bad += [(e["seq"], c["type"], c["id"], n, state.get(n)) for n in sorted(used)
                        if state.get(n) != "up"]
    return bad


def mass_loss(d, fleet):
    ids = [d.api("POST", "/v1/jobs", {"spec": {"gpus": 320, "name": "big%d" % i, "spares": 1,
                                               "parallelism": {"tp": 8}},
                                      "command": ["true"]}, expect=201)["id"]
           for i in range(6)]
    js = jobs(d)
    check(all(js[i]["state"] == "running" for i in ids), "six jobs run: %s" % js)
    steps, survivor = {}, None
    for k, i in enumerate(ids):
        info = d.api("GET", "/v1/jobs/%d" % i, expect=200)
        steps[i] = 1000 * (k + 1)
        fleet.send(info["ranks"][0]["node"],
                   P.agent("checkpoint", job=i, step=steps[i], tier="persistent"))
        survivor = info["ranks"][-1]["node"]
    wait_for(lambda: all(jobs(d)[i]["checkpoint_step"] == steps[i] for i in ids), 10,
             "six checkpoints stored")

    lost = ["n%d" % i for i in range(NODES) if "n%d" % i != survivor]
    fleet.drop(lost)
    wait_for(lambda: sum(n["state"] == "down" for n in nodes(d).values()) == len(lost), 20,
             "287 nodes down")
    js = jobs(d)
    for i in ids:
        check(js[i]["state"] == "queued", "job %d waits: %s (%s)" % (i, js[i]["state"],
                                                                      js[i]["reason"]))
        check("287 nodes down" in js[i]["reason"] and
              "restarts from checkpoint step %d" % steps[i] in js[i]["reason"],
              "job %d says why it waits and how it restarts: %s" % (i, js[i]["reason"]))
    log = events(d)
    batches = [len(e["event"]["requests"]) for e in log
               if e["event"]["type"] == "node_states_requested"]
    check(batches, "the liveness check logged node_states_requested batches")
    bad = starts_on_unhealthy_nodes(log)
    check(not bad, "restarts onto nodes that were not up (seq, type, job, node, state): %s"
          % bad[:10])
    reason = js[ids[0]]["reason"]

    for n in lost:
        fleet.connect(n)
    wait_for(lambda: all(jobs(d)[i]["state"] == "running" for i in ids), 30,
             "six jobs running again")
    log = events(d)
    check(not starts_on_unhealthy_nodes(log), "a start on a node that was not up")
    starts = {c["id"]: c for e in log for c in e["commands"]
              if c["type"] == "start_job" and c["restart_count"] == 1}
    for i in ids:
        check(i in starts and starts[i]["checkpoint_step"] == steps[i],
              "job %d starts again from step %d: %s" % (i, steps[i], starts.get(i)))
    check(not any(j["state"] == "failed" for j in jobs(d).values()), "no job failed")
    return "287 of 288 nodes lost in batches of %s: no job failed (%r); all six restarted " \
           "from their checkpoints, never onto a node that was not up" % (batches, reason)


def rank_127(d, fleet):
    jid = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "exits-127",
                                              "parallelism": {"tp": 8}},
                                     "command": ["true"]}, expect=201)["id"]

    def job():
        return d.api("GET", "/v1/jobs/%d" % jid, expect=200)

    def exit_127():
        info = job()
        check(info["state"] == "running", "the job runs: %s" % info)
        fleet.send(info["ranks"][3]["node"],
                   P.agent("rank_exited", job=jid, rank=3, restart_count=info["restarts"],
                           exit_code=127, signal=0, status_known=True))

    def logged(pred):
        return [e for e in events(d) if pred(e)]

    reasons = []
    for k, delay_ms in ((1, 1000), (2, 2000)):
        exit_127()
        queued = wait_for(lambda: (lambda j: j if j["state"] == "queued" else None)(job()), 5,
                          "failure %d requeues the job" % k)
        want = "restarting in %d s after rank 3 exited with status 127 (failure %d of 3)" % (
            delay_ms // 1000, k)
        check(want in queued["reason"], "reason %r lacks %r" % (queued["reason"], want))
        reasons.append(queued["reason"])
        wait_for(lambda: job()["state"] == "running", 10, "the restart after the backoff")
        failed_at = logged(lambda e: e["event"]["type"] == "rank_exited" and
                           e["event"]["id"] == jid)[-1]["time_ms"]
        started_at = logged(lambda e: any(c["type"] == "start_job" and c["id"] == jid
                                          for c in e["commands"]))[-1]["time_ms"]
        check(started_at - failed_at >= delay_ms,
              "restart %d after %d ms; the backoff is %d ms" % (k, started_at - failed_at,
                                                                delay_ms))
        if k == 1:
            lost = job()["ranks"][0]["node"]
            before = job()["restarts"]
            fleet.drop([lost])
            moved = wait_for(lambda: (lambda j: j if j["restarts"] == before + 1 and
                                      j["state"] == "running" else None)(job()), 10,
                             "the restart off the lost node")
            check(moved["ranks"][0]["node"] != lost, "moved off %s: %s" % (lost, moved["ranks"]))
            fleet.connect(lost)
    exit_127()
    failed = wait_for(lambda: (lambda j: j if j["state"] == "failed" else None)(job()), 5,
                      "the third failure fails the job")
    check("rank 3 exited with status 127" in failed["reason"] and
          "failure 3 of 3" in failed["reason"], "the failure says why: %s" % failed["reason"])
    return "rank 127: %s | %s | failed: %s" % (reasons[0], reasons[1], failed["reason"])


def take_node(d, fleet):
    """A gang on all but one node and an 8-GPU job on the last: a lost node
    of the gang has no free replacement, so the small job's node takes its
    place (docs/architecture.md, Recovery by preemption), in one step."""
    big = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8 * (NODES - 1), "name": "nearly-all",
                                              "parallelism": {"tp": 8}},
                                     "command": ["true"]}, expect=201)["id"]
    small = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "small",
                                                "parallelism": {"tp": 8}},
                                       "command": ["true"]}, expect=201)["id"]
    def job(jid):
        return d.api("GET", "/v1/jobs/%d" % jid, expect=200)

    b, s = job(big), job(small)
    check(b["state"] == "running" and s["state"] == "running",
          "both run: %s / %s" % (b["reason"], s["reason"]))
    taken = s["ranks"][0]["node"]
    lost = b["ranks"][0]["node"]
    fleet.drop([lost])
    moved = wait_for(lambda: (lambda j: j if j["restarts"] == 1 and j["state"] == "running"
                              else None)(job(big)), 15, "the gang's restart")
    used = {r["node"] for r in moved["ranks"]}
    check(taken in used and lost not in used,
          "the gang moved onto %s and off %s: %s" % (taken, lost, sorted(used)[:4]))
    check(("on nodes of preempted job(s) %d" % small) in moved["reason"],
          "its reason names the job it took the node of: %s" % moved["reason"])
    check(job(small)["state"] == "queued", "the small job waits: %s" % job(small)["reason"])
    # One logged step stops the small job and restarts the gang, saying why.
    step = [e for e in events(d) if any(c["type"] == "restart_job" and c["id"] == big
                                        for c in e["commands"])][-1]
    kinds = [(c["type"], c.get("id"), c.get("state")) for c in step["commands"]]
    check(("job_state_changed", small, "preempting") in kinds and ("stop_job", small, None) in kinds,
          "the same step stops job %d: %s" % (small, kinds))
    said = [c["reason"] for c in step["commands"]
            if c["type"] == "job_state_changed" and c["id"] == small and c["state"] == "preempting"]
    check(said and said[0].startswith("preempted for job %d" % big), "why: %s" % said)
    fleet.connect(lost)
    wait_for(lambda: job(small)["state"] == "running", 15,
             "the small job to start again once the node is back")
    return "take node: gang %d restarted on job %d's node %s in the step that lost %s" % (
        big, small, taken, lost)


def main():
    binary = sys.argv[1]
    d = Daemon(binary, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-failures-")
    fleet = None
    with serving(d, work):
        try:
            d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(topology())},
                  expect=200)
            certs = {"n%d" % i: issue(binary, d.state_dir, "n%d" % i, work) for i in range(NODES)}
            fleet = Fleet(d, certs, 0.15)
            for i in range(NODES):
                fleet.connect("n%d" % i)
            wait_for(lambda: all(n["state"] == "up" for n in nodes(d).values()), 30,
                     "288 nodes up")
            print("ok: " + mass_loss(d, fleet))
            for j in jobs(d).values():
                if j["state"] not in ("completed", "failed", "cancelled", "rejected"):
                    d.api("POST", "/v1/jobs/%d/cancel" % j["id"], {}, expect=200)
            print("ok: " + rank_127(d, fleet))
            for j in jobs(d).values():
                if j["state"] not in ("completed", "failed", "cancelled", "rejected"):
                    d.api("POST", "/v1/jobs/%d/cancel" % j["id"], {}, expect=200)
            print("ok: " + take_node(d, fleet))
        finally:
            if fleet is not None:
                fleet.stop()


if __name__ == "__main__":
    run(main)
