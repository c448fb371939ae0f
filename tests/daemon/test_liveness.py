#!/usr/bin/python3
"""A node's liveness is its agent's to prove, against a real daemon with test
agents that speak the protocol from its schema (agent_protocol.py):

- starts must be acknowledged: a run whose `start` a connected agent never
  answers with `started` is requeued after start_ack_timeout_s (an
  infrastructure failure, counted as a launch failure, never toward the
  failure limit), a node with no agent at all goes down, an acknowledged run
  keeps running, and a late `started` of the earlier run is ignored (no
  `error`, nothing refused);
- a node an admin resumed while its agent is gone goes down again;
- after a daemon restart every node that is not down gets the reconnect grace,
  whoever brought it up: resumed nodes without an agent go down and their
  jobs are recovered (no ghost jobs running until their time limit).

usage: test_liveness.py TOPO_SCHEDULER_BIN [TOPO_BIN]
"""

import json
import os
import sys
import tempfile
import time

from agent_protocol import Protocol
from harness import Daemon, Failure, check, run, serving, tiny_topology
from test_agents import Agent, issue, node_state, wait_for

CONFIG = ("heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\nlog_format = json\n"
          "start_ack_timeout_s = 10\npreemption = false\n")
P = Protocol()


def job(d, jid):
    return d.api("GET", "/v1/jobs/%d" % jid, expect=200)


def refused_total(d):
    text = d.request("GET", "/metrics", token=d.admin_token)[1]
    for line in str(text).splitlines():
        if line.startswith("topo_agent_messages_refused_total"):
            return float(line.split()[-1])
    return 0.0


def starts_of(agent, timeout):
    """Every `start` the agent receives within timeout, by job."""
    got = {}
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            m = agent.recv(timeout=0.1)
        except TimeoutError:
            continue
        if m["type"] == "start":
            got[m["job"]] = m
    return got


def acknowledged_starts(d, binary, work):
    """n0 acknowledges its start, n1 is connected but does not: one 8-GPU job
    on each. Then n2 is resumed with no agent at all and takes a third."""
    port = d.agent_port()
    ca = os.path.join(d.state_dir, "ca.pem")
    certs = {n: issue(binary, d.state_dir, n, work) for n in ("n0", "n1")}
    agents = {n: Agent(port, ca, certs[n], n, beat=True) for n in ("n0", "n1")}
    try:
        ids = [d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "j%d" % i},
                                          "command": ["true"]}, expect=201)["id"]
               for i in range(2)]
        placed = {job(d, jid)["ranks"][0]["node"]: jid for jid in ids}
        check(sorted(placed) == ["n0", "n1"], "one job per node: %s" % placed)
        t_start = time.time()
        got = starts_of(agents["n0"], 0.5)
        check(placed["n0"] in got, "n0 got its start: %s" % got)
        agents["n0"].send(P.agent("started", job=placed["n0"], restart_count=0))

        # The deadline: the run on n1 is requeued with the reason, and starts
        # again on n1 (the only free node); n1 stays up.
        wait_for(lambda: job(d, placed["n1"])["restarts"] == 1, 20,
                 "the unacknowledged run on n1 to be requeued")
        waited = time.time() - t_start
        check(waited >= 9.5, "requeued after %.1f s, before the 10-s deadline" % waited)
        incidents = job(d, placed["n1"])["incidents"]
        check(len(incidents) == 1 and incidents[0]["cause"] == "start_unacknowledged" and
              incidents[0]["requeued"] and
              "node n1's agent did not acknowledge its start within 10 s" in incidents[0]["reason"]
              and "do not count toward the failure limit" in incidents[0]["reason"],
              "the requeue names the node and the deadline: %s" % incidents)
        check(node_state(d, "n1")["state"] == "up", "n1 stays up: %s" % node_state(d, "n1"))
        check(job(d, placed["n0"])["state"] == "running" and job(d, placed["n0"])["restarts"] == 0,
              "the acknowledged run keeps running: %s" % job(d, placed["n0"]))

        # This time n1 answers, and its late answer to the first start is
        # ignored: no error, nothing refused. Another node's job is refused.
        again = starts_of(agents["n1"], 1.0)
        check(again.get(placed["n1"], {}).get("restart_count") == 1,
              "the restart on n1: %s" % again)
        # This restart waits on n1 (its checkpoint is copied first): n1 says
        # so and for how long, and the run is not requeued at the 10-s timeout.
        refused = refused_total(d)
        t_again = time.time()
        agents["n1"].send(P.agent("start_waiting", job=placed["n1"], restart_count=1,
                                  wait_ms=3000, reason="copying checkpoint step 2 onto the node"))
        agents["n1"].send(P.agent("started", job=placed["n1"], restart_count=0))
        try:
            reply = agents["n1"].recv(timeout=1.0)
            raise Failure("a late `started` was answered: %s" % reply)
        except TimeoutError:
            pass
        check(refused_total(d) == refused, "a late `started` is not a refusal")
        agents["n1"].refused(P.agent("started", job=placed["n0"], restart_count=0), "started.job",
                             "another node's job")
        agents["n1"].refused(P.agent("start_waiting", job=placed["n0"], restart_count=0,
                                     wait_ms=1000, reason="x"), "start_waiting.job",
                             "another node's job")

        # A node no agent ever registered for, resumed by an admin, takes a
        # job: nobody acknowledges it, the job is requeued and the node is
        # down (it takes no more work).
        d.api("POST", "/v1/nodes/resume", {"nodes": "n2"}, expect=200)
        ghost = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "ghost"},
                                           "command": ["true"]}, expect=201)["id"]
        check(job(d, ghost)["ranks"][0]["node"] == "n2", "the job went to n2: %s" % job(d, ghost))
        wait_for(lambda: node_state(d, "n2")["state"] == "down", 20, "agentless n2 to go down")
        check("no agent acknowledged the start of job %d" % ghost
              in node_state(d, "n2").get("reason", ""), "n2's reason: %s" % node_state(d, "n2"))
        g = job(d, ghost)
        check(g["state"] == "queued" and g["restarts"] == 1, "the ghost run is requeued: %s" % g)
        time.sleep(max(0.0, t_again + 11 - time.time()))
        check(job(d, placed["n1"])["state"] == "running" and job(d, placed["n1"])["restarts"] == 1,
              "a start that waits (start_waiting) outlives the 10-s timeout: %s" %
              job(d, placed["n1"]))
        agents["n1"].send(P.agent("started", job=placed["n1"], restart_count=1))
        time.sleep(max(0.0, t_again + 14 - time.time()))
        check(job(d, placed["n1"])["state"] == "running" and job(d, placed["n1"])["restarts"] == 1,
              "the acknowledged restart runs on past its deadline: %s" % job(d, placed["n1"]))
        print("ok: an unacknowledged start requeued after %.1f s, agentless n2 down, a late "
              "`started` ignored" % waited)
        for jid in list(placed.values()) + [ghost]:
            d.api("POST", "/v1/jobs/%d/cancel" % jid, {}, expect=200)
    finally:
        for a in agents.values():
            a.close()


