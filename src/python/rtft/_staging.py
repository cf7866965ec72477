"""Device tensors of one rtft.torch.ProcessGroup call, staged through pinned host buffers.

Ranks that share a GPU (NCCL refuses two ranks on one device) meet over Gloo, which moves host
memory: each device tensor of a call gets a pinned host twin.  The caller's stream is marked when
the call is made; on the group's thread the group's own stream waits for that mark, copies the
inputs to their twins, the collective runs on the twins, and the outputs are copied back on the
same stream.  The Work's future is completed on that stream, so whoever waits for it (DDP's
reducer, FSDP2's copy-out) has its stream wait for the copies, not the host.  A call whose
collective was aborted copies nothing back: its device tensors are left as they were.
"""

import torch

from rtft.errors import InvalidArgumentError


class Staging:
    """The host twins of one call's device tensors; host tensors stand for themselves."""

    def __init__(self, name):
        self.name = name
        self.device = None
        self.ins = []  # (device tensor, host twin): copied in before the collective
        self.outs = []  # (host twin, device tensor): copied out after it
        self.event = None

    def _twin(self, t):
        if t.device.type == "cpu":
            return None
        if self.device is None:
            self.device = t.device
        elif t.device != self.device:
            raise InvalidArgumentError(f"rtft.torch.ProcessGroup.{self.name}: tensors on "
                                       f"{self.device} and {t.device} in one call")
        return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)

    def input(self, t):
        """What the collective reads for ``t``."""
        h = self._twin(t)
        if h is None:
            return t
        self.ins.append((t, h))
        return h

    def output(self, t):
        """What the collective writes for ``t`` (copied back into ``t`` after it)."""
        h = self._twin(t)
        if h is None:
            return t
        self.outs.append((h, t))
        return h

    def inout(self, t):
        h = self.input(t)
        if h is not t:
            self.outs.append((h, t))
        return h

    def mark(self):
        """On the caller's thread: where the caller's stream stands when the call is made."""
        if self.device is not None:
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(self.device))

    def future(self):
        """The call's future: one that knows the device, so its waiters' streams wait."""
        if self.device is None:
            return torch.futures.Future()
        return torch.futures.Future(devices=[self.device])


def future_of(result):
    """A future for ``result`` (a list of tensors or of lists of them) made on this thread."""
    devices = set()
    for item in result:
        for t in item if isinstance(item, (list, tuple)) else [item]:
            if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                devices.add(t.device)
    return torch.futures.Future(devices=sorted(devices, key=str)) if devices \
        else torch.futures.Future()


class Streams:
    """The group's own stream per device, on which its copies run and its futures complete."""

    def __init__(self):
        self._streams = {}

    def run(self, staging, collective, complete):
        """``collective()`` between the copies in and out of ``staging``; ``complete(ran)`` on
        the group's stream (``ran``: whether the collective returned, so its outputs count)."""
        if staging.device is None:
            ran = collective()
            complete(ran)
            return
        stream = self._streams.get(staging.device)
        if stream is None:
            stream = self._streams[staging.device] = torch.cuda.Stream(staging.device)
        with torch.cuda.device(staging.device), torch.cuda.stream(stream):
            ran = False
            try:
                stream.wait_event(staging.event)
                for t, h in staging.ins:
                    h.copy_(t, non_blocking=True)
                stream.synchronize()  # the host twins hold the inputs
                ran = collective()
                if ran:
                    for h, t in staging.outs:
                        t.copy_(h, non_blocking=True)
            finally:
                complete(ran)
