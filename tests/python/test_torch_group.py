"""rtft.torch.ProcessGroup: every c10d operation it does on 3 ranks (threads of one process)
against integer-valued references, any dtype moved as bytes, calls it cannot do refused by name,
the unbound mode DDP's construction meets, an abort that completes the Work and is raised when
the step ends, the group bound by Protector.run at each step, DDP over it on 3 ranks ending on
the same bits everywhere and near a reference; and StepSampler's batches."""

import threading
import unittest

import torch
import torch.distributed as dist

import rtft
import rtft.torch
from test_comm import on_ranks as comm_ranks

WORLD = 3


def on_ranks(body, bind=True):
    """Runs body(group, comm) on WORLD ranks, one thread each (test_comm's harness), the group
    bound to the comm unless `bind` is false; returns their results by rank."""
    def rank(comm):
        group = rtft.torch.ProcessGroup(rank=comm.rank, size=comm.world_size)
        if not bind:
            return body(group, comm)
        with group.bound(comm):
            return body(group, comm)

    return comm_ranks(rank, WORLD)


def opts(cls, **fields):
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def reduce_opts(op):
    return opts(dist.AllreduceOptions, reduceOp=op)


class CollectivesTest(unittest.TestCase):
    def test_allreduce_every_op(self):
        def body(g, comm):
            r, out = g.rank(), {}
            for name in ("SUM", "AVG", "MAX", "MIN"):
                x = torch.tensor([r + 1.0, -r, 2.0 * r])
                g.allreduce([x], reduce_opts(getattr(dist.ReduceOp, name))).wait()
                out[name] = x.tolist()
            i = torch.full((4,), r, dtype=torch.int64)
            g.allreduce([i]).wait()  # no options: SUM
            out["int"] = i.tolist()
            a, b = torch.tensor([1.0 * r]), torch.tensor([2, r], dtype=torch.int32)
            g.allreduce_coalesced([a, b], opts(dist.AllreduceCoalescedOptions)).wait()
            out["coalesced"] = (a.tolist(), b.tolist())
            return out

        for out in on_ranks(body):
            self.assertEqual(out["SUM"], [6.0, -3.0, 6.0])
            self.assertEqual(out["AVG"], [2.0, -1.0, 2.0])
            self.assertEqual(out["MAX"], [3.0, 0.0, 4.0])
            self.assertEqual(out["MIN"], [1.0, -2.0, 0.0])
            self.assertEqual(out["int"], [3] * 4)
            self.assertEqual(out["coalesced"], ([3.0], [6, 3]))

    def test_collectives_without_reduction_move_any_dtype(self):
        def body(g, comm):
            r, out = g.rank(), {}
            flags = torch.tensor([r == 1, True, r == 0])  # bool: rt-ft has no such dtype
            g.broadcast([flags], opts(dist.BroadcastOptions, rootRank=1)).wait()
            out["broadcast"] = flags.tolist()
            small = torch.tensor([r, -r], dtype=torch.int16)
            outs = [torch.zeros(2, dtype=torch.int16) for _ in range(WORLD)]
            g.allgather([outs], [small]).wait()
            out["allgather"] = [o.tolist() for o in outs]
            flat = torch.zeros(2 * WORLD, dtype=torch.int16)
            g._allgather_base(flat, small).wait()
            out["base"] = flat.tolist()
            c_outs = [[torch.zeros(n) for _ in range(WORLD)] for n in (1, 2)]
            g.allgather_coalesced(c_outs, [torch.tensor([1.0 * r]), torch.tensor([r, 10.0])]
                                  ).wait()
            out["coalesced"] = [[o.tolist() for o in outs] for outs in c_outs]
            g.barrier().wait()
            return out

        for r, out in enumerate(on_ranks(body)):
            self.assertEqual(out["broadcast"], [True, True, False])
            self.assertEqual(out["allgather"], [[0, 0], [1, -1], [2, -2]])
            self.assertEqual(out["base"], [0, 0, 1, -1, 2, -2])
            self.assertEqual(out["coalesced"], [[[0.0], [1.0], [2.0]],
                                                [[0.0, 10.0], [1.0, 10.0], [2.0, 10.0]]])

    def test_reduce_scatter_reduce_gather_scatter(self):
        def body(g, comm):
            r, out = g.rank(), {}
            ins = [torch.tensor([10.0 * k + r, 1.0]) for k in range(WORLD)]
            mine = torch.zeros(2)
            g.reduce_scatter([mine], [ins], opts(dist.ReduceScatterOptions)).wait()
            out["reduce_scatter"] = mine.tolist()
            flat = torch.arange(2 * WORLD, dtype=torch.int64) * (r + 1)
            piece = torch.zeros(2, dtype=torch.int64)
            g._reduce_scatter_base(
                piece, flat, opts(dist.ReduceScatterOptions, reduceOp=dist.ReduceOp.MAX)).wait()
            out["base"] = piece.tolist()
            t = torch.tensor([r + 1.0])
            g.reduce([t], opts(dist.ReduceOptions, rootRank=2)).wait()
            out["reduce"] = t.tolist()
            gathered = [torch.zeros(1, dtype=torch.int16) for _ in range(WORLD)] if r == 0 else []
            g.gather([gathered] if r == 0 else [], [torch.tensor([5 * r], dtype=torch.int16)],
                     opts(dist.GatherOptions, rootRank=0)).wait()
            out["gather"] = [x.tolist() for x in gathered]
            got = torch.zeros(2)
            ins = [[torch.tensor([k, -k * 1.0]) for k in range(WORLD)]] if r == 1 else []
            g.scatter([got], ins, opts(dist.ScatterOptions, rootRank=1)).wait()
            out["scatter"] = got.tolist()
            return out

        for r, out in enumerate(on_ranks(body)):
            self.assertEqual(out["reduce_scatter"], [30.0 * r + 3.0, 3.0])
            self.assertEqual(out["base"], [6 * r, (2 * r + 1) * 3])
            self.assertEqual(out["reduce"], [6.0] if r == 2 else [r + 1.0])  # others unchanged
            self.assertEqual(out["gather"], [[0], [5], [10]] if r == 0 else [])
            self.assertEqual(out["scatter"], [float(r), -float(r)])

    def test_calls_run_in_order_behind_one_another(self):
        def body(g, comm):
            x = torch.tensor([float(g.rank())])
            works = [g.allreduce([x]) for _ in range(5)]  # each sums the last one's result
            for w in works:
                w.wait()
            return x.item()

        self.assertEqual(on_ranks(body), [3.0 * 3 ** 4] * WORLD)


