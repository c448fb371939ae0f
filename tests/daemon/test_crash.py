#!/usr/bin/python3
"""Crash safety: kill -9 the daemon at random points under a stream of
submissions, many times; after each restart every acknowledged submission is
there exactly once, and nothing else is (a job whose answer was lost in the
crash may be there, at most once: it was written but not acknowledged).

Then a write-ahead log cut short, as a torn copy or a failing disk leaves it:
180 jobs acknowledged, the daemon killed, copies of its state directory with
the WAL cut at 0, at a frame boundary, mid-frame, at half and inside its last
frame. SQLite opens each without a word; the daemon must refuse every copy
that lost acknowledged events, naming both seqs and --accept-data-loss,
start on it with that flag saying what was lost (numbering new jobs after
the lost ones), and start normally on the untouched copy.

usage: test_crash.py TOPO_SCHEDULER_BIN [TOPO_BIN]
   (TOPO_CRASH_ROUNDS, default 12, and TOPO_CRASH_SEED, default 7, in the environment)
"""

import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time

from harness import Daemon, check, commit_mark_seq, run, setup_tiny

CLIENTS = 4


def kill_loop(binary):
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


WAL_HEADER = 32


def wal_frames(path):
    """The WAL's page size and the number of its leading frames that carry
    the header's salts: one generation (a checkpoint that restarts the log
    writes new salts from the top; what follows is stale)."""
    with open(path, "rb") as f:
        data = f.read()
    page = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    n, at = 0, WAL_HEADER
    while at + 24 + page <= len(data) and data[at + 8:at + 16] == salts:
        n += 1
        at += 24 + page
    return page, n


def sqlite_view(db):
    """What SQLite alone makes of a store's files: (newest seq, jobs)."""
    with sqlite3.connect(db) as c:
        return (c.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0],
                c.execute("SELECT count(*) FROM jobs").fetchone()[0])


def copy_cut(src, dst, wal_bytes):
    shutil.copytree(src, dst)
    for name in ("endpoint", "agent-endpoint", "daemon.log"):
        if os.path.exists(os.path.join(dst, name)):
            os.unlink(os.path.join(dst, name))
    os.truncate(os.path.join(dst, "topo.db-wal"), wal_bytes)


def list_ids(d):
    ids, after = [], 0
    while True:
        page = d.api("GET", "/v1/jobs?all=1&limit=10000&after=%d" % after, expect=200)
        ids += [j["id"] for j in page["jobs"]]
        if page["next_after"] is None:
            return ids
        after = page["next_after"]


def wal_cut(binary):
    work = tempfile.mkdtemp(prefix="topo-walcut-")
    os.makedirs(os.path.join(work, "live"), mode=0o700)
    d = Daemon(binary, state_dir=os.path.join(work, "live"))
    try:
        d.start()
        setup_tiny(d)
        acked = [d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "w%d" % i},
                                           "command": ["true"]}, expect=201)["id"]
                 for i in range(180)]
        d.kill9()  # no checkpoint on the way out: the WAL holds the newest commits
        live = d.state_dir
        mark = commit_mark_seq(live)
        whole = os.path.join(work, "whole")
        copy_cut(live, whole, os.path.getsize(os.path.join(live, "topo.db-wal")))
        full_seq, full_jobs = sqlite_view(os.path.join(whole, "topo.db"))
        check(full_jobs == 180 and full_seq == mark,
              "the untouched copy: %d jobs, seq %d, mark %d" % (full_jobs, full_seq, mark))

        page, frames = wal_frames(os.path.join(live, "topo.db-wal"))
        frame = 24 + page
        check(frames >= 8, "only %d frames in the WAL" % frames)
        end = WAL_HEADER + frames * frame
        cuts = {"0": 0, "a frame boundary": WAL_HEADER + frame * (frames // 2),
                "mid-frame": WAL_HEADER + frame * (frames // 2) + frame // 3,
                "half": end // 2, "inside the last frame": end - frame + 100}
        refused = 0
        for what, cut in cuts.items():
            scratch, copy = os.path.join(work, "scratch"), os.path.join(work, "cut")
            for p in (scratch, copy):
                shutil.rmtree(p, ignore_errors=True)
                copy_cut(live, p, cut)
            left, jobs = sqlite_view(os.path.join(scratch, "topo.db"))
            if left >= mark:
                continue  # this cut lost nothing acknowledged (a stale tail)
            refused += 1
            p = subprocess.run([binary, "--state-dir", copy, "--listen", "127.0.0.1:0"],
                               capture_output=True, text=True, timeout=60)
            err = p.stderr
            check(p.returncode != 0, "cut at %s (%d): the daemon started on %d of 180 jobs"
                  % (what, cut, jobs))
            check("its log ends at seq %d," % left in err and "says seq %d was committed" % mark
                  in err and "--accept-data-loss" in err,
                  "cut at %s: the refusal names both seqs and the flag:\n%s" % (what, err))
            taken = Daemon(binary, state_dir=copy, extra_args=["--accept-data-loss"]).start()
            try:
                log = taken.log_all()
                lost = ("event %d is" % mark if left + 1 == mark else
                        "events %d..%d are" % (left + 1, mark))
                check(lost + " lost" in log and "--accept-data-loss" in log,
                      "cut at %s: the start says what was lost:\n%s" % (what, log))
                ids = list_ids(taken)
                check(len(ids) == jobs and set(ids) <= set(acked),
                      "cut at %s: %d jobs listed, SQLite kept %d" % (what, len(ids), jobs))
                new = taken.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]},
                                expect=201)["id"]
                check(new > max(acked), "cut at %s: new job %d reuses a lost job's id (<= %d)"
                      % (what, new, max(acked)))
                audit = taken.api("GET", "/v1/audit", expect=200)
                check("store.data_loss_accepted" in str(audit), "the loss is in the audit log")
            finally:
                taken.stop()
            # The mark now fits: a plain restart is an ordinary one.
            again = Daemon(binary, state_dir=copy).start()
            again.stop()
        check(refused >= 4, "only %d of %d cuts lost acknowledged events" % (refused, len(cuts)))

        plain = Daemon(binary, state_dir=whole).start()
        try:
            check(sorted(list_ids(plain)) == sorted(acked), "the untouched copy has every job")
        finally:
            plain.stop()
        print("ok: %d of %d WAL cuts lost acknowledged events; each was refused, started with "
              "--accept-data-loss, and the untouched copy started with all 180 jobs"
              % (refused, len(cuts)))
    except Exception:
        print(d.log(), file=sys.stderr)
        raise
    finally:
        d.kill9()
        shutil.rmtree(work, ignore_errors=True)


def main():
    binary = sys.argv[1]
    if os.environ.get("TOPO_CRASH_ROUNDS") != "0":
        kill_loop(binary)
    wal_cut(binary)


if __name__ == "__main__":
    run(main)
