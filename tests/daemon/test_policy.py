#!/usr/bin/env python3
"""Live policy changes against a real daemon: `topo config set` changes the
preemption grace and backfill while jobs run, the change is a logged event
(who, old, new) the core decides by from that point, and a restart replays
it at the same point (no divergence) and keeps it, also across a topology
re-import. Bad keys and values are refused naming the key and the range;
only a cluster-admin may change the policy.

usage: test_policy.py TOPO_SCHEDULER TOPO
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, run, serving, setup_tiny, tiny_topology  # noqa: E402


def topo(cli, d, *args, expect=0):
    env = dict(os.environ, TOPO_SERVER=d.url, TOPO_TOKEN=d.admin_token,
               TOPO_CA=os.path.join(d.state_dir, "ca.pem"))
    p = subprocess.run([cli] + list(args), capture_output=True, text=True, timeout=60, env=env)
    check(p.returncode == expect, "topo %s: exit %d (wanted %d)\n%s%s"
          % (" ".join(args), p.returncode, expect, p.stdout, p.stderr))
    return p.stdout + p.stderr


def wait_for(what, cond, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def main():
    sched, cli = sys.argv[1], sys.argv[2]
    d = Daemon(sched).start()
    with serving(d):
        setup_tiny(d)
        cfg = d.api("GET", "/v1/config", expect=200)
        check(cfg["policy"]["preempt_grace_s"] == 120 and cfg["policy"]["backfill"] is True, cfg)
        check(cfg["policy"]["fairshare_max_wait_s"] == 0 and "fairshare_max_wait_s" in cfg["live"], cfg)
        check(cfg["policy"]["attribution_window_ms"] == 5000 and "attribution_window_ms" in cfg["live"],
              cfg)
        check(cfg["policy"]["backfill_depth"] == 500 and "backfill_depth" in cfg["live"], cfg)
        check("preempt_grace_s" in cfg["live"] and "stack" not in cfg["live"], cfg["live"])
        out = topo(cli, d, "config", "show")
        check("preempt_grace_s" in out and "(fixed" in out, out)

        # Refusals name the key and what it accepts; nothing changes.
        d.api("POST", "/v1/users", {"name": "ann", "tenant": "default", "role": "user"}, expect=201)
        ann = d.api("POST", "/v1/tokens", {"user": "ann"}, expect=201)["token"]
        got, body = d.request("PUT", "/v1/config/preempt_grace_s", {"value": 5}, token=ann)
        check(got == 403, "a user changed the policy: %s %s" % (got, body))
        for key, value, text in (("preempt_grace_s", 999999, "out of range; use 0..86400"),
                                 ("backfill", "maybe", "backfill"),
                                 ("stack", "fifo-firstfit", "new state directory"),
                                 ("no_such_key", 1, "not a policy key"),
                                 ("fairshare_max_wait_s", 2592001, "out of range; use 0..2592000"),
                                 ("fairshare_max_wait_s", "2d", "fairshare_max_wait_s"),
                                 ("attribution_window_ms", 600001, "out of range; use 0..600000"),
                                 ("attribution_window_ms", "5s", "attribution_window_ms"),
                                 ("backfill_depth", 0, "out of range; use 1..100000"),
                                 ("backfill_depth", "all", "backfill_depth"),
                                 ("restart_backoff_initial_s", 900, "at least")):
            got, body = d.request("PUT", "/v1/config/" + key, {"value": value}, token=d.admin_token)
            msg = body.get("error", {}).get("message", "") if isinstance(body, dict) else str(body)
            check(got == 400 and text in msg, "%s=%r: %s %s" % (key, value, got, msg))
        check(d.api("GET", "/v1/config", expect=200)["policy"] == cfg["policy"], "a refusal changed it")

        # Eight low-priority jobs fill the cluster; then the grace drops to
        # 5 s and backfill goes off, live.
        low = [d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "low-%d" % i},
                                          "command": ["true"]}, expect=201)["id"] for i in range(8)]
        check(all(d.api("GET", "/v1/jobs/%d" % j, expect=200)["state"] == "running" for j in low),
              "the low jobs run")
        out = topo(cli, d, "config", "set", "preempt_grace_s", "5")
        check("120 -> 5" in out, out)
        out = topo(cli, d, "config", "set", "backfill", "false")
        check("true -> false" in out, out)
        out = topo(cli, d, "config", "set", "backfill", "false")
        check("nothing changed" in out, out)
        out = topo(cli, d, "config", "set", "backfill_depth", "100")
        check("500 -> 100" in out, out)

        # A high-priority job preempts one of them, which stops 5 s later
        # (under the old 120 s grace it would still be checkpointing).
        high = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "high"}, "priority": 10,
                                          "command": ["true"]}, expect=201)["id"]
        victims = [j for j in low if d.api("GET", "/v1/jobs/%d" % j, expect=200)["state"] == "preempting"]
        check(len(victims) == 1, "one victim preempting: %s" % victims)
        wait_for("the high job to start after the 5 s grace",
                 lambda: d.api("GET", "/v1/jobs/%d" % high, expect=200)["state"] == "running", 30)

        # The changes are events with who, old and new.
        events = d.api("GET", "/v1/events?limit=1000", expect=200)["events"]
        changes = [e for e in events if e["event"]["type"] == "policy_changed"]
        check([(e["event"]["key"], e["event"]["old"], e["event"]["new"]) for e in changes] ==
              [("preempt_grace_s", "120", "5"), ("backfill", "true", "false"),
               ("backfill_depth", "500", "100")], changes)
        check(all(e["actor"] == "user:admin" for e in changes), changes)
        check(changes[0]["event"]["policy"]["preempt_grace_ms"] == 5000, changes[0])
        check(changes[2]["event"]["policy"]["backfill_depth"] == 100, changes[2])
        audit = d.api("GET", "/v1/audit?limit=1000", expect=200)["audit"]
        check(sum(a["action"] == "config.set" for a in audit) == 3, audit)

        # A restart replays the log with the changes at their points: the
        # same decisions, and the policy in effect is the changed one (the
        # config file, absent here, does not undo it).
        d.stop()
        d.start()
        log = d.log_all()
        check("rebuilt the scheduler from" in log and "decided differently" not in log, log[-2000:])
        policy = d.api("GET", "/v1/config", expect=200)["policy"]
        check(policy["preempt_grace_s"] == 5 and policy["backfill"] is False and
              policy["backfill_depth"] == 100, policy)
        check(d.api("GET", "/v1/jobs/%d" % high, expect=200)["state"] == "running", "high runs")

        # A new topology epoch starts with the policy in effect, and a
        # restart after it keeps it.
        for j in d.api("GET", "/v1/jobs", expect=200)["jobs"]:
            d.api("POST", "/v1/jobs/%d/cancel" % j["id"], expect=200)
        d.api("PUT", "/v1/topology", {"format": "json", "content": json.dumps(tiny_topology())},
              expect=200)
        d.stop()
        d.start()
        policy = d.api("GET", "/v1/config", expect=200)["policy"]
        check(policy["preempt_grace_s"] == 5 and policy["backfill"] is False,
              "after a re-import and a restart: %s" % policy)
        print("ok: live policy changes take effect, are logged and survive restarts")


if __name__ == "__main__":
    run(main)
