"""A job of 3 ranks under dp-launch (test_torch_backend.py's JobTest): groups of a protector in
Protector.run, with communicators of their own made through the job's store: a group of ranks
[0, 1] and one of [1, 2] (each rank binds the groups it is in, in one order), and point-to-point
lanes of the world group (every rank sends to the next before it receives from the previous
one).  Prints one line per rank with what it saw."""
import json
import os

import torch

import rtft
import rtft.torch

runtime = rtft.Runtime()
rank, world = runtime.current().rank, runtime.current().world_size
protector = rtft.Protector(runtime)
w = torch.zeros(1)
protector.protect(rtft.State({"w": w}, rng=False))
everyone = rtft.torch.ProcessGroup(protector, name="everyone")
subgroups = {tuple(r): rtft.torch.ProcessGroup(protector, ranks=r, name=f"sub{r[0]}{r[1]}")
             for r in ([0, 1], [1, 2]) if rank in r}
seen = []


def compute(ctx):
    out = {"step": ctx.step}
    x = torch.tensor([float(rank + 1)])
    everyone.allreduce([x]).wait()
    out["world"] = x.item()
    for ranks, g in sorted(subgroups.items()):
        y = torch.tensor([float(rank + 1)])
        g.allreduce([y]).wait()
        out[f"sub{ranks[0]}{ranks[1]}"] = y.item()
    got = torch.zeros(1, dtype=torch.int64)
    works = [everyone.send([torch.tensor([100 * ctx.step + rank])], (rank + 1) % world),
             everyone.recv([got], (rank - 1) % world)]
    for work in works:
        work.wait()
    out["received"] = got.item()
    seen.append(out)


def update(ctx):
    w.add_(1)


result = protector.run(3, compute, update)
# One write of the whole line (print writes the text and the newline apart): mpirun forwards each
# process's writes as they come, and the ranks' lines must not run into each other.
line = "GROUPS_JOB " + json.dumps({"rank": rank, "outcome": str(result.outcome), "seen": seen})
os.write(1, (line + "\n").encode())
