"""Every doctest case must be runnable by its ctest name.

doctest_discover_tests turns each TEST_CASE name into a ctest test that runs
`binary --test-case=NAME`. A ';' in the name is CMake's list separator: the
case becomes two tests whose filters match nothing, both pass and the case
never runs (ten cases were lost that way). A name used twice in one binary
gives ctest two tests that each run both cases. This scan refuses both.

    test_case_names.py REPO_ROOT
"""

import os
import re
import sys
from collections import defaultdict

CASE = re.compile(r'\bTEST_CASE\(\s*"((?:[^"\\]|\\.)*)"')


def main():
    root = sys.argv[1]
    bad = []
    seen = defaultdict(list)
    count = 0
    for top in ("common", "core", "cli", "scheduler", "node-agent", "plugins", "bench", "tests"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, errors="replace") as f:
                    text = f.read()
                for m in CASE.finditer(text):
                    count += 1
                    line = text.count("\n", 0, m.start()) + 1
                    where = "%s:%d" % (os.path.relpath(path, root), line)
                    case = m.group(1)
                    if ";" in case:
                        bad.append("%s: TEST_CASE(\"%s\") has a ';', which splits it into ctest "
                                   "tests that run nothing; use ',' instead" % (where, case))
                    seen[(os.path.dirname(path), case)].append(where)
    for (_, case), wheres in seen.items():
        if len(wheres) > 1:
            bad.append("TEST_CASE(\"%s\") is defined %d times in one directory: %s"
                       % (case, len(wheres), ", ".join(wheres)))
    if count < 100:
        bad.append("only %d TEST_CASEs found under %s: is it the repository root?" % (count, root))
    for b in bad:
        print(b)
    if bad:
        return 1
    print("ok: %d doctest cases, none with a ';' or a twin in its directory" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
