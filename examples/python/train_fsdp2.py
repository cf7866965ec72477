"""FSDP2, and HSDP with --replicate, under the hot swap (docs/python.md, "FSDP2 and HSDP").

Ordinary FSDP2 code (torch 2.4 or later) over rt-ft's backend: torch.distributed's default
group, the DeviceMesh and its groups are rtft.torch.ProcessGroups, rebound to each recovery
epoch's communicators, so a spare that takes a lost rank joins the same mesh.  rt-ft's part is
marked; each rank ends with the digest of its shards in a run without the failure.

  mpirun -np 3 --enable-recovery dp-launch --spares 1 -- python3 examples/python/train_fsdp2.py
  mpirun -np 5 --enable-recovery dp-launch --spares 1 -- \
      python3 examples/python/train_fsdp2.py --replicate 2 --device cuda      # HSDP 2x2
"""
import argparse
import hashlib
import os

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
# fully_shard imports torch._dynamo at its first call (about 2 s): a warm spare imports it first.
import torch._dynamo  # noqa: F401

import rtft
import rtft.torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--replicate", type=int, default=1, help="HSDP: replicas of each shard")
args = parser.parse_args()
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts
torch.use_deterministic_algorithms(True)  # the same bits on every run
torch.set_num_threads(1)

runtime = rtft.Runtime()  # rt-ft: a warm spare waits here until it takes a lost rank
rank, world = runtime.current().rank, runtime.current().world_size
if world % args.replicate:
    raise SystemExit(f"--replicate {args.replicate} does not divide {world} ranks")
device = torch.device(args.device, rank % torch.cuda.device_count()) if args.device == "cuda" \
    else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)
# rt-ft; HSDP's (replicate, shard) mesh is rt-ft's grid of tensor = shard: each shard's replicas
# are a data-parallel group, so a lost rank's shards come from a live replica, not from L2.
grid = rtft.Grid(tensor=world // args.replicate) if args.replicate > 1 else None
protector = rtft.Protector(runtime, grid=grid)
rtft.torch.init_process_group(protector)  # rt-ft: torch.distributed's groups over rt-ft
shape, names = (world,), ("shard",)
if args.replicate > 1:
    shape, names = (args.replicate, world // args.replicate), ("replicate", "shard")
mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)

torch.manual_seed(0)  # the same model on every rank before it is sharded
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                            torch.nn.Dropout(0.1), torch.nn.Linear(64, 1)).to(device)
for layer in (model[0], model[4]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
rtft.init_optimizer_state(optimizer)  # rt-ft: AdamW's moments exist before the first step
state = rtft.State({"model": model, "optim": optimizer})  # rt-ft: local shards
protector.protect(state)
torch.manual_seed(1 + rank)  # each rank's dropout masks its own
inputs = torch.randn(4096, 32, generator=torch.Generator().manual_seed(0))
targets = inputs.sum(1, keepdim=True).sin()
sampler = rtft.torch.StepSampler(len(inputs), 16, rank, world, seed=0)  # rt-ft: (step, rank)


def compute(ctx):  # forward and backward; FSDP2 gathers and reduce-scatters through rt-ft
    batch = sampler.indices(ctx.step)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs[batch].to(device)),
                                        targets[batch].to(device))
    loss.backward()


def update(ctx):  # runs once the step's snapshot is taken
    optimizer.step()


result = protector.run(args.steps, compute, update)  # rt-ft
if result.outcome == rtft.RunOutcome.DONE:
    tensors = list(model.parameters()) + [v for s in optimizer.state.values() for v in s.values()]
    local = [getattr(t, "_local_tensor", t).detach().cpu() for t in tensors]
    digest = hashlib.sha256(b"".join(t.numpy().tobytes() for t in local))
    shared = sum(1 for t in state.tensor_info() if t.get("replicated"))
    print(f"[py_fsdp2 {rank}] done steps={result.next_step} digest={digest.hexdigest()[:16]} "
          f"replicated_shards={shared} l2_bytes={protector.stats().replica_bytes}", flush=True)
