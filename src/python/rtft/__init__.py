"""rt-ft for Python: checkpoints, per-step protection and the hot swap for PyTorch loops.

The compiled module ``rtft._core`` binds librt-ft's C++ API; tensors reach it through DLPack, by
their memory, without a copy, and it links no torch library.  Every call that can block
releases the GIL; callbacks from rt-ft (a step function, an object's serializer, a failure
listener) take it again.  Errors are ``rtft.Error`` subclasses keyed by rt-ft's status codes.

    state = rtft.State({"model": model, "optim": optimizer, "extra": {"epoch": 0}})
    engine = rtft.CheckpointEngine("/lustre/run/ckpt")
    engine.checkpoint(step, state)       # returns at once; the copy overlaps forward/backward
    engine.wait_captured(step)           # the fence before the optimizer's update
    rtft.restore("/lustre/run/ckpt", state)   # LATEST, in place, checksums verified

Restoring unpickles the state's non-tensor values: load only checkpoints you trust.
docs/python.md in rt-ft's repository describes the package.
"""

import atexit
import warnings
import weakref

from rtft import _core
from rtft._core import (  # noqa: F401 (re-exported)
    CheckpointEngine, Communicator, FailureEvent, Grid, GridPlace, LocalCommStore, ProtectStats,
    RecoveryInfo, RunOutcome, RunResult, Runtime, RuntimeInfo, RuntimeRole, StatusCode,
    StepContext, VersionInfo, VersionMarks, fault_flag, fault_point, latest_version,
    list_versions, place_in_grid, rank_in_grid, split_evenly, verify_version)
from rtft.errors import (  # noqa: F401 (re-exported: the exception classes)
    AbortedError, AlreadyExistsError, DataLossError, DeadlineExceededError, DeviceLostError, Error,
    FailedPreconditionError, InternalError, InvalidArgumentError, IoError, NotFoundError,
    OutOfRangeError, PermissionDeniedError, ResourceExhaustedError, ShutdownError,
    UnavailableError, UnimplementedError, error_class)
from rtft.state import Shard, State, init_optimizer_state  # noqa: F401
from rtft._groups import bind_step as _bind_step


class Protector(_core.Protector):
    __doc__ = _core.Protector.__doc__ + """

    ``Protector(runtime, **options)`` takes ``ProtectOptions``' fields as keywords.  The
    ``rtft.torch.ProcessGroup`` objects made for it are bound to each step's communicator by
    ``run()``, so DDP keeps one group object across every recovery."""

    def __init__(self, runtime, **options):
        super().__init__(runtime, **options)
        self._runtime = runtime
        self._grid = options.get("grid")
        self._groups = weakref.WeakSet()

    def protect(self, state, resize=None):
        """Describes the protected state once, before the first step.  A DTensor shard that the
        ranks of this rank's data-parallel group hold too (HSDP's replicas, with
        ``grid=rtft.Grid(tensor=S)``) is protected as replicated: compared across the group and
        fed to a lost rank from a live replica, out of L2's ring."""
        holders = getattr(state, "_replica_holders", None)
        if holders:
            _share_replicas(self, state, holders)
        if callable(resize):
            resize = _resize_sharing_replicas(self, resize)
        return super().protect(state, resize)

    def run(self, end_step, compute, update, local=None, reduce=None):
        if self._groups:
            compute, update, reduce = (_bind_step(self._groups, f) if callable(f) else f
                                       for f in (compute, update, reduce))
        return super().run(end_step, compute, update, local, reduce)


def _resize_sharing_replicas(protector, resize):
    """``resize`` whose state is marked as ``protect`` marks the first one: its DTensor shards
    that the new data-parallel group holds are replicated (for the new rank and world)."""
    def resized(rank, world_size, shards):
        state = resize(rank, world_size, shards)
        holders = getattr(state, "_replica_holders", None)
        if holders:
            _share_replicas(protector, state, holders, rank, world_size)
        return state
    return resized


def _share_replicas(protector, state, holders, rank=None, world_size=None):
    """Marks each shard in ``holders`` (name -> the ranks holding it) replicated where those
    ranks are this rank's data-parallel group under the protector's grid (``rank`` of
    ``world_size``: the runtime's now, unless a shrink gives them); says once, naming the grid
    that would fit, when some are not (they stay this rank's own, through L2's ring)."""
    if rank is None:
        now = protector._runtime.current()
        rank, world_size = now.rank, now.world_size
    grid = protector._grid if protector._grid is not None else Grid()
    place = _core.place_in_grid(grid, world_size, rank)
    group = tuple(sorted(_core.rank_in_grid(grid, world_size, place.t, place.p, d)
                         for d in range(place.data)))
    apart = []
    for name, ranks in holders.items():
        if tuple(ranks) == group:
            state._set_replicated(name, True)
        else:
            apart.append((name, ranks))
    if apart and rank == 0:
        name, ranks = apart[0]
        stride = ranks[1] - ranks[0]
        warnings.warn(
            f"rtft: {len(apart)} DTensor shard(s), '{name}' first, are held by ranks "
            f"{list(ranks)}, not by this rank's data-parallel group {list(group)}: each rank "
            "protects its own through L2's ring; rtft.Protector(runtime, "
            f"grid=rtft.Grid(tensor={stride})) makes those replicas the group (HSDP: the shard "
            "dimension's size)", stacklevel=3)


def restore(dir, state, version=None, *, verify_checksums=True, rank=None):
    """Fills every tensor of ``state`` in place, and every object, from the checkpoint under
    ``dir`` (LATEST, or ``version``); shards are reassembled from whichever saved shards overlap
    them, so a state saved by N ranks restores into M.  Objects are per rank: each comes from
    ``rank``'s file where the version has it (give this process's rank: its RNG state is its
    own), else from the lowest rank's.  Releases the GIL while it reads."""
    _core.restore(str(dir), state, version, verify_checksums, 0, rank)


# rt-ft's threads stop calling into Python before the interpreter goes away.
atexit.register(_core._at_exit)

__all__ = [
    "CheckpointEngine", "Communicator", "Error", "FailureEvent", "Grid", "GridPlace",
    "LocalCommStore", "ProtectStats", "Protector", "RecoveryInfo", "RunOutcome", "RunResult", "Runtime",
    "RuntimeInfo", "RuntimeRole", "Shard", "State", "StatusCode", "StepContext", "VersionInfo",
    "VersionMarks",
    "error_class", "fault_flag", "fault_point", "init_optimizer_state", "latest_version",
    "list_versions", "place_in_grid", "rank_in_grid", "restore", "split_evenly",
    "verify_version",
    # the exception classes (rtft/errors.py)
    "AbortedError", "AlreadyExistsError", "DataLossError", "DeadlineExceededError",
    "DeviceLostError", "FailedPreconditionError", "InternalError", "InvalidArgumentError",
    "IoError", "NotFoundError", "OutOfRangeError", "PermissionDeniedError",
    "ResourceExhaustedError", "ShutdownError", "UnavailableError", "UnimplementedError",
]
