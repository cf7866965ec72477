"""Checkpoint benchmark from Python: ``python3 -m rtft.bench`` (docs/python.md, "Benchmarks").

One process, one state (``--tensors`` float32 tensors of ``--bytes`` in all, on the GPU or in host
memory), saved by each variant in turn into a fresh directory under ``--dir``:

* ``torch.save``      - one file, flushed and fsynced; the training thread is held throughout;
* ``dcp.save``        - ``torch.distributed.checkpoint.save`` with its ``FileSystemWriter``;
* ``dcp.async_save``  - the same, asynchronous: held until it returns, persisted at its future;
* ``rtft``            - ``rtft.CheckpointEngine``: held for ``checkpoint`` + ``wait_captured``,
  persisted at ``wait_persisted`` (the engine, and its pinned pool, made before the clock starts);
* ``rtft.dcp.save`` / ``rtft.dcp.async_save`` - DCP's calls with ``rtft.dcp.RtftStorageWriter``;
  the writer's engine is made by its first save, so each is run twice on one writer and the
  second call is reported (the first's held time is ``cold_held_s``);
* ``cpp``             - ``rtft-bench ckpt`` (C++) on the same size, tensor count and disk, run as
  a child process, for the module's ratio against the C++ path (target: within 5 %).

``python3 -m rtft.bench ddp`` times DDP's step over ``rtft.torch.ProcessGroup`` against torch's
own Gloo group instead (``rtft/bench_ddp.py``); ``python3 -m rtft.bench fsdp2`` FSDP2's step
protected against not and a lost slot's recovery against a relaunch from a DCP checkpoint
(``rtft/bench_fsdp2.py``).

Prints one JSON object per line (``name`` "py_ckpt", then one "py_ckpt_summary") and a table on
stderr. A variant that fails prints its error in its line and the others go on.
"""

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

VARIANTS = ("torch.save", "dcp.save", "dcp.async_save", "rtft", "rtft.dcp.save",
            "rtft.dcp.async_save", "cpp")
WITHIN = 0.05  # the module's persist bandwidth and held time against the C++ path's
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_PAGE = 4096
_CHUNK = 64 << 20  # the engine's default chunk (RTFT_CKPT_CHUNK_BYTES)


def parse_bytes(text):
    """'16G' -> bytes; a plain integer is bytes. Refuses anything else, and zero."""
    text = text.strip().upper()
    scale = _UNITS.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in _UNITS else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 512M, 16G)")
    return int(digits) * scale


def parse_variants(text):
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown variant(s) {unknown or text!r}; choose from {', '.join(VARIANTS)}")
    return names


def make_state(torch, nbytes, tensors, device):
    """``tensors`` float32 tensors of about ``nbytes / tensors`` bytes each (4 KiB multiples)."""
    per = max(_PAGE, nbytes // tensors // _PAGE * _PAGE) // 4
    generator = torch.Generator(device=device).manual_seed(0)
    return {f"t{i:05d}": torch.randn(per, generator=generator, device=device)
            for i in range(tensors)}


def state_bytes(state):
    return sum(t.numel() * t.element_size() for t in state.values())


def sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_torch_save(torch, state, path, _):
    start = time.perf_counter()
    with open(os.path.join(path, "state.pt"), "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    held = time.perf_counter() - start
    return {"held_s": held, "persist_s": held}


def run_dcp_save(torch, state, path, _):
    import torch.distributed.checkpoint as dcp
    start = time.perf_counter()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(path))
    held = time.perf_counter() - start
    return {"held_s": held, "persist_s": held}


def run_dcp_async_save(torch, state, path, _):
    import torch.distributed.checkpoint as dcp
    start = time.perf_counter()
    future = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(path))
    held = time.perf_counter() - start
    future.result()
    return {"held_s": held, "persist_s": time.perf_counter() - start}


def pool_for(nbytes, tensors):
    """A pinned pool that holds the whole state, as ``rtft-bench ckpt`` sizes its own."""
    units = tensors + nbytes // _CHUNK + 1
    return (nbytes + _PAGE - 1) // _PAGE * _PAGE + units * _PAGE + _CHUNK


