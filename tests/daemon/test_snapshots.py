#!/usr/bin/env python3
"""Snapshots and compaction against a real daemon and its real SQLite file:
with a tiny snapshot interval and no retention, the daemon writes snapshots
(two kept), a restart restores the newest and replays only the events after
it, compaction then deletes the covered events in small batches while every
job stays listed and shown (`topo show` of a job whose events are gone), and
a corrupt newest snapshot makes the next start use the older one, with a
warning, instead of failing.

usage: test_snapshots.py TOPO_SCHEDULER TOPO
"""

import os
import re
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Cli, Daemon, check, run, serving, setup_tiny  # noqa: E402

CONFIG = """snapshot_every_events = 5
snapshot_every_minutes = 0
event_retention_days = 0
compaction_batch_events = 3
"""


def db_rows(d, sql):
    with sqlite3.connect("file:%s?mode=ro" % os.path.join(d.state_dir, "topo.db"), uri=True) as db:
        return db.execute(sql).fetchall()


def jobs_by_id(d):
    return {j["id"]: j["state"] for j in d.api("GET", "/v1/jobs?all=true", expect=200)["jobs"]}


def main():
    sched, topo = sys.argv[1], sys.argv[2]
    home = tempfile.mkdtemp(prefix="topo-snap-home-")
    d = Daemon(sched, config=CONFIG).start()
    with serving(d, home):
        cli = Cli(d, topo, home)
        setup_tiny(d)
        ids = [d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "s%d" % i},
                                          "command": ["true"]}, expect=201)["id"]
               for i in range(12)]
        for i in ids[:6]:
            d.api("POST", "/v1/jobs/%d/cancel" % i, {}, expect=200)
        before = jobs_by_id(d)
        check(len(before) == 12, "12 jobs listed: %s" % before)
        check(sorted(set(before.values())) == ["cancelled", "running"], str(before))
        snaps = db_rows(d, "SELECT seq, format FROM snapshots ORDER BY seq")
        check(len(snaps) == 2, "two snapshots kept: %s" % snaps)
        last_seq = db_rows(d, "SELECT MAX(seq) FROM events")[0][0]

        # Restart: the newest snapshot and only the events after it.
        d.stop()
        d.start()
        newest = db_rows(d, "SELECT MAX(seq) FROM snapshots")[0][0]
        m = re.search(r"loaded snapshot at seq (\d+), replayed (\d+) events in \d+ ms", d.log_all())
        check(m is not None, "the start says it loaded a snapshot:\n" + d.log())
        check(int(m.group(1)) == newest and int(m.group(2)) == last_seq - newest,
              "snapshot seq %s, %s events replayed; newest %d, log ends at %d" %
              (m.group(1), m.group(2), newest, last_seq))
        check(jobs_by_id(d) == before, "the same jobs in the same states after the restart")

        # Compaction: everything older than the older snapshot goes, in batches.
        older = db_rows(d, "SELECT MIN(seq) FROM snapshots")[0][0]
        deadline = time.time() + 30
        while time.time() < deadline:
            first = db_rows(d, "SELECT MIN(seq) FROM events")[0][0]
            if first >= older:
                break
            time.sleep(0.1)
        check(first == older, "events before seq %d compacted (oldest left: %d)" % (older, first))
        check(db_rows(d, "SELECT COUNT(*) FROM job_events WHERE seq < %d" % older)[0][0] == 0,
              "the per-job index went with the events")
        # Old jobs are still listed and shown.
        check(jobs_by_id(d) == before, "every job still listed after compaction")
        shown = cli.json(["show", str(ids[0])])
        check(shown["id"] == ids[0] and shown["state"] == "cancelled", str(shown)[:400])
        p = cli.run(["show", str(ids[0])])
        check("cancelled" in p.stdout, p.stdout)

        # A corrupt newest snapshot: the older one is used, with a warning.
        d.stop()
        with sqlite3.connect(os.path.join(d.state_dir, "topo.db")) as db:
            db.execute("UPDATE snapshots SET state = x'00112233' WHERE seq = "
                       "(SELECT MAX(seq) FROM snapshots)")
        d.start()
        log = d.log_all()
        check("snapshot at seq %d not used" % newest in log, "a warning names the snapshot:\n" +
              d.log())
        check("loaded snapshot at seq %d" % older in log, "the older one restores:\n" + d.log())
        check(jobs_by_id(d) == before, "the same jobs after restoring the older snapshot")
        # The daemon keeps scheduling: a new job runs where a cancelled one was.
        d.api("POST", "/v1/jobs/%d/cancel" % ids[6], {}, expect=200)
        new = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]}, expect=201)
        check(jobs_by_id(d)[new["id"]] == "running", "a new job starts after the restore")


if __name__ == "__main__":
    run(main)
