#!/usr/bin/python3
"""topo-agent's NVML backend end to end: a real topo-scheduler, a real topo-agent
with --gpu-backend nvml, and a job whose ranks run as an ordinary Unix account.

  - The node's GPUs, as the agent logs them ("GPU I: NAME, UUID, N MiB"), equal
    what this test reads itself from the same libnvidia-ml through ctypes (an
    independent NVML reader), and, where nvidia-smi is installed, what
    nvidia-smi says.
  - The node comes up with that many GPUs, and the scheduler gives a job all of
    them: every rank runs as the job's account with CUDA_VISIBLE_DEVICES (the
    node's GPUs in local-rank order) and CUDA_DEVICE_ORDER=PCI_BUS_ID.
  - Where a PyTorch with CUDA is found (GPU_TEST_PYTHON, or this interpreter),
    each rank opens CUDA device LOCAL_RANK, sums 2^20 numbers on it and prints
    the device's UUID, which must be the UUID NVML gives the GPU the scheduler
    assigned to that rank: the agent's GPU numbers and CUDA's agree.
  - The node stays up with no failed GPU for the whole run (no false health
    event from the real driver), and the agent stops on SIGTERM with status 0
    (its NVML event thread ends).

usage: test_real_gpu.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN [--nvml-library LIB]

Without --nvml-library it loads the machine's libnvidia-ml.so.1 and skips (77)
where there is none (no GPU here). CI runs it against the fake library of
node-agent/gpu/tests (two "Fake H100 80GB"), so the test itself is exercised on
every change; on a GPU machine it runs against the real driver
(docs/operations.md, "Checking a GPU node").
Standard library only; run as root (it creates a Unix account and cgroups).
"""

import ctypes
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agents import Agent, agent_cluster, job, nodes, run_jobs_as, setup, wait_for  # noqa: E402

SKIP = 77


class NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def nvml_inventory(library):
    """[(index, name, uuid, MiB)] read through NVML's C API with ctypes, or None
    when the library cannot be loaded or initialised."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0, "nvmlDeviceGetCount_v2 failed")
        out = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            check(nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == 0,
                  "nvmlDeviceGetHandleByIndex_v2(%d) failed" % i)
            name = ctypes.create_string_buffer(96)
            uuid = ctypes.create_string_buffer(96)
            mem = NvmlMemory()
            check(nvml.nvmlDeviceGetName(handle, name, 96) == 0, "nvmlDeviceGetName failed")
            check(nvml.nvmlDeviceGetUUID(handle, uuid, 96) == 0, "nvmlDeviceGetUUID failed")
            check(nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0,
                  "nvmlDeviceGetMemoryInfo failed")
            out.append((i, name.value.decode(), uuid.value.decode(), mem.total >> 20))
        return out
    finally:
        nvml.nvmlShutdown()


def smi_inventory():
    """nvidia-smi's [(index, name, uuid, MiB)], or None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    p = subprocess.run([smi, "--query-gpu=index,name,uuid,memory.total",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "nvidia-smi failed: %s" % p.stderr)
    out = []
    for line in p.stdout.strip().splitlines():
        i, name, uuid, mib = [f.strip() for f in line.split(",")]
        out.append((int(i), name, uuid, int(mib)))
    return out


