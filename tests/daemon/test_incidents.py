#!/usr/bin/python3
"""A job's restarts and incidents as `topo show` and the API give them,
against a real daemon with a test agent that speaks the protocol from its
schema: a job that checkpoints step 10, fails once (a rank exits 1: requeued
with a 1-s backoff), resumes from step 10 and completes shows `Restarts: 1`
(also once it ended and is read from the store), an incident that names the
step it resumed from and its restart count, and a lost work of the time since
the newest checkpoint, not since the run began.

usage: test_incidents.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import re
import sys
import tempfile
import time

from agent_protocol import Protocol
from harness import Cli, Daemon, check, run, serving, tiny_topology
from test_agents import Agent, issue, wait_for

CONFIG = ("heartbeat_interval_ms = 200\nmissed_heartbeats_down = 3\n"
          "restart_backoff_initial_s = 1\n")
P = Protocol()


def main():
    binary, topo_bin = sys.argv[1], sys.argv[2]
    d = Daemon(binary, config=CONFIG).start()
    work = tempfile.mkdtemp(prefix="topo-incidents-")
    with serving(d, work):
        cli = Cli(d, topo_bin, work)
        d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
              expect=200)
        a = Agent(d.agent_port(), os.path.join(d.state_dir, "ca.pem"),
                  issue(binary, d.state_dir, "n0", work), "n0", beat=True)
        try:
            jid = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "once"},
                                             "command": ["true"]}, expect=201)["id"]
            start = a.recv()
            check(start["type"] == "start" and start["restart_count"] == 0, str(start))
            a.send(P.agent("started", job=jid, restart_count=0))
            time.sleep(1.0)
            a.send(P.agent("checkpoint", job=jid, step=10, tier="persistent"))
            wait_for(lambda: d.api("GET", "/v1/jobs/%d" % jid, expect=200)["checkpoint_step"] == 10,
                     5, "step 10 stored")
            t_ckpt = time.time()
            time.sleep(1.5)
            t_fail = time.time()
            a.send(P.agent("rank_exited", job=jid, rank=3, restart_count=0, exit_code=1, signal=0,
                           status_known=True))
            restart = a.recv(timeout=15)
            while restart["type"] != "start":
                restart = a.recv(timeout=15)
            check(restart["restart_count"] == 1 and restart["checkpoint_step"] == 10,
                  "resumes from step 10 as restart 1: %s" % restart)
            a.send(P.agent("started", job=jid, restart_count=1))
            for r in range(8):
                a.send(P.agent("rank_exited", job=jid, rank=r, restart_count=1, exit_code=0,
                               signal=0, status_known=True))
            wait_for(lambda: d.api("GET", "/v1/jobs/%d" % jid, expect=200)["state"] == "completed",
                     5, "the job to complete")
        finally:
            a.close()
        j = d.api("GET", "/v1/jobs/%d" % jid, expect=200)
        check(j["restarts"] == 1, "one restart counted: %s" % j["restarts"])
        incidents = j["incidents"]
        check(len(incidents) == 1, "one incident: %s" % incidents)
        i = incidents[0]
        check(i["requeued"] and i["checkpoint_step"] == 10 and i["restart_count"] == 1,
              "the requeue names the step and the restart it resumed as: %s" % i)
        lost = i["lost_work_s"]
        since_ckpt = t_fail - t_ckpt
        check(since_ckpt - 0.3 <= lost <= since_ckpt + 1.0,
              "lost work %.2f s is the time since the checkpoint (%.2f s), not since the start "
              "(%.2f s more)" % (lost, since_ckpt, 1.0))
        out = cli.run(["show", str(jid)]).stdout
        check(re.search(r"Restarts:\s+1, checkpoint step 10", out), "topo show:\n" + out)
        row = next(l for l in out.splitlines() if "rank exited" in l)
        check(re.search(r"requeued \S+\s+10\s+\d", row), "FROM STEP 10 in:\n" + out)
        print("ok: Restarts 1, the incident resumed from step 10 as restart 1, lost work %.2f s "
              "(%.2f s since the checkpoint)" % (lost, since_ckpt))


if __name__ == "__main__":
    run(main)
