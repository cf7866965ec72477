"""The random number generators in rtft.State: torch's CPU generator, NumPy's global RandomState
and Python's random saved with every checkpoint and put back by every restore (a run with dropout
then recovers to the same bits); rng=False leaves them out; a checkpoint written without them
restores and leaves the generators as they are; each rank's generators come from its own file;
a damaged RNG object is refused by name."""

import pickle
import random
import shutil
import tempfile
import unittest

import numpy as np
import torch

import rtft


def engine_for(path, **options):
    return rtft.CheckpointEngine(path, pool_bytes=16 << 20, chunk_bytes=1 << 20, **options)


def draws():
    """One draw of each generator, in the order a training step would make them."""
    return (torch.rand(8).tolist(), np.random.rand(4).tolist(), random.random(),
            torch.nn.functional.dropout(torch.ones(64), p=0.5).tolist())


def seed(value):
    torch.manual_seed(value)
    np.random.seed(value)
    random.seed(value)


class RngTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rtft-py-rng-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def save(self, state, version=1, **options):
        engine = engine_for(self.dir, **options)
        engine.checkpoint(version, state)
        engine.wait_persisted(version)
        engine.close()

    def test_the_generators_are_an_object_of_every_state_by_default(self):
        self.assertEqual(rtft.State().object_names(), ["rtft/rng"])
        self.assertEqual(rtft.State({"w": torch.zeros(2)}, rng=False).object_names(), [])

    def test_restore_puts_every_generator_back(self):
        seed(11)
        w = torch.zeros(4)
        state = rtft.State({"w": w})
        self.save(state)
        expected = draws()
        self.assertNotEqual(draws(), expected)  # the generators moved on
        rtft.restore(self.dir, state)
        self.assertEqual(draws(), expected)

    def test_rng_false_leaves_the_generators_alone(self):
        seed(12)
        self.save(rtft.State({"w": torch.zeros(4)}, rng=False))
        draws()
        expected_after = (torch.get_rng_state(), np.random.get_state()[1].copy(),
                          random.getstate())
        rtft.restore(self.dir, rtft.State({"w": torch.zeros(4)}, rng=False))
        self.assertTrue(torch.equal(torch.get_rng_state(), expected_after[0]))
        self.assertTrue(np.array_equal(np.random.get_state()[1], expected_after[1]))
        self.assertEqual(random.getstate(), expected_after[2])

    def test_a_checkpoint_without_generators_restores_and_leaves_them(self):
        seed(13)
        w = torch.arange(4, dtype=torch.float32)
        self.save(rtft.State({"w": w}, rng=False))
        w.zero_()
        before = torch.get_rng_state()
        rtft.restore(self.dir, rtft.State({"w": w}))  # rng=True: optional, skipped
        self.assertEqual(w.tolist(), [0.0, 1.0, 2.0, 3.0])
        self.assertTrue(torch.equal(torch.get_rng_state(), before))

    def test_each_rank_takes_its_own_generators(self):
        # Two ranks seeded apart (data augmentation seeds by rank), saved into one version.
        expected = {}
        engines = [engine_for(self.dir, rank=r, world_size=2) for r in range(2)]
        for rank, engine in enumerate(engines):
            seed(100 + rank)
            engine.checkpoint(1, rtft.State({"w": torch.zeros(2)}))  # objects read at the call
            expected[rank] = draws()
        for engine in engines:  # the version commits once both ranks' files are written
            engine.wait_persisted(1)
            engine.close()
        for rank in (1, 0):
            seed(0)
            rtft.restore(self.dir, rtft.State({"w": torch.zeros(2)}), rank=rank)
            self.assertEqual(draws(), expected[rank], f"rank {rank}")
        seed(0)  # no rank: the lowest rank's, as for any object
        rtft.restore(self.dir, rtft.State({"w": torch.zeros(2)}))
        self.assertEqual(draws(), expected[0])
        # A rank the version has no file of takes the lowest rank's.
        seed(0)
        rtft.restore(self.dir, rtft.State({"w": torch.zeros(2)}), rank=5)
        self.assertEqual(draws(), expected[0])
        with self.assertRaises(ValueError):
            rtft.restore(self.dir, rtft.State(), rank=-1)

    def test_a_damaged_generator_state_is_refused_by_name(self):
        state = rtft.State(rng=False)
        state.add_object("rtft/rng", lambda: pickle.dumps(["not", "a", "dict"]),
                         lambda data: None)
        self.save(state)
        with self.assertRaises(TypeError) as caught:  # the deserializer's, raised again
            rtft.restore(self.dir, rtft.State())
        self.assertIn("rtft/rng", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
