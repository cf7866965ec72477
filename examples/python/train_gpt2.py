"""A transformers GPT-2 under the hot swap, trained as its users train it (docs/python.md).

GPT2LMHeadModel from its config (dropout 0.1 in the embeddings, attention and residuals, as
GPT-2 ships), DDP, AdamW with a warm-up schedule: ordinary code over rtft.torch.ProcessGroup.
The State holds the scheduler and, by default, the random generators (dropout's masks): a step
that a recovery runs again draws the same masks, so a run with a failure ends on the bits of a
run without one.  rt-ft's part is marked.  Needs `transformers`.

  mpirun -np 4 --enable-recovery dp-launch --spares 1 -- \
      python3 examples/python/train_gpt2.py --device cuda
"""
import argparse
import hashlib
import os

import torch
from torch.nn.parallel import DistributedDataParallel
from transformers import GPT2Config, GPT2LMHeadModel

import rtft
import rtft.torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--width", type=int, default=128)
args = parser.parse_args()
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts
torch.use_deterministic_algorithms(True)  # the same bits on every run
torch.set_num_threads(1)
torch.manual_seed(0)  # the same model on every rank
config = GPT2Config(vocab_size=1024, n_positions=64, n_embd=args.width, n_layer=args.layers,
                    n_head=4, attn_implementation="eager")
model = GPT2LMHeadModel(config)
tokens = torch.randint(0, config.vocab_size, (2048, 64), generator=torch.Generator().manual_seed(0))

runtime = rtft.Runtime()  # rt-ft: a warm spare waits here until it takes a lost rank
rank, world = runtime.current().rank, runtime.current().world_size
device = torch.device("cpu")
if args.device == "cuda":
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
model.to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 8))
torch.manual_seed(1 + rank)  # each rank's dropout masks its own
rtft.init_optimizer_state(optimizer)  # rt-ft: AdamW's moments exist before the first step
protector = rtft.Protector(runtime)  # rt-ft
protector.protect(rtft.State({"model": model, "optim": optimizer, "sched": schedule}))  # rt-ft
group = rtft.torch.ProcessGroup(protector)  # rt-ft: rebound to each step's communicator
ddp = DistributedDataParallel(model, process_group=group, find_unused_parameters=True)
sampler = rtft.torch.StepSampler(len(tokens), 4, rank, world, seed=0)  # rt-ft: (step, rank)


def compute(ctx):  # forward and backward; DDP averages the gradients through the group
    batch = tokens[sampler.indices(ctx.step)].to(device)
    optimizer.zero_grad()
    ddp(input_ids=batch, labels=batch).loss.backward()


def update(ctx):  # runs once the step's snapshot is taken
    optimizer.step()
    schedule.step()


result = protector.run(args.steps, compute, update)  # rt-ft
if result.outcome == rtft.RunOutcome.DONE:
    state = list(model.parameters()) + [v for s in optimizer.state.values() for v in s.values()]
    digest = hashlib.sha256(b"".join(t.detach().cpu().numpy().tobytes() for t in state))
    print(f"[py_gpt2 {rank}] done steps={result.next_step} digest={digest.hexdigest()[:16]}",
          flush=True)