class PremulSumTest(unittest.TestCase):
    def test_scale_then_sum_or_refused_where_torch_hides_the_factor(self):
        # FSDP2's gradient divide factor: torch 2.x gives the factor with the op (its pickled
        # state); torch 1.13 does not, and the call is refused by name before anything is sent.
        make = getattr(dist, "_make_nccl_premul_sum", None)
        if make is None:
            self.skipTest("this torch has no premultiplied sum")
        op = make(0.5)
        state = op.__getstate__()
        readable = isinstance(state, tuple) and len(state) == 2 and state[1] is not None

        def body(g, comm):
            r, out = g.rank(), {}
            x = torch.tensor([1.0 + r, 2.0 * r])
            try:
                g.allreduce([x], reduce_opts(op)).wait()
                out["allreduce"] = x.tolist()
                src = torch.arange(2.0 * WORLD) + r
                got = torch.zeros(2)
                g._reduce_scatter_base(got, src, opts(dist.ReduceScatterOptions,
                                                      reduceOp=op)).wait()
                out["reduce_scatter"] = (got.tolist(), src.tolist())
            except NotImplementedError as e:
                out["refused"] = str(e)
            g.barrier().wait()
            return out

        for r, out in enumerate(on_ranks(body)):
            if not readable:
                self.assertIn("PREMUL_SUM", out["refused"])
                self.assertIn("does not give its factor", out["refused"])
                continue
            self.assertEqual(out["allreduce"], [0.5 * 6.0, 0.5 * 6.0])
            got, src = out["reduce_scatter"]
            self.assertEqual(got, [0.5 * (3 * 2.0 * r + 3), 0.5 * (3 * (2.0 * r + 1) + 3)])
            self.assertEqual(src, (torch.arange(2.0 * WORLD) + r).tolist())  # input untouched


