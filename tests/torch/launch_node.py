#!/usr/bin/python3
"""Plays torchrun's part for tests/torch/test_launch_modes.py in node mode
(Debian's /usr/bin/torchrun crashes on start): started once per node with
GROUP_RANK, GROUP_WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT and
WORLD_SIZE, it starts LOCAL_WORLD_SIZE workers with RANK = GROUP_RANK *
LOCAL_WORLD_SIZE + i and LOCAL_RANK = i, as `torchrun --node-rank
$GROUP_RANK` does, and exits with the first failure among them."""

import os
import subprocess
import sys

local = int(os.environ["LOCAL_WORLD_SIZE"])
group = int(os.environ["GROUP_RANK"])
nnodes = int(os.environ["GROUP_WORLD_SIZE"])
if nnodes * local != int(os.environ["WORLD_SIZE"]) or "RANK" in os.environ:
    print("NODE-ENV-WRONG %r" % sorted(os.environ), flush=True)
    sys.exit(2)
print("NODE group_rank=%d ranks=%s" % (group, os.environ["TOPO_NODE_RANKS"]), flush=True)
workers = []
for i in range(local):
    env = dict(os.environ, RANK=str(group * local + i), LOCAL_RANK=str(i),
               ROLE_RANK=str(group * local + i), GROUP_RANK=str(group))
    workers.append(subprocess.Popen([sys.executable, sys.argv[1]], env=env))
codes = [w.wait() for w in workers]
sys.exit(next((c for c in codes if c != 0), 0))
