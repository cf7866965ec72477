"""The replay of steps from Python (docs/python.md, "Replay"): jobs/replay_job.py on 3 ranks and a
spare under ``mpirun --enable-recovery dp-launch --spares 1``, its compute split into ``local``
(the gradients of ``ctx.data_rank``'s batch, named in ``ctx.gradients``) and ``reduce``.  A bit
flipped once in rank 1's own gradients is caught before the reduction and the step goes on with
the right ones; flipped at every step, rank 1's slot is retired as a faulty device and the spare
takes the rank; every run ends with the digest of the run without the flip, bit for bit, and
without the replay the same flip changes the result.  The step functions' misuses are refused
on a standalone runtime."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

import rtft

_BIN = os.environ.get("RTFT_TEST_BIN_DIR", "")
_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "replay_job.py")


def _mpirun():
    return shutil.which("mpirun")


@unittest.skipUnless(os.path.exists(os.path.join(_BIN, "dp-launch")) and _mpirun(),
                     "needs dp-launch (RTFT_TEST_BIN_DIR) and mpirun")
class ReplayJobTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="rtft-py-replay-")
        cls.reference = cls.run_job("ref")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def run_job(cls, name, fault="", replay_every=1, check_finite=False, extra_env=None,
                extra_args=()):
        env = dict(os.environ, RTFT_COMM_GLOO_HOST="127.0.0.1", PYTHONDONTWRITEBYTECODE="1")
        env.update(extra_env or {})
        env.pop("RTFT_FAULT", None)
        if fault:
            env["RTFT_FAULT"] = fault
        cmd = [_mpirun(), "-np", "4", "--enable-recovery", "-x", "RTFT_FAULT",
               os.path.join(_BIN, "dp-launch"), "--spares", "1", "--", sys.executable, _JOB,
               "--replay-every", str(replay_every)] + (["--check-finite"] if check_finite else [])
        cmd += list(extra_args)
        if not fault:
            cmd.remove("-x")
            cmd.remove("RTFT_FAULT")
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240,
                             check=False)
        out = run.stdout + run.stderr
        digests = dict(re.findall(r"\[replay_job (\d+)\] done steps=12 digest=(\w+)", out))
        return run.returncode, digests, out

    def expect_reference(self, run):
        rc, digests, out = run
        self.assertEqual(rc, 0, out[-6000:])
        self.assertEqual(sorted(digests), ["0", "1", "2"], out[-6000:])
        ref = self.reference[1]
        self.assertEqual(sorted(ref), ["0", "1", "2"], self.reference[2][-6000:])
        self.assertEqual(len(set(ref.values())), 1)  # data parallel: one state
        self.assertEqual(digests, ref, out[-6000:])

    def test_l3_versions_say_which_steps_were_replayed(self):
        # L3 every 2 steps, the replay every 4: rtft.list_versions reads the marks back.
        ckpt = os.path.join(self.dir, "l3")
        run = self.run_job("l3-marks", replay_every=4, extra_env={
            "RTFT_PROTECT_CKPT_DIR": ckpt, "RTFT_PROTECT_L3_EVERY": "2",
            "RTFT_CKPT_KEEP_VERSIONS": "0"})
        self.expect_reference(run)
        versions = [v for v in rtft.list_versions(ckpt) if v.complete]
        self.assertGreaterEqual(len(versions), 4, run[2][-6000:])
        for v in versions:
            self.assertEqual(v.marks.replayed, v.version % 4 == 0, (v.version, v.marks))

    def test_a_flip_once_is_caught_and_the_step_goes_on(self):
        run = self.run_job("once", "1/train.grad_flip@5:flag")
        self.expect_reference(run)
        out = run[2]
        self.assertIn("fault train.grad_flip flag", out)
        self.assertIn("the gradients of data-parallel rank 1 differ from its replay by rank 2", out)
        self.assertIn("a transient fault, the step goes on", out)

    def test_a_flip_at_every_step_retires_the_slot(self):
        run = self.run_job("always", "1/train.grad_flip@5:flags")
        self.expect_reference(run)
        out = run[2]
        self.assertIn("its second run disagrees too: its device is taken for faulty", out)
        self.assertIn("device error, slot retired", out)

    def test_a_nan_loss_is_replayed_and_the_step_goes_on(self):
        # check_finite without the replay period: the NaN that local reports (ctx.nonfinite) has
        # the step replayed; its second run is finite.
        run = self.run_job("nan", "1/train.grad_nan@5:flag", replay_every=-1, check_finite=True)
        self.expect_reference(run)
        self.assertIn("are not finite: the step is replayed by a peer", run[2])

    def test_without_the_replay_the_flip_changes_the_result(self):
        rc, digests, out = self.run_job("unseen", "1/train.grad_flip@5:flag", replay_every=-1)
        self.assertEqual(rc, 0, out[-6000:])
        self.assertEqual(sorted(digests), ["0", "1", "2"], out[-6000:])
        for rank, digest in digests.items():
            self.assertNotEqual(digest, self.reference[1][rank], rank)
        self.assertNotIn("silent data corruption", out)


    def test_a_flip_beside_buffers_that_differ_per_rank_goes_back_to_the_agreed_step(self):
        # BatchNorm's running statistics differ per rank between steps (each rank's own batch):
        # the cross-check leaves them out and compares the rest. A bit flipped in rank 1's copy
        # of a parameter after step 5's update is caught at step 6 and every rank goes back to
        # step 5: the digest of the run without the flip (with the check off, as it was where a
        # model had buffers, the flip stays: another digest).
        bn = ["--batchnorm"]
        ref = self.run_job("bn-ref", replay_every=-1, extra_args=bn)
        self.assertEqual(ref[0], 0, ref[2][-6000:])
        self.assertEqual(sorted(ref[1]), ["0", "1", "2"], ref[2][-6000:])
        rc, digests, out = self.run_job("bn-flip", "1/train.flip@6:flag", replay_every=-1,
                                        extra_args=bn)
        self.assertEqual(rc, 0, out[-6000:])
        self.assertIn("silent data corruption: at step 6 the replicated tensors of data-parallel "
                      "rank(s) 1 differ from the other copies' (in 'model/0.weight'); back to "
                      "step 5", out)
        self.assertEqual(digests, ref[1], out[-6000:])


class StepFunctionsTest(unittest.TestCase):
    """On a standalone runtime (one rank: nothing to replay, the split still runs)."""

    def setUp(self):
        self.protector = rtft.Protector(rtft.Runtime(), replay_every=1)
        self.w = torch.zeros(4)
        self.protector.protect(rtft.State({"w": self.w}, rng=False))
        self.grads = torch.zeros(4)

    def tearDown(self):
        self.protector.close()

    def update(self, ctx):
        self.w.add_(self.grads)

    def test_local_then_reduce_then_update(self):
        calls = []

        def local(ctx):
            self.assertEqual((ctx.data_rank, ctx.replaying), (0, False))
            self.grads.fill_(float(ctx.step))
            ctx.gradients = [self.grads[:2], self.grads[2:]]  # several: digested one after another
            calls.append(("local", ctx.step))

        def reduce(ctx):
            ctx.comm.all_reduce(self.grads, op="avg")
            calls.append(("reduce", ctx.step))

        result = self.protector.run(3, None, self.update, local=local, reduce=reduce)
        self.assertEqual(result.next_step, 3)
        self.assertEqual(calls, [("local", 0), ("reduce", 0), ("local", 1), ("reduce", 1),
                                 ("local", 2), ("reduce", 2)])
        self.assertTrue(torch.equal(self.w, torch.full((4,), 3.0)))

    def test_gradients_that_stay_non_finite_end_the_run(self):
        # One rank: no peer to replay; a NaN that the second run makes too is the model's own.
        protector = rtft.Protector(rtft.Runtime(), check_finite=True)
        protector.protect(rtft.State({"w": self.w}, rng=False))
        runs = []

        def local(ctx):
            runs.append(ctx.step)
            self.grads.fill_(float("nan") if ctx.step == 2 else 1.0)
            ctx.gradients = self.grads

        def reduce(ctx):
            pass

        with self.assertRaises(rtft.FailedPreconditionError) as caught:
            protector.run(4, None, self.update, local=local, reduce=reduce)
        self.assertIn("at step 2 the gradients of data-parallel rank(s) 0 are not finite, and "
                      "computed again they are not finite either", str(caught.exception))
        self.assertEqual(runs, [0, 1, 2, 2])  # step 2 ran again
        self.assertTrue(torch.equal(self.w, torch.full((4,), 2.0)))  # step 2 was not applied
        protector.close()

    def test_misuses_are_refused(self):
        def reduce(ctx):
            pass

        def names(value):
            def local(ctx):
                ctx.gradients = value
            return local

        for value, text in (("grads", "a tensor or a list of tensors, not a str"),
                            ([self.grads, 3], "ctx.gradients[1] is a int, not a tensor"),
                            (None, "needs the local step function to name its gradient buffer"),
                            ([], "needs the local step function to name its gradient buffer")):
            protector = rtft.Protector(rtft.Runtime(), replay_every=1)  # each its own: an
            protector.protect(rtft.State({"w": self.w}, rng=False))  # error ends run mid-step
            with self.assertRaises(rtft.Error) as caught:
                protector.run(1, None, self.update, local=names(value), reduce=reduce)
            self.assertIn(text, str(caught.exception))
            protector.close()
        with self.assertRaisesRegex(TypeError, "local and reduce are given together"):
            self.protector.run(1, self.update, self.update, local=names(self.grads))
        with self.assertRaisesRegex(TypeError, "compute must be callable"):
            self.protector.run(1, None, self.update)
        with self.assertRaisesRegex(TypeError, "update must be callable"):
            self.protector.run(1, self.update, None)


if __name__ == "__main__":
    unittest.main()