def run_rtft(torch, state, path, args):
    import rtft
    engine = rtft.CheckpointEngine(path, pool_bytes=pool_for(args.bytes, args.tensors))
    try:
        described = rtft.State(state, rng=False)
        sync(torch)
        start = time.perf_counter()
        engine.checkpoint(1, described)
        engine.wait_captured(1)
        held = time.perf_counter() - start
        engine.wait_persisted(1)
        persist = time.perf_counter() - start
        stats = engine.stats(1)
    finally:
        engine.close()
    return {"held_s": held, "persist_s": persist, "capture_s": stats["capture_s"],
            "tensor_bytes": stats["tensor_bytes"], "io": stats["io_backend"],
            "direct_io": stats["direct_io"]}


def _rtft_dcp(torch, state, path, args, asynchronous):
    import torch.distributed.checkpoint as dcp
    from rtft.dcp import RtftStorageWriter
    writer = RtftStorageWriter(path, pool_bytes=pool_for(args.bytes, args.tensors),
                               keep_versions=1)
    try:
        runs = []
        for _ in range(2):  # the first call makes the writer's engine and pins its pool
            sync(torch)
            start = time.perf_counter()
            if asynchronous:
                future = dcp.async_save(state, storage_writer=writer)
                held = time.perf_counter() - start
                future.result()
            else:
                dcp.save(state, storage_writer=writer)
                held = time.perf_counter() - start
            runs.append((held, time.perf_counter() - start))
    finally:
        writer.close()
    return {"held_s": runs[1][0], "persist_s": runs[1][1], "cold_held_s": runs[0][0],
            "cold_persist_s": runs[0][1]}


def run_rtft_dcp_save(torch, state, path, args):
    return _rtft_dcp(torch, state, path, args, asynchronous=False)


def run_rtft_dcp_async_save(torch, state, path, args):
    return _rtft_dcp(torch, state, path, args, asynchronous=True)


def run_cpp(torch, state, path, args):
    """rtft-bench ckpt on the same size and tensor count, its rt-ft line."""
    binary = args.rtft_bench or shutil.which("rtft-bench")
    if not binary:
        raise RuntimeError("rtft-bench not found: give --rtft-bench PATH")
    command = [binary, "ckpt", "--bytes", str(args.bytes), "--tensors", str(args.tensors),
               "--state", args.state, "--repeat", "1", "--dir", path]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.cpp_timeout)
    if done.returncode != 0:
        raise RuntimeError(f"rtft-bench ckpt exited {done.returncode}: {done.stderr[-2000:]}")
    for line in done.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("name") == "ckpt" and record.get("variant") == "rtft":
            return {"held_s": record["blocking_s"], "persist_s": record["persist_s"],
                    "capture_s": record.get("capture_s"), "raw_gbps": record.get("raw_gbps"),
                    "io": record.get("io"), "direct_io": record.get("direct_io")}
    raise RuntimeError("rtft-bench ckpt printed no rt-ft line")


RUNNERS = {"torch.save": run_torch_save, "dcp.save": run_dcp_save,
           "dcp.async_save": run_dcp_async_save, "rtft": run_rtft,
           "rtft.dcp.save": run_rtft_dcp_save, "rtft.dcp.async_save": run_rtft_dcp_async_save,
           "cpp": run_cpp}
NEEDS_DCP = {"dcp.save", "dcp.async_save", "rtft.dcp.save", "rtft.dcp.async_save"}


def have_dcp():
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        return False
    return hasattr(dcp, "save") and hasattr(dcp, "async_save")


