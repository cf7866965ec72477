"""CUDA tensors through the module (label gpu): device memory checkpointed and restored by the
engine, and protected by the step driver. Skipped where torch sees no GPU (as here); run on the
GPU machine with its PyTorch."""

import shutil
import tempfile
import unittest

import torch

import rtft

SKIP = "no CUDA device visible to torch: run on the GPU machine"


@unittest.skipUnless(torch.cuda.is_available(), SKIP)
class GpuTest(unittest.TestCase):
    def test_device_tensors_checkpointed_and_restored(self):
        path = tempfile.mkdtemp(prefix="rtft-py-gpu-")
        try:
            torch.manual_seed(0)
            w = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)
            m = torch.randn(1 << 20, device="cuda")
            state = rtft.State({"w": w, "m": m})
            self.assertEqual({t["memory"] for t in state.tensor_info()}, {"device"})
            expected = (w.clone(), m.clone())
            torch.cuda.current_stream().synchronize()  # the engine copies on a stream of its own
            engine = rtft.CheckpointEngine(path)
            engine.checkpoint(1, state)
            engine.wait_captured(1)
            w.zero_()
            m.zero_()
            engine.wait_persisted(1)
            engine.close()
            rtft.restore(path, state)
            self.assertTrue(torch.equal(w, expected[0]) and torch.equal(m, expected[1]))
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def test_device_state_protected_by_the_driver(self):
        w = torch.zeros(4096, device="cuda")
        protector = rtft.Protector(rtft.Runtime(), stream=torch.cuda.current_stream().cuda_stream)
        protector.protect(rtft.State({"w": w}))
        result = protector.run(5, lambda ctx: None, lambda ctx: w.add_(1.0))
        self.assertEqual(result.next_step, 5)
        self.assertTrue(torch.equal(w, torch.full_like(w, 5.0)))
        protector.close()


if __name__ == "__main__":
    unittest.main()
