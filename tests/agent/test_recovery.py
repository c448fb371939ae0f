#!/usr/bin/python3
"""Recovery with real agents (`topo-agent --simulate`: real AgentCores over
real mutual-TLS WebSockets) against a real topo-scheduler on loopback.

pause        the simulator process is stopped (SIGSTOP) until every one of its
             nodes is down for silence, then continued (SIGCONT): heartbeats
             resume on the same connections and bring the nodes back up, with
             no new registration.
attribution  a job on two nodes; a rank on one node exits with status 1 and,
             just after, the agent of the other node (rank 0's) is killed. The
             rank's exit is part of the lost node's incident: the job restarts
             at once (no application-failure backoff), its reason and its
             incident name the lost node, and no failure is counted toward
             max_app_failures.

usage: test_recovery.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN (pause|attribution|all)
Standard library only (/usr/bin/python3).
"""

import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run, tiny_topology  # noqa: E402
from test_simulate import Simulator, wait_for  # noqa: E402

CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"


def nodes(d):
    return {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}


def job(d, jid):
    return d.api("GET", "/v1/jobs/%d" % jid, expect=200)


def start_sim(d, agent_bin, work, count):
    d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
          expect=200)
    sim = Simulator(agent_bin, d, os.path.join(work, "simulator.log"), count)
    wait_for(lambda: sim.find(ev="ready"), 20, "the simulator to start:\n" + sim.log())
    wait_for(lambda: all(n["state"] == "up" for n in nodes(d).values()), 30,
             "all %d simulated nodes to come up" % count)
    return sim


def test_pause(d, agent_bin, work):
    sim = start_sim(d, agent_bin, work, 8)
    try:
        sim.send("status")
        before = wait_for(lambda: sim.find(ev="status"), 5, "the status event")[-1]
        os.kill(sim.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.time()
            wait_for(lambda: all(n["state"] == "down" for n in nodes(d).values()), 10,
                     "every node of the stopped simulator to go down")
            down = nodes(d)
            check(all("agent silent for" in n.get("reason", "") and "(connected)" in n["reason"]
                      for n in down.values()), "down for silence: %s" % down)
            # Stopped for at least 5 heartbeat limits, as a paused VM would be.
            time.sleep(max(0.0, t0 + 3.0 - time.time()))
        finally:
            os.kill(sim.proc.pid, signal.SIGCONT)
        t1 = time.time()
        wait_for(lambda: all(n["state"] == "up" for n in nodes(d).values()), 10,
                 "heartbeats on the same connections to bring every node back up")
        back = time.time() - t1
        sim.send("status")
        after = wait_for(lambda: sim.find(ev="status")[1:], 5, "the second status event")[-1]
        check(after["registered"] == before["registered"] and
              after.get("losses", 0) == before.get("losses", 0),
              "no connection was lost or registered again: %s -> %s" % (before, after))
        check(all(n.get("reason") == "heartbeat resumed" for n in nodes(d).values()),
              "the reason says why: %s" % nodes(d))
        print("ok: 8 nodes down for silence while stopped, up %.2f s after SIGCONT on the same "
              "connections" % back)
    except Exception:
        print("---- simulator log\n" + sim.log(), file=sys.stderr)
        raise
    finally:
        sim.kill()


def test_attribution(d, agent_bin, work):
    sim = start_sim(d, agent_bin, work, 8)
    try:
        jid = d.api("POST", "/v1/jobs", {"spec": {"gpus": 16, "name": "two-node",
                                                  "parallelism": {"tp": 8}},
                                         "command": ["true"]}, expect=201)["id"]
        info = job(d, jid)
        rank0 = info["ranks"][0]["node"]
        peer_rank = next(r for r in info["ranks"] if r["node"] != rank0)
        peer = peer_rank["node"]
        wait_for(lambda: len(sim.find(ev="start", job=jid, restart_count=0)) == 2, 10,
                 "the start on both nodes")
        # A collective fails on the peer as its partner vanishes: the peer's
        # rank exits first, then rank 0's node is lost.
        sim.send("exit %s %d %d 1" % (peer, jid, peer_rank["rank"]))
        wait_for(lambda: sim.find(ev="ack", cmd="exit %s %d %d 1" % (peer, jid, peer_rank["rank"])),
                 5, "the exit to be reported")
        sim.send("kill " + rank0)
        t0 = time.time()
        restarted = wait_for(lambda: (lambda s: s if len(s) >= 2 else None)(
            sim.find(ev="start", job=jid, restart_count=1)), 10, "the restart on two nodes")
        took = time.time() - t0
        check(took < 5.0, "restarted %.1f s after the loss: no application-failure backoff" % took)
        check(rank0 not in {e["node"] for e in restarted}, "off the lost node: %s" % restarted)
        j = job(d, jid)
        check(j["state"] == "running" and j["restarts"] == 1, "running again: %s" % j)
        check(rank0 in j["reason"] and "failure 1 of" not in j["reason"],
              "the reason names the lost node, not an application failure: %s" % j["reason"])
        incidents = j["incidents"]
        check(len(incidents) == 1, "one incident: %s" % incidents)
        check(incidents[0]["cause"] == "node_state_requested" and rank0 in incidents[0]["reason"]
              and "rank %d" % peer_rank["rank"] in incidents[0]["reason"],
              "the incident is the node's and names it and the rank: %s" % incidents[0])
        print("ok: rank %d's exit on %s before %s was lost is part of its incident; restarted in "
              "%.2f s" % (peer_rank["rank"], peer, rank0, took))
    except Exception:
        print("---- simulator log\n" + sim.log(), file=sys.stderr)
        raise
    finally:
        sim.kill()


def main():
    sched_bin, agent_bin, which = sys.argv[1], sys.argv[2], sys.argv[4]
    tests = {"pause": test_pause, "attribution": test_attribution}
    for name, fn in tests.items():
        if which not in (name, "all"):
            continue
        d = Daemon(sched_bin, config=CONFIG).start()
        work = tempfile.mkdtemp(prefix="topo-recovery-test-")
        ok = False
        try:
            fn(d, agent_bin, work)
            ok = True
        finally:
            if not ok:
                print(d.log(), file=sys.stderr)
            d.cleanup()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run(main)