def init_process_group(root):
    """DCP's async_save wants a process group: one rank of Gloo over a file store."""
    import torch.distributed as dist
    if dist.is_available() and not dist.is_initialized():
        store = dist.FileStore(os.path.join(root, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def summary(lines, nbytes):
    by = {line["variant"]: line for line in lines if "error" not in line and "skipped" not in line}
    out = {"name": "py_ckpt_summary", "bytes": nbytes}
    module, cpp = by.get("rtft"), by.get("cpp")
    if module and cpp:
        out["module_over_cpp_persist_gbps"] = module["persist_gbps"] / cpp["persist_gbps"]
        out["module_over_cpp_held"] = module["held_s"] / cpp["held_s"]
        # Within 5 %: the bandwidth at least 0.95x the C++ path's, the held time at most 1.05x
        # plus 10 ms (docs/benchmarks.md).
        out["module_within_target"] = bool(
            out["module_over_cpp_persist_gbps"] >= 1 - WITHIN and
            module["held_s"] <= (1 + WITHIN) * cpp["held_s"] + 0.01)
    for baseline in ("torch.save", "dcp.async_save"):
        for ours in ("rtft", "rtft.dcp.async_save"):
            if baseline in by and ours in by:
                key = f"{ours}_over_{baseline}".replace(".", "_")
                out[key + "_persist_gbps"] = by[ours]["persist_gbps"] / by[baseline]["persist_gbps"]
                out[key + "_held"] = by[ours]["held_s"] / by[baseline]["held_s"]
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["ddp"]:  # python3 -m rtft.bench ddp: DDP's step over rt-ft's group
        from rtft import bench_ddp
        return bench_ddp.main(argv[1:])
    if argv[:1] == ["fsdp2"]:  # python3 -m rtft.bench fsdp2: the protected step, the recovery
        from rtft import bench_fsdp2
        return bench_fsdp2.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python3 -m rtft.bench [ddp|fsdp2]",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=parse_bytes, default=parse_bytes("16G"),
                        help="state size, K/M/G suffixes (default 16G)")
    parser.add_argument("--tensors", type=int, default=64, help="tensor count (default 64)")
    parser.add_argument("--state", choices=("gpu", "host"), default="gpu")
    parser.add_argument("--dir", default="/var/tmp", help="parent of the scratch directory")
    parser.add_argument("--variants", type=parse_variants, default=list(VARIANTS),
                        help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--rtft-bench", help="the C++ rtft-bench (default: on PATH)")
    parser.add_argument("--cpp-timeout", type=float, default=1800,
                        help="seconds the C++ run may take (default 1800)")
    args = parser.parse_args(argv)
    if args.tensors < 1 or args.tensors > 1 << 20:
        parser.error("--tensors must be between 1 and 1048576")
    if args.bytes // args.tensors < _PAGE:
        parser.error("--bytes / --tensors must be at least 4 KiB")

    import torch
    device = "cuda" if args.state == "gpu" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--state gpu: torch sees no CUDA device (use --state host)")
    if not os.path.isdir(args.dir):
        parser.error(f"--dir {args.dir} is not a directory")
    root = tempfile.mkdtemp(prefix="rtft-py-bench-", dir=args.dir)
    lines = []
    try:
        state = make_state(torch, args.bytes, args.tensors, device)
        sync(torch)
        nbytes = state_bytes(state)
        dcp_ok = have_dcp()
        if dcp_ok and NEEDS_DCP & set(args.variants):
            init_process_group(root)
        print(f"rtft.bench: {nbytes / 2**30:.2f} GiB in {args.tensors} tensors on {device}, "
              f"torch {torch.__version__}, scratch {root}", file=sys.stderr, flush=True)
        for variant in args.variants:
            line = {"name": "py_ckpt", "variant": variant, "bytes": nbytes,
                    "tensors": args.tensors, "state": args.state, "torch": torch.__version__}
            path = os.path.join(root, variant)
            os.makedirs(path)
            if variant in NEEDS_DCP and not dcp_ok:
                line["skipped"] = f"torch {torch.__version__} has no dcp.save/async_save"
            else:
                print(f"rtft.bench: {variant} ...", file=sys.stderr, flush=True)
                try:
                    line.update(RUNNERS[variant](torch, state, path, args))
                    line["persist_gbps"] = nbytes / line["persist_s"] / 1e9
                except Exception as e:  # noqa: BLE001 (reported, the other variants go on)
                    line["error"] = f"{type(e).__name__}: {e}"
            shutil.rmtree(path, ignore_errors=True)
            gc.collect()
            print(json.dumps(line), flush=True)
            lines.append(line)
        out = summary(lines, nbytes)
        print(json.dumps(out), flush=True)
        for line in lines:
            if "persist_gbps" in line:
                print(f"  {line['variant']:<22} held {line['held_s']:8.3f} s   persist "
                      f"{line['persist_gbps']:6.2f} GB/s", file=sys.stderr)
            else:
                print(f"  {line['variant']:<22} {line.get('error') or line.get('skipped')}",
                      file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if any("error" in line for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
