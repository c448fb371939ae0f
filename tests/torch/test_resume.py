#!/usr/bin/python3
"""train_ddp.py resumed from a checkpoint equals an uninterrupted run, bit for bit.

Starts the ranks by hand on loopback (the environment topo-agent gives them),
with no torchrun. Cases:
  periodic: --checkpoint-every K; both ranks SIGKILLed after a checkpoint and
            a few more steps; restarted with TOPO_RESTART_COUNT=1.
  signal:   no periodic checkpoints; SIGUSR1 to every rank asks for one; then
            killed and restarted.
Exit 0 on success, 1 on a mismatch or failure, 77 (ctest skip) without torch.

Usage: /usr/bin/python3 tests/torch/test_resume.py [--ranks N] [--steps S]
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "train_ddp.py")
PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete_steps(ckdir):
    out = []
    if os.path.isdir(ckdir):
        for n in os.listdir(ckdir):
            if n.startswith("step-") and os.path.isfile(os.path.join(ckdir, n, "COMPLETE")):
                out.append(int(n[5:]))
    return sorted(out)


def start(world, ckdir, restart, out, extra, logdir, tag):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ)
        env.update({
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
            "WORLD_SIZE": str(world), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0", "TOPO_CHECKPOINT_DIR": ckdir, "TOPO_RESTART_COUNT": str(restart),
            "OMP_NUM_THREADS": "1",
        })
        log = open(os.path.join(logdir, "%s-rank-%d.log" % (tag, r)), "ab")
        procs.append(subprocess.Popen([PYTHON, SCRIPT, "--out", out] + extra, env=env,
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    return procs


def wait_all(procs, timeout):
    deadline = time.time() + timeout
    for p in procs:
        p.wait(timeout=max(1, deadline - time.time()))
    return [p.returncode for p in procs]


def kill_all(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait()


def wait_for(pred, timeout, procs):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        if any(p.poll() is not None for p in procs):
            return pred()
        time.sleep(0.05)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        print("SKIP: %s cannot import torch (apt-get install python3-torch)" % PYTHON)
        return 77
    work = tempfile.mkdtemp(prefix="topo-torch-")
    common = ["--steps", str(a.steps), "--hidden", str(a.hidden), "--step-sleep", "0.1"]
    ok = True
    try:
        ref = os.path.join(work, "ref.bin")
        rc = wait_all(start(a.ranks, os.path.join(work, "ck-ref"), 0, ref,
                            common + ["--checkpoint-every", "0"], work, "ref"), 300)
        if rc != [0] * a.ranks or not os.path.isfile(ref):
            print("FAIL: uninterrupted run exited %s (logs in %s)" % (rc, work))
            return 1
        for case in ("periodic", "signal"):
            ck = os.path.join(work, "ck-" + case)
            out = os.path.join(work, case + ".bin")
            k = a.steps // 3
            extra = common + ["--checkpoint-every", str(k if case == "periodic" else 0)]
            procs = start(a.ranks, ck, 0, out, extra, work, case)
            if case == "signal":
                # Wait for training to be under way, then ask for a checkpoint.
                log0 = os.path.join(work, "signal-rank-0.log")
                wait_for(lambda: b"step 3 " in open(log0, "rb").read(), 120, procs)
                for p in procs:
                    p.send_signal(signal.SIGUSR1)
            if not wait_for(lambda: complete_steps(ck), 120, procs):
                print("FAIL: %s: no complete checkpoint appeared" % case)
                kill_all(procs)
                ok = False
                continue
            first = complete_steps(ck)[0]
            time.sleep(0.35)  # a few more steps that the restart must redo
            kill_all(procs)
            if os.path.exists(out):
                print("FAIL: %s: the run finished before it was killed; lower --step-sleep" % case)
                ok = False
                continue
            steps_seen = complete_steps(ck)
            rc = wait_all(start(a.ranks, ck, 1, out, extra, work, case + "-resumed"), 300)
            log = open(os.path.join(work, case + "-resumed-rank-0.log")).read()
            resumed_at = [l for l in log.splitlines() if "starting at step" in l]
            same = os.path.isfile(out) and open(out, "rb").read() == open(ref, "rb").read()
            print("%s: first checkpoint step-%d, complete when killed %s, %s, exit %s, "
                  "final parameters %s (%d bytes)"
                  % (case, first, steps_seen, resumed_at[0] if resumed_at else "?", rc,
                     "IDENTICAL" if same else "DIFFERENT", os.path.getsize(ref)))
            ok = ok and same and rc == [0] * a.ranks and resumed_at and \
                not resumed_at[0].endswith("step 0")
    finally:
        if a.keep or not ok:
            print("work directory kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
