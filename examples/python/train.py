"""A data-parallel PyTorch loop that survives a lost slot (examples/README.md, docs/python.md).

Gradients are averaged by rt-ft's own all-reduce on flattened buckets (no torch.distributed: its
process group dies with a peer); the parameters and AdamW's state are protected every step; a
spare takes a lost rank and the run ends with the digest of a run without the failure. The
State holds the random generators too (dropout's masks), each rank its own, so the step that a
recovery runs again draws the same masks.

  mpirun -np 4 --enable-recovery dp-launch --spares 1 -- python3 examples/python/train.py
"""
import argparse
import hashlib
import os

import torch

import rtft

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--device", default="cpu")  # cuda: ranks share a GPU, Gloo on the host
args = parser.parse_args()
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts
torch.use_deterministic_algorithms(True)  # the same bits on every run, as are the data
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(64, 1))
model.to(args.device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
rtft.init_optimizer_state(optimizer)  # AdamW's moments exist before the first step
params = list(model.parameters())
grads = torch.zeros(sum(p.numel() for p in params))  # host memory, for Gloo

runtime = rtft.Runtime()  # a warm spare waits here until it takes a lost rank
torch.manual_seed(1 + runtime.current().rank)  # each rank's dropout masks its own
protector = rtft.Protector(runtime)
protector.protect(rtft.State({"model": model, "optim": optimizer}))


def compute(ctx):  # forward and backward on this rank's batch, then the average
    g = torch.Generator().manual_seed(1000 * ctx.step + ctx.rank)
    x = torch.randn(64, 32, generator=g).to(args.device)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
    grads.copy_(torch.cat([d.reshape(-1) for d in torch.autograd.grad(loss, params)]))
    for bucket in grads.split(1024):  # a lost peer aborts it: the step recovers
        ctx.comm.all_reduce(bucket, op="avg")


def update(ctx):  # runs once the step's snapshot is taken
    for p, g in zip(params, grads.split([p.numel() for p in params])):
        p.grad = g.view_as(p).to(p.device)
    optimizer.step()


result = protector.run(args.steps, compute, update)
if result.outcome == rtft.RunOutcome.DONE:
    state = params + [v for s in optimizer.state.values() for v in s.values()]
    digest = hashlib.sha256(b"".join(t.detach().cpu().numpy().tobytes() for t in state))
    print(f"[py_train {runtime.current().rank}] done steps={result.next_step} "
          f"digest={digest.hexdigest()[:16]}", flush=True)