class PointToPointTest(unittest.TestCase):
    def test_sends_first_in_a_cycle_and_both_ways_ordered_per_peer(self):
        # Every rank sends to the next before it receives from the previous one (a cycle that
        # one queue for sends and receives would deadlock), then ranks 0 and 1 exchange three
        # messages each way, both sending first; the order per direction is the call order.
        store, made = rtft.LocalCommStore(), []

        def body(g, comm):
            r = g.rank()

            def make(src, dst):
                c = rtft.Communicator.create(0 if r == src else 1, 2, store,
                                             name=f"p2p-{src}-{dst}", timeout=30,
                                             create_timeout=30, host="127.0.0.1")
                made.append(c)
                return c
            out = {}
            with g.bound(comm, p2p=make):
                got = torch.zeros(2, dtype=torch.int64)
                works = [g.send([torch.tensor([r, 10 * r])], (r + 1) % WORLD),
                         g.recv([got], (r - 1) % WORLD)]
                for w in works:
                    w.wait()
                out["cycle"] = got.tolist()
                if r < 2:
                    peer, ins = 1 - r, [torch.zeros(1) for _ in range(3)]
                    works = [g.send([torch.tensor([100.0 * r + i])], peer) for i in range(3)]
                    works += [g.recv([t], peer) for t in ins]
                    for w in works:
                        w.wait()
                    out["pair"] = [t.item() for t in ins]
                g.barrier().wait()  # the collectives' queue is unaffected
            return out

        got = on_ranks(body, bind=False)
        for r, out in enumerate(got):
            p = (r - 1) % WORLD
            self.assertEqual(out["cycle"], [p, 10 * p])
        self.assertEqual(got[0]["pair"], [100.0, 101.0, 102.0])
        self.assertEqual(got[1]["pair"], [0.0, 1.0, 2.0])
        self.assertTrue(made)
        for c in made:  # the lanes' communicators were closed when the binding ended
            with self.assertRaises(rtft.FailedPreconditionError):
                c.barrier()


class RefusedTest(unittest.TestCase):
    def test_what_it_cannot_do_is_refused_by_name(self):
        def body(g, comm):
            seen = []
            cases = [
                (lambda: g.allreduce([torch.ones(2)], reduce_opts(dist.ReduceOp.PRODUCT)),
                 NotImplementedError, "PRODUCT"),
                (lambda: g.allreduce([torch.ones(2, dtype=torch.int16)]),
                 NotImplementedError, "int16"),
                (lambda: g.allreduce([torch.ones(2), torch.ones(2)]), NotImplementedError,
                 "one tensor"),
                (lambda: g.allreduce([torch.ones(4, 2).t()]), rtft.InvalidArgumentError,
                 "contiguous"),
                (lambda: g.send([torch.ones(1)], (g.rank() + 1) % WORLD, 7),
                 NotImplementedError, "tag 7"),
                (lambda: g.recv([torch.ones(1)], g.rank(), 0), rtft.InvalidArgumentError,
                 "not this rank"),
                (lambda: g.recv_anysource([torch.ones(1)], 0), NotImplementedError,
                 "recv_anysource"),
                (lambda: g.alltoall([torch.ones(1)], [torch.ones(1)]), NotImplementedError,
                 "alltoall"),
                (lambda: g.allgather([[torch.zeros(1)]], [torch.ones(1)]),
                 rtft.InvalidArgumentError, "1 outputs for 3 ranks"),
                (lambda: g.allreduce(["no tensor"]), TypeError, "tensor expected"),
                (lambda: g.reduce([torch.ones(1)], opts(dist.ReduceOptions, rootRank=5)),
                 rtft.InvalidArgumentError, "root 5 of 3 ranks"),
                (lambda: g.scatter([torch.ones(1)], [[torch.ones(1)] * 3],
                                   opts(dist.ScatterOptions, rootRank=-1)),
                 rtft.InvalidArgumentError, "root -1"),
            ]
            for call, error, text in cases:
                try:
                    call()
                    seen.append(f"{text}: nothing raised")
                except error as e:
                    if text not in str(e):
                        seen.append(f"{text}: {e}")
            g.barrier().wait()  # the group still works: nothing was sent
            return seen

        self.assertEqual(on_ranks(body), [[]] * WORLD)

    def test_unbound_only_what_ddp_builds_with(self):
        g = rtft.torch.ProcessGroup(rank=1, size=3)
        x = torch.tensor([7.0, 8.0])
        self.assertTrue(g.broadcast([x], opts(dist.BroadcastOptions, rootRank=0)).wait())
        self.assertEqual(x.tolist(), [7.0, 8.0])  # this rank's values are every rank's
        outs = [torch.zeros(2) for _ in range(3)]
        g.allgather([outs], [x]).wait()
        self.assertEqual([o.tolist() for o in outs], [[7.0, 8.0]] * 3)
        for call in (lambda: g.allreduce([x]), lambda: g.barrier()):
            with self.assertRaises(rtft.FailedPreconditionError) as caught:
                call()
            self.assertIn("outside a step", str(caught.exception))
        # A scatter too (DTensor's distribute_tensor from a source rank): rank 1 holds no
        # inputs; the refusal names the local split.
        with self.assertRaises(rtft.FailedPreconditionError) as caught:
            g.scatter([torch.zeros(2)], [], opts(dist.ScatterOptions, rootRank=0))
        self.assertIn("src_data_rank=None", str(caught.exception))

    def test_bad_construction_and_binding(self):
        for kwargs in ({"rank": 3, "size": 3}, {"rank": -1, "size": 2}, {"rank": 0},
                       {"rank": 0, "size": 1, "axis": "pipeline"}):
            with self.assertRaises(rtft.InvalidArgumentError):
                rtft.torch.ProcessGroup(**kwargs)
        g = rtft.torch.ProcessGroup(rank=0, size=2)
        comm = rtft.Runtime().create_communicator("one")  # a world of one
        with self.assertRaises(rtft.FailedPreconditionError) as caught:
            with g.bound(comm):
                pass
        self.assertIn("rank 0 of 2", str(caught.exception))
        comm.close()


