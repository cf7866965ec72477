"""A training job's state, described once for rt-ft from state dicts, modules and optimizers.

``State`` walks a mapping and describes what it finds without copying it:

* tensors (``torch.Tensor``, ``numpy.ndarray``, anything with ``__dlpack__``) by their memory,
  saved from and restored into that memory in place;
* ``Shard(tensor, global_shape, offset)``: this rank's shard of a larger tensor;
* a ``torch.nn.Module``: its ``state_dict()`` tensors (the live parameters and buffers);
* a ``torch.optim.Optimizer``: its live per-parameter state (``state/<index>/<key>``, indexed as
  in its ``state_dict()``) and each group's hyperparameters (``param_groups/<i>``, written back
  into the live group on restore);
* any other object with ``state_dict()`` and ``load_state_dict()`` (an LR scheduler): one
  pickled object, handed to ``load_state_dict`` on restore;
* nested dicts and lists; any other value is pickled, read from its container when saved and
  put back into it when restored;
* unless ``rng=False``: the process's random number generators (object ``rtft/rng``): torch's
  CPU generator and, once CUDA is initialised, the current device's, NumPy's global
  ``RandomState`` (when NumPy is imported) and Python's ``random``. A run with dropout then
  recovers to the same bits; a generator the program made itself (``torch.Generator()``,
  ``numpy.random.default_rng()``) is its own to describe. Restored from a checkpoint written
  without it, the generators are left as they are.

Names join the keys with ``/`` (a ``/`` or ``%`` inside a key is written ``%2F``, ``%25``).
Loading a pickle runs code: restore only from directories you trust (the checksums catch
corruption, not tampering).
"""

import collections.abc
import importlib
import json
import pickle
import random
import sys

from rtft import _core

_PICKLE_PROTOCOL = 4
_LOGICAL_DTYPES = "rtft/logical_dtypes"
_RNG = "rtft/rng"


