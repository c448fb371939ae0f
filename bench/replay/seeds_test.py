#!/usr/bin/env python3
"""bench_replay --seeds: the real binary on workload K (a few seconds).

Checks that every seed replays the base workloads with its own seed, that the
goals over seeds are the means and counts of the per-seed figures (recomputed
here from each seed's policy records), and that bad --seeds values are refused
with a message that names the flag.

    seeds_test.py BENCH_REPLAY     (TOPO_SHARED_DIR set, as under ctest)
"""

import json
import os
import subprocess
import sys
import tempfile


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)


def per_seed_values(workload):
    """The goal values the report should have averaged, from one seed's record."""
    ts = workload["policies"]["toposched"]
    st = workload["policies"]["slurm-tree"]
    out = {}
    a = ts["jct_by_size"]["large"]["mean_jct_s"]
    b = st["jct_by_size"]["large"]["mean_jct_s"]
    if a is not None and b:
        out["mean JCT"] = (a / b, a / b <= 0.7)
    if workload["failures"]:
        failure_restarts = st["counts"]["restarts"] - st["counts"]["preemption_restarts"]
        churn = ts["counts"]["preemption_restarts"]
        out["preemption restarts"] = (churn / failure_restarts if failure_restarts else None,
                                      churn <= 2 * failure_restarts)
        if ts["ettr_large"] is not None and st["ettr_large"] is not None:
            out["under F >= slurm-tree"] = ((ts["ettr_large"] - st["ettr_large"]) * 100,
                                            ts["ettr_large"] >= st["ettr_large"])
    return out


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "replay.json")
        r = run(binary, "--workloads", "K,K+F", "--policies", "slurm-tree,toposched",
                "--seeds", "1-2,5", "--sensitivity", "false", "--out", path)
        if r.returncode != 0:
            fail(f"bench_replay exited {r.returncode}: {r.stderr[-2000:]}")
        report = json.load(open(path))
    if report["seeds"] != [1, 2, 5]:
        fail(f"seeds {report['seeds']}, expected [1, 2, 5]")
    names = [(w["name"], w["seed"]) for w in report["workloads"]]
    expected = [(n, s) for s in (1, 2, 5) for n in ("K", "K+F")]
    if names != expected:
        fail(f"workloads {names}, expected {expected}")
    if "over seeds 1-2,5" not in r.stdout:
        fail("the text report does not name the seeds")

    # Each seed is its own run: the failure-injected records differ.
    kf = [w for w in report["workloads"] if w["name"] == "K+F"]
    injected = {w["policies"]["toposched"]["counts"]["failures_injected"] for w in kf}
    if len(injected) < 2:
        fail(f"K+F injected the same failures ({injected}) at every seed: seeds not applied")

    across = report["goals_across_seeds"]
    if not across:
        fail("no goals over seeds")
    checked = 0
    for goal in across:
        key = next((k for k in ("mean JCT", "preemption restarts", "under F >= slurm-tree")
                    if k in goal["figure"]), None)
        if key is None:
            continue
        runs = [per_seed_values(w).get(key) for w in report["workloads"]
                if w["name"] == goal["workload"]]
        if goal["seeds"] != 3 or len(runs) != 3:
            fail(f"{goal['figure']} on {goal['workload']}: {goal['seeds']} seeds, expected 3")
        met = sum(1 for v in runs if v and v[1])
        if goal["met"] != met:
            fail(f"{goal['figure']} on {goal['workload']}: met on {goal['met']}, recomputed {met}")
        values = [v[0] for v in runs if v and v[0] is not None]
        if values:
            mean = sum(values) / len(values)
            if goal["mean"] is None or abs(goal["mean"] - mean) > 1e-4 * max(1, abs(mean)):
                fail(f"{goal['figure']} on {goal['workload']}: mean {goal['mean']}, "
                     f"recomputed {mean}")
            if abs(goal["min"] - min(values)) > 1e-4 * max(1, abs(min(values))) or \
               abs(goal["max"] - max(values)) > 1e-4 * max(1, abs(max(values))):
                fail(f"{goal['figure']} on {goal['workload']}: range {goal['min']}..{goal['max']}")
        checked += 1
    if checked < 3:  # JCT on K, churn and ETTR on K+F
        fail(f"only {checked} goals over seeds checked")

    # Hostile --seeds values: refused, naming the flag, before any replay.
    for bad in ("3-1", "x", "1,,2", "1-2,2", "-4", "1-100", "99999999999"):
        r = run(binary, "--workloads", "K", "--seeds", bad, "--out", os.devnull)
        if r.returncode == 0 or "--seeds" not in r.stderr:
            fail(f"--seeds {bad!r}: exit {r.returncode}, stderr {r.stderr!r}")
    r = run(binary, "--workloads", "K", "--seed", "3", "--seeds", "1-2", "--out", os.devnull)
    if r.returncode == 0:
        fail("--seed with --seeds was accepted")
    print(f"ok: {checked} goals over 3 seeds match the per-seed records; bad --seeds refused")


if __name__ == "__main__":
    main()
