"""topo-slurm-task as Slurm's TaskEpilog removes only what its TaskProlog wrote
for the job (scheduler/slurm_task/topo_slurm_task.cpp), run here as slurmstepd
runs it: a real process with SLURM_SCRIPT_CONTEXT=epilog_task, in a real
$TMPDIR holding the job's files beside files it must leave (hostile-input rows:
another job's, a symlink named like the job's, a file of another Unix user, a
directory, names that are near misses). Needs no Slurm.

    test_task_epilog.py TOPO_SLURM_TASK
"""

import os
import shutil
import subprocess
import sys
import tempfile


def run(task, tmp, env_extra):
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": tmp, "SLURM_JOB_ID": "4242"}
    env.update(env_extra)
    return subprocess.run([task], env=env, capture_output=True, text=True, timeout=30)


def touch(path, text="gpu0001\n"):
    with open(path, "w") as f:
        f.write(text)


def main():
    task = sys.argv[1]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    tmp = tempfile.mkdtemp(prefix="topo-task-epilog-")
    try:
        # What the TaskProlog of a placed job writes, through the binary itself
        # (TOPO_SCONTROL answers with a rank map of two ranks on one node).
        fake = os.path.join(tmp, "scontrol")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'JobId=4242 AdminComment=toposched:7 ranks=gpu0001 "
                    "map=0:0-1 layout=tp:2 Comment=x'\n")
        os.chmod(fake, 0o755)
        prolog = run(task, tmp, {"TOPO_SCONTROL": fake})
        written = sorted(n for n in os.listdir(tmp) if n.startswith("topo-4242-"))
        check(len(written) == 2 and "export SLURM_HOSTFILE=" in prolog.stdout,
              "the prolog wrote the hostfile and nodefile: %s\n%s%s"
              % (written, prolog.stdout, prolog.stderr))

        keep = {
            "another job's hostfile": "topo-4243-hosts-AbC123",
            "a job id that only starts alike": "topo-42421-hosts-AbC123",
            "a name with a seventh letter": "topo-4242-hosts-AbC1234",
            "a name with five letters": "topo-4242-hosts-AbC12",
            "a name with a dot": "topo-4242-nodes-Ab.123",
            "another kind of file": "topo-4242-ranks-AbC123",
        }
        for name in keep.values():
            touch(os.path.join(tmp, name))
        target = os.path.join(tmp, "precious")
        touch(target, "not the job's\n")
        os.symlink(target, os.path.join(tmp, "topo-4242-hosts-Link01"))
        keep["a symlink named like the job's file"] = "topo-4242-hosts-Link01"
        os.mkdir(os.path.join(tmp, "topo-4242-nodes-Dir001"))
        keep["a directory named like it"] = "topo-4242-nodes-Dir001"
        foreign = os.path.join(tmp, "topo-4242-hosts-Other1")
        touch(foreign)
        os.chown(foreign, 65534, 65534)  # nobody's: not this user's to remove
        keep["another user's file"] = "topo-4242-hosts-Other1"

        # A step's task epilog leaves everything: the script's next srun reads them.
        step = run(task, tmp, {"SLURM_SCRIPT_CONTEXT": "epilog_task", "SLURM_STEP_ID": "0"})
        check(step.returncode == 0, "a step's epilog exits 0: %s" % step.stderr)
        check(all(os.path.exists(os.path.join(tmp, n)) for n in written),
              "a step's task epilog removed the batch script's files")

        # The batch script's task epilog: the two files go, nothing else.
        batch = run(task, tmp, {"SLURM_SCRIPT_CONTEXT": "epilog_task"})
        check(batch.returncode == 0 and batch.stdout == "",
              "the batch epilog exits 0 and prints nothing: %d %r %r"
              % (batch.returncode, batch.stdout, batch.stderr))
        check(not any(os.path.exists(os.path.join(tmp, n)) for n in written),
              "the batch epilog left the job's files: %s" % written)
        for why, name in keep.items():
            check(os.path.lexists(os.path.join(tmp, name)), "removed %s (%s)" % (why, name))
        with open(target) as f:
            check(f.read() == "not the job's\n", "the symlink's target is untouched")

        # A prolog context runs as before (no removal): the files come back.
        again = run(task, tmp, {"TOPO_SCONTROL": fake, "SLURM_SCRIPT_CONTEXT": "prolog_task"})
        check("export SLURM_HOSTFILE=" in again.stdout, "prolog_task still writes: %r" % again.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print("ok task epilog: the job's hostfile and nodefile removed after the batch script; "
          "%d look-alikes kept" % len(keep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