def _rng_state():
    """The process's generators as they are now (only the libraries the program imported)."""
    state = {"random": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # The device this process runs on: a spare that takes the rank may run on another
            # index, and gets this generator on its own device.
            state["torch_cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state):
    if not isinstance(state, dict):
        raise TypeError(f"{_RNG}: a dict of generator states expected, not {type(state).__name__}")
    if "random" in state:
        random.setstate(state["random"])
    if "numpy" in state:
        import numpy
        numpy.random.set_state(state["numpy"])
    if "torch" in state or "torch_cuda" in state:
        import torch
        if "torch" in state:
            torch.set_rng_state(state["torch"])
        if "torch_cuda" in state:
            if not torch.cuda.is_available():
                raise RuntimeError(f"{_RNG}: the state holds a CUDA generator's, and this "
                                   "process has no CUDA device")
            torch.cuda.set_rng_state(state["torch_cuda"])


class Shard:
    """``tensor`` is this rank's shard of a tensor of ``global_shape``, starting at ``offset``.
    ``replicated``: every rank of this rank's data-parallel group holds the same shard (HSDP's
    replicas, a tensor-parallel partition's slice): the protector compares the copies and feeds a
    lost rank from a live one, and L2's ring does not carry it (docs/python.md)."""

    def __init__(self, tensor, global_shape, offset, replicated=False):
        self.tensor = tensor
        self.global_shape = [int(d) for d in global_shape]
        self.offset = [int(d) for d in offset]
        self.replicated = bool(replicated)


def _key(key):
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"rtft.State: key {key!r} is a {type(key).__name__}; keys are str or int")
    return str(key).replace("%", "%25").replace("/", "%2F")


def _join(prefix, key):
    return f"{prefix}/{_key(key)}" if prefix else _key(key)


def _is_tensor(value):
    return hasattr(value, "__dlpack__") and not isinstance(value, type)


def _refuse_subclass(name, tensor):
    """A tensor subclass's DLPack need not be its own memory (a DTensor's is a gathered full-size
    copy, made anew at each call): saving or restoring it would touch a temporary, silently."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor):
        return
    kind = type(tensor)
    if kind is torch.Tensor or kind is torch.nn.Parameter:
        return
    from rtft.errors import InvalidArgumentError
    why = "its DLPack may not be its own memory"
    raise InvalidArgumentError(f"rtft.State: tensor '{name}' is a {kind.__name__}, a tensor "
                               f"subclass: {why}")


def _storage_order(tensor, global_shape):
    """A channels_last (or channels_last_3d) tensor as the same memory in its storage order
    (N, H, W, C), contiguous, so that it is described without a copy; the saved shape is then
    the storage order's (docs/format.md).  Any other tensor as it is."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor) or global_shape is not None or \
            tensor.is_contiguous():
        return tensor
    for fmt, order in ((torch.channels_last, (0, 2, 3, 1)),
                       (torch.channels_last_3d, (0, 2, 3, 4, 1))):
        if tensor.dim() == len(order) and tensor.is_contiguous(memory_format=fmt):
            return tensor.permute(*order)
    return tensor


def _dtensor_type():
    """torch's DTensor class where this torch has one (2.x), else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for module in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            return importlib.import_module(module).DTensor
        except (ImportError, AttributeError):
            continue
    return None


def _shard_holders(tensor, kinds):
    """The global ranks that hold the same local shard as this rank: those of the DTensor's mesh
    that differ from it only along its Replicate dimensions (HSDP's replicate dimension)."""
    mesh = tensor.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return None
    index = tuple(slice(None) if kind == "Replicate" else coordinate[i]
                  for i, kind in enumerate(kinds))
    return tuple(sorted(int(r) for r in mesh.mesh[index].reshape(-1).tolist()))


def _local_shard(name, tensor):
    """A DTensor as what this rank holds: its local tensor (its own memory, not the gathered
    copy its ``__dlpack__`` makes) with the global shape, this shard's offset and the ranks that
    hold the same shard (more than this one where a placement is Replicate), or the local tensor
    alone when every placement is Replicate.  Partial placements are refused: their local values
    are not yet the tensor's."""
    from rtft.errors import InvalidArgumentError
    kinds = [type(p).__name__ for p in tensor.placements]
    if any(k not in ("Shard", "Replicate") for k in kinds):
        raise InvalidArgumentError(f"rtft.State: DTensor '{name}' has placements "
                                   f"{list(tensor.placements)}: only Shard and Replicate are "
                                   "saved (a Partial one holds no value of the tensor yet)")
    local = tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor.to_local()
    if all(k == "Replicate" for k in kinds):
        return local, None, None, None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh,
                                                          tensor.placements)
    if list(shape) != list(local.shape):
        raise InvalidArgumentError(f"rtft.State: DTensor '{name}' holds a local tensor of shape "
                                   f"{list(local.shape)} where its placements give "
                                   f"{list(shape)}")
    holders = _shard_holders(tensor, kinds) if "Replicate" in kinds else None
    return local, list(tensor.shape), list(offset), holders


def _holds_tensor(value):
    if _is_tensor(value) or isinstance(value, Shard):
        return True
    if isinstance(value, collections.abc.Mapping):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return False


# Wrappers whose state_dict() puts a prefix before the wrapped module's names: DDP's and
# DataParallel's "module.", torch.compile's "_orig_mod.".
_WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module",
             "OptimizedModule": "_orig_mod"}


def _plain_state_dict(module, prefix):
    """``module``'s state_dict() under the names of the plain model: wrappers around it are
    looked through, and "_orig_mod." (a compiled submodule) is left out of every key, so a
    state saved from a DDP-wrapped or compiled model restores into a plain one and back."""
    while type(module).__name__ in _WRAPPERS:
        inner = getattr(module, _WRAPPERS[type(module).__name__], None)
        if inner is None or not _is_module(inner):
            break
        module = inner
    plain = {}
    for key, value in module.state_dict().items():
        name = ".".join(part for part in key.split(".") if part != "_orig_mod")
        if name in plain:
            raise ValueError(f"rtft.State: {prefix or 'the module'} has two entries named "
                             f"'{name}' once torch.compile's '_orig_mod.' is left out")
        plain[name] = value
    return plain


def _is_module(value):
    return hasattr(value, "state_dict") and hasattr(value, "named_parameters")


def _is_optimizer(value):
    return (hasattr(value, "param_groups") and hasattr(value, "state")
            and hasattr(value, "state_dict"))


def _is_stateful(value):
    return hasattr(value, "state_dict") and hasattr(value, "load_state_dict")


