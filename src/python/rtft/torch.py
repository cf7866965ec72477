"""torch.distributed over rt-ft: a process group that survives the hot swap, and a step sampler.

``ProcessGroup`` is a ``torch.distributed.ProcessGroup`` whose transport is the current epoch's
rt-ft communicator.  DDP (and whatever else takes a group object) keeps the same object for the
whole run; the step driver binds it to each step's communicator (``Protector.run`` does so for
every group made for it), so a recovery that rebuilds the communicators around a spare changes
nothing the model holds::

    protector = rtft.Protector(runtime)
    protector.protect(rtft.State({"model": model, "optim": optimizer}))
    group = rtft.torch.ProcessGroup(protector)
    ddp = DistributedDataParallel(model, process_group=group, find_unused_parameters=True)
    protector.run(steps, compute, update)

Collectives run on a thread of the group, in the order they were called, so that DDP's
all-reduce of a bucket overlaps the rest of the backward pass; each returns a ``Work`` at once.
A collective that a failure aborts completes (its tensors hold no result: untouched or partly
reduced) and is recorded: when ``compute`` (or ``update``) returns, the driver raises
``rtft.AbortedError`` and recovers, and the step runs again.  Neither autograd nor DDP's
reducer sees an error half-way.  CUDA tensors are staged through pinned host buffers on a stream
of the group's (``rtft/_staging.py``); the Work's future makes its waiter's stream wait.

Outside a step the group is unbound: it then does what DDP's construction asks of it as if this
rank were every rank (its parameter-shape check gathers this rank's shapes, its broadcast of the
module keeps this rank's values), because a spare that builds its model while the others train
could never meet them there.  Every rank must therefore build its model from the same seed.  Any
other call outside a step is refused.  The fixed-bucket rule and the rest: docs/python.md.

This file imports torch; the compiled module ``rtft._core`` links no torch library.
"""

import contextlib
import hashlib
import queue
import re
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from rtft._p2p import Lanes
from rtft._staging import Staging, Streams, future_of
from rtft.errors import AbortedError, FailedPreconditionError, InvalidArgumentError

__all__ = ["ProcessGroup", "StepSampler", "Store", "init_process_group"]

# The reductions rt-ft's communicators do, by c10d's op type; the rest are refused by name.
_RED = dist.ReduceOp.RedOpType
_PREMUL_SUM = getattr(_RED, "PREMUL_SUM", None)
_REDUCTIONS = {_RED.SUM: "sum", _RED.AVG: "avg", _RED.MAX: "max", _RED.MIN: "min"}
# The dtypes rt-ft reduces; operations without a reduction move any dtype as bytes.
_REDUCIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.int32, torch.int64, torch.uint8}
_AXES = ("comm",)  # the grid's axes (tensor, pipeline, data) are to come, for HSDP


def _comm_name(name):
    """The communicator name of a group named ``name``: rt-ft's names are 1 to 64 of
    A-Z a-z 0-9 _ . -, so any other name is hashed."""
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,56}", name):
        return f"torch.{name}"
    return "torch.h" + hashlib.sha256(name.encode()).hexdigest()[:32]


def _scale(t, factor):
    """``t`` multiplied in place by a premultiplied sum's factor (a number or a tensor)."""
    if factor is not None:
        t.mul_(factor.to(t.device) if isinstance(factor, torch.Tensor) else factor)
    return t


def _bytes(t):
    """A contiguous tensor's memory as uint8 (the same storage)."""
    return t.reshape(-1).view(torch.uint8)


