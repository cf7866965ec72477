"""What compute changes is captured before compute runs: a module's buffers (BatchNorm's running
statistics and its count of batches) are copied into the step's snapshot on the training thread
when the step begins, where other tensors are copied by the capture worker while compute runs.
The worker is held at its fault point (protect.l1_copy, wait=PATH) until compute has changed the
state, and the step's L3 checkpoint (written from the snapshot) is read back: the buffers hold
their values from before compute, a tensor compute should not have changed holds its value from
after (which shows that the worker did copy after compute)."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch

import rtft

CHILD = textwrap.dedent("""
    import os, sys, torch, rtft
    ckpt, go = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(4)
    plain = torch.zeros(4)  # changed in compute, against the contract: copied after it
    protector = rtft.Protector(rtft.Runtime(), ckpt_dir=ckpt)
    protector.protect(rtft.State({"bn": bn, "plain": plain}, rng=False))

    def compute(ctx):
        bn(torch.arange(8.0).reshape(2, 4) + 1)  # running_mean, running_var, num_batches_tracked
        plain.add_(1)
        open(go, "w").close()  # now the capture worker may copy

    protector.run(1, compute, lambda ctx: None)
    protector.checkpoint_now()  # step 0's snapshot to L3, committed
    protector.close()
    print("running_mean", bn.running_mean.tolist(), flush=True)
""")


class CaptureBeforeComputeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rtft-py-capture-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_buffers_are_captured_before_compute_changes_them(self):
        ckpt, go = os.path.join(self.dir, "ckpt"), os.path.join(self.dir, "go")
        env = dict(os.environ, RTFT_FAULT=f"protect.l1_copy@1:wait={go}")
        done = subprocess.run([sys.executable, "-c", CHILD, ckpt, go], env=env, timeout=120,
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("fault protect.l1_copy wait=", done.stderr)  # the worker was held
        self.assertNotIn("running_mean [0.0, 0.0, 0.0, 0.0]", done.stdout)  # forward changed it
        versions = [v.version for v in rtft.list_versions(ckpt)]
        self.assertTrue(versions, "no L3 version was written")
        bn, plain = torch.nn.BatchNorm1d(4), torch.full((4,), -1.0)
        for t in (bn.running_mean, bn.running_var):
            t.fill_(7.0)
        bn.num_batches_tracked.fill_(7)
        rtft.restore(ckpt, rtft.State({"bn": bn, "plain": plain}, rng=False),
                     version=min(versions))
        self.assertEqual(bn.running_mean.tolist(), [0.0] * 4)  # as before the step's compute
        self.assertEqual(bn.running_var.tolist(), [1.0] * 4)
        self.assertEqual(int(bn.num_batches_tracked), 0)
        self.assertEqual(plain.tolist(), [1.0] * 4)  # copied after compute: the hold held

    def test_module_buffers_are_marked(self):
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
        state = rtft.State({"model": model, "w": torch.zeros(2)}, rng=False)
        marked = {t["name"] for t in state.tensor_info() if t["changed_in_compute"]}
        self.assertEqual(marked, {"model/1.running_mean", "model/1.running_var",
                                  "model/1.num_batches_tracked"})
        mine = rtft.State(rng=False)
        mine.add_tensor("ema", torch.zeros(3), changed_in_compute=True)
        self.assertTrue(mine.tensor_info()[0]["changed_in_compute"])


if __name__ == "__main__":
    unittest.main()
