"""The step driver from Python on a standalone runtime: compute and update are Python callables
called with the GIL and a StepContext; an exception raised in either comes back to rt-ft as an
error that is not an abort (run() neither recovers nor hangs) and is raised again from run()
with the callable's frame in its traceback; the bracket; a fault point armed from the
environment."""

import os
import shutil
import subprocess
import sys
import tempfile
import traceback
import unittest

import torch

import rtft


class Boom(Exception):
    pass


class DriverTest(unittest.TestCase):
    def setUp(self):
        self.rt = rtft.Runtime()
        self.weights = torch.zeros(16)
        self.extra = {"seen": 0}
        self.state = rtft.State({"w": self.weights, "extra": self.extra})
        self.protector = rtft.Protector(self.rt)
        self.protector.protect(self.state)

    def tearDown(self):
        self.protector.close()

    def test_run_calls_the_step_functions_in_order(self):
        calls = []

        def compute(ctx):
            self.assertIsInstance(ctx, rtft.StepContext)
            self.assertEqual((ctx.rank, ctx.world_size, ctx.epoch), (0, 1, 0))
            self.assertIsNone(ctx.recovered)
            grad = torch.full((16,), float(ctx.step))
            ctx.comm.all_reduce(grad, op="avg")
            compute.grad = grad
            calls.append(("compute", ctx.step))

        def update(ctx):
            self.weights.add_(compute.grad)
            self.extra["seen"] += 1
            calls.append(("update", ctx.step))

        result = self.protector.run(4, compute, update)
        self.assertEqual(result.outcome, rtft.RunOutcome.DONE)
        self.assertEqual(result.next_step, 4)
        self.assertEqual(calls, [(f, s) for s in range(4) for f in ("compute", "update")])
        self.assertTrue(torch.equal(self.weights, torch.full((16,), 6.0)))
        result = self.protector.run(6, compute, update)  # goes on from where it stopped
        self.assertEqual((result.next_step, self.extra["seen"]), (6, 6))

    def test_an_exception_in_compute_is_raised_again_with_its_traceback(self):
        def compute(ctx):
            if ctx.step == 2:
                raise Boom(f"bad batch at step {ctx.step}")

        try:
            self.protector.run(10, compute, lambda ctx: None)
            self.fail("run() raised nothing")
        except Boom as e:
            self.assertEqual(str(e), "bad batch at step 2")
            self.assertIn("compute", [f.name for f in traceback.extract_tb(e.__traceback__)])

    def test_an_exception_in_update_and_a_base_exception(self):
        class Stop(BaseException):
            pass

        def update(ctx):
            raise Stop()

        with self.assertRaises(Stop):
            self.protector.run(3, lambda ctx: None, update)

    def test_an_rtft_error_keeps_its_code_and_class(self):
        def compute(ctx):
            ctx.comm.all_reduce(torch.zeros(2, dtype=torch.int16))  # refused: int16

        with self.assertRaises(rtft.InvalidArgumentError):
            self.protector.run(2, compute, lambda ctx: None)

    def test_a_steps_communicator_is_gone_after_its_step(self):
        kept = []
        self.protector.run(1, lambda ctx: kept.append(ctx.comm), lambda ctx: None)
        with self.assertRaises(rtft.FailedPreconditionError):
            kept[0].barrier()

    def test_protector_comm_taken_in_a_step_is_gone_with_it(self):
        # A recovery inside run() frees the epoch's communicators between two steps: one kept
        # from `protector.comm` must then refuse, not reach freed memory.
        kept, refused = [], []

        def compute(ctx):
            if kept:
                try:
                    kept[0].barrier()
                except rtft.FailedPreconditionError:
                    refused.append(ctx.step)
            kept.append(self.protector.comm)
            kept[-1].barrier()  # usable in its own step

        self.protector.run(3, compute, lambda ctx: None)
        self.assertEqual(refused, [1, 2])
        with self.assertRaises(rtft.FailedPreconditionError):
            kept[-1].barrier()

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            self.protector.run(3, "not callable", lambda ctx: None)
        with self.assertRaises(rtft.FailedPreconditionError):
            self.protector.protect(rtft.State({"other": torch.zeros(1)}))
        with self.assertRaises(TypeError):
            rtft.Protector(self.rt, protect_step=3)


