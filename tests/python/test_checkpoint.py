"""The checkpoint engine from Python: a model, its AdamW state, a scheduler and plain values saved
lazily and restored in place, bit for bit; the files read back by h5py (names, values, bool as
uint8, pickled objects); versions; shards written by two ranks restored into one; errors with
their codes, and a Python exception of a serializer raised again from the call that failed."""

import json
import os
import pickle
import shutil
import tempfile
import threading
import traceback
import unittest

import h5py
import numpy as np
import torch

import rtft


def engine_for(path, **options):
    # A small pool: the default (an eighth of the host's memory) takes a second to allocate.
    return rtft.CheckpointEngine(path, pool_bytes=16 << 20, chunk_bytes=1 << 20, **options)


def make_model():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def train_step(model, optimizer, scheduler, step):
    x = torch.linspace(-1, 1, 6 * 8).reshape(8, 6) + step
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
    scheduler.step()


def snapshot(model, optimizer):
    return [t.detach().clone() for t in model.state_dict().values()] + [
        v.clone() for s in optimizer.state.values() for v in s.values()]


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rtft-py-ckpt-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_lazy_checkpoints_restore_bit_for_bit(self):
        model, optimizer, scheduler = make_model()
        rtft.init_optimizer_state(optimizer)
        extra = {"step": 0, "flags": torch.tensor([True, False, True])}
        state = rtft.State({"model": model, "optim": optimizer, "sched": scheduler,
                            "extra": extra})
        engine = engine_for(self.dir, keep_versions=0)  # keep all
        saved = {}
        for step in range(6):
            if step % 2 == 0:
                extra["step"] = step
                engine.checkpoint(step + 1, state)  # returns at once
                saved[step + 1] = (snapshot(model, optimizer), scheduler.state_dict(),
                                   optimizer.param_groups[0]["lr"])
                engine.wait_captured(step + 1)  # the fence before the update
            train_step(model, optimizer, scheduler, step)
        for version in (5, 3, 1):  # versions may complete out of order: each is waited for
            engine.wait_persisted(version)
        self.assertEqual(rtft.latest_version(self.dir), 5)
        self.assertEqual([v.version for v in rtft.list_versions(self.dir)], [1, 3, 5])
        # A version an engine wrote outside a Protector carries no certification marks.
        for v in rtft.list_versions(self.dir):
            self.assertIsInstance(v.marks, rtft.VersionMarks)
            self.assertEqual((v.marks.checked, v.marks.agreed, v.marks.replayed),
                             (False, False, False))
        rtft.verify_version(self.dir, 3)

        for version in (3, 5):  # an older version, then LATEST
            rtft.restore(self.dir, state, version=None if version == 5 else version)
            tensors, sched, lr = saved[version]
            for a, b in zip(snapshot(model, optimizer), tensors):
                self.assertTrue(torch.equal(a, b))
            self.assertEqual(scheduler.state_dict(), sched)
            self.assertEqual(optimizer.param_groups[0]["lr"], lr)  # the live group
            self.assertEqual(extra["step"], version - 1)
        engine.close()

    def test_files_read_back_by_h5py(self):
        weights = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        half = torch.linspace(0, 1, 5, dtype=torch.bfloat16)
        flags = torch.tensor([True, False])
        extra = {"epoch": 42, "name": "run-7"}
        state = rtft.State({"w": weights, "half": half, "flags": flags, "extra": extra})
        engine = engine_for(self.dir)
        engine.checkpoint(7, state)
        engine.wait_persisted(7)
        engine.close()
        path = os.path.join(self.dir, "v000000000007", "rank-00000.h5")
        with h5py.File(path, "r") as f:
            manifest = json.loads(f["rtft_manifest"][()].rstrip(b"\0"))
            dtypes = {t["name"]: t["dtype"] for t in manifest["tensors"]}
            self.assertEqual(dtypes, {"w": "float32", "half": "bfloat16", "flags": "uint8"})
            np.testing.assert_array_equal(f["tensors/w"][()], weights.numpy())
            np.testing.assert_array_equal(f["tensors/half"][()], half.float().numpy())
            np.testing.assert_array_equal(f["tensors/flags"][()], [1, 0])
            objects = {name: bytes(f["objects/" + name][()]) for name in
                       ("extra/epoch", "extra/name", "rtft/logical_dtypes")}
        self.assertEqual(pickle.loads(objects["extra/epoch"]), 42)
        self.assertEqual(pickle.loads(objects["extra/name"]), "run-7")
        self.assertEqual(json.loads(objects["rtft/logical_dtypes"]), {"flags": "bool"})

    def test_buffers_are_copied_inside_checkpoint(self):
        # A module's buffers (BatchNorm's running statistics, which the next forward changes) are
        # copied inside checkpoint(); the other tensors by the capture thread, held here until the
        # forward has run: the file holds the buffers from the call, a tensor changed against
        # the contract from after (which shows that the thread copied late).
        torch.manual_seed(0)
        bn = torch.nn.BatchNorm1d(4)
        bn(torch.randn(8, 4))
        plain = torch.zeros(4)
        state = rtft.State({"bn": bn, "plain": plain}, rng=False)
        at_call = {k: v.clone() for k, v in bn.state_dict().items()}
        go = os.path.join(self.dir, "go")
        engine = engine_for(self.dir)
        rtft._core.arm_faults(f"ckpt.capture_begin:wait={go}")
        try:
            engine.checkpoint(1, state)
            bn(torch.randn(8, 4) + 3)  # the next forward: running_mean, _var, num_batches_tracked
            plain.add_(1)
            open(go, "w").close()
            engine.wait_persisted(1)
        finally:
            rtft._core.arm_faults("")
        self.assertGreater(engine.stats(1)["early_bytes"], 0)
        engine.close()
        self.assertFalse(torch.equal(bn.running_mean, at_call["running_mean"]))
        path = os.path.join(self.dir, "v000000000001", "rank-00000.h5")
        with h5py.File(path, "r") as f:
            for name, value in at_call.items():
                np.testing.assert_array_equal(f["tensors/bn/" + name][()], value.numpy(),
                                              err_msg=name)
            np.testing.assert_array_equal(f["tensors/plain"][()], np.ones(4, np.float32))

    def test_shards_of_two_ranks_restore_into_one(self):
        full = torch.arange(10 * 3, dtype=torch.float32).reshape(10, 3)
        engines = [engine_for(self.dir, rank=r, world_size=2) for r in range(2)]
        for rank, engine in enumerate(engines):
            offset, count = rtft.split_evenly(10, 2, rank)
            shard = full[offset:offset + count].clone()
            engine.checkpoint(1, rtft.State({"m": rtft.Shard(shard, [10, 3], [offset, 0])}))
        for engine in engines:
            engine.wait_persisted(1)
            engine.close()
        whole = torch.zeros(10, 3)
        rtft.restore(self.dir, rtft.State({"m": rtft.Shard(whole, [10, 3], [0, 0])}))
        self.assertTrue(torch.equal(whole, full))

    def test_a_version_written_again_commits_only_its_own_writes_files(self):
        # write_id (docs/format.md, "Commit protocol"): rank 1's file of write 1 is waited past when
        # rank 0 alone writes the version again as write 2; written again by both, it commits.
        state = rtft.State({"w": torch.arange(4, dtype=torch.float32)})

        def write(write_id, ranks, commit_timeout):
            engines = [engine_for(self.dir, rank=r, world_size=2, keep_versions=0,
                                  commit_timeout=commit_timeout, write_id=write_id)
                       for r in ranks]
            try:
                for engine in reversed(engines):  # rank 1's file first
                    engine.checkpoint(5, state)
                    engine.wait_persisted(5)
            finally:
                for engine in engines:
                    engine.close()

        write(1, [0, 1], 60)
        with self.assertRaises(rtft.DeadlineExceededError) as raised:
            write(2, [0], 0.5)
        self.assertIn("from another write of the version (write 1, this one's 2)",
                      str(raised.exception))
        write(3, [0, 1], 60)
        self.assertEqual(rtft.latest_version(self.dir), 5)

    def test_errors_carry_their_codes(self):
        with self.assertRaises(rtft.NotFoundError) as caught:
            rtft.restore(os.path.join(self.dir, "nothing"), rtft.State({"w": torch.zeros(1)}))
        self.assertEqual(caught.exception.code, rtft.StatusCode.NOT_FOUND)
        engine = engine_for(self.dir)
        state = rtft.State({"w": torch.ones(4)})
        engine.checkpoint(2, state)
        with self.assertRaises(rtft.InvalidArgumentError):
            engine.checkpoint(1, state)  # versions must increase
        with self.assertRaises(rtft.NotFoundError):
            engine.wait_captured(99)
        engine.wait_persisted(2)
        engine.close()
        with self.assertRaises(rtft.FailedPreconditionError):
            engine.checkpoint(3, state)
        with self.assertRaises(rtft.Error) as caught:  # another shape: the tensor is named
            rtft.restore(self.dir, rtft.State({"w": torch.zeros(5)}))
        self.assertIn("'w'", str(caught.exception))
        with self.assertRaises(rtft.InvalidArgumentError):
            rtft.CheckpointEngine(self.dir, rank=2, world_size=2)
        with self.assertRaises(rtft.InvalidArgumentError):
            engine = engine_for(self.dir)
            engine.wait_captured(2, timeout=-1)

    def test_a_damaged_file_is_data_loss(self):
        state = rtft.State({"w": torch.arange(4096, dtype=torch.float32)})
        engine = engine_for(self.dir)
        engine.checkpoint(1, state)
        engine.wait_persisted(1)
        engine.close()
        path = os.path.join(self.dir, "v000000000001", "rank-00000.h5")
        with h5py.File(path, "r") as f:
            manifest = json.loads(f["rtft_manifest"][()].rstrip(b"\0"))
        with open(path, "r+b") as raw:
            raw.seek(manifest["tensors"][0]["offset"] + 100)
            byte = raw.read(1)
            raw.seek(-1, os.SEEK_CUR)
            raw.write(bytes([byte[0] ^ 0xFF]))
        with self.assertRaises(rtft.DataLossError):
            rtft.restore(self.dir, state)

    def test_a_python_exception_in_a_serializer_is_raised_again(self):
        class Broken(Exception):
            pass

        def save():
            raise Broken("cannot pickle this")

        state = rtft.State({"w": torch.zeros(2)})
        state.add_object("bad", save, lambda data: None)
        engine = engine_for(self.dir)
        try:
            engine.checkpoint(1, state)
            self.fail("checkpoint() raised nothing")
        except Broken as e:  # with the serializer's frame in its traceback
            self.assertIn("save", [f.name for f in traceback.extract_tb(e.__traceback__)])
        good = rtft.State({"w": torch.zeros(2)})
        good.add_object("bad", lambda: b"bytes", lambda data: None)
        engine.checkpoint(2, good)
        engine.wait_persisted(2)
        engine.close()

        def load(data):
            raise Broken("cannot restore " + data.decode())

        reader = rtft.State({"w": torch.zeros(2)})
        reader.add_object("bad", lambda: b"", load)
        with self.assertRaises(Broken) as caught:
            rtft.restore(self.dir, reader)
        self.assertIn("cannot restore bytes", str(caught.exception))
        wrong = rtft.State()
        wrong.add_object("o", lambda: "not bytes", lambda data: None)
        with self.assertRaises(rtft.InvalidArgumentError):
            engine_for(self.dir).checkpoint(3, wrong)

    def test_restored_runs_after_a_restore_and_threads_restore_at_once(self):
        calls = []
        engine = engine_for(self.dir)
        engine.checkpoint(1, rtft.State({"w": torch.full((64,), 3.0)}))
        engine.wait_persisted(1)
        engine.close()
        targets = [torch.zeros(64) for _ in range(4)]
        states = [rtft.State({"w": t}, restored=lambda i=i: calls.append(i))
                  for i, t in enumerate(targets)]
        threads = [threading.Thread(target=rtft.restore, args=(self.dir, s)) for s in states]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(calls), [0, 1, 2, 3])
        for t in targets:
            self.assertTrue(torch.equal(t, torch.full((64,), 3.0)))


if __name__ == "__main__":
    unittest.main()
