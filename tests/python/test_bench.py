"""python3 -m rtft.bench (docs/python.md, "Benchmarks") on a small host state: every variant this
torch has runs and prints its line, rt-ft's files are real (its persisted bytes counted by the
engine), the C++ path runs as a child, bad options are refused, and the scratch directory goes;
``python3 -m rtft.bench ddp`` on 2 ranks under mpirun and dp-launch (skipped without them), and
``python3 -m rtft.bench fsdp2`` on 2 ranks and a spare (a skip line where torch has no FSDP2)."""

import contextlib
import importlib
import io
import json
import os
import shutil
import tempfile
import unittest

from rtft import bench


class BenchTest(unittest.TestCase):
    def run_bench(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = bench.main(list(argv))
        return rc, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()

    def test_host_state(self):
        parent = tempfile.mkdtemp(prefix="rtft-py-bench-test-")
        cpp = os.path.join(os.environ.get("RTFT_TEST_BIN_DIR", ""), "rtft-bench")
        variants = "torch.save,dcp.async_save,rtft,rtft.dcp.async_save" + (
            ",cpp" if os.path.exists(cpp) else "")
        rc, lines, err = self.run_bench("--bytes", "32M", "--tensors", "8", "--state", "host",
                                        "--dir", parent, "--variants", variants,
                                        "--rtft-bench", cpp)
        self.assertEqual(rc, 0, err)
        by = {line["variant"]: line for line in lines if line["name"] == "py_ckpt"}
        self.assertEqual(list(by), variants.split(","))
        for name, line in by.items():
            self.assertEqual(line["bytes"], 32 << 20)
            if "skipped" in line:
                self.assertIn("dcp", name)
                continue
            self.assertNotIn("error", line)
            self.assertGreater(line["persist_s"], 0)
            self.assertLessEqual(line["held_s"], line["persist_s"] + 1e-6)
        self.assertLess(by["rtft"]["held_s"], by["rtft"]["persist_s"])
        self.assertEqual(by["rtft"]["tensor_bytes"], 32 << 20)  # every byte went through the engine
        summary = lines[-1]
        self.assertEqual(summary["name"], "py_ckpt_summary")
        self.assertIn("rtft_over_torch_save_persist_gbps", summary)
        if "cpp" in by:  # the C++ run's own line: it measured the disk too
            self.assertGreater(by["cpp"]["raw_gbps"], 0)
            self.assertIn("module_over_cpp_persist_gbps", summary)
        self.assertEqual(os.listdir(parent), [])  # the scratch directory is removed
        os.rmdir(parent)

    @unittest.skipUnless(os.path.exists(os.path.join(os.environ.get("RTFT_TEST_BIN_DIR", ""),
                                                      "dp-launch")) and shutil.which("mpirun"),
                         "needs dp-launch (RTFT_TEST_BIN_DIR) and mpirun")
    def test_ddp_over_both_groups(self):
        launcher = os.path.join(os.environ["RTFT_TEST_BIN_DIR"], "dp-launch")
        rc, lines, err = self.run_bench("ddp", "--ranks", "2", "--steps", "2", "--blocks", "2",
                                        "--hidden", "64", "--layers", "2",
                                        "--dp-launch", launcher)
        self.assertEqual(rc, 0, (lines, err))
        line = lines[-1]
        self.assertEqual(line["name"], "py_ddp")
        self.assertNotIn("error", line)
        self.assertEqual(len(line["torch_blocks_s"]), 2)
        self.assertEqual(len(line["rtft_blocks_s"]), 2)
        self.assertGreater(line["torch_step_s"], 0)
        self.assertGreater(line["rtft_step_s"], 0)
        self.assertAlmostEqual(line["rtft_over_torch"], line["rtft_step_s"] / line["torch_step_s"])
        # Both trained the same model on the same data: the gradients were averaged alike.
        self.assertLess(line["max_param_diff"], 1e-6)
        for argv in (["--ranks", "1", "--dp-launch", launcher], ["--dp-launch", "/nonexistent"],
                     ["--steps", "0", "--dp-launch", launcher]):
            with self.assertRaises(SystemExit, msg=argv) as caught, \
                    contextlib.redirect_stderr(io.StringIO()):
                bench.main(["ddp"] + argv)
            self.assertEqual(caught.exception.code, 2, argv)

    @unittest.skipUnless(os.path.exists(os.path.join(os.environ.get("RTFT_TEST_BIN_DIR", ""),
                                                      "dp-launch")) and shutil.which("mpirun"),
                         "needs dp-launch (RTFT_TEST_BIN_DIR) and mpirun")
    def test_fsdp2_step_and_recovery(self):
        launcher = os.path.join(os.environ["RTFT_TEST_BIN_DIR"], "dp-launch")
        for argv in (["--ranks", "1", "--dp-launch", launcher], ["--dp-launch", "/nonexistent"],
                     ["--figures", "step,speed", "--dp-launch", launcher],
                     ["--fail-at", "0", "--dp-launch", launcher]):
            with self.assertRaises(SystemExit, msg=argv) as caught, \
                    contextlib.redirect_stderr(io.StringIO()):
                bench.main(["fsdp2"] + argv)
            self.assertEqual(caught.exception.code, 2, argv)
        rc, lines, err = self.run_bench("fsdp2", "--ranks", "2", "--steps", "2", "--blocks", "2",
                                        "--hidden", "64", "--layers", "2", "--fail-at", "4",
                                        "--dp-launch", launcher)
        self.assertEqual(rc, 0, (lines, err))
        try:  # 1.13's fsdp fails to import on Python 3.11 with a ValueError
            have_fsdp2 = hasattr(importlib.import_module("torch.distributed.fsdp"), "fully_shard")
        except Exception:  # noqa: BLE001
            have_fsdp2 = False
        if not have_fsdp2:  # one line saying why, nothing run
            self.assertEqual(len(lines), 1)
            self.assertIn("FSDP2", lines[0]["skipped"])
            return
        by = {line["figure"]: line for line in lines}
        self.assertEqual(set(by), {"step", "recovery"})
        for line in lines:
            self.assertEqual(line["name"], "py_fsdp2")
            self.assertNotIn("error", line)
        step = by["step"]
        self.assertEqual(len(step["protected_blocks_s"]), 2)
        self.assertEqual(len(step["unprotected_blocks_s"]), 2)
        self.assertAlmostEqual(step["overhead_pct"],
                               (step["protected_step_s"] / step["unprotected_step_s"] - 1) * 100)
        # The local shards: 2 linear layers of 64 x 64 + 64, with AdamW's two moments, halved.
        self.assertGreaterEqual(step["state_bytes"], 3 * 2 * (64 * 64 + 64) * 4 // 2)
        recovery = by["recovery"]
        self.assertGreater(recovery["resumed_s"], 0)
        self.assertGreater(recovery["relaunch_s"], recovery["relaunch_load_s"])
        self.assertLessEqual(recovery["recovered_at_step"], 5)  # at most the lost step again
        self.assertAlmostEqual(recovery["speedup"],
                               recovery["relaunch_s"] / recovery["resumed_s"])
        # The breakdown: rank 0's phases within its recovery, the replacement's start in order.
        parts = recovery["breakdown"]
        self.assertLessEqual(parts["rank0_wait_event_s"], parts["rank0_total_s"])
        self.assertGreater(parts["rank0_bytes_moved"], 0)
        starts = [parts["spare_" + k + "_s"] for k in ("activated", "device", "group", "sharded",
                                                       "protected", "first_step")]
        self.assertEqual(starts, sorted(starts))

    def test_bad_options_refused(self):
        for argv in (["--bytes", "0"], ["--bytes", "12Q"], ["--variants", "torch.load"],
                     ["--tensors", "0"], ["--bytes", "4K", "--tensors", "2"],
                     ["--state", "gpu", "--dir", "/nonexistent"]):
            with self.assertRaises(SystemExit, msg=argv) as caught, \
                    contextlib.redirect_stderr(io.StringIO()):
                bench.main(argv)
            self.assertEqual(caught.exception.code, 2, argv)


if __name__ == "__main__":
    unittest.main()
