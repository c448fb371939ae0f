#!/usr/bin/env python3
"""topo-scheduler backup and restore against a real daemon and real SQLite
files: a backup taken while submissions keep arriving is consistent (every
job acknowledged before it began is in it), has mode 0600 and is never
overwritten; a restore into a new state directory starts a daemon that has
those jobs; a state directory that holds a store, a file that is not a
store, and a store of a newer schema are refused with the reason.

usage: test_backup.py TOPO_SCHEDULER TOPO
"""

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, run, serving, setup_tiny  # noqa: E402


def main():
    sched = sys.argv[1]
    work = tempfile.mkdtemp(prefix="topo-backup-test-")
    d = Daemon(sched).start()
    restored = None
    with serving(d, work):
        setup_tiny(d)
        acked = []
        for i in range(20):
            acked.append(d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "before-%d" % i},
                                                   "command": ["true"]}, expect=201)["id"])
        # Submissions keep arriving while the backup runs.
        stop = threading.Event()
        during = []

        def submit_more():
            while not stop.is_set():
                during.append(d.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]},
                                    expect=201)["id"])

        t = threading.Thread(target=submit_more)
        t.start()
        out = os.path.join(work, "topo.backup")
        try:
            p = subprocess.run([sched, "backup", "--out", out, "--state-dir", d.state_dir],
                               capture_output=True, text=True, timeout=60)
        finally:
            stop.set()
            t.join()
        check(p.returncode == 0, "backup: %s %s" % (p.stdout, p.stderr))
        check("Backed up" in p.stdout, p.stdout)
        check(os.stat(out).st_mode & 0o777 == 0o600, "backup mode %o" % os.stat(out).st_mode)
        check(not os.path.exists(out + ".partial"), "no partial file left")
        with sqlite3.connect(out) as db:
            ids = {r[0] for r in db.execute("SELECT id FROM jobs")}
            check(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity")
        check(set(acked) <= ids, "every job acknowledged before the backup is in it")

        # Never overwritten.
        p = subprocess.run([sched, "backup", "--out", out, "--state-dir", d.state_dir],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and "exists" in p.stderr, p.stderr)
        # A mistyped state directory: no store, and nothing created there.
        nowhere = os.path.join(work, "no-such-state")
        p = subprocess.run([sched, "backup", "--out", out + "2", "--state-dir", nowhere],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and "no store" in p.stderr and not os.path.exists(nowhere),
              p.stderr)

        # Restore into a new state directory; a daemon there has the jobs.
        new_dir = os.path.join(work, "restored")
        p = subprocess.run([sched, "restore", out, "--state-dir", new_dir], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 0 and "Restored" in p.stdout, p.stdout + p.stderr)
        # The same again is refused: the directory holds a store now.
        p = subprocess.run([sched, "restore", out, "--state-dir", new_dir], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode != 0 and "--force" in p.stderr, p.stderr)
        restored = Daemon(sched, state_dir=new_dir).start()
        try:
            # The admin token of the old daemon works: users and tokens came along.
            jobs = []
            after = 0
            while True:
                page = restored.request("GET", "/v1/jobs?all=1&after=%d" % after,
                                        token=d.admin_token)[1]
                jobs += page["jobs"]
                if not page.get("next_after"):
                    break
                after = page["next_after"]
            got = {j["id"] for j in jobs}
            check(got == ids, "the restored daemon has the backup's %d jobs, not %d" %
                  (len(ids), len(got)))
        finally:
            restored.stop()

        # A file that is not a store, and a store of a newer schema.
        junk = os.path.join(work, "junk.db")
        with open(junk, "w") as f:
            f.write("not a database" * 100)
        p = subprocess.run([sched, "restore", junk, "--state-dir", os.path.join(work, "j")],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and "junk.db" in p.stderr, p.stderr)
        newer = os.path.join(work, "newer.db")
        shutil.copy(out, newer)
        with sqlite3.connect(newer) as db:
            db.execute("INSERT INTO schema_version(version, name, applied_ms) VALUES (999, 'x', 0)")
        p = subprocess.run([sched, "restore", newer, "--state-dir", os.path.join(work, "n")],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and "schema version 999" in p.stderr and "newer" in p.stderr,
              p.stderr)
        check(not os.path.exists(os.path.join(work, "n", "topo.db")), "nothing restored")
    print("ok backup: %d jobs in an online backup, restored and served" % len(ids))


if __name__ == "__main__":
    run(main)