def torch_python():
    """An interpreter whose torch sees a CUDA GPU, or None."""
    for py in [os.environ.get("GPU_TEST_PYTHON"), sys.executable, "/usr/bin/python3"]:
        if not py or not os.access(py, os.X_OK):
            continue
        p = subprocess.run([py, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode == 0 and p.stdout.strip() == "True":
            return py
    return None


RANK_PY = r"""
import os, torch
d = int(os.environ["LOCAL_RANK"])
p = torch.cuda.get_device_properties(d)
s = torch.arange(1 << 20, device="cuda:%d" % d, dtype=torch.float64).sum().item()
print("torch devices=%d uuid=%s sum=%d" % (torch.cuda.device_count(), p.uuid, s), flush=True)
"""


def main():
    sched_bin, agent_bin, topo_bin = sys.argv[1], sys.argv[2], sys.argv[3]
    library = "libnvidia-ml.so.1"
    if len(sys.argv) > 5 and sys.argv[4] == "--nvml-library":
        library = sys.argv[5]
    want = nvml_inventory(library)
    if want is None:
        print("SKIP: %s cannot be loaded or initialised here (no NVIDIA GPU)" % library)
        sys.exit(SKIP)
    check(len(want) > 0, "NVML reports no GPU")
    print("NVML (ctypes): %s" % want)
    if library == "libnvidia-ml.so.1":
        smi = smi_inventory()
        if smi is not None:
            print("nvidia-smi:    %s" % smi)
            check(smi == want, "nvidia-smi and NVML disagree: %s vs %s" % (smi, want))
    n = len(want)
    torch_py = torch_python() if library == "libnvidia-ml.so.1" else None
    print("PyTorch with CUDA: %s" % (torch_py or "none: the ranks check their environment only"))

    d = Daemon(sched_bin, config="heartbeat_interval_ms = 200\n").start()
    topology = {"version": 1, "name": "gpu-check", "tiers": ["node", "leaf"], "hbd": "node",
                "gpus_per_node": n, "gpu_model": "H100",
                "domains": [{"name": "leaf0", "nodes": ["g0"]}]}
    with agent_cluster(d, "topo-gpu-test-") as cluster:
        work, agents = cluster
        account = cluster.account("gpu")
        run_jobs_as(d, account)
        uid = int(subprocess.run(["id", "-u", account], capture_output=True, text=True,
                                 check=True).stdout)
        certs = setup(d, work, ["g0"], topology=topology)
        script = os.path.join(work, "rank.sh")
        with open(script, "w") as f:
            f.write('#!/bin/sh\n'
                    'echo "uid=$(id -u) rank=$RANK local=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES '
                    'order=$CUDA_DEVICE_ORDER"\n'
                    'if [ -n "$GPU_TEST_PYTHON" ]; then "$GPU_TEST_PYTHON" -c "$GPU_TEST_CODE"; fi\n'
                    # Runs until the test has read the ranks' GPUs from the scheduler.
                    'while [ ! -e %s ]; do sleep 0.1; done\n' % os.path.join(work, "go"))
        agent = Agent(agent_bin, d, work, "g0", certs["g0"][0], certs["g0"][1], "/bin/sh " + script,
                      nvml_library=library)
        agents["g0"] = agent.start()
        wait_for(lambda: nodes(d)["g0"]["state"] == "up" or not agent.alive(), 30, "g0 to come up")
        log = agent.log()
        check(agent.alive() and nodes(d)["g0"]["state"] == "up", "g0 did not come up:\n" + log)
        check("GPU backend: nvml: loaded %s, %d GPU(s)" % (library, n) in log,
              "the agent chose NVML with %d GPU(s):\n%s" % (n, log))
        for (index, name, uuid, mib) in want:
            line = "GPU %d: %s, %s, %d MiB" % (index, name, uuid, mib)
            check(line in log, "the agent's inventory line %r:\n%s" % (line, log))

        env = {}
        if torch_py:
            env = {"GPU_TEST_PYTHON": torch_py, "GPU_TEST_CODE": RANK_PY}
        submitted = d.api("POST", "/v1/jobs", {"spec": {"gpus": n, "name": "gpu-check",
                                                        "parallelism": {"tp": n}},
                                               "command": ["/bin/sh", script], "env": env},
                          expect=201)
        jid = submitted["id"]
        check(submitted["state"] == "running", "the job starts at once: %s" % submitted)
        gpu_of = {r["rank"]: r["gpu"] for r in job(d, jid)["ranks"]}
        check(sorted(gpu_of) == list(range(n)) and sorted(gpu_of.values()) == list(range(n)),
              "the job holds every GPU of g0, one a rank: %s" % gpu_of)
        with open(os.path.join(work, "go"), "w"):
            pass
        wait_for(lambda: job(d, jid)["state"] in ("completed", "failed"), 180, "the job to end")
        done = job(d, jid)
        logs = {}
        for r in range(n):
            path = os.path.join(agent.state_dir, "logs", str(jid), "rank-%d.log" % r)
            with open(path, errors="replace") as f:
                logs[r] = f.read()
        check(done["state"] == "completed", "the job completed: %s\n%s" % (done, logs))
        cvd = ",".join(str(gpu_of[r]) for r in range(n))  # local rank = rank on one node
        for r in range(n):
            line = "uid=%d rank=%d local=%d cvd=%s order=PCI_BUS_ID" % (uid, r, r, cvd)
            check(line in logs[r], "rank %d's environment %r:\n%s" % (r, line, logs[r]))
            if torch_py:
                uuid = want[gpu_of[r]][2]
                got = "torch devices=%d uuid=%s sum=%d" % (n, uuid[4:] if uuid.startswith("GPU-")
                                                          else uuid, (1 << 20) * ((1 << 20) - 1) // 2)
                check(got in logs[r], "rank %d drove GPU %d (%s) through CUDA: want %r in\n%s" %
                      (r, gpu_of[r], uuid, got, logs[r]))
                print("rank %d: GPU %d %s: %s" % (r, gpu_of[r], uuid, got))

        node = nodes(d)["g0"]
        check(node["state"] == "up", "g0 stayed up: %s" % node)
        check("GPU event:" not in agent.log(),
              "no GPU health event from a healthy GPU:\n" + agent.log())
        t0 = time.time()
        rc = agent.terminate()
        check(rc == 0, "the agent exited %s on SIGTERM:\n%s" % (rc, agent.log()))
        print("agent stopped on SIGTERM in %.2f s" % (time.time() - t0))
    d.stop()
    print("OK: %d GPU(s) through NVML (%s)%s" % (n, library, ", CUDA checked" if torch_py else ""))


if __name__ == "__main__":
    run(main)
