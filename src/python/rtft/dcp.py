"""``torch.distributed.checkpoint`` (DCP) over rt-ft's engine: a storage writer and reader.

    import torch.distributed.checkpoint as dcp
    from rtft.dcp import RtftStorageReader, RtftStorageWriter

    dcp.save(state_dict, storage_writer=RtftStorageWriter("/lustre/run/step-100"))
    future = dcp.async_save(state_dict, storage_writer=RtftStorageWriter("/lustre/run/step-200"))
    dcp.load(state_dict, storage_reader=RtftStorageReader("/lustre/run/step-200"))

The directory is an rt-ft checkpoint root (docs/format.md: HDF5 rank files, checksums, atomic
commit) plus DCP's own ``.metadata``.  Tensors are written from their memory (host or GPU) by
rt-ft's engine; each rank's chunk of a tensor is an rt-ft shard at its offset, so rt-ft's
resharding reads any box of it back.  Objects that are not tensors, and tensors of a dtype rt-ft
lacks, are stored as the bytes DCP gives them.  With ``async_save`` the writer is its own stager:
staging completes when rt-ft's capture of the state is in host memory, the upload when the version
is persisted.  ``.metadata`` and the objects are pickles: load only directories you trust.

Written against the DCP API of PyTorch 2.x (``dcp.save``/``async_save``/``load``); PyTorch 1.13
has neither call, and the tests skip there.
"""

import copy
import dataclasses
import io
import math
import os
import pickle
import threading

import torch
from torch.distributed.checkpoint import StorageReader, StorageWriter
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

import rtft
from rtft.state import _dtensor_type, _key, _local_shard

_METADATA = ".metadata"
_STAGE_WAIT_S = 600.0  # how long a stage() waits for the previous save to take its staging
_SUPPORTED = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
              torch.int32, torch.int64, torch.uint8, torch.bool}


def _place(group=None):
    """This rank's place in ``group`` (None: the default group), or (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    if group is not None:
        raise RuntimeError("rtft.dcp: the writer was given a group, but torch.distributed is "
                           "not initialised")
    return 0, 1


def _fits(tensor):
    return type(tensor) is torch.Tensor and tensor.dtype in _SUPPORTED


def _add_bytes(state, name, blob):
    """`blob` saved as the object `name` of `state` (saved only, never restored into); its size."""
    state.add_object(name, lambda b=blob: b, lambda data: None)
    return len(blob)


def _torch_bytes(value):
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


class _Names:
    """Unique rt-ft names for DCP's fully qualified names (a rank may hold several chunks)."""

    def __init__(self):
        self.used = set()

    def __call__(self, kind, fqn):
        base, n = f"dcp/{kind}/{_key(fqn)}", 0
        name = base
        while name in self.used:
            n += 1
            name = f"{base}#{n}"
        self.used.add(name)
        return name


