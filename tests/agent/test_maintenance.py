#!/usr/bin/python3
"""A maintenance reservation drains its nodes in time, through real simulated
agents (`topo-agent --simulate 64`) and a real topo-scheduler on loopback.

A 32-GPU job runs on four nodes with a time limit past the reservation's
start. `preempt_grace_s` (2 s here) before the start the scheduler asks the job
to checkpoint, and rank 0's agent stores one; at the start the job is requeued
and restarts on four other nodes from that checkpoint (restart_count 1, the
stored step): it never fails and never runs on the reserved nodes inside the
window. A job that ends before the start is left alone and keeps its nodes.

usage: test_maintenance.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN
Standard library only (/usr/bin/python3).
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from harness import check  # noqa: E402
from test_simulate import NODES, Simulator, run_simulated, topology, wait_for  # noqa: E402

CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\npreempt_grace_s = 2\n"


def nodes_of(d, jid):
    return sorted({r["node"] for r in d.api("GET", "/v1/jobs/%d" % jid, expect=200)["ranks"]})


def test(d, agent_bin, work):
    d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(topology())}, expect=200)
    sim = Simulator(agent_bin, d, os.path.join(work, "simulator.log"))
    try:
        wait_for(lambda: sim.find(ev="ready"), 20, "the simulator to start:\n" + sim.log())
        wait_for(lambda: all(n["state"] == "up" for n in
                             d.api("GET", "/v1/nodes", expect=200)["nodes"]), 30,
                 "all %d simulated nodes to come up" % NODES)
        big = d.api("POST", "/v1/jobs", {"spec": {"gpus": 32, "parallelism": {"tp": 8}},
                                         "command": ["true"], "time_limit_s": 3600}, expect=201)
        jid = big["id"]
        check(big["state"] == "running", "the job runs: %s" % big)
        held = nodes_of(d, jid)
        wait_for(lambda: len(sim.find(ev="start", job=jid, restart_count=0)) == 4, 10,
                 "the job's start on its 4 nodes")
        # A short job on another node, ending before the window: left alone.
        short = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"],
                                           "time_limit_s": 4}, expect=201)
        check(short["state"] == "running", "the short job runs: %s" % short)
        start_ms = int(time.time() * 1000) + 6000
        reserved = held + nodes_of(d, short["id"])
        d.api("POST", "/v1/reservations",
              {"name": "maint", "nodes": ",".join(reserved), "start_ms": start_ms,
               "duration_s": 3600, "maintenance": True}, expect=201)
        # The checkpoint, asked a grace before the start and stored.
        ck = wait_for(lambda: sim.find(ev="ckpt", job=jid), 15, "the maintenance checkpoint")[-1]
        asked_at = time.time() * 1000
        check(asked_at < start_ms, "the checkpoint came before the window (%d ms early)" %
              (start_ms - asked_at))
        wait_for(lambda: d.api("GET", "/v1/jobs/%d" % jid, expect=200)["checkpoint_step"] ==
                 ck["step"], 5, "checkpoint step %d stored" % ck["step"])
        # At the start: requeued, and restarted elsewhere from that step.
        restarted = wait_for(lambda: (lambda s: s if len(s) == 4 else None)(
            sim.find(ev="start", job=jid, restart_count=1)), 20, "the restart on 4 other nodes")
        check(time.time() * 1000 >= start_ms - 200, "it moved at the window's start, not before")
        moved = sorted(e["node"] for e in restarted)
        check(not set(moved) & set(reserved), "restarted off the reserved nodes: %s" % moved)
        check(all(e["checkpoint_step"] == ck["step"] for e in restarted),
              "from step %d: %s" % (ck["step"], restarted))
        view = d.api("GET", "/v1/jobs/%d" % jid, expect=200)
        check(view["state"] == "running" and view["restarts"] == 1 and
              nodes_of(d, jid) == moved, "running on the new nodes, restarts 1: %s" % view)
        states = [e.get("state") for e in view["history"]]
        check("failed" not in states, "never failed: %s" % states)
        # The short job was not moved: it ended by its own limit.
        check(not sim.find(ev="start", job=short["id"], restart_count=1),
              "the short job was not restarted")
        sim.send("quit")
        sim.proc.wait(timeout=10)
        print("ok: job %d on %s checkpointed at step %d before maintenance and restarted on %s" %
              (jid, held, ck["step"], moved))
    except Exception:
        print("---- simulator log\n" + sim.log(), file=sys.stderr)
        raise
    finally:
        sim.kill()


if __name__ == "__main__":
    run_simulated(test, CONFIG, "topo-maintenance-test-")
