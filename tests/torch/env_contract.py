#!/usr/bin/python3
"""One rank of a job that checks the environment topo-agent gives it
(docs/jobs.md) and then uses it the way a PyTorch job does.

Every rank checks its own variables, joins the world with gloo
(init_method="env://"), all-reduces over the world, builds the tensor-
parallel groups from the TOPO_TP_GROUP every rank reports, and all-reduces
over its own. It prints one line `CONTRACT {json}` with what it saw and
the problems it found (none expected), and rank 0 prints `WORLD {json}`
with every rank's view. Exit 0 when this rank found no problem, else 1.

Run by /usr/bin/python3 (Debian's python3-torch), CPU only.
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    env = os.environ
    problems = []

    def need(ok, what):
        if not ok:
            problems.append(what)

    def num(name):
        try:
            return int(env[name])
        except (KeyError, ValueError):
            problems.append("%s missing or not a number: %r" % (name, env.get(name)))
            return -1

    rank, world = num("RANK"), num("WORLD_SIZE")
    local, local_world = num("LOCAL_RANK"), num("LOCAL_WORLD_SIZE")
    group, group_world = num("GROUP_RANK"), num("GROUP_WORLD_SIZE")
    size = {k: num("TOPO_%s_SIZE" % k.upper()) for k in ("tp", "cp", "ep", "pp", "dp")}
    coord = {k: num("TOPO_%s_RANK" % k.upper()) for k in ("tp", "cp", "ep", "pp", "dp")}
    tp_group = num("TOPO_TP_GROUP")

    # torchrun's variables.
    need(env.get("ROLE_RANK") == str(rank), "ROLE_RANK %r != RANK" % env.get("ROLE_RANK"))
    need(env.get("ROLE_WORLD_SIZE") == str(world), "ROLE_WORLD_SIZE != WORLD_SIZE")
    need(env.get("ROLE_NAME") == "default", "ROLE_NAME %r" % env.get("ROLE_NAME"))
    need(env.get("TORCHELASTIC_RUN_ID") == "topo-" + env.get("TOPO_JOB_ID", "?"),
         "TORCHELASTIC_RUN_ID %r" % env.get("TORCHELASTIC_RUN_ID"))
    need(env.get("TORCHELASTIC_RESTART_COUNT") == env.get("TOPO_RESTART_COUNT") == "0",
         "restart counts %r %r" % (env.get("TORCHELASTIC_RESTART_COUNT"),
                                   env.get("TOPO_RESTART_COUNT")))
    need("TORCHELASTIC_MAX_RESTARTS" in env, "TORCHELASTIC_MAX_RESTARTS missing")
    need(env.get("OMP_NUM_THREADS") == "1", "OMP_NUM_THREADS %r" % env.get("OMP_NUM_THREADS"))
    need(env.get("MASTER_ADDR") and env.get("MASTER_PORT", "").isdigit(), "MASTER_ADDR/PORT")
    need(0 <= rank < world and 0 <= local < local_world and 0 <= group < group_world,
         "ranks in range")
    # LOCAL_RANK indexes CUDA_VISIBLE_DEVICES: the node's GPUs of the job.
    devices = env.get("CUDA_VISIBLE_DEVICES", "").split(",")
    need(len(devices) == local_world and len(set(devices)) == local_world,
         "CUDA_VISIBLE_DEVICES %r has not LOCAL_WORLD_SIZE distinct GPUs" % devices)
    gpu = devices[local] if 0 <= local < len(devices) else None
    # Dense blocks of equal size per node.
    need(rank == group * local_world + local,
         "RANK %d != GROUP_RANK %d * LOCAL_WORLD_SIZE %d + LOCAL_RANK %d"
         % (rank, group, local_world, local))
    # Megatron's tp-cp-ep-dp-pp order (TP fastest, EP inside DP).
    need(size["tp"] * size["cp"] * size["pp"] * size["dp"] == world, "degrees * != WORLD_SIZE")
    megatron = coord["tp"] + size["tp"] * (coord["cp"] + size["cp"] * (
        coord["dp"] + size["dp"] * coord["pp"]))
    need(megatron == rank, "TOPO_*_RANK %s give rank %d, not %d" % (coord, megatron, rank))
    need(tp_group == rank // size["tp"], "TOPO_TP_GROUP %d for rank %d" % (tp_group, rank))
    # Nothing of the agent's environment.
    leaked = [k for k in env if k.startswith(("TOPO_SERVER", "TOPO_CA", "TOPO_TOKEN", "INVOCATION"))]
    need(not leaked, "agent variables leaked: %s" % leaked)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    mine = {"rank": rank, "group_rank": group, "local_rank": local, "gpu": gpu,
            "tp_group": tp_group, "tp_rank": coord["tp"], "pp_rank": coord["pp"],
            "dp_rank": coord["dp"], "uid": os.getuid()}
    views = [None] * world
    dist.all_gather_object(views, mine)

    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    need(total.item() == world * (world - 1) / 2, "world all-reduce gave %s" % total.item())

    # The TP groups, from what every rank said; every rank creates every
    # group in the same order (torch.distributed requires it).
    members = {}
    for v in views:
        members.setdefault(v["tp_group"], []).append(v["rank"])
    handles = {g: dist.new_group(sorted(r)) for g, r in sorted(members.items())}
    ours = sorted(members.get(tp_group, []))
    need(ours == [rank - coord["tp"] + i for i in range(size["tp"])],
         "TP group %d is %s" % (tp_group, ours))
    tp_sum = torch.tensor([float(rank)])
    dist.all_reduce(tp_sum, group=handles[tp_group])
    need(tp_sum.item() == sum(ours), "TP all-reduce gave %s, not %s" % (tp_sum.item(), sum(ours)))

    mine["problems"] = problems
    print("CONTRACT " + json.dumps(mine, sort_keys=True), flush=True)
    if rank == 0:
        print("WORLD " + json.dumps(views, sort_keys=True), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
