#!/usr/bin/python3
"""Crash safety: kill -9 the daemon at random points under a stream of
submissions, many times; after each restart every acknowledged submission is
there exactly once, and nothing else is (a job whose answer was lost in the
crash may be there, at most once: it was written but not acknowledged).

usage: test_crash.py TOPO_SCHEDULER_BIN [TOPO_BIN]
   (TOPO_CRASH_ROUNDS, default 12, and TOPO_CRASH_SEED, default 7, in the environment)
"""

import os
import random
import sys
import threading
import time

from harness import Daemon, check, run, setup_tiny

CLIENTS = 4


def main():
    binary = sys.argv[1]
    rounds = int(os.environ.get("TOPO_CRASH_ROUNDS", "12"))
    rng = random.Random(int(os.environ.get("TOPO_CRASH_SEED", "7")))
    d = Daemon(binary).start()
    token = d.admin_token
    setup_tiny(d)
    lock = threading.Lock()
    acked = {}      # name -> id
    in_doubt = set()  # names sent with no answer
    up = threading.Event()
    up.set()
    stop = threading.Event()
    errors = []

    def submitter(k):
        n = 0
        while not stop.is_set():
            up.wait()
            name = "c%d-%d" % (k, n)
            n += 1
            body = {"spec": {"gpus": 8 if n % 3 else 16, "name": name}, "command": ["true"]}
            try:
                status, out = d.request("POST", "/v1/jobs", body, token, timeout=10)
            except Exception:  # noqa: BLE001 - the daemon died under us
                with lock:
                    in_doubt.add(name)
                time.sleep(0.02)
                continue
            with lock:
                if status == 201:
                    acked[name] = out["id"]
                elif status == 503:
                    in_doubt.add(name)
                else:
                    errors.append("%s: %s %s" % (name, status, out))

    threads = [threading.Thread(target=submitter, args=(k,), daemon=True) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        for r in range(rounds):
            time.sleep(rng.uniform(0.2, 1.0))
            up.clear()
            d.kill9()
            time.sleep(0.05)
            d.start()
            up.set()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        check(not errors, "unexpected answers:\n" + "\n".join(errors[:10]))
        jobs = []
        after = 0
        while True:
            page = d.api("GET", "/v1/jobs?all=1&limit=10000&after=%d" % after, expect=200)
            jobs += page["jobs"]
            if page["next_after"] is None:
                break
            after = page["next_after"]
        by_name = {}
        for j in jobs:
            check(j["name"] not in by_name, "job %s is there twice (ids %s and %s)" %
                  (j["name"], by_name.get(j["name"]), j["id"]))
            by_name[j["name"]] = j["id"]
        ids = [j["id"] for j in jobs]
        check(len(set(ids)) == len(ids), "job ids repeat")
        for name, job_id in acked.items():
            check(name in by_name, "acknowledged job %s (id %d) is lost" % (name, job_id))
            check(by_name[name] == job_id, "job %s has id %d, acknowledged as %d" %
                  (name, by_name[name], job_id))
        extra = set(by_name) - set(acked)
        check(extra <= in_doubt, "jobs nobody submitted: %s" % sorted(extra - in_doubt)[:10])
        check(len(acked) > 50 * rounds // 10, "too few submissions got through (%d)" % len(acked))
        print("ok: %d kills, %d acknowledged submissions all there once, %d written but unacknowledged, "
              "%d lost before the write" % (rounds, len(acked), len(extra), len(in_doubt - extra)))
    except Exception:
        print(d.log(), file=sys.stderr)
        raise
    finally:
        stop.set()
        up.set()
        d.cleanup()


if __name__ == "__main__":
    run(main)