class AbortTest(unittest.TestCase):
    def test_an_abort_completes_the_work_and_is_raised_when_the_step_ends(self):
        # Ranks 0 and 1 call an all-reduce that rank 2 never joins; their communicators are
        # aborted (as the runtime does when a peer dies): each Work completes without raising,
        # the call queued behind it too, and leaving the bound block raises AbortedError.
        store = rtft.LocalCommStore()
        comms, raised, waited, values = {}, {}, {}, {}
        made, queued = threading.Barrier(WORLD + 1), threading.Barrier(3)

        def rank(r):
            comms[r] = rtft.Communicator.create(r, WORLD, store, name="ab", timeout=60,
                                                create_timeout=30, host="127.0.0.1")
            made.wait()
            if r == 2:
                return
            g = rtft.torch.ProcessGroup(rank=r, size=WORLD)
            x = torch.full((4,), 1.0 + r)
            try:
                with g.bound(comms[r]):
                    works = [g.allreduce([x]), g.barrier()]
                    queued.wait()
                    waited[r] = [w.wait() for w in works]
            except rtft.AbortedError as e:
                raised[r] = e
            values[r] = x.tolist()

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(WORLD)]
        for t in threads:
            t.start()
        made.wait()
        queued.wait()  # ranks 0 and 1 have queued their calls
        for r in (0, 1):
            comms[r].abort()
        for t in threads:
            t.join(60)
        for r in (0, 1):
            self.assertIsInstance(raised.get(r), rtft.AbortedError, f"rank {r}")
            self.assertEqual(waited[r], [True, True])
            # The ring reduces in place: an aborted call leaves each element this rank's own
            # value or a partial sum of ranks 0 and 1 (whichever segments moved before the
            # abort), never a result of all three; the step is void and runs again.
            for v in values[r]:
                self.assertIn(v, (1.0 + r, 3.0), f"rank {r}: {values[r]}")
        for c in comms.values():
            c.close()


