"""`topo --help` and every verb's: a listing of verbs shows one line each.

    test_help.py TOPO

Each verb's description starts with a one-line summary; the listings (`topo
--help`, `topo users --help`, ...) show that line alone, and `topo VERB --help`
the whole text. This walks every listing and fails where an entry takes more
than one line or is too long to read at a glance. Standard library only.
"""

import re
import subprocess
import sys

MAX_SUMMARY = 96  # characters after the name column
ENTRY = re.compile(r"^  (\S+)\s{2,}(\S.*)$")
SECTIONS = ("Subcommands:", "Offline tools:", "Cluster (talk to topo-scheduler):")


def listing(topo, args):
    """[(name, summary, continuation lines)] of the verb listings in `topo ARGS --help`."""
    r = subprocess.run([topo] + args + ["--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (args, r.stderr)
    entries, inside = [], False
    for line in r.stdout.splitlines():
        if line in SECTIONS:
            inside = True
            continue
        if not inside:
            continue
        if not line:  # an empty line ends the section; CLI11 indents an entry's own blank lines
            inside = False
            continue
        m = ENTRY.match(line)
        if m:
            entries.append([m.group(1), m.group(2), 0])
        elif entries:
            entries[-1][2] += 1  # an indented continuation of the entry above
    return entries


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    topo = sys.argv[1]
    failures = []
    top = listing(topo, [])
    if len(top) < 20:
        failures.append("topo --help lists %d verbs" % len(top))
    walked = 0
    todo = [[name] for name, _, _ in top]
    seen = [([], top)]
    while todo:
        args = todo.pop()
        sub = listing(topo, args)
        seen.append((args, sub))
        todo += [args + [name] for name, _, _ in sub]
    for args, entries in seen:
        for name, summary, more in entries:
            walked += 1
            where = "topo %s--help: %s" % (" ".join(args) + " " if args else "", name)
            if more:
                failures.append("%s takes %d more line(s)" % (where, more))
            if len(summary) > MAX_SUMMARY:
                failures.append("%s: %d characters: %s" % (where, len(summary), summary))
    for f in failures:
        print("FAIL " + f)
    print("help listings: %d entries in %d listings, %d failed" % (walked, len(seen), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
