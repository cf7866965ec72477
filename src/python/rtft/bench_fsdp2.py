"""FSDP2 under rt-ft: ``python3 -m rtft.bench fsdp2`` (docs/python.md, "Benchmarks").

Two figures of one model (``--layers`` linear layers of ``--hidden``, each its own FSDP2 unit,
AdamW), on ``--ranks`` processes under ``mpirun`` and ``dp-launch`` over rt-ft's c10d backend:

step       The step protected against not, in one job: ``ProtectOptions.protect_step`` makes
           alternate blocks of ``--steps`` steps take their snapshot (L1, and L2 on the ring
           neighbour: plain FSDP2's shards are unique, so the whole state crosses to a
           neighbour every protected step) or not; the first kind of each pair of blocks
           alternates.  Rank 0's step (its collectives end together with every rank's) from one
           step's start to the next's.  ``overhead_pct``; target 3 % or less.
recovery   A lost slot against a relaunch.  rt-ft: one spare more; slot 1 stands still in
           step ``--fail-at``'s update and its dp-launch is SIGKILLed (the node is gone);
           ``resumed_s`` runs from that kill until rank 0 has finished the first step after
           the recovery (every rank's collectives are in it).  The relaunch, at its best: a job
           over torch's own Gloo group (no rt-ft) trains ``--fail-at`` steps and saves them
           with ``dcp.save``; a second job is started as a scheduler would start it again and
           loads them with ``dcp.load``: ``relaunch_s`` runs from its start until rank 0 has
           finished its first step.  No detection, no steps lost since the checkpoint and no
           queue wait are counted for it, all of which a real relaunch adds.
           ``speedup`` = relaunch_s / resumed_s; target 5 or more.

Prints one JSON object per figure (``name`` "py_fsdp2", ``figure``) and a line each on stderr.
Needs torch 2.4 or later (``fully_shard``).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from rtft.bench_ddp import _check_dp_launch, _job_options, _positive

OVERHEAD_TARGET_PCT = 3.0  # the protected step at most this much slower
SPEEDUP_TARGET = 5.0  # a lost slot's recovery against the relaunch
WARMUP = 3  # steps before the first timed block
_TAG = "RTFT_BENCH_FSDP2 "
FIGURES = ("step", "recovery")


def _figures(text):
    names = [n for n in text.split(",") if n]
    for n in names:
        if n not in FIGURES:
            raise argparse.ArgumentTypeError(f"unknown figure {n!r} (known: {', '.join(FIGURES)})")
    if not names:
        raise argparse.ArgumentTypeError("no figure named")
    return names


def main(argv):
    parser = argparse.ArgumentParser(prog="python3 -m rtft.bench fsdp2", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figures", type=_figures, default=list(FIGURES),
                        help="comma-separated, from: " + ", ".join(FIGURES))
    parser.add_argument("--ranks", type=_positive, default=4, help="active ranks (default 4)")
    parser.add_argument("--hidden", type=_positive, default=2048, help="layer width (2048)")
    parser.add_argument("--layers", type=_positive, default=8, help="linear layers (8)")
    parser.add_argument("--batch", type=_positive, default=16, help="rows per rank (16)")
    parser.add_argument("--steps", type=_positive, default=5, help="steps per block (5)")
    parser.add_argument("--blocks", type=_positive, default=4,
                        help="blocks of each kind, protected and not (4)")
    parser.add_argument("--fail-at", type=_positive, default=8,
                        help="the step slot 1 is lost in (8)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="parent of the scratch folder (the DCP checkpoint)")
    _job_options(parser, 1200)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(json.loads(args.worker))
    _check_dp_launch(parser, args)
    if args.ranks < 2:
        parser.error("--ranks must be at least 2 (FSDP2 on one rank shards nothing)")
    if not os.path.isdir(args.dir):
        parser.error(f"--dir {args.dir} is not a directory")
    probe = subprocess.run([sys.executable, "-c", "from torch.distributed.fsdp import "
                            "fully_shard; import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        print(json.dumps({"name": "py_fsdp2", "skipped": "this torch has no FSDP2 "
                          "(fully_shard: torch 2.4 or later)"}), flush=True)
        return 0
    config = {k: getattr(args, k) for k in ("hidden", "layers", "batch", "steps", "blocks",
                                            "fail_at", "device")}
    base = {"name": "py_fsdp2", "ranks": args.ranks, "hidden": args.hidden,
            "layers": args.layers, "batch": args.batch, "device": args.device,
            "torch": probe.stdout.strip()}
    failed = False
    for figure in args.figures:
        root = tempfile.mkdtemp(prefix="rtft-py-bench-fsdp2-", dir=args.dir)
        try:
            line = dict(base, figure=figure)
            line.update(FIGURE_RUNS[figure](args, dict(config, root=root)))
        except _JobError as e:
            line["error"] = str(e)
            line["output"] = e.output[-4000:]
        finally:
            shutil.rmtree(root, ignore_errors=True)
        failed |= "error" in line
        print(json.dumps(line), flush=True)
        _say(line)
    return 1 if failed else 0


def _say(line):
    if "error" in line:
        print(f"  {line['figure']}: {line['error']}", file=sys.stderr)
    elif line["figure"] == "step":
        print(f"  step: protected {line['protected_step_s'] * 1e3:8.2f} ms   not "
              f"{line['unprotected_step_s'] * 1e3:8.2f} ms   overhead "
              f"{line['overhead_pct']:+.2f} % (target <= {OVERHEAD_TARGET_PCT} %)",
              file=sys.stderr)
    else:
        print(f"  recovery: rt-ft {line['resumed_s']:.2f} s   relaunch from DCP "
              f"{line['relaunch_s']:.2f} s   speedup {line['speedup']:.1f}x (target >= "
              f"{SPEEDUP_TARGET:g}x)", file=sys.stderr)
        print("  recovery breakdown (s): " + "  ".join(
            f"{k} {v:.3f}" for k, v in line.get("breakdown", {}).items()
            if isinstance(v, float)), file=sys.stderr)


class _JobError(Exception):
    def __init__(self, message, output=""):
        super().__init__(message)
        self.output = output


def _env(extra=None):
    env = dict(os.environ)
    env.setdefault("RTFT_COMM_GLOO_HOST", "127.0.0.1")
    env.setdefault("RTFT_STRAGGLER_PCT", "0")  # ranks sharing a GPU are uneven by nature
    env.update(extra or {})
    return env


def _rtft_job(args, config, mode, slots, spares, env=None):
    """The command of an rt-ft job of ``slots`` processes running the worker in ``mode``."""
    return ([args.mpirun, "-np", str(slots), "--enable-recovery", args.dp_launch, "--spares",
             str(spares), "--", sys.executable, "-m", "rtft.bench_fsdp2", "--worker",
             json.dumps(dict(config, mode=mode))], _env(env))


def _records(stdout):
    return [json.loads(line[len(_TAG):]) for line in stdout.splitlines() if line.startswith(_TAG)]


def _run(command, env, timeout, what):
    try:
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                             check=False)
    except subprocess.TimeoutExpired as e:
        raise _JobError(f"{what}: timed out after {timeout} s",
                        (e.stdout or b"").decode(errors="replace")) from None
    if run.returncode != 0:
        raise _JobError(f"{what}: the job ended with {run.returncode}", run.stdout + run.stderr)
    return run


def _step_figure(args, config):
    print(f"rtft.bench fsdp2: step, {args.ranks} ranks, {args.layers} x {args.hidden} on "
          f"{args.device}, {args.blocks} blocks of {args.steps} steps each way", file=sys.stderr,
          flush=True)
    command, env = _rtft_job(args, config, "steps", args.ranks, 0)
    run = _run(command, env, args.timeout, "the protected job")
    records = _records(run.stdout)
    if len(records) != 1:
        raise _JobError("rank 0 reported no step times", run.stdout + run.stderr)
    blocks = records[0]
    protected = statistics.median(blocks["protected"])
    unprotected = statistics.median(blocks["unprotected"])
    overhead = (protected / unprotected - 1) * 100
    return {"steps": args.steps, "blocks": args.blocks, "state_bytes": blocks["state_bytes"],
            "protected_step_s": protected, "unprotected_step_s": unprotected,
            "overhead_pct": overhead, "within_target": overhead <= OVERHEAD_TARGET_PCT,
            "protected_blocks_s": blocks["protected"],
            "unprotected_blocks_s": blocks["unprotected"]}


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _agent_of(job, slot):
    """The pid of the dp-launch that holds ``slot`` in the job whose mpirun is ``job`` (Open
    MPI's rank of the launcher), never another job's."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("dp-launch"):
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={slot}".encode() not in env:
            continue
        ancestor = int(pid)
        while ancestor > 1 and ancestor != job:
            ancestor = _parent(ancestor)
        if ancestor == job:
            return int(pid)
    return 0


def _recovery_figure(args, config):
    root = config["root"]
    print(f"rtft.bench fsdp2: recovery, {args.ranks} ranks + 1 spare, slot 1 lost in step "
          f"{args.fail_at}", file=sys.stderr, flush=True)
    faults = os.path.join(root, "faults.log")
    command, env = _rtft_job(args, config, "recover", args.ranks + 1, 1, {
        "RTFT_FAULT": f"1/protect.update@{args.fail_at}:hang", "RTFT_FAULT_LOG": faults,
        "RTFT_HANG_K": "0"})  # the slot is lost: the hang must not be cured in place first
    log_path = os.path.join(root, "job.log")  # a file: a pipe left unread could stall the job
    log = open(log_path, "w")  # noqa: SIM115 (closed below, whatever happens)
    job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)

    def output():
        with open(log_path) as f:
            return f.read()

    killed = None
    try:
        deadline = time.monotonic() + args.timeout
        while killed is None and time.monotonic() < deadline and job.poll() is None:
            if os.path.exists(faults) and os.path.getsize(faults) > 0:
                agent = _agent_of(job.pid, 1)
                if agent > 0:
                    os.kill(agent, signal.SIGKILL)
                    killed = time.time()
                    break
            time.sleep(0.01)
        job.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        raise _JobError(f"the rt-ft job: timed out after {args.timeout} s", output()) from None
    finally:
        log.close()
    out = output()
    if killed is None:
        raise _JobError("slot 1 never reached the fault point (or its dp-launch was not found)",
                        out)
    if job.returncode != 0:
        raise _JobError(f"the rt-ft job ended with {job.returncode}", out)
    after = [r for r in _records(out) if r.get("recovered") and r.get("rank") == 0]
    if not after:
        raise _JobError("rank 0 reported no step after the recovery", out)
    first = after[0]
    # The one recovery is the kill's: rank 0 stays itself, and the replacement is rank 1; the
    # step it resumes at is the failed one, or the one after where rank 0 had passed it.
    if first["step"] > args.fail_at + 1 or first.get("marks") or not first["recovery"]:
        raise _JobError(f"rank 0's first step after a recovery (step {first['step']}) is not "
                        f"the recovery from the kill in step {args.fail_at}", out)
    resumed = first["t"] - killed
    # Where the time went: rank 0's recovery phases, and the replacement's start (each phase
    # from the kill: its activation, CUDA context, process group and mesh, fully_shard, protect).
    spare = [r for r in _records(out) if r.get("recovered") and r.get("marks")
             and r.get("rank") == 1]
    breakdown = {"rank0_" + k: v for k, v in first["recovery"].items()}
    if spare:
        breakdown.update({"spare_" + k + "_s": t - killed for k, t in spare[0]["marks"].items()})
        breakdown["spare_first_step_s"] = spare[0]["t"] - killed

    print("rtft.bench fsdp2: recovery, the relaunch: a job saves its steps with dcp.save, a "
          "second loads them", file=sys.stderr, flush=True)
    base = dict(config, ckpt=os.path.join(root, "dcp"), store=os.path.join(root, "store-save"))
    _run(_torch_job(args, base, "save"), _env(), args.timeout, "the job that saves")
    base["store"] = os.path.join(root, "store-load")
    start = time.time()
    run = _run(_torch_job(args, base, "relaunch"), _env(), args.timeout, "the relaunched job")
    records = _records(run.stdout)
    if len(records) != 1:
        raise _JobError("the relaunched job's rank 0 reported nothing", run.stdout + run.stderr)
    relaunch = records[0]["t"] - start
    return {"fail_at": args.fail_at, "resumed_s": resumed, "recovered_at_step": first["step"],
            "relaunch_s": relaunch, "relaunch_load_s": records[0]["load_s"],
            "relaunch_ready_s": records[0]["ready"] - start,
            "speedup": relaunch / resumed, "within_target": relaunch / resumed >= SPEEDUP_TARGET,
            "breakdown": breakdown}


