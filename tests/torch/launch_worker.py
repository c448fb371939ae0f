#!/usr/bin/python3
"""One worker of tests/torch/test_launch_modes.py: joins the gloo group from
the torchrun environment (env://), all-reduces RANK + 1 over the world and
prints one RESULT line (JSON) to its standard output."""

import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
print("RESULT " + json.dumps({
    "rank": dist.get_rank(), "world": dist.get_world_size(), "sum": x.item(),
    "env_rank": int(os.environ["RANK"]), "local_rank": int(os.environ["LOCAL_RANK"]),
    "group_rank": int(os.environ["GROUP_RANK"]), "job_value": os.environ.get("JOB_VALUE"),
    "cwd": os.getcwd(), "uid": os.getuid()}), flush=True)
dist.destroy_process_group()