class SharedShardTest(unittest.TestCase):
    """rtft.Protector.protect marks a DTensor's shard replicated where the ranks holding it are
    this rank's data-parallel group, and says once which grid would make them so otherwise
    (``State._replica_holders`` is what rtft.State records of a DTensor: torch 2.x, on the GPU
    machine; here set by hand)."""

    def protect(self, holders, grid=None):
        state = rtft.State({"a": rtft.Shard(torch.zeros(2), [4], [0]),
                            "b": rtft.Shard(torch.zeros(2), [4], [2])}, rng=False)
        state._replica_holders = holders
        options = {} if grid is None else {"grid": grid}
        protector = rtft.Protector(rtft.Runtime(), **options)
        self.addCleanup(protector.close)
        return state, protector

    def test_the_groups_replicas_are_protected_as_replicated(self):
        state, protector = self.protect({"a": (0,)})  # one rank: its group is itself
        protector.protect(state)
        info = {t["name"]: t["replicated"] for t in state.tensor_info()}
        self.assertEqual(info, {"a": True, "b": False})
        self.assertEqual(protector.stats().protected_steps, 0)
        protector.run(2, lambda ctx: None, lambda ctx: None)
        stats = protector.stats()
        self.assertEqual(stats.protected_steps, 2)
        self.assertGreaterEqual(stats.state_bytes, 16)  # two shards of two float32, aligned
        self.assertEqual(stats.replica_bytes, 0)  # one rank: no ring

    def test_replicas_outside_the_group_stay_this_ranks_own_and_it_says_so(self):
        state, protector = self.protect({"a": (0, 2), "b": (0, 2)}, grid=rtft.Grid(tensor=1))
        with self.assertWarns(UserWarning) as caught:
            protector.protect(state)
        text = str(caught.warning)
        self.assertIn("2 DTensor shard(s), 'a' first, are held by ranks [0, 2]", text)
        self.assertIn("grid=rtft.Grid(tensor=2)", text)
        self.assertFalse(any(t["replicated"] for t in state.tensor_info()))

    def test_the_state_resize_returns_is_marked_for_its_new_place(self):
        # A shrink hands resize the new rank and world; protect() hands the library a resize that
        # marks the state it returns for them, not for the runtime's (here one standalone rank).
        state, protector = self.protect({}, grid=rtft.Grid(tensor=2))

        def resize(rank, world_size, shards):
            state = rtft.State({"a": rtft.Shard(torch.zeros(2), [4], [0]),
                                "b": rtft.Shard(torch.zeros(2), [4], [2])}, rng=False)
            state._replica_holders = {"a": (1, 3), "b": (0, 2)}
            return state

        given = []
        base = rtft._core.Protector.protect
        rtft._core.Protector.protect = lambda self, state, resize: given.append(resize)
        try:
            protector.protect(state, resize)
        finally:
            rtft._core.Protector.protect = base
        self.assertEqual(len(given), 1)
        resized = given[0](1, 4, [])
        info = {t["name"]: t["replicated"] for t in resized.tensor_info()}
        # Rank 1 of 4 under tensor=2 sits at t 1: its data-parallel group is ranks 1 and 3.
        self.assertEqual(info, {"a": True, "b": False})


class BracketTest(unittest.TestCase):
    def test_the_bracket(self):
        w = torch.ones(8)
        protector = rtft.Protector(rtft.Runtime(), protect_step=lambda step: step % 2 == 0)
        protector.protect(rtft.State({"w": w}))
        step = protector.start()
        self.assertEqual(step, 0)
        with self.assertRaises(rtft.FailedPreconditionError):
            protector.before_update()  # outside a step
        for s in range(step, 3):
            protector.begin_step(s)
            protector.comm.all_reduce(w)
            protector.before_update()
            w.mul_(2)
            protector.end_step()
        self.assertTrue(torch.equal(w, torch.full((8,), 8.0)))
        protector.close()
        with self.assertRaises(rtft.FailedPreconditionError):
            protector.start()


RESTART = r"""
import sys, torch, rtft
rt = rtft.Runtime()
w, extra = torch.zeros(4), {"log": []}
p = rtft.Protector(rt, shm_dir=sys.argv[1])
p.protect(rtft.State({"w": w, "extra": extra}))
def update(ctx):
    w.add_(1.0)
    extra["log"].append(ctx.step)
    if ctx.step == int(sys.argv[2]):
        rtft.fault_point("py.test.update")
r = p.run(6, lambda ctx: None, update)
print("resumed", extra["log"][0], "w", w.tolist(), "log", extra["log"])
"""


class FaultPointTest(unittest.TestCase):
    def test_an_armed_fault_point_ends_the_process_at_its_point(self):
        # How the job tests fail a Python application at a named phase of its step.
        shm = tempfile.mkdtemp(prefix="rtft-py-shm-", dir="/dev/shm")
        try:
            env = dict(os.environ, RTFT_FAULT="py.test.update@1:exit=3")
            done = subprocess.run([sys.executable, "-c", RESTART, shm, "2"], env=env,
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 3, done.stderr)
            self.assertNotIn("resumed", done.stdout)
            done = subprocess.run([sys.executable, "-c", RESTART, shm, "99"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("w [6.0, 6.0, 6.0, 6.0]", done.stdout)
        finally:
            shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
