"""rtft.deepspeed.RtftCheckpointEngine against a copy of DeepSpeed's CheckpointEngine interface
(deepspeed_interface.py: DeepSpeed cannot be installed here): every method with a compatible
signature, and the calls DeepSpeed makes for a tag (create, save per file, commit, load) saving
and loading a ZeRO-like state dict bit for bit, decoupled (save returns once captured)."""

import argparse
import collections
import inspect
import os
import shutil
import tempfile
import unittest

import h5py
import torch

import deepspeed_interface
from rtft.deepspeed import RtftCheckpointEngine

POOL = {"pool_bytes": 16 << 20, "chunk_bytes": 1 << 20}


def positional(fn):
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


class InterfaceTest(unittest.TestCase):
    def test_every_method_of_the_interface_with_its_parameters(self):
        for cls in (deepspeed_interface.CheckpointEngine,
                    deepspeed_interface.AsyncCheckpointEngine):
            for name, fn in inspect.getmembers(cls, inspect.isfunction):
                ours = getattr(RtftCheckpointEngine, name, None)
                self.assertTrue(callable(ours), f"no {name}")
                theirs, mine = positional(fn), positional(ours)
                self.assertEqual(mine[:len(theirs)], theirs, name)
                extra = list(inspect.signature(ours).parameters.values())[len(theirs):]
                for p in extra:  # only optional additions
                    self.assertTrue(p.default is not p.empty or p.kind == p.VAR_KEYWORD, name)

    def test_answers(self):
        engine = RtftCheckpointEngine()
        self.assertTrue(engine.is_decoupled())
        self.assertTrue(engine.is_data_parallel_writer(0))
        self.assertFalse(engine.is_data_parallel_writer(1))
        self.assertFalse(engine.preserves_storage_sharing())


class SaveLoadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rtft-py-ds-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def model_states(self):
        torch.manual_seed(3)
        module = collections.OrderedDict(
            [("w", torch.randn(8, 4)), ("b", torch.randn(4, dtype=torch.bfloat16))])
        return {"module": module, "args": argparse.Namespace(lr=0.1, zero=1),
                "global_steps": 120, "mask": torch.tensor([True, False]),
                "odd": torch.arange(3, dtype=torch.int16),  # no rt-ft dtype: pickled
                "shapes": [(torch.Size([8, 4]), "w")],
                "flat": torch.arange(12.0)[::2]}  # not contiguous: saved as a copy

    def test_a_tag_saved_decoupled_and_loaded(self):
        engine = RtftCheckpointEngine(**POOL)
        info = deepspeed_interface.CheckpointCommitInfo("global_step120", self.dir, True)
        engine.create(info)
        self.assertIs(engine.get_commit_info(), info)
        engine.makedirs(os.path.join(self.dir, "global_step120"), exist_ok=True)
        states = self.model_states()
        optim = {"exp_avg": torch.randn(16), "step": 7}
        paths = [os.path.join(self.dir, "global_step120", name)
                 for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_optim_states.pt")]
        expected = {"w": states["module"]["w"].clone(), "exp_avg": optim["exp_avg"].clone()}
        engine.save(states, paths[0])
        engine.save(optim, paths[1])
        states["module"]["w"].zero_()  # after save returned: the checkpoint has the old bits
        optim["exp_avg"].add_(1)
        self.assertTrue(engine.commit(info))
        self.assertIsNone(engine.get_commit_info())

        loaded = engine.load(paths[0], map_location="cpu")
        self.assertIsInstance(loaded["module"], collections.OrderedDict)
        self.assertTrue(torch.equal(loaded["module"]["w"], expected["w"]))
        self.assertEqual(loaded["module"]["b"].dtype, torch.bfloat16)
        self.assertEqual(vars(loaded["args"]), {"lr": 0.1, "zero": 1})
        self.assertEqual(loaded["global_steps"], 120)
        self.assertEqual(loaded["mask"].tolist(), [True, False])
        self.assertEqual(loaded["odd"].tolist(), [0, 1, 2])
        self.assertEqual(loaded["shapes"], [(torch.Size([8, 4]), "w")])
        self.assertEqual(loaded["flat"].tolist(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0])
        optim_loaded = engine.load(paths[1])
        self.assertTrue(torch.equal(optim_loaded["exp_avg"], expected["exp_avg"]))
        self.assertEqual(optim_loaded["step"], 7)
        # Each path is an rt-ft checkpoint directory, its tensors readable by h5py.
        with h5py.File(os.path.join(paths[1], "v000000000001", "rank-00000.h5"), "r") as f:
            self.assertEqual(f["tensors/t/0"][()].tolist(), expected["exp_avg"].tolist())

    def test_cleanup_commits_what_is_in_flight(self):
        engine = RtftCheckpointEngine(**POOL)
        engine.create("tag")  # old DeepSpeed passes the tag
        path = os.path.join(self.dir, "file.pt")
        engine.save({"x": torch.ones(3)}, path)
        engine.wait()
        self.assertEqual(engine.get_commit_info(), "tag")
        engine.cleanup()
        self.assertEqual(engine.load(path)["x"].tolist(), [1.0, 1.0, 1.0])

    def test_map_location_as_deepspeed_and_torch_load_pass_it(self):
        engine = RtftCheckpointEngine(**POOL)
        engine.create("tag")
        path = os.path.join(self.dir, "file.pt")
        engine.save({"x": torch.arange(3.0)}, path)
        engine.commit("tag")
        others = [torch.device("cpu"), {"cpu": "cpu"}, lambda storage, loc: None]
        for where in deepspeed_interface.LOADER_MAP_LOCATIONS + others:
            loaded = engine.load(path, map_location=where)
            self.assertEqual(loaded["x"].tolist(), [0.0, 1.0, 2.0])
            self.assertEqual(loaded["x"].device, torch.device("cpu"))
        seen = []
        engine.load(path, map_location=lambda storage, loc: seen.append(loc) or storage)
        self.assertEqual(seen, ["cpu"])  # the saved location, as torch.load passes it
        for bad in (3, lambda storage, loc: "cuda"):
            with self.assertRaises(TypeError):
                engine.load(path, map_location=bad)


if __name__ == "__main__":
    unittest.main()