def resumed_without_agent(d, binary, work):
    """n3's agent registers and leaves; n3 goes down; an admin resumes it:
    its agent must come back, or it is down again."""
    port = d.agent_port()
    ca = os.path.join(d.state_dir, "ca.pem")
    a3 = Agent(port, ca, issue(binary, d.state_dir, "n3", work), "n3")
    a3.close()
    wait_for(lambda: node_state(d, "n3")["state"] == "down", 5, "n3 down after its agent left")
    d.api("POST", "/v1/nodes/resume", {"nodes": "n3"}, expect=200)
    t0 = time.time()
    wait_for(lambda: node_state(d, "n3")["state"] == "down", 5,
             "resumed n3, whose agent is gone, to go down again")
    check("agent disconnected for" in node_state(d, "n3").get("reason", ""),
          "n3's reason: %s" % node_state(d, "n3"))
    print("ok: resumed n3 without its agent down again after %.2f s" % (time.time() - t0))


def restart_grace(d):
    """Nodes n4..n7 resumed by an admin, no agent ever; a job runs on two of
    them. After a daemon restart they get the reconnect grace (10 s) and go
    down; the job is requeued, not left running."""
    d.api("POST", "/v1/nodes/resume", {"nodes": "n[4-7]"}, expect=200)
    jid = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "ghost", "parallelism": {"tp": 8}},
                                     "command": ["true"]}, expect=201)["id"]
    check(job(d, jid)["state"] == "running", "the job runs: %s" % job(d, jid))
    d.stop()
    d.start()
    t0 = time.time()
    check(job(d, jid)["state"] == "running", "running right after the restart")
    wait_for(lambda: all(node_state(d, "n%d" % i)["state"] == "down" for i in range(4, 8)), 20,
             "n4..n7 to go down after the reconnect grace")
    gone = time.time() - t0
    check(gone >= 9.0, "down after %.1f s, before the 10-s grace" % gone)
    j = job(d, jid)
    check(j["state"] == "queued" and j["restarts"] == 1, "the job is requeued: %s" % j)
    print("ok: after a restart, agentless n4..n7 down in %.1f s and job %d requeued" % (gone, jid))


def main():
    binary = sys.argv[1]
    d = Daemon(binary, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-liveness-")
    with serving(d, work):
        d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
              expect=200)
        acknowledged_starts(d, binary, work)
        resumed_without_agent(d, binary, work)
        restart_grace(d)


if __name__ == "__main__":
    run(main)
