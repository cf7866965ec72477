"""rtft.dcp with torch.distributed.checkpoint (PyTorch 2.x): dcp.save, dcp.async_save and dcp.load
through rt-ft's engine, bit for bit, async staging done when save returns (the tensors may change
after it), values and tensors of dtypes rt-ft lacks through DCP's bytes, and the files read by
rtft.restore. Debian's PyTorch 1.13 has neither dcp.save nor dcp.async_save: skipped there."""

import os
import shutil
import tempfile
import unittest

import torch

import rtft

try:
    import torch.distributed.checkpoint as dcp
    HAVE_DCP = hasattr(dcp, "save") and hasattr(dcp, "async_save")
except ImportError:
    HAVE_DCP = False

SKIP = (f"PyTorch {torch.__version__} has no torch.distributed.checkpoint.save/async_save "
        "(PyTorch 2.x): the DCP writer and reader are tested on the GPU machine's PyTorch")
POOL = {"pool_bytes": 64 << 20, "chunk_bytes": 1 << 20}


def state_dict(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optim": optimizer.state_dict(),
            "odd": torch.arange(5, dtype=torch.int16), "extra": {"epoch": seed}}


def equal(a, b):
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return a == b


@unittest.skipUnless(HAVE_DCP, SKIP)
class DcpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch.distributed as dist
        cls.root = tempfile.mkdtemp(prefix="rtft-py-dcp-")
        if not dist.is_initialized():  # one rank: async_save wants a process group
            store = dist.FileStore(os.path.join(cls.root, "store"), 1)
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        import torch.distributed as dist
        dist.destroy_process_group()
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_save_and_load(self):
        from rtft.dcp import RtftStorageReader, RtftStorageWriter
        path = os.path.join(self.root, "sync")
        saved = state_dict(1)
        dcp.save(saved, storage_writer=RtftStorageWriter(path, **POOL))
        self.assertEqual(rtft.latest_version(path), 1)
        loaded = state_dict(2)
        dcp.load(loaded, storage_reader=RtftStorageReader(path))
        self.assertTrue(equal(loaded["model"], saved["model"]))
        self.assertTrue(equal(loaded["odd"], saved["odd"]))
        self.assertTrue(equal(loaded["optim"]["state"], saved["optim"]["state"]))
        # The rank file is rt-ft's: a tensor of it restored by rt-ft itself.
        weight = torch.zeros_like(saved["model"]["0.weight"])
        rtft.restore(path, rtft.State({"dcp": {"tensors": {"model.0.weight": rtft.Shard(
            weight, list(weight.shape), [0, 0])}}}))
        self.assertTrue(torch.equal(weight, saved["model"]["0.weight"]))

    def test_async_save_is_staged_when_it_returns(self):
        from rtft.dcp import RtftStorageReader, RtftStorageWriter
        path = os.path.join(self.root, "async")
        saved = state_dict(3)
        expected = {k: v.clone() for k, v in saved["model"].items()}
        result = dcp.async_save(saved, storage_writer=RtftStorageWriter(path, **POOL))
        for tensor in saved["model"].values():  # training goes on: the checkpoint keeps the old
            tensor.add_(1.0)
        saved["odd"].add_(1)  # int16, a dtype rt-ft lacks: staged as DCP's bytes
        saved["extra"]["epoch"] = 99
        upload = getattr(result, "upload_completion", result)
        upload.result()
        loaded = state_dict(4)
        dcp.load(loaded, storage_reader=RtftStorageReader(path))
        self.assertTrue(equal(loaded["model"], expected))
        self.assertEqual(loaded["extra"]["epoch"], 3)
        self.assertTrue(equal(loaded["odd"], torch.arange(5, dtype=torch.int16)))

    def test_async_save_of_dtensors_and_versions_in_a_row(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        from rtft.dcp import RtftStorageReader, RtftStorageWriter
        path = os.path.join(self.root, "dtensor")
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(5)
        saved = {"w": distribute_tensor(torch.randn(6, 4), mesh, [Shard(0)]),
                 "b": distribute_tensor(torch.randn(4), mesh, [Replicate()])}
        expected = {k: v.to_local().clone() for k, v in saved.items()}
        writer = RtftStorageWriter(path, **POOL)
        first = dcp.async_save(saved, storage_writer=writer)
        for value in saved.values():  # staged: the checkpoint keeps the values as they were
            value.to_local().add_(1.0)
        # A second save before the first is committed takes the next version, not the same.
        second = dcp.async_save(saved, storage_writer=writer)
        for result in (first, second):
            getattr(result, "upload_completion", result).result()
        self.assertEqual([v.version for v in rtft.list_versions(path)], [1, 2])
        loaded = {"w": distribute_tensor(torch.zeros(6, 4), mesh, [Shard(0)]),
                  "b": distribute_tensor(torch.zeros(4), mesh, [Replicate()])}
        # .metadata is the second save's; version 1's bytes are the first's, read by rt-ft.
        dcp.load(loaded, storage_reader=RtftStorageReader(path))
        for name, value in loaded.items():
            self.assertTrue(torch.equal(value.to_local(), expected[name] + 1.0), name)
        weight = torch.zeros(6, 4)
        rtft.restore(path, rtft.State({"dcp": {"tensors": {"w": rtft.Shard(weight, [6, 4],
                                                                             [0, 0])}}}),
                     version=1)
        self.assertTrue(torch.equal(weight, expected["w"]))

    def test_async_save_over_a_group_of_its_own(self):
        # The writer's group is DCP's process_group: the engine's place and the version's
        # agreement are the group's (a group of one rank here: the path, not the meeting).
        import torch.distributed as dist

        from rtft.dcp import RtftStorageReader, RtftStorageWriter
        path = os.path.join(self.root, "group")
        group = dist.new_group([0])
        saved = state_dict(6)
        expected = {k: v.clone() for k, v in saved["model"].items()}
        writer = RtftStorageWriter(path, group=group, **POOL)
        result = dcp.async_save(saved, storage_writer=writer, process_group=group)
        getattr(result, "upload_completion", result).result()
        self.assertEqual(rtft.latest_version(path), 1)
        loaded = state_dict(7)
        dcp.load(loaded, storage_reader=RtftStorageReader(path), process_group=group)
        self.assertTrue(equal(loaded["model"], expected))
        with self.assertRaisesRegex(TypeError, "group is a torch.distributed.ProcessGroup"):
            RtftStorageWriter(path, group="world")


class SkipMessageTest(unittest.TestCase):
    def test_the_reason_is_clear_where_dcp_is_missing(self):
        if not HAVE_DCP:
            print(f"\n  skipped: {SKIP}")


if __name__ == "__main__":
    unittest.main()
