"""DDP's step over rtft.torch.ProcessGroup against the same DDP over torch's own Gloo group:
``python3 -m rtft.bench ddp`` (docs/python.md, "Benchmarks").

Starts ``--ranks`` processes under ``mpirun`` and ``dp-launch`` (no spare).  Each builds one
model twice (``--layers`` linear layers of ``--hidden``, ReLU, SGD), wraps one copy in DDP over
torch's Gloo group (``init_process_group("gloo")`` on a file store) and the other in DDP over
``rtft.torch.ProcessGroup`` bound to an rt-ft communicator at every step, both with
``find_unused_parameters=True`` (the fixed buckets rt-ft's group needs), and times ``--steps``
steps of each in ``--blocks`` alternating blocks (the first variant of each block alternates), so
both see the same machine.  Rank 0 reports the median step of each; the target is rt-ft's at
most 5 % slower (``within_target``).  Prints one JSON object (``name`` "py_ddp") and a line on
stderr.  The step is the slowest rank's: the gradients' all-reduce ends together on every rank.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WITHIN = 0.05  # rt-ft's step at most this much slower than torch's Gloo
_TAG = "RTFT_BENCH_DDP "


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _job_options(parser, timeout):
    """The options of a benchmark whose jobs run under ``mpirun`` and ``dp-launch``."""
    parser.add_argument("--dp-launch", default=shutil.which("dp-launch"),
                        help="rt-ft's launcher (default: on PATH)")
    parser.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"seconds a job may take (default {timeout:g})")
    parser.add_argument("--worker", help=argparse.SUPPRESS)


def _check_dp_launch(parser, args):
    if not args.dp_launch or not os.access(args.dp_launch, os.X_OK):
        parser.error("--dp-launch: rt-ft's dp-launch was not found (give its path)")


def main(argv):
    parser = argparse.ArgumentParser(prog="python3 -m rtft.bench ddp", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=_positive, default=4, help="processes (default 4)")
    parser.add_argument("--steps", type=_positive, default=20, help="steps per block (20)")
    parser.add_argument("--blocks", type=_positive, default=6, help="blocks per variant (6)")
    parser.add_argument("--hidden", type=_positive, default=1024, help="layer width (1024)")
    parser.add_argument("--layers", type=_positive, default=4, help="linear layers (4)")
    parser.add_argument("--batch", type=_positive, default=32, help="rows per rank (32)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    _job_options(parser, 1800)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(json.loads(args.worker))
    _check_dp_launch(parser, args)
    if args.ranks < 2:
        parser.error("--ranks must be at least 2 (one rank has nothing to reduce)")
    root = tempfile.mkdtemp(prefix="rtft-py-bench-ddp-")
    try:
        config = {k: getattr(args, k) for k in ("steps", "blocks", "hidden", "layers", "batch",
                                                 "device")}
        config["store"] = os.path.join(root, "store")
        command = [args.mpirun, "-np", str(args.ranks), args.dp_launch, "--spares", "0", "--",
                   sys.executable, "-m", "rtft.bench_ddp", "--worker", json.dumps(config)]
        env = dict(os.environ)
        env.setdefault("RTFT_COMM_GLOO_HOST", "127.0.0.1")
        print(f"rtft.bench ddp: {args.ranks} ranks, {args.layers} x {args.hidden} on "
              f"{args.device}, {args.blocks} blocks of {args.steps} steps", file=sys.stderr,
              flush=True)
        try:
            run = subprocess.run(command, env=env, capture_output=True, text=True,
                                 timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(json.dumps({"name": "py_ddp", "error": f"timed out after {args.timeout} s"}))
            return 1
        report = [line[len(_TAG):] for line in run.stdout.splitlines() if line.startswith(_TAG)]
        if run.returncode != 0 or len(report) != 1:
            tail = (run.stdout + run.stderr)[-4000:]
            print(json.dumps({"name": "py_ddp", "error": f"the job ended with {run.returncode}",
                              "output": tail}))
            return 1
        line = summary(json.loads(report[0]), args)
        print(json.dumps(line), flush=True)
        print(f"  torch gloo {line['torch_step_s'] * 1e3:8.2f} ms   rtft "
              f"{line['rtft_step_s'] * 1e3:8.2f} ms   rtft/torch {line['rtft_over_torch']:.3f} "
              f"(target <= {1 + WITHIN:.2f})", file=sys.stderr)
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def summary(report, args):
    torch_s = statistics.median(report["torch"])
    rtft_s = statistics.median(report["rtft"])
    return {"name": "py_ddp", "ranks": args.ranks, "hidden": args.hidden, "layers": args.layers,
            "batch": args.batch, "device": args.device, "steps": args.steps,
            "blocks": args.blocks, "torch": report["torch_version"],
            "torch_step_s": torch_s, "rtft_step_s": rtft_s, "rtft_over_torch": rtft_s / torch_s,
            "within_target": rtft_s / torch_s <= 1 + WITHIN,
            "torch_blocks_s": report["torch"], "rtft_blocks_s": report["rtft"],
            "max_param_diff": report["max_param_diff"]}


def _worker(config):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import rtft
    import rtft.torch

    runtime = rtft.Runtime()
    rank, world = runtime.current().rank, runtime.current().world_size
    torch.set_num_threads(1)
    device = torch.device(config["device"])
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method="file://" + config["store"], rank=rank,
                            world_size=world)

    def model():
        torch.manual_seed(0)
        layers = []
        for _ in range(config["layers"]):
            layers += [torch.nn.Linear(config["hidden"], config["hidden"]), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers).to(device)

    group = rtft.torch.ProcessGroup(rank=rank, size=world)
    comm = runtime.create_communicator("bench-ddp")
    variants = {}
    for name, pg in (("torch", None), ("rtft", group)):
        m = model()
        ddp = DistributedDataParallel(m, process_group=pg, find_unused_parameters=True)
        variants[name] = (m, ddp, torch.optim.SGD(m.parameters(), lr=1e-3))
    x = torch.randn(config["batch"], config["hidden"],
                    generator=torch.Generator().manual_seed(rank)).to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(name):
        _, ddp, opt = variants[name]
        opt.zero_grad()
        if name == "rtft":
            with group.bound(comm):
                ddp(x).square().mean().backward()
        else:
            ddp(x).square().mean().backward()
        opt.step()

    for name in variants:  # warm-up: buckets, allocator, connections
        for _ in range(3):
            step(name)
    times = {"torch": [], "rtft": []}
    for block in range(config["blocks"]):
        order = ("torch", "rtft") if block % 2 == 0 else ("rtft", "torch")
        for name in order:
            sync()
            start = time.perf_counter()
            for _ in range(config["steps"]):
                step(name)
            sync()
            times[name].append((time.perf_counter() - start) / config["steps"])
    diff = max((a - b).abs().max().item() for a, b in
               zip(variants["torch"][0].parameters(), variants["rtft"][0].parameters()))
    comm.close()
    dist.destroy_process_group()
    if rank == 0:
        print(_TAG + json.dumps({"torch": times["torch"], "rtft": times["rtft"],
                                 "max_param_diff": diff, "torch_version": torch.__version__}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
