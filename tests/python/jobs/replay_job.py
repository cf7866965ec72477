"""A data-parallel PyTorch job whose compute is split for the replay of steps (test_replay.py):
``local`` computes the gradients of ``ctx.data_rank``'s batch into one flat host buffer that it
names in ``ctx.gradients`` (no collective; its batch and dropout masks drawn from the step and
the data rank alone, so a peer replaying it gets the same bits), ``reduce`` averages them on
rt-ft's communicator.  ``rtft.fault_flag("train.grad_flip")`` (RTFT_FAULT's ``flag``/``flags``)
flips a bit of the rank's own gradients, not of a replay: a faulty SM; ``train.grad_nan`` makes
its loss NaN and says so in ``ctx.nonfinite`` (``--check-finite``); ``train.flip`` flips a bit of
the rank's copy of a parameter after its update (a flip in memory).  ``--batchnorm`` puts a
BatchNorm layer in the model: its running statistics, updated by each rank's own batch, differ
per rank between steps.  Prints one digest line per rank."""
import argparse
import hashlib

import torch

import rtft

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--replay-every", type=int, default=1)
parser.add_argument("--check-finite", action="store_true")
parser.add_argument("--batchnorm", action="store_true")
args = parser.parse_args()
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
torch.manual_seed(0)
norm = [torch.nn.BatchNorm1d(32)] if args.batchnorm else []
model = torch.nn.Sequential(torch.nn.Linear(16, 32), *norm, torch.nn.Tanh(),
                            torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
rtft.init_optimizer_state(optimizer)
params = list(model.parameters())
grads = torch.zeros(sum(p.numel() for p in params))

runtime = rtft.Runtime()
protector = rtft.Protector(runtime, replay_every=args.replay_every,
                           check_finite=args.check_finite or None)
protector.protect(rtft.State({"model": model, "optim": optimizer}))


def local(ctx):
    torch.manual_seed(7919 * ctx.step + ctx.data_rank)  # dropout's masks: (step, data rank)
    x = torch.randn(32, 16)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
    if not ctx.replaying and rtft.fault_flag("train.grad_nan"):
        loss = loss * float("nan")
    ctx.nonfinite = not torch.isfinite(loss).item()
    grads.copy_(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]))
    if not ctx.replaying and rtft.fault_flag("train.grad_flip"):
        bits = grads[:1].view(torch.int32)
        bits ^= 1 << 20
    ctx.gradients = grads


def reduce(ctx):
    for bucket in grads.split(256):
        ctx.comm.all_reduce(bucket, op="avg")


def update(ctx):
    for p, g in zip(params, grads.split([p.numel() for p in params])):
        p.grad = g.view_as(p).clone()
    optimizer.step()
    if rtft.fault_flag("train.flip"):
        bits = params[0].data.view(-1)[:1].view(torch.int32)
        bits ^= 1 << 20


result = protector.run(args.steps, None, update, local=local, reduce=reduce)
if result.outcome == rtft.RunOutcome.DONE:
    state = params + [v for s in optimizer.state.values() for v in s.values()]
    digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in state))
    print(f"[replay_job {runtime.current().rank}] done steps={result.next_step} "
          f"digest={digest.hexdigest()[:16]}", flush=True)