class State(_core.State):
    """The state rt-ft saves, restores and protects; see the module's documentation.

    ``State(state)`` describes the mapping ``state``; ``restored()``, when given, runs after
    every restore (a checkpoint's or a recovery's), once every tensor and object is back.
    ``rng=False`` leaves the process's random number generators out.
    """

    def __init__(self, state=None, *, restored=None, rng=True):
        super().__init__()
        self._logical = {}
        # DTensor shards that other ranks hold too: name -> the ranks (rtft.Protector marks
        # them replicated where those are the rank's data-parallel group).
        self._replica_holders = {}
        self._buffers = set()  # data pointers of the module being described's buffers
        if restored is not None:
            self.set_restored(restored)
        if rng:
            self.add_object(_RNG, lambda: pickle.dumps(_rng_state(), protocol=_PICKLE_PROTOCOL),
                            lambda data: _set_rng_state(pickle.loads(data)), optional=True)
        if state is not None:
            if not isinstance(state, collections.abc.Mapping):
                raise TypeError("rtft.State takes a mapping (a dict of state dicts, modules, "
                                f"optimizers, tensors and values), not a {type(state).__name__}")
            self.add(state)

    def add(self, value, prefix=""):
        """Describes ``value`` (see the module's documentation) under the name ``prefix``."""
        if isinstance(value, Shard):
            self._tensor(prefix, value.tensor, value.global_shape, value.offset,
                         value.replicated)
        elif _is_tensor(value):
            self._tensor(prefix, value)
        elif _is_module(value):
            # Buffers (BatchNorm's running statistics) change in forward, inside compute: the
            # protector copies them when the step begins.
            buffers = self._buffers
            self._buffers = {b.data_ptr() for b in value.buffers() if b.numel() > 0}
            try:
                self.add(_plain_state_dict(value, prefix), prefix)
            finally:
                self._buffers = buffers
        elif _is_optimizer(value):
            self._optimizer(value, prefix)
        elif _is_stateful(value):
            self._stateful(value, prefix)
        elif isinstance(value, collections.abc.Mapping):
            for key, item in value.items():
                self._item(value, key, item, _join(prefix, key))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                self._item(value, index, item, _join(prefix, index))
        else:
            raise TypeError(f"rtft.State: {prefix or 'the state'} is a {type(value).__name__}: "
                            "describe values inside a mapping")
        return self

    def add_value(self, name, get, put):
        """An object pickled from ``get()`` when saved and given to ``put(value)`` on restore."""
        self.add_object(name, lambda: pickle.dumps(get(), protocol=_PICKLE_PROTOCOL),
                        lambda data: put(pickle.loads(data)))

    @property
    def logical_dtypes(self):
        """Tensors saved under another dtype than their own (bool as uint8): name -> dtype."""
        return dict(self._logical)

    # ---- the parts of add() -----------------------------------------------------------------

    def _tensor(self, name, tensor, global_shape=None, offset=None, replicated=False):
        if not name:
            raise TypeError("rtft.State: a tensor needs a name (put it in a mapping)")
        dtensor = _dtensor_type()
        if dtensor is not None and isinstance(tensor, dtensor):
            if global_shape is not None or offset is not None:
                raise TypeError(f"rtft.State: DTensor '{name}' describes its own shard")
            tensor, global_shape, offset, holders = _local_shard(name, tensor)
            if holders is not None and len(holders) > 1:
                self._replica_holders[name] = holders
        _refuse_subclass(name, tensor)
        tensor = _storage_order(tensor, global_shape)
        changed = _is_tensor(tensor) and hasattr(tensor, "data_ptr") and \
            tensor.data_ptr() in self._buffers
        logical = self.add_tensor(name, tensor, global_shape, offset, changed_in_compute=changed,
                                  replicated=replicated)
        if logical == "bool":
            if not self._logical:
                # Readers of the files (h5py) see uint8; this object says what the bytes mean.
                dtypes = self._logical  # not self: rt-ft holds the callable
                self.add_object(_LOGICAL_DTYPES,
                                lambda: json.dumps(dtypes, sort_keys=True).encode(),
                                lambda data: None)
            self._logical[name] = logical

    def _item(self, container, key, item, name):
        mutable = not isinstance(container, tuple)
        if _holds_tensor(item) or _is_module(item) or _is_optimizer(item) or _is_stateful(item):
            self.add(item, name)
        elif isinstance(item, (collections.abc.Mapping, list)) and item and mutable:
            self.add(item, name)
        elif mutable:
            self.add_value(name, lambda: container[key],
                           lambda value: container.__setitem__(key, value))
        else:
            # Inside a tuple (immutable): saved, but there is nowhere to put it back.
            self.add_value(name, lambda: item, lambda value: None)

    def _optimizer(self, optimizer, prefix):
        index = 0
        for group_index, group in enumerate(optimizer.param_groups):
            for param in group["params"]:
                per_param = optimizer.state.get(param)
                if not per_param:
                    raise ValueError(
                        f"rtft.State: {prefix or 'the optimizer'} has no state for parameter "
                        f"{index} yet (optimizers create it at their first step): call "
                        "rtft.init_optimizer_state(optimizer) first")
                where = _join(_join(prefix, "state"), index)
                for key, value in per_param.items():
                    self._item(per_param, key, value, _join(where, key))
                index += 1
            self.add_value(_join(_join(prefix, "param_groups"), group_index),
                           lambda g=group: {k: v for k, v in g.items() if k != "params"},
                           lambda value, g=group: g.update(value))

    def _stateful(self, obj, prefix):
        if not prefix:
            raise TypeError("rtft.State: an object with state_dict() needs a name")
        self.add_value(prefix, obj.state_dict, obj.load_state_dict)