def _write_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RtftStorageWriter(StorageWriter):
    """Writes DCP checkpoints with rt-ft's engine; ``engine_options`` go to CheckpointEngine.

    ``group``: the process group whose ranks write the checkpoint, the one given to DCP as
    ``process_group`` (None: the default group): the engine's rank and world size are the
    rank's place in it, and ``async_save``'s version is agreed over it."""

    _synchronize_after_execute = False  # staging is complete when stage() returns

    def __init__(self, path=None, *, group=None, **engine_options):
        super().__init__()
        kind = getattr(torch.distributed, "ProcessGroup", ())
        if group is not None and not isinstance(group, kind):
            raise TypeError(f"RtftStorageWriter: group is a torch.distributed.ProcessGroup, "
                            f"not {type(group).__name__}")
        self.path = None if path is None else os.fspath(path)
        self.group = group
        self.engine_options = engine_options
        self._engine = None
        self._staged = None  # what stage() captured, until this save's write_data takes it
        self._staged_taken = threading.Condition()
        self._last_version = 0  # this writer's newest version, committed or not yet
        self.is_coordinator = False

    # ---- StorageWriter -----------------------------------------------------------------------

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if self.path is None:
            raise ValueError("RtftStorageWriter needs a path (or dcp.save's checkpoint_id)")
        self.is_coordinator = is_coordinator
        os.makedirs(self.path, exist_ok=True)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        # The coordinator numbers the version, so that every rank writes the same one (the
        # staged one where async_save agreed on it already).
        version = self._staged[0] if self._staged is not None else \
            self._take_version(self._next_version())
        return [dataclasses.replace(plan, storage_data=version) for plan in plans]

    def write_data(self, plan, planner):
        if self._staged is not None:
            with self._staged_taken:
                version, names, pickled, offsets = self._staged
                self._staged = None
                self._staged_taken.notify_all()
            results = [self._staged_result(item, names, pickled, offsets, version)
                       for item in plan.items]
        else:
            version = self._take_version(plan.storage_data if isinstance(
                plan.storage_data, int) else self._next_version())
            state, results = rtft.State(rng=False), []
            new_name = _Names()
            for item in plan.items:
                results.append(self._describe(state, new_name, item, planner, version))
            self._engine_for().checkpoint(version, state)
        return self._when_persisted(version, results)

    def finish(self, metadata, results):
        metadata.storage_data = {r.index: r.storage_data for rank in results for r in rank}
        _write_atomically(os.path.join(self.path, _METADATA), pickle.dumps(metadata))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))

    def storage_meta(self):
        return None

    # ---- AsyncStager (dcp.async_save) --------------------------------------------------------

    @property
    def should_synchronize_after_execute(self):
        return self._synchronize_after_execute

    def stage(self, state_dict):
        """Captures the state into rt-ft's pinned host memory and returns once it is there; the
        tensors may change from then on. Non-tensor values are copied. A DTensor is staged as
        its local shard at its offset (DCP's plan, made later from its metadata, names the same
        chunk); the version is agreed by every rank of the writer's group."""
        from torch.distributed.checkpoint._nested_dict import flatten_state_dict
        flat, mapping = flatten_state_dict(state_dict)
        # One staged save at a time: torch stages on a thread of its own, so a second
        # async_save may stage while the first's save has not yet taken what it staged.
        with self._staged_taken:
            if not self._staged_taken.wait_for(lambda: self._staged is None,
                                               timeout=_STAGE_WAIT_S):
                raise RuntimeError(
                    f"rtft.dcp: the previous async_save on this writer staged version "
                    f"{self._staged[0]} and did not write it within {_STAGE_WAIT_S:g} s (did "
                    "its save fail?): a writer serves one async_save at a time")
            self._staged = (None,)  # staging: a concurrent stage() waits for this one
        try:
            return self._stage(flat, mapping)
        except BaseException:
            with self._staged_taken:
                self._staged = None
                self._staged_taken.notify_all()
            raise

    def _stage(self, flat, mapping):
        from torch.distributed.checkpoint._nested_dict import unflatten_state_dict
        version, state, names, staged = self._agreed_version(), rtft.State(rng=False), {}, {}
        new_name = _Names()
        pickled = {}  # fqn -> the size of the bytes of a tensor of a dtype rt-ft lacks
        offsets = {}  # fqn -> the offset a DTensor's shard was staged at
        dtensor = _dtensor_type()
        for fqn, value in flat.items():
            if dtensor is not None and isinstance(value, dtensor):
                local, shape, offset, _ = _local_shard(fqn, value)
                local = local.detach()
                if shape is None:  # replicated: the whole tensor, at the origin
                    shape, offset = list(local.shape), [0] * local.dim()
                offsets[fqn] = offset
                staged[fqn] = value  # DCP plans from its metadata; its bytes are captured here
                if not _fits(local):
                    names[fqn] = new_name("pickled", fqn)
                    pickled[fqn] = _add_bytes(state, names[fqn],
                                              _torch_bytes(local.cpu().clone()))
                    continue
                local = local if local.is_contiguous() else local.contiguous()
                names[fqn] = new_name("tensors", fqn)
                state.add_tensor(names[fqn], local, shape, offset)
                continue
            if torch.is_tensor(value) and type(value) is not torch.Tensor:
                raise NotImplementedError(
                    f"rtft.dcp: async staging takes plain tensors and DTensors; '{fqn}' is a "
                    f"{type(value).__name__} (use dcp.save)")
            if torch.is_tensor(value) and not _fits(value):
                # The bytes DCP's own writer would store, as dcp.save's path does (_describe).
                names[fqn] = new_name("pickled", fqn)
                staged[fqn] = value.detach().cpu().clone()
                pickled[fqn] = _add_bytes(state, names[fqn], _torch_bytes(staged[fqn]))
            elif torch.is_tensor(value):
                tensor = value.detach()
                tensor = tensor if tensor.is_contiguous() else tensor.contiguous()
                names[fqn] = new_name("tensors", fqn)
                state.add_tensor(names[fqn], tensor, list(tensor.shape), [0] * tensor.dim())
                staged[fqn] = value
            else:
                names[fqn] = new_name("bytes", fqn)
                _add_bytes(state, names[fqn], _torch_bytes(value))
                staged[fqn] = copy.deepcopy(value)
        engine = self._engine_for()
        engine.checkpoint(version, state)
        engine.wait_captured(version)
        with self._staged_taken:
            self._staged = (version, names, pickled, offsets)
        return unflatten_state_dict(staged, mapping)

    def synchronize_staging(self):
        pass

    def close(self):
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    # ---- parts ---------------------------------------------------------------------------------

    def _engine_for(self):
        rank, world = _place(self.group)
        if self._engine is None or self._engine.dir != self.path or \
                (self._engine.rank, self._engine.world_size) != (rank, world):
            self.close()
            self._engine = rtft.CheckpointEngine(self.path, rank=rank, world_size=world,
                                                 **self.engine_options)
        return self._engine

    def _next_version(self):
        """The version after the newest committed one and after this writer's own (whose
        commit may still be in flight)."""
        return max(rtft.latest_version(self.path) or 0, self._last_version) + 1

    def _take_version(self, version):
        self._last_version = max(self._last_version, version)
        return version

    def _agreed_version(self):
        """One version for every rank: each proposes its next one and the largest is taken (a
        rank may see the previous version committed where another does not yet)."""
        version = self._next_version()
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and \
                dist.get_world_size(self.group) > 1:
            proposals = [None] * dist.get_world_size(self.group)
            dist.all_gather_object(proposals, version, group=self.group)
            version = max(proposals)
        return self._take_version(version)

    def _describe(self, state, new_name, item, planner, version):
        fqn = item.index.fqn
        if item.type == WriteItemType.BYTE_IO:
            name = new_name("bytes", fqn)
            size = _add_bytes(state, name, planner.resolve_data(item).getvalue())
            return WriteResult(item.index, size, {"name": name, "version": version})
        tensor = planner.resolve_data(item).detach()
        chunk = item.tensor_data.chunk
        if not _fits(tensor):  # a dtype rt-ft lacks: the bytes DCP's own writer would store
            name = new_name("pickled", fqn)
            size = _add_bytes(state, name, _torch_bytes(tensor.cpu()))
            return WriteResult(item.index, size,
                               {"name": name, "version": version, "pickled": True})
        tensor = tensor if tensor.is_contiguous() else tensor.contiguous()
        name = new_name("tensors", fqn)
        state.add_tensor(name, tensor, list(item.tensor_data.size), list(chunk.offsets))
        return WriteResult(item.index, tensor.numel() * tensor.element_size(),
                           {"name": name, "version": version, "offsets": list(chunk.offsets)})

    def _staged_result(self, item, names, pickled, offsets, version):
        fqn = item.index.fqn
        if fqn not in names:
            raise RuntimeError(f"rtft.dcp: '{fqn}' was planned but not staged")
        if fqn in offsets and item.tensor_data is not None and \
                list(item.tensor_data.chunk.offsets) != list(offsets[fqn]):
            raise RuntimeError(f"rtft.dcp: DCP planned the chunk of '{fqn}' at "
                               f"{list(item.tensor_data.chunk.offsets)}, staged at "
                               f"{offsets[fqn]}")
        if fqn in pickled:
            return WriteResult(item.index, pickled[fqn],
                               {"name": names[fqn], "version": version, "pickled": True})
        if item.type == WriteItemType.BYTE_IO:
            return WriteResult(item.index, 0, {"name": names[fqn], "version": version})
        chunk = item.tensor_data.chunk
        dtype = item.tensor_data.properties.dtype
        size = math.prod(chunk.sizes) * torch.empty((), dtype=dtype).element_size()
        return WriteResult(item.index, size, {"name": names[fqn], "version": version,
                                              "offsets": list(chunk.offsets)})

    def _when_persisted(self, version, results):
        engine, future = self._engine_for(), Future()

        def wait():  # wait_persisted releases the GIL
            try:
                engine.wait_persisted(version)
                future.set_result(results)
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)

        threading.Thread(target=wait, name="rtft-dcp-persist", daemon=True).start()
        return future


