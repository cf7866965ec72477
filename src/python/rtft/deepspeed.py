"""A DeepSpeed checkpoint engine over rt-ft's (as DataStates-LLM provides one), decoupled:
``save`` returns once the state is in rt-ft's pinned host memory, and the files are written
while training goes on; ``commit`` waits until every file of the tag is durable.

    from rtft.deepspeed import RtftCheckpointEngine
    engine.checkpoint_engine = RtftCheckpointEngine()   # a deepspeed.DeepSpeedEngine's

Each path DeepSpeed saves to becomes an rt-ft checkpoint directory (docs/format.md) holding the
state's tensors, read from their memory (host or GPU) without a copy, and a pickle of the rest of
its structure; ``load`` rebuilds the dictionary. Loading unpickles it: load only paths you trust.
DeepSpeed cannot be installed on rt-ft's test machines, so this class is tested against a copy of
the method signatures of DeepSpeed's ``CheckpointEngine`` interface; it derives from that class
where DeepSpeed is installed.
"""

import copy
import os
import pickle

import torch

import rtft

try:  # DeepSpeed's interface, where it is installed
    from deepspeed.runtime.checkpoint_engine.checkpoint_engine import CheckpointEngine as _Base
except ImportError:
    _Base = object

_SKELETON = "rtft/deepspeed_skeleton"
_VERSION = 1
_SUPPORTED = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
              torch.int32, torch.int64, torch.uint8, torch.bool}


class _Tensor:
    """Where a tensor of the state dict was: its rt-ft name, dtype, shape and device."""

    def __init__(self, name, tensor):
        self.name, self.dtype = name, tensor.dtype
        self.shape, self.device = list(tensor.shape), str(tensor.device)


def _split(value, tensors):
    """The state dict with each tensor rt-ft saves replaced by a _Tensor (collected in
    `tensors`); other values, tensors of other dtypes included, stay for the pickle."""
    if type(value) is torch.Tensor and value.dtype in _SUPPORTED:
        tensor = value.detach()
        tensors.append(tensor if tensor.is_contiguous() else tensor.contiguous())
        return _Tensor(f"t/{len(tensors) - 1}", tensor)
    if isinstance(value, dict):
        out = copy.copy(value)  # its own type (OrderedDict, defaultdict)
        for k in out:
            out[k] = _split(out[k], tensors)
        return out
    if type(value) in (list, tuple):
        return type(value)(_split(v, tensors) for v in value)
    return value


def _join(value, tensors):
    if isinstance(value, _Tensor):
        return tensors[value.name]
    if isinstance(value, dict):
        for k in list(value):
            value[k] = _join(value[k], tensors)
        return value
    if type(value) in (list, tuple):
        return type(value)(_join(v, tensors) for v in value)
    return value


def _walk(value, out):
    if isinstance(value, _Tensor):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _walk(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk(v, out)
    return out


def _device(saved, map_location):
    """Where a tensor saved on ``saved`` goes, as ``torch.load(map_location=...)`` would put it:
    None (where it was), a str or a device, a dict of saved location to location, or a callable
    ``f(storage, location)`` given the tensor's storage on the host that returns a storage (its
    device) or None (where it was). DeepSpeed's own loader passes ``lambda storage, loc:
    storage``, which loads onto the host."""
    if map_location is None:
        return torch.device(saved)
    if isinstance(map_location, (str, torch.device)):
        return torch.device(map_location)
    if isinstance(map_location, dict):
        return torch.device(map_location.get(str(saved), saved))
    if callable(map_location):
        empty = torch.empty(0)
        storage = empty.untyped_storage() if hasattr(empty, "untyped_storage") else \
            empty.storage()
        moved = map_location(storage, str(saved))
        if moved is None:
            return torch.device(saved)
        if not hasattr(moved, "device"):
            raise TypeError("RtftCheckpointEngine.load: map_location returned a "
                            f"{type(moved).__name__}, not a storage or None")
        return torch.device(moved.device)
    raise TypeError("RtftCheckpointEngine.load: map_location is None, a str, a torch.device, a "
                    f"dict or a callable, not a {type(map_location).__name__}")


class RtftCheckpointEngine(_Base):
    """DeepSpeed's CheckpointEngine interface over rt-ft's engine; ``engine_options`` go to
    rtft.CheckpointEngine (pool_bytes, flush_threads, ...)."""

    def __init__(self, config_params=None, **engine_options):
        if _Base is not object:
            super().__init__(config_params)
        self.name = "RtftCheckpointEngine"
        self.engine_options = engine_options
        self.commit_info = None
        self._in_flight = []  # (engine, path) saved and not committed yet

    def create(self, info):
        """Begins a tag (DeepSpeed's CheckpointCommitInfo, or the tag itself in old DeepSpeed)."""
        self.commit_info = info

    def makedirs(self, path, exist_ok=False):
        os.makedirs(path, exist_ok=exist_ok)

    def save(self, state_dict, path: str):
        tensors = []
        skeleton = _split(state_dict, tensors)
        state = rtft.State(rng=False)
        for i, tensor in enumerate(tensors):
            state.add_tensor(f"t/{i}", tensor)
        blob = pickle.dumps(skeleton, protocol=4)
        state.add_object(_SKELETON, lambda: blob, lambda data: None)
        engine = rtft.CheckpointEngine(os.fspath(path), **self.engine_options)
        engine.checkpoint(_VERSION, state)
        engine.wait_captured(_VERSION)  # DeepSpeed changes the tensors once save returns
        self._in_flight.append((engine, path))

    def load(self, path: str, map_location=None):
        got = {}
        head = rtft.State(rng=False)
        head.add_object(_SKELETON, lambda: b"", lambda data: got.__setitem__("skeleton", data))
        rtft.restore(os.fspath(path), head)
        skeleton = pickle.loads(got["skeleton"])  # trusted paths only
        state, tensors = rtft.State(rng=False), {}
        for t in _walk(skeleton, []):
            tensors[t.name] = torch.empty(t.shape, dtype=t.dtype,
                                          device=_device(t.device, map_location))
            state.add_tensor(t.name, tensors[t.name])
        rtft.restore(os.fspath(path), state)
        return _join(skeleton, tensors)

    def commit(self, info):
        """Waits until every file saved since create() is durable; True when all are."""
        in_flight, self._in_flight = self._in_flight, []
        for engine, _ in in_flight:
            engine.wait_persisted(_VERSION)
            engine.close()
        self.commit_info = None
        return True

    def wait(self):
        """Older DeepSpeed's fence for asynchronous engines: as commit, keeping the tag."""
        info = self.commit_info
        self.commit(info)
        self.commit_info = info

    def cleanup(self):
        if self._in_flight:
            self.commit(self.commit_info)

    def is_data_parallel_writer(self, dp_rank):
        return dp_rank == 0

    def is_decoupled(self):
        return True

    def set_commit_info(self, info):
        self.commit_info = info

    def get_commit_info(self):
        return self.commit_info

    def preserves_storage_sharing(self):
        return False  # two views of one storage are saved as two tensors
