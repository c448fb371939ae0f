#!/usr/bin/python3
"""A small data-parallel training job for topo-agent's end-to-end tests.

Run by /usr/bin/python3 (Debian's python3-torch), CPU only, gloo backend.
Every rank is started with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (as
topo-agent or torchrun set them) and, for checkpoints, TOPO_CHECKPOINT_DIR.

Checkpoints follow node-agent/supervisor/CHECKPOINTS.md: on SIGUSR1 (or the
signal named by TOPO_CHECKPOINT_SIGNAL) and every --checkpoint-every K steps,
rank 0 writes TOPO_CHECKPOINT_DIR/step-N/state.pt (model, optimizer, step and
every rank's RNG state) and then step-N/COMPLETE; all ranks then barrier. The
ranks agree on the step to checkpoint at (an all-reduce of the signal flag
after every step), so a signal that reaches the ranks at different times
still gives one consistent checkpoint. On start the job resumes from
TOPO_RESTART_STEP when set, else from the newest complete step; rank 0 reads
it and broadcasts it, so only rank 0's node needs the checkpoint. A resumed
run is bit-identical to an uninterrupted one. At the end rank 0 writes the
final parameters (raw float32 bytes, in parameter order) to --out.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

_signalled = False


def _on_signal(signum, frame):  # noqa: ARG001
    global _signalled
    _signalled = True


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20, help="total optimizer steps")
    p.add_argument("--hidden", type=int, default=64, help="hidden width of the MLP")
    p.add_argument("--input", type=int, default=16, help="input features")
    p.add_argument("--batch", type=int, default=8, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="checkpoint every K steps (0: only on the signal)")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step (lets tests interrupt a run)")
    p.add_argument("--out", default="", help="rank 0 writes the final parameters here")
    return p.parse_args()


def complete_steps(ckdir):
    steps = []
    if not ckdir or not os.path.isdir(ckdir):
        return steps
    for name in os.listdir(ckdir):
        if not name.startswith("step-"):
            continue
        try:
            n = int(name[5:])
        except ValueError:
            continue
        if n >= 0 and os.path.isfile(os.path.join(ckdir, name, "COMPLETE")):
            steps.append(n)
    return sorted(steps)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(ckdir, step, state):
    """step-N/state.pt first, COMPLETE last (each durable before the next)."""
    d = os.path.join(ckdir, "step-%d" % step)
    if os.path.isfile(os.path.join(d, "COMPLETE")):
        return
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, ".state.pt.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, "state.pt"))
    ctmp = os.path.join(d, ".COMPLETE.tmp")
    with open(ctmp, "w") as f:
        f.write("%d\n" % step)
        f.flush()
        os.fsync(f.fileno())
    os.replace(ctmp, os.path.join(d, "COMPLETE"))
    fsync_path(d)
    fsync_path(ckdir)


def average_gradients(model, world):
    """Data parallelism: each gradient summed over the ranks, one all-reduce
    per parameter in parameter order. Not DistributedDataParallel: DDP
    regroups its gradient buckets after the first step of every run, so a
    resumed run reduces in another grouping than the uninterrupted one and,
    with more than 2 ranks, its sums differ in the last bits."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world


def main():
    global _signalled
    args = parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    ckdir = os.environ.get("TOPO_CHECKPOINT_DIR", "")
    restart_count = int(os.environ.get("TOPO_RESTART_COUNT", "0"))
    sig = int(os.environ.get("TOPO_CHECKPOINT_SIGNAL", str(int(signal.SIGUSR1))))
    signal.signal(sig, _on_signal)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.input, args.hidden),
        torch.nn.Tanh(),
        torch.nn.Dropout(p=0.1),  # uses the global RNG: its state is checkpointed
        torch.nn.Linear(args.hidden, 1),
    )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Per-rank data stream, and a per-rank global RNG for dropout.
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    torch.manual_seed(args.seed * 7919 + rank)
    target_w = torch.linspace(-1.0, 1.0, args.input)

    # Resume: rank 0 picks the step and broadcasts the whole state.
    start = 0
    box = [None]
    if rank == 0 and ckdir:
        steps = complete_steps(ckdir)
        want = os.environ.get("TOPO_RESTART_STEP", "")
        step = None
        if want and int(want) in steps:
            step = int(want)
        elif want and int(want) >= 0:
            print("rank 0: TOPO_RESTART_STEP=%s is not complete in %s" % (want, ckdir),
                  file=sys.stderr, flush=True)
            sys.exit(2)
        elif steps:
            step = steps[-1]
        if step is not None:
            with open(os.path.join(ckdir, "step-%d" % step, "state.pt"), "rb") as f:
                box[0] = torch.load(f)
    dist.broadcast_object_list(box, src=0)
    state = box[0]
    if state is not None:
        if state["world_size"] != world:
            raise SystemExit("checkpoint was written by %d ranks, not %d"
                             % (state["world_size"], world))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        mine = state["rng"][rank]
        torch.set_rng_state(mine["torch"])
        gen.set_state(mine["data"])
        start = state["step"]
    print("rank %d/%d: restart %d, starting at step %d" % (rank, world, restart_count, start),
          flush=True)

    def checkpoint(step):
        rng = [None] * world
        dist.all_gather_object(rng, {"torch": torch.get_rng_state(), "data": gen.get_state()})
        if rank == 0:
            write_checkpoint(ckdir, step, {
                "step": step,
                "world_size": world,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "rng": rng,
                "args": vars(args),
            })
            print("rank 0: checkpoint step-%d complete" % step, flush=True)
        dist.barrier()

    flag = torch.zeros(1)
    for step in range(start, args.steps):
        x = torch.randn(args.batch, args.input, generator=gen)
        y = (x @ target_w).unsqueeze(1) + 0.01 * torch.randn(args.batch, 1, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        average_gradients(model, world)
        opt.step()
        done = step + 1
        if rank == 0:
            print("step %d loss %.6f" % (done, loss.item()), flush=True)
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        asked, _signalled = _signalled, False  # a later signal counts for the next step
        flag[0] = 1.0 if asked else 0.0
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        periodic = args.checkpoint_every > 0 and done % args.checkpoint_every == 0
        if ckdir and (periodic or flag[0] > 0):
            checkpoint(done)

    if rank == 0 and args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "wb") as f:
            for p in model.parameters():
                f.write(p.detach().contiguous().numpy().tobytes())
        os.replace(tmp, args.out)
    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: done" % rank, flush=True)


if __name__ == "__main__":
    main()
