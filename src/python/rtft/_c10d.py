"""rtft.torch's groups as torch.distributed's backend "rtft" (torch 2.x): the default group,
``new_group`` and DeviceMesh's groups are ``rtft.torch.ProcessGroup``s of one protector.

torch names every group (its group id, the same on every member when they make their groups in
the same order, as torch requires); a group of listed ranks makes its communicator under that
name through the job's store in each recovery epoch.  torch's own store is ``Store``, over the
job's key-value store through the agent, never a TCPStore on rank 0: a spare that takes any
rank, rank 0 included, reads it.
"""

import hashlib

import torch
import torch.distributed as dist

from rtft.errors import FailedPreconditionError, InvalidArgumentError

_NAME = "rtft"
_state = {"protector": None, "registered": False}


def _torch_major():
    return int(torch.__version__.split(".")[0])


class Store(dist.Store):
    """torch.distributed's store over the job's key-value store (``runtime.kv_put`` and
    ``kv_get``): ``set``, ``get``, ``wait`` and ``check``.  The job's store has no atomic
    update, so ``add``, ``compare_set``, ``delete_key`` and ``num_keys`` raise
    ``NotImplementedError`` naming themselves (torch 2.x's ``init_process_group`` and
    ``new_group`` use none of them unless ``TORCH_DIST_INIT_BARRIER=1``)."""

    def __init__(self, runtime, prefix="torch/", timeout=300.0):
        super().__init__()
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidArgumentError(f"rtft.torch.Store: timeout {timeout!r} s")
        self._runtime, self._prefix, self._timeout = runtime, prefix, float(timeout)

    def set(self, key, value):
        value = value.encode() if isinstance(value, str) else bytes(value)
        self._runtime.kv_put(self._prefix + key, value)

    def get(self, key):
        return self._runtime.kv_get(self._prefix + key, self._timeout)

    def wait(self, keys, timeout=None):
        seconds = timeout.total_seconds() if timeout is not None else self._timeout
        for key in keys:
            self._runtime.kv_get(self._prefix + key, max(seconds, 0.001))

    def check(self, keys):
        from rtft.errors import DeadlineExceededError
        try:
            for key in keys:
                self._runtime.kv_get(self._prefix + key, 0.001)
        except DeadlineExceededError:
            return False
        return True

    def _refused(name):  # noqa: N805 (a factory of methods)
        def refused(self, *args, **kwargs):
            raise NotImplementedError(f"rtft.torch.Store.{name}: the job's key-value store has "
                                      "no atomic update (set TORCH_DIST_INIT_BARRIER=0, the "
                                      "default of torch 2.x)")
        refused.__name__ = name
        return refused

    add = _refused("add")
    compare_set = _refused("compare_set")
    delete_key = _refused("delete_key")
    num_keys = _refused("num_keys")
    del _refused


def _group_name(group_id, ranks):
    digest = hashlib.sha256(",".join(map(str, ranks)).encode()).hexdigest()[:12]
    return f"{group_id}-{len(ranks)}-{digest}"


def _create(opts, backend_options=None):
    """The backend's creator (torch's extended API): a group of the registered protector."""
    from rtft.torch import ProcessGroup
    protector = _state["protector"]
    if protector is None:
        raise FailedPreconditionError("the 'rtft' backend is made by "
                                      "rtft.torch.init_process_group(protector), not by "
                                      "torch.distributed.init_process_group")
    world = protector._runtime.current().world_size
    ranks = list(opts.global_ranks_in_group) or list(range(world))
    name = _group_name(opts.group_id, ranks)
    if ranks == list(range(world)) and opts.group_size == world:
        return ProcessGroup(protector, name=name)
    return ProcessGroup(protector, ranks=ranks, name=name)


def init_process_group(protector, timeout=None):
    """``torch.distributed.init_process_group`` over rt-ft: the default group (and every
    ``new_group`` and DeviceMesh group made afterwards with the default backend) is an
    ``rtft.torch.ProcessGroup`` of ``protector``, bound by ``protector.run`` at each step.

    Needs torch 2.0 or later: torch 1.13's ``init_process_group`` and ``new_group`` end in a
    barrier on a store with an atomic add, which a spare joining later could never pass; there
    give the group itself to DDP (``process_group=rtft.torch.ProcessGroup(protector)``)."""
    if _torch_major() < 2:
        raise NotImplementedError(
            f"rtft.torch.init_process_group needs torch 2.0 or later (this is torch "
            f"{torch.__version__}, whose init_process_group and new_group end in a barrier a "
            "spare could never pass): give DDP the group itself, "
            "DistributedDataParallel(model, process_group=rtft.torch.ProcessGroup(protector))")
    if not hasattr(protector, "_groups"):
        raise InvalidArgumentError("rtft.torch.init_process_group: an rtft.Protector expected, "
                                   f"not {type(protector).__name__}")
    if dist.is_initialized():
        raise FailedPreconditionError("rtft.torch.init_process_group: torch.distributed is "
                                      "initialised already (destroy_process_group first)")
    if not _state["registered"]:
        dist.Backend.register_backend(_NAME, _create, extended_api=True,
                                      devices=["cpu", "cuda"])
        _state["registered"] = True
    now = protector._runtime.current()
    _state["protector"] = protector
    kwargs = {} if timeout is None else {"timeout": timeout}
    dist.init_process_group(_NAME, store=Store(protector._runtime), rank=now.rank,
                            world_size=now.world_size, **kwargs)
    return dist.distributed_c10d._get_default_group()
