#!/usr/bin/env python3
"""topo-scheduler backup and restore against a real daemon and real SQLite
files: a backup taken while submissions keep arriving is consistent (every
job acknowledged before it began is in it), has mode 0600 and is never
overwritten; a restore into a new state directory rebuilds the scheduler
from it as a start would, gives it a commit mark, warns about each file the
directory still lacks (the CA, pki/, admin-token), and starts a daemon that
has those jobs; a state directory that holds a store, a file that is not a
store, a store of a newer schema, a backup whose log has a gap and one whose
last event does not read back are refused with the reason (the seq at
fault), leaving the state directory as it was.

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
from harness import Daemon, check, commit_mark_seq, run, serving, setup_tiny  # noqa: E402


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
        # Checked by the rebuild a start does, and given a commit mark at its last event.
        with sqlite3.connect(out) as db:
            last = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
            epoch = int(db.execute("SELECT value FROM meta WHERE key = 'topology_from_seq'")
                        .fetchone()[0])
        check("log up to seq %d" % last in p.stdout and "as a start does" in p.stdout, p.stdout)
        check(os.path.exists(os.path.join(new_dir, "topo.db.mark")), "no commit mark")
        check(not [f for f in os.listdir(new_dir) if "restoring" in f], os.listdir(new_dir))
        # What a backup does not hold: each missing file named, with why it matters.
        for name in ("admin-token", "ca.pem", "ca-key.pem", "pki/issued.tsv"):
            check("%s/%s is missing" % (new_dir, name) in p.stderr,
                  "restore warns that %s is missing:\n%s" % (name, p.stderr))
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
            # It goes on from there: its log, and its mark, pass the backup's.
            restored.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]},
                         token=d.admin_token, expect=201)
        finally:
            restored.stop()

        # A backup whose log has a gap, or whose last event does not read
        # back: refused, naming the seq, with the state directory as it was
        # (a new one stays without a store; one replaced with --force keeps
        # its own).
        def snapshot_dir(path):
            files = {}
            for root, _, names in os.walk(path):
                for n in names:
                    with open(os.path.join(root, n), "rb") as f:
                        files[os.path.relpath(os.path.join(root, n), path)] = f.read()
            return files

        mid = (epoch + last) // 2
        bad = {
            "gap": ("DELETE FROM events WHERE seq = %d" % mid,
                    "seq %d is followed by seq %d, so event %d is missing" % (mid - 1, mid + 1, mid)),
            "bad last event": ("UPDATE events SET body = '{\"event\": {\"type\": "
                               "\"job_submitted\"}, \"commands\": []}' WHERE seq = %d" % last,
                               "event %d" % last),
            "unreadable last event": ("UPDATE events SET body = 'not json' WHERE seq = %d" % last,
                                      "event seq %d: body is not" % last),
        }
        for what, (sql, names) in bad.items():
            f = os.path.join(work, what.replace(" ", "-") + ".db")
            shutil.copy(out, f)
            with sqlite3.connect(f) as db:
                db.execute(sql)
            fresh = os.path.join(work, "fresh-" + what.replace(" ", "-"))
            p = subprocess.run([sched, "restore", f, "--state-dir", fresh], capture_output=True,
                               text=True, timeout=60)
            check(p.returncode != 0 and "Restored" not in p.stdout, "%s: %s" % (what, p.stdout))
            check(names in p.stderr and "not restored" in p.stderr and
                  "was left as it was" in p.stderr, "%s: the refusal names the seq:\n%s" %
                  (what, p.stderr))
            check(not os.path.exists(os.path.join(fresh, "topo.db")) and
                  not [n for n in os.listdir(fresh) if n.startswith("topo.db")],
                  "%s: %s" % (what, os.listdir(fresh)))
            before = snapshot_dir(new_dir)
            p = subprocess.run([sched, "restore", f, "--state-dir", new_dir, "--force"],
                               capture_output=True, text=True, timeout=60)
            check(p.returncode != 0 and names in p.stderr, "%s --force: %s" % (what, p.stderr))
            after = snapshot_dir(new_dir)
            after.pop("lock", None)
            before.pop("lock", None)
            check(after == before, "%s --force changed %s" %
                  (what, sorted(k for k in set(before) | set(after)
                                if before.get(k) != after.get(k))))

        # The good backup again over the store the restored daemon then
        # wrote to (its mark further on): --force replaces both, and a
        # daemon starts on it without --accept-data-loss.
        check(commit_mark_seq(new_dir) > last, "the restored daemon wrote nothing")
        p = subprocess.run([sched, "restore", out, "--state-dir", new_dir, "--force"],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "Restored" in p.stdout, p.stdout + p.stderr)
        check(commit_mark_seq(new_dir) == last, "the mark is the backup's last seq")
        again = Daemon(sched, state_dir=new_dir).start()
        again.stop()

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
