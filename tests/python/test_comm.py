"""rt-ft's communicators from Python: ranks in threads of one process over Gloo (their create()
meet only if each releases the GIL while it waits), every collective on torch tensors and NumPy
arrays, and calls that do not fit refused before anything is sent."""

import threading
import unittest

import numpy as np
import torch

import rtft

WORLD = 3


def on_ranks(body, world=WORLD):
    """Runs body(comm) on `world` ranks, one thread each; returns their results by rank."""
    store = rtft.LocalCommStore()
    results, errors = [None] * world, []

    def rank(r):
        try:
            comm = rtft.Communicator.create(r, world, store, name="py", timeout=30,
                                            create_timeout=30, host="127.0.0.1")
            results[r] = body(comm)
            comm.close()
        except BaseException as e:  # reported by the test's thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return results


class CollectivesTest(unittest.TestCase):
    def test_all_reduce(self):
        def body(comm):
            r = comm.rank
            out = {}
            for op in ("sum", "avg", "max", "min"):
                x = torch.tensor([r + 1.0, -r, 2.0 * r])
                comm.all_reduce(x, op=op)
                out[op] = x.tolist()
            y = np.full(3, r, dtype=np.int64)
            z = np.zeros(3, dtype=np.int64)
            comm.all_reduce(y, out=z)
            out["numpy"] = z.tolist()
            return out

        for out in on_ranks(body):
            self.assertEqual(out["sum"], [6.0, -3.0, 6.0])
            self.assertEqual(out["avg"], [2.0, -1.0, 2.0])
            self.assertEqual(out["max"], [3.0, 0.0, 4.0])
            self.assertEqual(out["min"], [1.0, -2.0, 0.0])
            self.assertEqual(out["numpy"], [3, 3, 3])

    def test_gathers_scatters_and_point_to_point(self):
        def body(comm):
            r, w = comm.rank, comm.world_size
            b = torch.full((2,), float(r)) if r != 1 else torch.tensor([7.0, 8.0])
            comm.broadcast(b, root=1)
            g = torch.zeros(2 * w)
            comm.all_gather(torch.full((2,), float(r)), g)
            inplace = torch.zeros(2 * w)
            inplace[2 * r:2 * r + 2] = r + 10
            comm.all_gather(inplace[2 * r:2 * r + 2], inplace)
            counts = [1, 2, 3]
            gv = torch.zeros(6, dtype=torch.int32)
            comm.all_gather_v(torch.full((counts[r],), r, dtype=torch.int32), gv, counts)
            rs = torch.zeros(2)
            comm.reduce_scatter(torch.arange(2.0 * w), rs)
            rsv = torch.zeros(counts[r])
            comm.reduce_scatter_v(torch.ones(6), rsv, counts, op="sum")
            p = torch.zeros(3, dtype=torch.bfloat16)
            if r == 0:
                comm.send(torch.full((3,), 1.5, dtype=torch.bfloat16), peer=2)
            elif r == 2:
                comm.recv(p, peer=0)
            comm.barrier()
            return b.tolist(), g.tolist(), inplace.tolist(), gv.tolist(), rs.tolist(), \
                rsv.tolist(), p.float().tolist()

        for r, (b, g, inplace, gv, rs, rsv, p) in enumerate(on_ranks(body)):
            self.assertEqual(b, [7.0, 8.0])
            self.assertEqual(g, [0.0, 0.0, 1.0, 1.0, 2.0, 2.0])
            self.assertEqual(inplace, [10.0, 10.0, 11.0, 11.0, 12.0, 12.0])
            self.assertEqual(gv, [0, 1, 1, 2, 2, 2])
            self.assertEqual(rs, [3.0 * 2 * r, 3.0 * (2 * r + 1)])
            self.assertEqual(rsv, [3.0] * [1, 2, 3][r])
            self.assertEqual(p, [1.5] * 3 if r == 2 else [0.0] * 3)


class RefusedCallsTest(unittest.TestCase):
    def test_calls_that_do_not_fit(self):
        def body(comm):
            caught = []
            for call in (
                    lambda: comm.all_reduce(torch.zeros(3), out=torch.zeros(4)),
                    lambda: comm.all_reduce(torch.zeros(3), out=torch.zeros(3, dtype=torch.int32)),
                    lambda: comm.all_reduce(torch.zeros(3), op="product"),
                    lambda: comm.all_reduce(torch.zeros(4, 4).t()),
                    lambda: comm.all_reduce(torch.zeros(3, dtype=torch.int16)),
                    lambda: comm.broadcast(torch.zeros(3), root=comm.world_size),
                    lambda: comm.all_gather(torch.zeros(2), torch.zeros(5)),
                    lambda: comm.reduce_scatter(torch.zeros(5), torch.zeros(2)),
                    lambda: comm.all_gather_v(torch.zeros(1), torch.zeros(6), [1, 2]),
                    lambda: comm.send(torch.zeros(1), peer=-1)):
                try:
                    call()
                    caught.append(None)
                except rtft.InvalidArgumentError as e:
                    caught.append(e.code)
            big = torch.zeros(8)
            try:  # overlapping, but not this rank's slice
                comm.all_gather(big[1:3], big[:6])
                caught.append(None)
            except rtft.InvalidArgumentError as e:
                caught.append(e.code)
            comm.barrier()  # still usable: nothing was sent
            with self.assertRaises(TypeError):
                comm.all_reduce([1.0, 2.0])
            return caught

        for caught in on_ranks(body):
            self.assertEqual(caught, [rtft.StatusCode.INVALID_ARGUMENT] * 11)

    def test_an_aborted_communicator_raises_aborted(self):
        def body(comm):
            comm.abort()
            self.assertTrue(comm.aborted)
            with self.assertRaises(rtft.AbortedError):
                comm.all_reduce(torch.zeros(2))
            return True

        self.assertEqual(on_ranks(body, world=2), [True, True])


if __name__ == "__main__":
    unittest.main()
