#!/usr/bin/python3
"""`topo demo`, the offline demonstration `make demo` ends with, as a user runs it.

    test_demo.py TOPO

The text report and `--json` describe the same cases; in the JSON every case
lists every policy, and toposched's placement of each big job meets its
required constraints, is predicted faster than a baseline's that breaks one,
and is predicted at most 2 % slower than any (the report's prediction is with
idle links; the placer compares its candidates with the oversubscribed links
saturated, so on an empty cluster a baseline's pipeline-across mapping can be
a little faster at idle). A bad flag is refused with the flag's name and no
report. Standard library only.
"""

import json
import subprocess
import sys


def run(topo, *args):
    return subprocess.run([topo, "demo"] + list(args), capture_output=True, text=True, timeout=120)


def main():
    topo = sys.argv[1]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    text = run(topo, "--no-map")
    check(text.returncode == 0, "topo demo exits 0: %s" % text.stderr)
    headers = [line for line in text.stdout.splitlines() if line.startswith("==== ")]

    r = run(topo, "--json", "--fill", "10", "--seed", "7")
    check(r.returncode == 0, "topo demo --json exits 0: %s" % r.stderr)
    out = json.loads(r.stdout)
    check(out["fill_percent"] == 10 and out["seed"] == 7, "the fill and seed asked for: %s" %
          {k: out[k] for k in ("fill_percent", "seed")})
    cases = out["cases"]
    check(len(cases) == len(headers) and len(cases) > 0,
          "%d cases in JSON, %d in the text report" % (len(cases), len(headers)))
    for case in cases:
        name = "%s on %s" % (case["job"]["name"], case["topology"])
        check(0.05 < case["busy_fraction"] < 0.2, "%s: filled to about 10 %%: %s" %
              (name, case["busy_fraction"]))
        check(case["job"]["gpus"] <= case["gpus"], name + ": the job fits the cluster")
        policies = {p["policy"]: p for p in case["policies"]}
        check(set(policies) == {"toposched", "slurm-tree", "first-fit"},
              "%s: every policy: %s" % (name, sorted(policies)))
        ours = policies.get("toposched", {})
        if ours.get("outcome") != "placed":
            # Too busy for the job is an answer, when it is everybody's.
            check(not any(p["outcome"] == "placed" for p in policies.values()),
                  "%s: a baseline placed it, toposched did not: %s" % (name, ours))
            check(bool(ours.get("reason")), name + ": the reason it was not placed")
            continue
        check(ours["metrics"]["required_met"], name + ": toposched meets the required constraints")
        check(ours["predicted"]["step_s"] > 0, name + ": a predicted step time")
        for other, p in policies.items():
            if other == "toposched" or p["outcome"] != "placed":
                continue
            mine, theirs = ours["predicted"]["slowdown"], p["predicted"]["slowdown"]
            check(mine <= 1.02 * theirs,
                  "%s: toposched predicted %.3fx, %s %.3fx" % (name, mine, other, theirs))
            if not p["metrics"]["required_met"]:
                check(mine < theirs, "%s: %s breaks a required constraint, yet toposched is "
                      "predicted %.3fx against its %.3fx" % (name, other, mine, theirs))

    for args, needle in ((["--fill", "99"], "--fill"), (["--seed", "x"], "--seed"),
                         (["--bogus"], "--bogus")):
        bad = run(topo, *args)
        check(bad.returncode != 0 and needle in bad.stderr and not bad.stdout,
              "topo demo %s is refused naming %s: rc %d, %r" %
              (" ".join(args), needle, bad.returncode, bad.stderr))

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("ok: topo demo, %d cases in text and JSON, toposched meets every required constraint, "
          "bad flags refused" %
          len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
