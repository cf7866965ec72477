"""DistributedDataParallel under the hot swap (docs/python.md, "DDP as people write it").

A model with LayerNorm and dropout, AdamW, a DataLoader: ordinary DDP code over
rtft.torch.ProcessGroup, the group that survives a lost peer. rt-ft's part is marked; the run
ends with the digest of a run without the failure.

  mpirun -np 4 --enable-recovery dp-launch --spares 1 -- python3 examples/python/train_ddp.py
  (--device cuda: the model on this rank's GPU; ranks sharing one GPU go through host buffers)
"""
import argparse
import hashlib
import os

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import rtft
import rtft.torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
args = parser.parse_args()
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts
torch.use_deterministic_algorithms(True)  # the same bits on every run
torch.set_num_threads(1)
torch.manual_seed(0)  # the same model on every rank: DDP's start-up broadcast is skipped
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                            torch.nn.Dropout(0.1), torch.nn.Linear(64, 1))
inputs = torch.randn(4096, 32)
data = TensorDataset(inputs, inputs.sum(1, keepdim=True).sin())

runtime = rtft.Runtime()  # rt-ft: a warm spare waits here until it takes a lost rank
rank, world = runtime.current().rank, runtime.current().world_size
device = torch.device("cpu")
if args.device == "cuda":
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
torch.manual_seed(1 + rank)  # each rank's dropout masks its own
rtft.init_optimizer_state(optimizer)  # rt-ft: AdamW's moments exist before the first step
protector = rtft.Protector(runtime)  # rt-ft
protector.protect(rtft.State({"model": model, "optim": optimizer}))  # rt-ft (+ the RNG)
group = rtft.torch.ProcessGroup(protector)  # rt-ft: rebound to each step's communicator
ddp = DistributedDataParallel(model, process_group=group, find_unused_parameters=True)
sampler = rtft.torch.StepSampler(len(data), 16, rank, world, seed=0)  # rt-ft: (step, rank)
loader = DataLoader(data, batch_sampler=sampler)


def compute(ctx):  # forward and backward; DDP averages the gradients through the group
    sampler.step = ctx.step  # rt-ft: this step's batch, also when a step runs again
    x, y = (t.to(device) for t in next(iter(loader)))
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()


def update(ctx):  # runs once the step's snapshot is taken
    optimizer.step()


result = protector.run(args.steps, compute, update)  # rt-ft
if result.outcome == rtft.RunOutcome.DONE:
    state = list(model.parameters()) + [v for s in optimizer.state.values() for v in s.values()]
    digest = hashlib.sha256(b"".join(t.detach().cpu().numpy().tobytes() for t in state))
    print(f"[py_ddp {rank}] done steps={result.next_step} digest={digest.hexdigest()[:16]}",
          flush=True)