class ProcessGroup(dist.ProcessGroup):
    """A c10d process group over rt-ft's communicators (docs/python.md).

    ``ProcessGroup(protector)``: the ranks of ``protector``'s training communicator (every rank
    of a data-parallel job); ``Protector.run`` binds it at every step.  Make it before ``run``.
    ``ProcessGroup(protector, ranks=[...], name=...)``: the listed ranks of that communicator
    (``new_group`` and DeviceMesh make these through ``init_process_group``); every member gives
    the same ``name``, and the group's communicator is made afresh in each recovery epoch.  A
    group of every rank may have a name too: its point-to-point lanes are named from it.
    ``ProcessGroup(rank=r, size=n)``: a group that is bound by hand, ``with group.bound(comm):``
    (the bracket's ``protector.comm``, or any rt-ft communicator of that rank and size).
    """

    def __init__(self, protector=None, *, axis="comm", rank=None, size=None, ranks=None,
                 name=None):
        if axis not in _AXES:
            raise InvalidArgumentError(f"axis '{axis}': expected one of {', '.join(_AXES)}")
        self._runtime, self._ranks, self._name = None, None, None
        if protector is not None:
            if rank is not None or size is not None:
                raise InvalidArgumentError("ProcessGroup: a protector or rank and size, not both")
            now = protector._runtime.current()
            rank, size = now.rank, now.world_size
            self._runtime = protector._runtime
            if ranks is not None:
                rank, size = self._members(ranks, name, now)
                self._ranks = tuple(int(r) for r in ranks)
            if name is not None:
                if not isinstance(name, str) or not name:
                    raise InvalidArgumentError(f"ProcessGroup: name {name!r}")
                self._name = name
        elif ranks is not None or name is not None:
            raise InvalidArgumentError("ProcessGroup: ranks and name need a protector")
        elif rank is None or size is None:
            raise InvalidArgumentError("ProcessGroup: needs a protector, or rank and size")
        if not (isinstance(rank, int) and isinstance(size, int) and 0 <= rank < size):
            raise InvalidArgumentError(f"ProcessGroup: rank {rank!r} of size {size!r}")
        super().__init__(rank, size)
        self._rank, self._size, self.axis = rank, size, axis
        self._group_name, self._group_desc = self._name, "undefined"
        # The order in which a step binds its groups: every rank makes the communicators of
        # the groups it shares with others in the same order (each making meets its members).
        self._order = (0, "") if self._ranks is None else (1, self._name)
        self._group_comm, self._group_epoch = None, None
        self._comm = None
        self._aborted = None  # the first AbortedError of the bound step
        self._failed = None  # another error of a collective, raised when the step ends
        self._queue = queue.Queue()
        self._worker = None
        self._streams = Streams()
        self._lanes = Lanes(self)
        if protector is not None:
            protector._groups.add(self)

    # -- the group's name and description ---------------------------------------------------
    # torch's C++ ProcessGroup keeps its name in the backends registered under it, and a Python
    # group registers none: torch 2.x's ``_set_group_name`` would drop the name and DeviceMesh
    # would read "ProcessGroup name not set".  The group keeps them itself, for Python callers
    # (``group_name``) and C++ ones (``getGroupName``, through torch's trampoline).

    @property
    def group_name(self):
        if self._group_name is None:
            raise FailedPreconditionError(
                "this rtft.torch.ProcessGroup has no name: torch names the groups it makes "
                "(rtft.torch.init_process_group, new_group, DeviceMesh)")
        return self._group_name

    def _set_group_name(self, name):
        self._group_name = str(name)

    def getGroupName(self):  # noqa: N802 (torch's C++ name)
        return self.group_name

    def setGroupName(self, name):  # noqa: N802
        self._set_group_name(name)

    @property
    def group_desc(self):
        return self._group_desc

    def _set_group_desc(self, desc):
        self._group_desc = str(desc)

    def getGroupDesc(self):  # noqa: N802
        return self._group_desc

    def setGroupDesc(self, desc):  # noqa: N802
        self._set_group_desc(desc)

    @staticmethod
    def _members(ranks, name, now):
        """This rank's place in ``ranks`` (global ranks of ``now``'s world), checked."""
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("ProcessGroup: a group of listed ranks needs a name, the "
                                       "same on every member")
        try:
            ranks = [int(r) for r in ranks]
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"ProcessGroup '{name}': ranks {ranks!r} are not "
                                       "integers") from None
        if not ranks or len(set(ranks)) != len(ranks) or \
                not all(0 <= r < now.world_size for r in ranks):
            raise InvalidArgumentError(f"ProcessGroup '{name}': ranks {ranks} are not distinct "
                                       f"ranks of a world of {now.world_size}")
        if now.rank not in ranks:
            raise InvalidArgumentError(f"ProcessGroup '{name}': rank {now.rank} is not one of "
                                       f"its ranks {ranks}")
        return ranks.index(now.rank), len(ranks)

    # -- binding ---------------------------------------------------------------------------

    def _bind_step(self, ctx):
        """Binds the group for a step of ``Protector.run``: to the step's communicator of its
        axis, or, for a group of listed ranks, to its own communicator of the step's epoch."""
        if self._ranks is None:
            self._bind(getattr(ctx, self.axis))
            return
        epoch = self._runtime.current().epoch
        if self._group_comm is None or self._group_epoch != epoch:
            if self._group_comm is not None:
                self._group_comm.close()
                self._group_comm = None
            # Its calls are the step's: watched for the hang detector, members by job rank.
            self._group_comm = self._runtime.create_group_communicator(
                _comm_name(self._name), self._rank, self._size, job_ranks=list(self._ranks))
            self._group_epoch = epoch
        self._bind(self._group_comm)

    @contextlib.contextmanager
    def bound(self, comm, p2p=None):
        """Binds the group to ``comm`` for the block; on leaving it waits for every collective
        called meanwhile and raises ``rtft.AbortedError`` if a failure aborted one.  ``p2p``:
        ``make(src, dst)``, the two-rank communicator of a direction of point-to-point
        (``rtft/_p2p.py``), closed when the block ends."""
        self._bind(comm)
        self._lanes.make = p2p
        try:
            yield self
        except BaseException:
            self._release(raise_abort=False)
            raise
        self._release()

    def _bind(self, comm):
        if self._comm is not None:
            raise FailedPreconditionError("this rtft.torch.ProcessGroup is bound already")
        if comm is None:
            raise FailedPreconditionError(f"the step has no '{self.axis}' communicator")
        if (comm.rank, comm.world_size) != (self._rank, self._size):
            raise FailedPreconditionError(
                f"the group is rank {self._rank} of {self._size}, the step's '{self.axis}' "
                f"communicator rank {comm.rank} of {comm.world_size}: a group cannot follow a "
                "shrink (make the model again)")
        self._aborted = self._failed = None
        self._comm = comm

    def _release(self, raise_abort=True):
        """Waits for the collectives of the step (each ends: done, aborted or past its
        deadline), then unbinds; raises what went wrong in them."""
        if self._worker is not None:
            self._queue.join()
        self._lanes.drain()
        self._comm = None
        aborted, failed = self._aborted, self._failed
        self._aborted = self._failed = None
        if not raise_abort:
            return
        if failed is not None:
            raise failed
        if aborted is not None:
            raise AbortedError(f"a collective of rtft.torch.ProcessGroup was aborted: "
                               f"{aborted.message}")

    # -- the worker ------------------------------------------------------------------------

    def _submit(self, name, run, result, staging=None):
        """Queues ``run(comm)`` behind the group's earlier calls; a Work for its future.
        ``staging`` names the host twins that ``run`` uses for the call's device tensors."""
        comm = self._comm
        if comm is None:
            raise FailedPreconditionError(
                f"rtft.torch.ProcessGroup.{name} outside a step: the group is bound only while "
                "Protector.run's compute or update runs (or inside group.bound(comm))")
        staging = staging or Staging(name)
        staging.mark()
        future = staging.future()
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="rtft-torch-pg",
                                            daemon=True)
            self._worker.start()
        self._queue.put((run, comm, staging, future, result))
        return _create_work_from_future(future)

    def _work(self):
        while True:
            run, comm, staging, future, result = self._queue.get()
            self._execute(run, lambda: comm, staging, future, result, self._streams)
            self._queue.task_done()

    def _execute(self, run, comm, staging, future, result, streams):
        """On a thread of the group's: ``run(comm())`` between ``staging``'s copies; its
        future completed whatever happens, an abort or another error kept for the step."""
        def call():
            if self._aborted is not None:  # after an abort the step's result is void
                return False
            run(comm())
            return True
        try:
            streams.run(staging, call, lambda ran: future.set_result(result))
        except AbortedError as e:
            self._aborted = e
        except BaseException as e:  # noqa: B902 (a thread's exception goes to its step)
            if self._failed is None:
                self._failed = e
        finally:
            if not future.done():
                future.set_result(result)

    @staticmethod
    def _done(result):
        future = future_of(result)
        future.set_result(result)
        return _create_work_from_future(future)

    # -- checks ----------------------------------------------------------------------------

    @staticmethod
    def _one(tensors, name):
        if not isinstance(tensors, (list, tuple)) or len(tensors) != 1:
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: one tensor per call "
                                      "(several devices per process are not supported)")
        return tensors[0]

    @staticmethod
    def _check(t, name, reduce=False):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"rtft.torch.ProcessGroup.{name}: a tensor expected, not "
                            f"{type(t).__name__}")
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: a {type(t).__name__} "
                                      "(tensor subclass) is not supported")
        if t.device.type not in ("cpu", "cuda"):
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: {t.device} tensors are "
                                      "not supported (host and CUDA tensors are)")
        if not t.is_contiguous():
            raise InvalidArgumentError(f"rtft.torch.ProcessGroup.{name}: the tensor is not "
                                       "contiguous")
        if reduce and t.dtype not in _REDUCIBLE:
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: rt-ft does not reduce "
                                      f"{t.dtype}")
        return t

    def _root(self, opts, name):
        root = opts.rootRank if opts is not None else 0
        if not 0 <= root < self._size:
            raise InvalidArgumentError(f"rtft.torch.ProcessGroup.{name}: root {root} of "
                                       f"{self._size} ranks")
        return root

    def _like(self, tensors, like, name, what):
        """Checks that ``tensors`` are one per rank, each of ``like``'s dtype and size."""
        if len(tensors) != self._size:
            raise InvalidArgumentError(f"rtft.torch.ProcessGroup.{name}: {len(tensors)} {what} "
                                       f"for {self._size} ranks")
        for t in tensors:
            self._check(t, name)
            if t.dtype != like.dtype or t.numel() != like.numel():
                raise InvalidArgumentError(f"rtft.torch.ProcessGroup.{name}: one of the {what} "
                                           "has another dtype or size")
        return tensors

    def _gather_into(self, c, t, outs):
        """All-gathers ``t`` and copies rank r's piece into ``outs[r]`` (none on a rank that
        keeps nothing)."""
        flat = torch.empty(self._size * t.numel(), dtype=t.dtype, device=t.device)
        c.all_gather(_bytes(t), _bytes(flat))
        for o, piece in zip(outs, flat.split(t.numel())):
            o.view(-1).copy_(piece)

    def _op(self, opts, name, t):
        """(rt-ft's reduction, the factor of a premultiplied sum or None) of ``opts``."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        kind = getattr(op, "op", op)
        if kind == _PREMUL_SUM:
            # Scale, then sum (NCCL's order); torch 2.x pickles the factor with the op.
            try:
                state = op.__getstate__()
            except Exception:  # noqa: BLE001 (a torch without it: refused below)
                state = None
            if not (isinstance(state, tuple) and len(state) == 2 and state[1] is not None):
                raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: PREMUL_SUM: this "
                                          f"torch ({torch.__version__}) does not give its factor")
            if not t.dtype.is_floating_point:
                raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: PREMUL_SUM of "
                                          f"{t.dtype}")
            return "sum", state[1]
        if kind not in _REDUCTIONS:
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: the reduction "
                                      f"{getattr(kind, 'name', kind)} is not one rt-ft does "
                                      "(SUM, AVG, MAX, MIN, PREMUL_SUM)")
        return _REDUCTIONS[kind], None

    # -- c10d's interface ------------------------------------------------------------------

    def getBackendName(self):  # noqa: N802 (c10d's name)
        return "rtft"

    def allreduce(self, tensors, opts=None):
        t = self._check(self._one(tensors, "allreduce"), "allreduce", reduce=True)
        op, factor = self._op(opts, "allreduce", t)
        st = Staging("allreduce")
        h = st.inout(t)
        return self._submit("allreduce", lambda c: c.all_reduce(_scale(h, factor), op=op),
                            list(tensors), st)

    def allreduce_coalesced(self, tensors, opts=None):
        tensors = [self._check(t, "allreduce_coalesced", reduce=True) for t in tensors]
        reductions = [self._op(opts, "allreduce_coalesced", t) for t in tensors]
        st = Staging("allreduce_coalesced")
        hs = [st.inout(t) for t in tensors]

        def run(c):
            for h, (op, factor) in zip(hs, reductions):  # one call each: as separate calls
                c.all_reduce(_scale(h, factor), op=op)
        return self._submit("allreduce_coalesced", run, list(tensors), st)

    def broadcast(self, tensors, opts=None):
        t = self._check(self._one(tensors, "broadcast"), "broadcast")
        root = self._root(opts, "broadcast")
        if opts is not None and opts.rootTensor != 0:
            raise NotImplementedError("rtft.torch.ProcessGroup.broadcast: rootTensor must be 0")
        if self._comm is None:
            return self._done(list(tensors))  # unbound: this rank's values are every rank's
        st = Staging("broadcast")
        h = st.inout(t)
        return self._submit("broadcast", lambda c: c.broadcast(_bytes(h), root=root),
                            list(tensors), st)

    def allgather(self, output_lists, input_list, opts=None):
        t = self._check(self._one(input_list, "allgather"), "allgather")
        outs = self._like(self._one(output_lists, "allgather"), t, "allgather", "outputs")
        if self._comm is None:  # unbound: as if every rank held this rank's tensor
            for o in outs:
                o.copy_(t)
            return self._done(list(output_lists))
        st = Staging("allgather")
        h, houts = st.input(t), [st.output(o) for o in outs]
        return self._submit("allgather", lambda c: self._gather_into(c, h, houts),
                            list(output_lists), st)

    def _allgather_base(self, output, input, opts=None):
        self._check(output, "_allgather_base")
        self._check(input, "_allgather_base")
        if output.dtype != input.dtype or output.numel() != input.numel() * self._size:
            raise InvalidArgumentError("rtft.torch.ProcessGroup._allgather_base: the output must "
                                       "hold size times the input, of its dtype")
        st = Staging("_allgather_base")
        hin, hout = st.input(input), st.output(output)  # the input may be a view of the output
        return self._submit("_allgather_base",
                            lambda c: c.all_gather(_bytes(hin), _bytes(hout)), [output], st)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        works = []
        for outs, t in zip(output_lists, input_list):
            works.append(self.allgather([outs], [t]))
        return works[-1] if works else self._done([])

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        out = self._check(self._one(output_tensors, "reduce_scatter"), "reduce_scatter",
                          reduce=True)
        ins = self._like(self._one(input_lists, "reduce_scatter"), out, "reduce_scatter", "inputs")
        op, factor = self._op(opts, "reduce_scatter", out)
        st = Staging("reduce_scatter")
        hins, hout = [st.input(i) for i in ins], st.output(out)

        def run(c):
            c.reduce_scatter(_scale(torch.cat([i.reshape(-1) for i in hins]), factor),
                             hout.view(-1), op=op)
        return self._submit("reduce_scatter", run, list(output_tensors), st)

    def _reduce_scatter_base(self, output, input, opts=None):
        self._check(output, "_reduce_scatter_base", reduce=True)
        self._check(input, "_reduce_scatter_base")
        if output.dtype != input.dtype or input.numel() != output.numel() * self._size:
            raise InvalidArgumentError("rtft.torch.ProcessGroup._reduce_scatter_base: the input "
                                       "must hold size times the output, of its dtype")
        op, factor = self._op(opts, "_reduce_scatter_base", output)
        st = Staging("_reduce_scatter_base")
        hin, hout = st.input(input), st.output(output)

        def run(c):  # a premultiplied sum scales a copy: the input is the caller's
            src = hin.view(-1) if factor is None else _scale(hin.reshape(-1).clone(), factor)
            c.reduce_scatter(src, hout.view(-1), op=op)
        return self._submit("_reduce_scatter_base", run, [output], st)

    def barrier(self, opts=None):
        return self._submit("barrier", lambda c: c.barrier(), [])

    def reduce(self, tensors, opts=None):
        # An all-reduce into a scratch copy, kept by the root only: the others' tensors stay
        # as they were, as c10d's reduce leaves them.
        t = self._check(self._one(tensors, "reduce"), "reduce", reduce=True)
        root = self._root(opts, "reduce")
        op, factor = self._op(opts, "reduce", t)
        st = Staging("reduce")
        h = st.inout(t) if self._rank == root else st.input(t)

        def run(c):
            scratch = _scale(h.clone(), factor)
            c.all_reduce(scratch, op=op)
            if self._rank == root:
                h.copy_(scratch)
        return self._submit("reduce", run, list(tensors), st)

    def gather(self, output_lists, input_list, opts=None):
        # An all-gather whose result only the root keeps (DCP's planning gathers objects).
        t = self._check(self._one(input_list, "gather"), "gather")
        root = self._root(opts, "gather")
        outs = []
        if self._rank == root:
            outs = self._like(self._one(output_lists, "gather"), t, "gather", "outputs")
        st = Staging("gather")
        h, houts = st.input(t), [st.output(o) for o in outs]
        return self._submit("gather", lambda c: self._gather_into(c, h, houts),
                            list(output_lists), st)

    def scatter(self, output_tensors, input_lists, opts=None):
        # The root's inputs broadcast whole; each rank keeps its own piece.
        out = self._check(self._one(output_tensors, "scatter"), "scatter")
        root = self._root(opts, "scatter")
        if self._comm is None:
            # Unbound, a rank other than the root holds no inputs to take its piece from.
            raise FailedPreconditionError(
                "rtft.torch.ProcessGroup.scatter outside a step: only a bound group scatters "
                "(a spare could never meet the others there). To shard a tensor that every "
                "rank builds alike, split it locally: "
                "distribute_tensor(tensor, mesh, placements, src_data_rank=None)")
        ins = []
        if self._rank == root:
            ins = self._like(self._one(input_lists, "scatter"), out, "scatter", "inputs")
        st = Staging("scatter")
        hins, hout = [st.input(i) for i in ins], st.output(out)

        def run(c):
            flat = torch.cat([i.reshape(-1) for i in hins]) if hins else \
                torch.empty(self._size * hout.numel(), dtype=hout.dtype)
            c.broadcast(_bytes(flat), root=root)
            hout.view(-1).copy_(flat.split(hout.numel())[self._rank])
        return self._submit("scatter", run, list(output_tensors), st)

    def _p2p(self, name, tensors, peer, tag, send):
        t = self._check(self._one(tensors, name), name)
        if not (isinstance(peer, int) and 0 <= peer < self._size and peer != self._rank):
            raise InvalidArgumentError(f"rtft.torch.ProcessGroup.{name}: peer {peer!r} of "
                                       f"{self._size} ranks (not this rank, {self._rank})")
        if tag != 0:
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: tag {tag}: calls are "
                                      "matched in order per peer and direction, not by tag")
        if self._comm is None:
            raise FailedPreconditionError(f"rtft.torch.ProcessGroup.{name} outside a step")
        st = Staging(name)
        if send:
            h = st.input(t)

            def run(c):
                c.send(_bytes(h), peer=1)
            src, dst = self._rank, peer
        else:
            h = st.output(t)

            def run(c):
                c.recv(_bytes(h), peer=0)
            src, dst = peer, self._rank
        st.mark()
        future = st.future()
        self._lanes.submit(src, dst, run, st, future, list(tensors))
        return _create_work_from_future(future)

    def send(self, tensors, dstRank, tag=0):  # noqa: N803 (c10d's names)
        return self._p2p("send", tensors, dstRank, tag, send=True)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803 (c10d's names)
        return self._p2p("recv", tensors, srcRank, tag, send=False)

    def _refuse(name, why):  # noqa: N805 (a factory of methods)
        def refused(self, *args, **kwargs):
            raise NotImplementedError(f"rtft.torch.ProcessGroup.{name}: {why}")
        refused.__name__ = name
        return refused

    recv_anysource = _refuse("recv_anysource", "not supported (a receive names its peer)")
    alltoall = _refuse("alltoall", "not supported")
    alltoall_base = _refuse("alltoall_base", "not supported")
    monitored_barrier = _refuse("monitored_barrier", "not supported (barrier is)")
    del _refuse


class StepSampler(torch.utils.data.Sampler):
    """The batch of (step, rank): nothing to save, the same after any recovery.

    Step ``s`` of rank ``r`` takes ``batch_size`` indices of epoch ``s // steps_per_epoch``'s
    permutation (seeded by ``seed`` and the epoch), at ``((s % steps_per_epoch) * world_size +
    r) * batch_size``; ``steps_per_epoch = len // (batch_size * world_size)`` (the tail of each
    permutation is dropped).  Give it to a ``DataLoader`` as its ``batch_sampler`` and set
    ``sampler.step`` before taking the step's batch: iterating yields the batches of
    ``step``, ``step + 1``, ...  A spare that takes rank ``r`` at step ``s`` draws what the lost
    rank would have drawn.
    """

    def __init__(self, length, batch_size, rank, world_size, seed=0):
        if not (length > 0 and batch_size > 0 and 0 <= rank < world_size):
            raise InvalidArgumentError(f"StepSampler: length {length}, batch_size {batch_size}, "
                                       f"rank {rank} of {world_size}")
        self.steps_per_epoch = length // (batch_size * world_size)
        if self.steps_per_epoch == 0:
            raise InvalidArgumentError(f"StepSampler: {length} samples are fewer than one step "
                                       f"of {batch_size} x {world_size}")
        self.length, self.batch_size, self.rank, self.world_size = length, batch_size, rank, \
            world_size
        self.seed, self.step = seed, 0
        self._epoch, self._perm = None, None

    def indices(self, step):
        epoch, at = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm, self._epoch = torch.randperm(self.length, generator=g), epoch
        first = (at * self.world_size + self.rank) * self.batch_size
        return self._perm[first:first + self.batch_size].tolist()

    def __iter__(self):
        step = self.step
        while True:
            yield self.indices(step)
            step += 1

    def __len__(self):
        return self.steps_per_epoch


from rtft._c10d import Store, init_process_group  # noqa: E402,F401 (the backend, torch 2.x)