# Optimizers whose first step only reads state it would create as zeros (and a step counter),
# so that a zero step with a learning rate and weight decay of 0 makes exactly that state.
_EXACT_ZERO_STEP = ("Adam", "AdamW", "SGD", "RMSprop", "Adadelta", "Adagrad")


def init_optimizer_state(optimizer):
    """Creates the per-parameter state an optimizer makes at its first step, so that it can be
    described before any step: one step with zero gradients, a learning rate of 0 and no weight
    decay on the parameters that have none, its step counters then set back to 0. The parameters
    do not change, and the state is exactly the one the first real step finds (zero moments, step
    0) for Adam, AdamW, SGD, RMSprop, Adadelta and Adagrad. Refused, with the reason: SGD with
    momentum and dampening (its first step copies the gradient, undamped, into a buffer it has not
    got yet), and other optimizers (NAdam's, RAdam's, Rprop's first step sets state from the
    learning rate or the step count): take their first step before describing them."""
    import torch

    from rtft.errors import InvalidArgumentError

    groups = optimizer.param_groups
    params = [p for g in groups for p in g["params"]]
    missing = {id(p) for p in params if not optimizer.state.get(p)}
    if not missing:
        return optimizer
    kind = type(optimizer).__name__
    if not any(type(optimizer) is getattr(torch.optim, name, None) for name in _EXACT_ZERO_STEP):
        raise InvalidArgumentError(
            f"init_optimizer_state: {kind} is not one whose first step's state a zero step "
            f"makes exactly ({', '.join(_EXACT_ZERO_STEP)} are): run its first step before "
            "describing it")
    for i, g in enumerate(groups):
        if kind == "SGD" and g.get("momentum", 0) and g.get("dampening", 0):
            raise InvalidArgumentError(
                f"init_optimizer_state: SGD group {i} has momentum and dampening "
                f"{g['dampening']}: its first step copies the gradient into the momentum buffer "
                "undamped, later ones damp it, so no buffer made beforehand is right; run its "
                "first step before describing it")
    grads = [p.grad for p in params]
    saved = [(g["lr"], g.get("weight_decay")) for g in groups]
    try:
        for p in params:
            p.grad = torch.zeros_like(p) if id(p) in missing else None
        for g in groups:
            g["lr"] = g["lr"] * 0 if torch.is_tensor(g["lr"]) else 0.0
            if "weight_decay" in g:  # L2 decay would add weight_decay * p to the zero gradient
                g["weight_decay"] = 0.0
        with torch.no_grad():
            optimizer.step()
    finally:
        for g, (lr, decay) in zip(groups, saved):
            g["lr"] = lr
            if decay is not None:
                g["weight_decay"] = decay
        for p, grad in zip(params, grads):
            p.grad = grad
    for p in params:
        if id(p) in missing:
            per_param = optimizer.state[p]
            for key, value in per_param.items():
                if key != "step" and torch.is_tensor(value) and bool(value.ne(0).any()):
                    raise InvalidArgumentError(  # a guard: none of the above does this
                        f"init_optimizer_state: {kind}'s zero step left '{key}' non-zero")
            if "step" in per_param:
                step = per_param["step"]
                if torch.is_tensor(step):
                    step.zero_()
                else:
                    per_param["step"] = type(step)(0)
    return optimizer