class DriverTest(unittest.TestCase):
    def test_protector_run_binds_the_group_at_every_step(self):
        rt = rtft.Runtime()
        protector = rtft.Protector(rt)
        w = torch.zeros(3)
        protector.protect(rtft.State({"w": w}))
        group = rtft.torch.ProcessGroup(protector)
        self.assertEqual((group.rank(), group.size()), (0, 1))
        with self.assertRaises(rtft.FailedPreconditionError):
            group.allreduce([w])  # outside a step
        seen = []

        def compute(ctx):
            g = torch.full((3,), float(ctx.step))
            work = group.allreduce([g], reduce_opts(dist.ReduceOp.AVG))
            work.wait()
            seen.append(g.tolist())

        def update(ctx):
            w.add_(torch.tensor(seen[-1]))

        result = protector.run(3, compute, update)
        self.assertEqual(result.outcome, rtft.RunOutcome.DONE)
        self.assertEqual(w.tolist(), [3.0] * 3)
        with self.assertRaises(rtft.FailedPreconditionError):
            group.allreduce([w])  # unbound again after run()
        protector.close()

    def test_ddp_on_three_ranks(self):
        # DDP over the group (fixed buckets: find_unused_parameters), built unbound as in a run,
        # a model with LayerNorm (dropout is the job test's: these ranks share one generator),
        # 3 steps: every rank ends on the same bits, near a model trained on the mean of the
        # three ranks' gradients.
        seeding = threading.Lock()  # the ranks are threads: one global generator

        def model():  # the same initial values on every rank: DDP's start-up broadcast is void
            with seeding:
                torch.manual_seed(0)
                return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                                           torch.nn.Tanh(), torch.nn.Linear(16, 2))

        def batch(step, r):
            g = torch.Generator().manual_seed(100 * step + r)
            return torch.randn(4, 8, generator=g)

        def body(group, comm):
            m = model()
            ddp = torch.nn.parallel.DistributedDataParallel(m, process_group=group,
                                                            find_unused_parameters=True)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for step in range(3):
                with group.bound(comm):
                    opt.zero_grad()
                    ddp(batch(step, group.rank())).square().mean().backward()
                opt.step()
            return [p.detach().clone() for p in m.parameters()]

        got = on_ranks(body, bind=False)
        ref = model()
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(3):
            grads = []
            for r in range(WORLD):
                ref.zero_grad()
                ref(batch(step, r)).square().mean().backward()
                grads.append([p.grad.clone() for p in ref.parameters()])
            for p, *gs in zip(ref.parameters(), *grads):
                p.grad = sum(gs) / WORLD
            opt.step()
        for r in range(1, WORLD):
            for a, b in zip(got[0], got[r]):
                self.assertTrue(torch.equal(a, b), f"rank {r}")
        for a, b in zip(got[0], ref.parameters()):
            self.assertTrue(torch.allclose(a, b, atol=1e-6))


class StepSamplerTest(unittest.TestCase):
    def test_batches_of_step_and_rank(self):
        samplers = [rtft.torch.StepSampler(100, 4, r, 3, seed=7) for r in range(3)]
        self.assertEqual(samplers[0].steps_per_epoch, 8)
        for step in (0, 5, 8, 13):
            batches = [s.indices(step) for s in samplers]
            flat = sum(batches, [])
            self.assertEqual(len(set(flat)), 12)  # disjoint across ranks
            self.assertTrue(all(0 <= i < 100 for i in flat))
        # An epoch covers 96 distinct samples; the next epoch is another permutation.
        epoch0 = sum((s.indices(k) for k in range(8) for s in samplers), [])
        self.assertEqual(len(set(epoch0)), 96)
        self.assertNotEqual(samplers[0].indices(0), samplers[0].indices(8))
        # A fresh sampler (a spare's) draws what the lost rank's drew, at any step.
        spare = rtft.torch.StepSampler(100, 4, 1, 3, seed=7)
        self.assertEqual(spare.indices(13), samplers[1].indices(13))
        # Through a DataLoader, from the step it is set to.
        data = torch.arange(100)
        loader = torch.utils.data.DataLoader(data, batch_sampler=spare)
        spare.step = 13
        self.assertEqual(next(iter(loader)).tolist(), samplers[1].indices(13))
        for bad in ((0, 4, 0, 1), (100, 4, 3, 3), (10, 4, 0, 3)):
            with self.assertRaises(rtft.InvalidArgumentError):
                rtft.torch.StepSampler(*bad)


if __name__ == "__main__":
    unittest.main()
