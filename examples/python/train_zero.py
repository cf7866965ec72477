"""ZeRO-1 that goes on with fewer ranks when no spare is left (examples/README.md, docs/python.md).

Each rank updates its own rows of the parameters with AdamW (torch's, on a shard parameter) and
holds only those rows of AdamW's moments; the parameters are gathered after every update. With
``dp-launch --on-spares-exhausted shrink`` a lost rank with no spare to take it shrinks the job:
rt-ft asks ``resize`` for the state laid out over the ranks left (each sharded tensor's first
dimension split evenly over them) and moves every row of the moments to its new owner, from the
survivors' snapshots and the lost rank's replica.

The arithmetic does not depend on the number of ranks, so a run that shrank ends bit for bit
like one that never did: the global batch is 12 micro-batches of 16 samples, each rank computes
the gradients of a contiguous run of them, and they are gathered (copied, not summed) and summed
in one order on every rank; the shard rows are whole blocks of 64 values, so AdamW's vectorised
loops see no partial vector whatever the split.

  mpirun -np 3 --enable-recovery dp-launch --spares 0 --on-spares-exhausted shrink -- \\
      python3 examples/python/train_zero.py
"""
import argparse
import hashlib

import torch

import rtft

BLOCK = 64  # values per row of the sharded tensors
MICRO = 12  # micro-batches per step, split over the ranks

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=24)
args = parser.parse_args()
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
params = list(model.parameters())
numel = sum(p.numel() for p in params)
rows = -(-numel // BLOCK)
# One flat buffer of whole rows holds the parameters; the model's parameters are views of it.
flat = torch.zeros(rows * BLOCK)
at = 0
for p in params:
    flat[at:at + p.numel()] = p.detach().reshape(-1)
    p.data = flat[at:at + p.numel()].view_as(p)
    at += p.numel()
table = flat.view(rows, BLOCK)
grads = torch.zeros(MICRO, rows * BLOCK)


class Zero:
    """This rank's rows of the parameters (a torch Parameter AdamW updates) and AdamW itself,
    whose moments are exactly those rows' moments."""

    def __init__(self, rank, world_size):
        self.first, self.count = rtft.split_evenly(rows, world_size, rank)
        self.shard = torch.nn.Parameter(table[self.first:self.first + self.count].clone())
        self.optimizer = torch.optim.AdamW([self.shard], lr=1e-2)
        rtft.init_optimizer_state(self.optimizer)  # the moments exist before the first step

    def state(self):
        moments = self.optimizer.state[self.shard]
        return rtft.State({
            "params": flat,  # every rank's full copy (replicated)
            "step": moments["step"],
            "exp_avg": rtft.Shard(moments["exp_avg"], [rows, BLOCK], [self.first, 0]),
            "exp_avg_sq": rtft.Shard(moments["exp_avg_sq"], [rows, BLOCK], [self.first, 0]),
        })


runtime = rtft.Runtime()  # a warm spare, if any, waits here until it takes a lost rank
zero = Zero(runtime.current().rank, runtime.current().world_size)


def resize(rank, world_size, shards):
    """The state laid out over the ranks left: rt-ft gives each sharded tensor's new rows
    (``shards``: name, dtype, shape, global_shape, offset) and fills them once described."""
    global zero
    zero = Zero(rank, world_size)
    for s in shards:  # the same split as rt-ft's: say so loudly if it ever differs
        if s["offset"][0] != zero.first or s["shape"][0] != zero.count:
            raise RuntimeError(f"resize: rt-ft put {s['name']} at rows {s['offset'][0]}, "
                               f"{s['shape'][0]} of them; this program split them at "
                               f"{zero.first}, {zero.count}")
    return zero.state()


protector = rtft.Protector(runtime)
protector.protect(zero.state(), resize)


def gather_rows(comm, mine, out):
    """Every rank's rows of a sharded tensor, copied into ``out`` in order."""
    counts = [rtft.split_evenly(rows, comm.world_size, r)[1] * BLOCK
              for r in range(comm.world_size)]
    comm.all_gather_v(mine.reshape(-1), out.reshape(-1), counts)


def compute(ctx):  # this rank's micro-batches, then every rank's gradients gathered
    first, count = rtft.split_evenly(MICRO, ctx.world_size, ctx.rank)
    for m in range(first, first + count):
        g = torch.Generator().manual_seed(1000 * ctx.step + m)
        x = torch.randn(16, 32, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
        grads[m, :numel] = torch.cat([d.reshape(-1) for d in torch.autograd.grad(loss, params)])
    counts = [rtft.split_evenly(MICRO, ctx.world_size, r)[1] * rows * BLOCK
              for r in range(ctx.world_size)]
    ctx.comm.all_gather_v(grads[first:first + count].reshape(-1), grads.view(-1), counts)


def update(ctx):  # runs once the step's snapshot is taken
    zero.shard.data.copy_(table[zero.first:zero.first + zero.count])
    zero.shard.grad = (grads.sum(0) / MICRO).view(rows, BLOCK)[zero.first:zero.first + zero.count]
    zero.optimizer.step()
    gather_rows(ctx.comm, zero.shard.detach(), table)


result = protector.run(args.steps, compute, update)
if result.outcome == rtft.RunOutcome.DONE:
    digest = hashlib.sha256(flat.numpy().tobytes())
    moments = zero.optimizer.state[zero.shard]
    for key in ("exp_avg", "exp_avg_sq"):  # the whole moments, whatever the world's size
        whole = torch.zeros(rows, BLOCK)
        gather_rows(protector.comm, moments[key], whole)
        digest.update(whole.numpy().tobytes())
    digest.update(moments["step"].numpy().tobytes())
    now = runtime.current()
    print(f"[py_zero {now.rank}] done steps={result.next_step} world={now.world_size} "
          f"digest={digest.hexdigest()[:16]}", flush=True)