class RtftStorageReader(StorageReader):
    """Reads what RtftStorageWriter wrote, resharding through rt-ft's restore."""

    def __init__(self, path=None):
        super().__init__()
        self.path = None if path is None else os.fspath(path)
        self.metadata = None
        self._planner = None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self):
        with open(os.path.join(self.path, _METADATA), "rb") as f:
            return pickle.load(f)  # trusted directories only (see the module's documentation)

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.metadata = metadata

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        self._planner = planner
        pending = list(plan.items)
        while pending:  # one restore per round: a State names each stored tensor once
            pending = self._read_round(pending, planner)
        future = Future()
        future.set_result(None)
        return future

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return os.path.isfile(os.path.join(os.fspath(checkpoint_id), _METADATA))

    def _read_round(self, items, planner):
        by_version, later, used = {}, [], set()
        for item in items:
            stored = self.metadata.storage_data[item.storage_index]
            if stored["name"] in used:
                later.append(item)
                continue
            used.add(stored["name"])
            by_version.setdefault(stored["version"], []).append((item, stored))
        for version, group in by_version.items():
            state, done = rtft.State(rng=False), []
            for item, stored in group:
                done.append(self._describe(state, item, stored))
            rtft.restore(self.path, state, version=version)
            for finish in done:
                finish()
        return later

    def _describe(self, state, item, stored):
        name = stored["name"]
        if item.type == LoadItemType.BYTE_IO or stored.get("pickled"):
            got = {}
            state.add_object(name, lambda: b"", lambda data: got.__setitem__("data", data))
            if item.type == LoadItemType.BYTE_IO:
                return lambda: self._planner.load_bytes(item, io.BytesIO(got["data"]))
            return lambda: self._copy_pickled(item, got)
        md = self.metadata.state_dict_metadata[item.storage_index.fqn]
        box = [o + s for o, s in zip(stored["offsets"], item.storage_offsets)]
        buffer = torch.empty(list(item.lengths), dtype=md.properties.dtype)
        state.add_tensor(name, buffer, list(md.size), box)
        return lambda: self._commit(item, buffer)

    def _commit(self, item, buffer):
        target = self._planner.resolve_tensor(item).detach()
        target.copy_(buffer)
        self._planner.commit_tensor(item, target)

    def _copy_pickled(self, item, got):
        tensor = torch.load(io.BytesIO(got["data"]), weights_only=False)
        for dim, (start, length) in enumerate(zip(item.storage_offsets, item.lengths)):
            tensor = tensor.narrow(dim, start, length)
        self._commit(item, tensor)