def _torch_job(args, config, mode):
    return [args.mpirun, "-np", str(args.ranks), sys.executable, "-m", "rtft.bench_fsdp2",
            "--worker", json.dumps(dict(config, mode=mode))]


FIGURE_RUNS = {"step": _step_figure, "recovery": _recovery_figure}


def _report(record):
    print(_TAG + json.dumps(record), flush=True)


def _worker(config):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    # fully_shard imports torch._dynamo at its first call (1.8-2.0 s on the H100 machine, most of
    # a spare's start after its activation): imported here, a warm spare pays it while it waits.
    import torch._dynamo  # noqa: F401

    mode = config["mode"]
    torch.set_num_threads(1)
    # The model is built on the CPU first, the same on every rank: a warm spare builds it while it
    # waits for a rank (it touches no GPU before its activation: docs/launcher.md, "GPUs").
    torch.manual_seed(0)
    layers = []
    for _ in range(config["layers"]):
        layers += [torch.nn.Linear(config["hidden"], config["hidden"]), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    protector = None
    marks = {}  # the replacement's start after its activation, phase by phase (time.time())
    if mode in ("steps", "recover"):
        import rtft
        import rtft.torch
        runtime = rtft.Runtime()  # a spare waits here
        rank, world = runtime.current().rank, runtime.current().world_size
        if runtime.current().role == rtft.RuntimeRole.SPARE_ACTIVATED:  # in a lost rank's place
            marks["activated"] = time.time()
    else:  # the relaunch's jobs: torch's own Gloo group, no rt-ft
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    device = torch.device("cpu")
    if config["device"] == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)  # the CUDA context, here rather than inside a later phase
    if marks:
        marks["device"] = time.time()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    steps, blocks = config["steps"], config["blocks"]
    if mode == "steps":
        def protect_step(step):  # pairs of blocks, the first kind alternating pair by pair
            if step < WARMUP:
                return True
            block = (step - WARMUP) // steps
            return (block % 2 == 0) == ((block // 2) % 2 == 0)
        protector = rtft.Protector(runtime, protect_step=protect_step)
    elif mode == "recover":
        protector = rtft.Protector(runtime)
    if protector is not None:
        rtft.torch.init_process_group(protector)
    else:
        dist.init_process_group("gloo", init_method="file://" + config["store"], rank=rank,
                                world_size=world)
    mesh = init_device_mesh(device.type, (world,))
    if marks:
        marks["group"] = time.time()
    model = model.to(device)
    if marks:
        sync()
        marks["moved"] = time.time()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if marks:
        sync()
        marks["fully_shard"] = time.time()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if marks:
        sync()
        marks["sharded"] = time.time()
    x = torch.randn(config["batch"], config["hidden"],
                    generator=torch.Generator().manual_seed(rank)).to(device)

    def train_step():
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    if protector is not None:
        rtft.init_optimizer_state(optimizer)
        state = rtft.State({"model": model, "optim": optimizer})
        protector.protect(state)
        if marks:
            marks["protected"] = time.time()
        starts = []

        def compute(ctx):
            sync()
            if mode == "steps":
                starts.append((ctx.step, time.perf_counter()))
            optimizer.zero_grad()
            model(x).square().mean().backward()

        def update(ctx):
            optimizer.step()
            info = ctx.recovered
            if mode == "recover" and ((rank == 0 and info is not None) or marks):
                sync()  # rank 0's first step after the recovery; the replacement's first step
                _report({"rank": rank, "step": ctx.step, "t": time.time(), "recovered": True,
                         "marks": dict(marks), "recovery": {} if info is None else {
                             k: getattr(info, k) for k in ("wait_event_s", "agree_s",
                                                           "rebuild_s", "transfer_s", "total_s",
                                                           "bytes_moved")}})
                marks.clear()

        total = WARMUP + 2 * blocks * steps + 1 if mode == "steps" else config["fail_at"] + 4
        result = protector.run(total, compute, update)
        if result.outcome != rtft.RunOutcome.DONE:
            return 0  # the job is ending (a spare never used)
        if mode == "steps" and rank == 0:
            times = {"protected": [], "unprotected": []}
            per_step = {a[0]: b[1] - a[1] for a, b in zip(starts, starts[1:]) if b[0] == a[0] + 1}
            for block in range(2 * blocks):
                first = WARMUP + block * steps
                took = [per_step[s] for s in range(first, first + steps) if s in per_step]
                if len(took) == steps:
                    kind = "protected" if protect_step(first) else "unprotected"
                    times[kind].append(sum(took) / steps)
            nbytes = sum(t.numel() * t.element_size() for t in _local_tensors(model, optimizer))
            _report(dict(times, state_bytes=nbytes))
        return 0

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    if mode == "save":
        for _ in range(config["fail_at"]):
            train_step()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=config["ckpt"])
    else:  # relaunch: load the checkpoint, then one step
        sync()
        ready = time.time()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        sd = {"model": model_sd, "optim": optim_sd}
        dcp.load(sd, checkpoint_id=config["ckpt"])
        set_state_dict(model, optimizer, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])
        sync()
        loaded = time.time()
        train_step()
        sync()
        dist.barrier()
        if rank == 0:
            _report({"t": time.time(), "ready": ready, "load_s": loaded - ready})
    dist.destroy_process_group()
    return 0


def _local_tensors(model, optimizer):
    state = list(model.parameters()) + [v for s in optimizer.state.values() for v in s.values()
                                        if hasattr(v, "numel")]
    return [getattr(t, "_local_tensor", t) for t in state]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
