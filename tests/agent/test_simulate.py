#!/usr/bin/python3
"""`topo-agent --simulate 64` against a real topo-scheduler on loopback.

64 simulated nodes (n0..n63, one process, one TLS WebSocket and one minted
certificate each) register and come up; a 32-GPU tp-8 job with a spare runs on
four of them; a checkpoint reported by rank 0's node is stored; every node is
given two scheduler addresses of which the first refuses (HA replicas); `kill` of one of
the job's nodes brings that node down within 3 heartbeat intervals (200 ms, with
slack for a loaded machine) and the job restarts with restart_count 1 from the
stored step on four nodes without it; an XID 79 fails a GPU; `revive` brings the
node back; `quit` ends the process with status 0.

usage: test_simulate.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN
Standard library only (/usr/bin/python3).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, wait_for  # noqa: E402

CONFIG = "heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"
NODES = 64


def topology():
    """2 spines x 4 leaves x 8 nodes of 8 GPUs: n0..n63."""
    domains = []
    for s in range(2):
        children = []
        for l in range(4):
            leaf = 4 * s + l
            children.append({"name": "leaf%d" % leaf, "nodes": ["n%d" % (8 * leaf + i) for i in range(8)]})
        domains.append({"name": "spine%d" % s, "children": children})
    return {"version": 1, "name": "sim64", "tiers": ["node", "leaf", "spine"], "hbd": "node",
            "gpus_per_node": 8, "gpu_model": "H100", "domains": domains}


class Simulator:
    def __init__(self, binary, daemon, log_path, count=NODES, prefix="n"):
        self.log_path = log_path
        self.events = []
        self.lock = threading.Lock()
        # Two scheduler addresses, as for HA replicas (docs/ha.md): the first
        # refuses every connection, so each node goes on to the second.
        with open(os.path.join(daemon.state_dir, "agent-endpoint")) as f:
            endpoint = f.read().strip()
        self.proc = subprocess.Popen(
            [binary, "--simulate", str(count), "--node-prefix", prefix, "--scheduler-state-dir",
             daemon.state_dir, "--server", "wss://127.0.0.1:1/v1/agent," + endpoint,
             "--stats-every-s", "0", "--step-ms", "100"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log_path, "ab"))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                e = {"ev": "garbage", "line": line.decode(errors="replace")}
            with self.lock:
                self.events.append(e)

    def send(self, line):
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def find(self, **match):
        with self.lock:
            return [e for e in self.events if all(e.get(k) == v for k, v in match.items())]

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def nodes(d):
    return {n["name"]: n for n in d.api("GET", "/v1/nodes", expect=200)["nodes"]}


def job(d, jid):
    return d.api("GET", "/v1/jobs/%d" % jid, expect=200)


def test(d, agent_bin, work):
    d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(topology())}, expect=200)
    sim = Simulator(agent_bin, d, os.path.join(work, "simulator.log"))
    try:
        wait_for(lambda: sim.find(ev="ready"), 20, "the simulator to start:\n" + sim.log())
        wait_for(lambda: all(n["state"] == "up" for n in nodes(d).values()), 30,
                 "all 64 simulated nodes to come up")
        # The simulator's own "up" events reach us through its stdout reader,
        # possibly after the daemon already shows the nodes up.
        wait_for(lambda: len({e["node"] for e in sim.find(ev="up")}) == NODES, 10,
                 "64 distinct nodes registered (simulator events)")
        sim.send("status")
        first = wait_for(lambda: sim.find(ev="status"), 5, "the status event")[-1]
        check(first["connect_failures"] >= NODES and first["registered"] == NODES,
              "every node tried the refusing address first, then registered: %s" % first)

        j = d.api("POST", "/v1/jobs", {"spec": {"gpus": 32, "name": "sim", "parallelism": {"tp": 8},
                                                "spares": 1},
                                       "command": ["true"]}, expect=201)
        jid = j["id"]
        check(j["state"] == "running", "the job starts at once: %s" % j)
        info = job(d, jid)
        placed = sorted({r["node"] for r in info["ranks"]})
        check(len(placed) == 4, "32 GPUs on 4 nodes: %s" % placed)
        starts = wait_for(lambda: (lambda s: s if len(s) == 4 else None)(
            sim.find(ev="start", job=jid, restart_count=0)), 10, "start on the job's 4 nodes")
        check(sorted(e["node"] for e in starts) == placed, "starts went to %s" % placed)
        check(sum(e["ranks"] for e in starts) == 32, "32 ranks started: %s" % starts)

        # Rank 0's node reports a checkpoint; the scheduler stores it.
        time.sleep(0.3)
        sim.send("checkpoint %d" % jid)
        ck = wait_for(lambda: sim.find(ev="ckpt", job=jid), 5, "the checkpoint report")[-1]
        check(ck["node"] == info["ranks"][0]["node"], "rank 0's node reports: %s" % ck)
        wait_for(lambda: job(d, jid)["checkpoint_step"] == ck["step"], 5,
                 "checkpoint step %d stored" % ck["step"])

        # A node of the job is lost.
        victim = placed[-1]
        t0 = time.time()
        sim.send("kill " + victim)
        wait_for(lambda: nodes(d)[victim]["state"] == "down", 10, victim + " to go down")
        detect = time.time() - t0
        # 3 x 200 ms, the liveness check every 100 ms, polling: 2 s is generous.
        check(detect < 2.0, "%s down after %.2f s (3 heartbeats of 200 ms)" % (victim, detect))
        restarted = wait_for(lambda: (lambda s: s if len(s) >= 4 else None)(
            sim.find(ev="start", job=jid, restart_count=1)), 10, "the restart on 4 nodes")
        moved = sorted(e["node"] for e in restarted)
        check(victim not in moved and len(moved) == 4, "restarted on %s (victim %s)" % (moved, victim))
        check(all(e["checkpoint_step"] == ck["step"] for e in restarted),
              "restarted from step %d: %s" % (ck["step"], restarted))
        after = wait_for(lambda: (lambda x: x if x["restarts"] == 1 and x["state"] == "running" else None)(
            job(d, jid)), 5, "the job running with restarts 1")
        check(sorted({r["node"] for r in after["ranks"]}) == moved, "the API shows the new ranks")

        # An XID 79 on a node without a job fails its GPU at once.
        other = next(n for n in ("n%d" % i for i in range(NODES)) if n not in placed and n not in moved)
        sim.send("xid %s 3 79" % other)
        wait_for(lambda: nodes(d)[other]["gpu_health"][3] == "failed", 3, "GPU 3 of %s to fail" % other)

        # The lost node comes back; the counters agree.
        sim.send("revive " + victim)
        wait_for(lambda: nodes(d)[victim]["state"] == "up", 10, victim + " to come back up")
        sim.send("status")
        status = wait_for(lambda: sim.find(ev="status")[1:], 5, "the status event")[-1]
        check(status["registered"] == NODES and status["killed"] == 0, "status: %s" % status)
        check(not sim.find(ev="refused"), "no refusals: %s" % sim.find(ev="refused"))
        acks = sim.find(ev="ack")
        check(all("error" not in a for a in acks), "every command acknowledged: %s" % acks)
        sim.send("nonsense n0")
        wait_for(lambda: sim.find(ev="ack", cmd="nonsense n0"), 5, "the ack of a bad command")
        check("error" in sim.find(ev="ack", cmd="nonsense n0")[0], "a bad command is an error")

        sim.send("quit")
        rc = sim.proc.wait(timeout=10)
        check(rc == 0, "the simulator exits 0 on quit, not %s" % rc)
        print("ok: 64 simulated nodes up, job on %s, %s lost and down in %.2f s, restarted on %s from "
              "step %d, XID 79 failed a GPU, the node revived" % (placed, victim, detect, moved, ck["step"]))
    except Exception:
        print("---- simulator log\n" + sim.log(), file=sys.stderr)
        raise
    finally:
        sim.kill()


def run_simulated(test_fn, config, prefix):
    """Runs test_fn(daemon, agent_bin, work) against a fresh daemon of `config`
    (argv: TOPO_SCHEDULER TOPO_AGENT), printing the daemon's log on a failure;
    exits 1 on a check that failed."""
    try:
        sched_bin, agent_bin = sys.argv[1], sys.argv[2]
        d = Daemon(sched_bin, config=config).start()
        work = tempfile.mkdtemp(prefix=prefix)
        ok = False
        try:
            test_fn(d, agent_bin, work)
            ok = True
        finally:
            if not ok:
                print("---- daemon log\n" + d.log(), file=sys.stderr)
            d.cleanup()
            subprocess.run(["rm", "-rf", work])
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run_simulated(test, CONFIG, "topo-simulate-test-")
