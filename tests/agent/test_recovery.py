#!/usr/bin/python3
"""Recovery with real agents (`topo-agent --simulate`: real AgentCores over
real mutual-TLS WebSockets) against a real topo-scheduler on loopback.

pause        the simulator process is stopped (SIGSTOP) until every one of its
             nodes is down for silence, then continued (SIGCONT): heartbeats
             resume on the same connections and bring the nodes back up, with
             no new registration.

usage: test_recovery.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN (pause|all)
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


def main():
    sched_bin, agent_bin, which = sys.argv[1], sys.argv[2], sys.argv[4]
    tests = {"pause": test_pause}
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
