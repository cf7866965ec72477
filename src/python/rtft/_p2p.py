"""Point-to-point of rtft.torch.ProcessGroup: a lane per direction and peer.

An rt-ft send may wait until its receive is made, so sends and receives cannot share the
group's queue of collectives (a pipeline's ``batch_isend_irecv`` of a send and a receive with
the same peer would wait on itself).  Each direction between this rank and a peer is a lane: its
own two-rank communicator (the sender rank 0, the receiver rank 1, named from the group and the
pair) and its own thread, so calls are ordered per peer and direction, never behind a
collective or the other direction.  A lane's communicator is made at its first call: for a
group of a protector once per recovery epoch through the job's store (aborted at the next
failure like the others); for a group bound by hand by ``make(src, dst)``, given to
``group.bound(comm, p2p=make)``, and closed when the binding ends.
"""

import queue
import threading


class Lanes:
    def __init__(self, group):
        self._group = group
        self._lanes = {}  # (src, dst) in group ranks -> _Lane
        self._lock = threading.Lock()
        self.make = None  # the binding's maker of two-rank communicators, for groups by hand

    def submit(self, src, dst, run, staging, future, result):
        with self._lock:
            lane = self._lanes.get((src, dst))
            if lane is None:
                lane = self._lanes[(src, dst)] = _Lane(self, src, dst)
        lane.queue.put((run, staging, future, result))

    def drain(self):
        """Waits for every lane's calls; closes the communicators made by hand."""
        with self._lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.queue.join()
        if self.make is not None:
            for lane in lanes:
                lane.close()
        self.make = None

    def comm(self, lane):
        """The lane's communicator for the call now running (made if it has none yet)."""
        group = self._group
        if group._runtime is not None:
            epoch = group._runtime.current().epoch
            if lane.comm is not None and lane.epoch != epoch:
                lane.close()
            if lane.comm is None:
                from rtft.torch import _comm_name
                name = _comm_name(f"{group._name or 'world'}.p2p.{lane.src}.{lane.dst}")
                lane.comm = group._runtime.create_group_communicator(
                    name, 0 if group._rank == lane.src else 1, 2)
                lane.epoch = epoch
        elif lane.comm is None:
            if self.make is None:
                raise NotImplementedError(
                    "rtft.torch.ProcessGroup: point-to-point in a group bound by hand needs "
                    "group.bound(comm, p2p=make): make(src, dst) gives the two-rank "
                    "communicator of that direction")
            lane.comm = self.make(lane.src, lane.dst)
        return lane.comm


class _Lane:
    def __init__(self, lanes, src, dst):
        self.src, self.dst = src, dst
        self.comm, self.epoch = None, None
        self.queue = queue.Queue()
        self._lanes = lanes
        threading.Thread(target=self._work, name=f"rtft-torch-p2p-{src}-{dst}",
                         daemon=True).start()

    def close(self):
        if self.comm is not None:
            self.comm.close()
        self.comm, self.epoch = None, None

    def _work(self):
        from rtft._staging import Streams
        streams = Streams()
        group = self._lanes._group
        while True:
            run, staging, future, result = self.queue.get()
            group._execute(run, lambda: self._lanes.comm(self), staging, future, result,
                           streams)
            self.queue.task_done()
