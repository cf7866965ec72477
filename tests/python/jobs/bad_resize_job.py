"""A job whose ``resize`` describes its shard at the wrong rows (examples_test's
``ABadResizeIsNamed``): rt-ft must refuse it with an error that names the shard, where it was put
and where it should be, on every rank left, and end the job; the shard is never filled."""
import argparse

import torch

import rtft

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
ROWS = 12
runtime = rtft.Runtime()
params = torch.zeros(8)


def state(rank, world_size, skew=0):
    first, count = rtft.split_evenly(ROWS, world_size, rank)
    moment = torch.zeros(count, 4)
    return rtft.State({"params": params,
                       "moment": rtft.Shard(moment, [ROWS, 4], [first + skew, 0])}, rng=False)


def resize(rank, world_size, shards):
    return state(rank, world_size, skew=1 if rank == 0 else -1)  # one row off: refused


protector = rtft.Protector(runtime)
protector.protect(state(runtime.current().rank, runtime.current().world_size), resize)
total = torch.zeros(8)


def compute(ctx):  # reads the state, never changes it
    ctx.comm.all_reduce(params.clone(), op="sum", out=total)


def update(ctx):
    params.add_(total / 1000 + 1)


try:
    protector.run(args.steps, compute, update)
except rtft.InvalidArgumentError as e:
    print(f"[bad_resize {runtime.current().rank}] refused: {e}", flush=True)
    raise SystemExit(3)
