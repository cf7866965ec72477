"""rtft.torch beyond the group object: groups of listed ranks bound by Protector.run to their
own communicator of each epoch, torch.distributed's backend "rtft" (init_process_group,
new_group, DeviceMesh, DTensors described as their local shard: torch 2.x; refused by name on
1.13), the store over the job's key-value store, and CUDA tensors staged through host buffers
(skipped without a GPU)."""

import json
import os
import shutil
import subprocess
import sys
import unittest

import torch
import torch.distributed as dist

import rtft
import rtft.torch
from test_torch_group import WORLD, on_ranks, opts

TORCH2 = int(torch.__version__.split(".")[0]) >= 2


class ListedRanksTest(unittest.TestCase):
    def test_a_group_of_listed_ranks_has_its_own_communicator_per_epoch(self):
        rt = rtft.Runtime()  # standalone: a world of one, epoch 0
        protector = rtft.Protector(rt)
        w = torch.zeros(2)
        protector.protect(rtft.State({"w": w}))
        world = rtft.torch.ProcessGroup(protector)
        sub = rtft.torch.ProcessGroup(protector, ranks=[0], name="sub")
        self.assertEqual((sub.rank(), sub.size()), (0, 1))
        comms = []

        def compute(ctx):
            g = torch.ones(2)
            world.allreduce([g]).wait()
            sub.allreduce([g]).wait()
            comms.append(sub._group_comm)
            self.assertIsNot(sub._group_comm, ctx.comm)

        def update(ctx):
            w.add_(1)

        self.assertEqual(protector.run(3, compute, update).outcome, rtft.RunOutcome.DONE)
        self.assertEqual(w.tolist(), [3.0, 3.0])
        self.assertEqual(len(set(map(id, comms))), 1)  # one communicator for the epoch
        self.assertEqual(comms[0].name, "torch.sub")
        long = rtft.torch.ProcessGroup(protector, ranks=[0], name="a/b" * 40)
        self.assertRegex(rtft.torch._comm_name(long._name), r"^torch\.h[0-9a-f]{32}$")
        protector.close()

    def test_bad_lists_are_refused(self):
        rt = rtft.Runtime()
        protector = rtft.Protector(rt)
        for kwargs, text in (({"ranks": [0]}, "needs a name"),
                             ({"ranks": [1], "name": "x"}, "not distinct ranks"),
                             ({"ranks": [0, 0], "name": "x"}, "not distinct ranks"),
                             ({"ranks": ["a"], "name": "x"}, "not integers"),
                             ({"ranks": [], "name": "x"}, "not distinct ranks")):
            with self.assertRaises(rtft.InvalidArgumentError) as caught:
                rtft.torch.ProcessGroup(protector, **kwargs)
            self.assertIn(text, str(caught.exception))
        with self.assertRaises(rtft.InvalidArgumentError):
            rtft.torch.ProcessGroup(rank=0, size=1, ranks=[0], name="x")  # no protector
        protector.close()


_BIN = os.environ.get("RTFT_TEST_BIN_DIR", "")


@unittest.skipUnless(os.path.exists(os.path.join(_BIN, "dp-launch")) and shutil.which("mpirun"),
                     "needs dp-launch (RTFT_TEST_BIN_DIR) and mpirun")
class JobTest(unittest.TestCase):
    def test_listed_ranks_and_point_to_point_in_a_job(self):
        # jobs/groups_job.py on 3 ranks: each group's communicator made through the job's
        # store, the world group's lanes too; every step sees the right sums and messages.
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs",
                              "groups_job.py")
        env = dict(os.environ, RTFT_COMM_GLOO_HOST="127.0.0.1")
        run = subprocess.run(["mpirun", "-np", "3", os.path.join(_BIN, "dp-launch"), "--spares",
                              "0", "--", sys.executable, script], env=env, capture_output=True,
                             text=True, timeout=300, check=False)
        out = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, out[-4000:])
        # Each rank's record, wherever it sits in the merged output (one rank's line may still
        # follow another's text on the same line).
        decoder = json.JSONDecoder()
        lines = [decoder.raw_decode(part)[0] for part in run.stdout.split("GROUPS_JOB ")[1:]]
        self.assertEqual(sorted(line["rank"] for line in lines), [0, 1, 2], out[-4000:])
        for line in lines:
            r = line["rank"]
            self.assertIn("DONE", line["outcome"])
            self.assertEqual([s["step"] for s in line["seen"]], [0, 1, 2])
            for s in line["seen"]:
                self.assertEqual(s["world"], 6.0)
                if r in (0, 1):
                    self.assertEqual(s["sub01"], 3.0)
                if r in (1, 2):
                    self.assertEqual(s["sub12"], 5.0)
                self.assertEqual(s["received"], 100 * s["step"] + (r - 1) % 3)


class StoreTest(unittest.TestCase):
    def test_set_get_wait_check_and_what_it_refuses(self):
        store = rtft.torch.Store(rtft.Runtime(), timeout=5)
        store.set("a", b"\x00\x01")
        store.set("b", "text")
        self.assertEqual(store.get("a"), b"\x00\x01")
        self.assertEqual(store.get("b"), b"text")
        store.wait(["a", "b"])
        self.assertTrue(store.check(["a"]))
        self.assertFalse(store.check(["a", "never"]))
        for call in (lambda: store.add("a", 1), lambda: store.compare_set("a", b"", b"x"),
                     lambda: store.delete_key("a"), lambda: store.num_keys()):
            with self.assertRaises(NotImplementedError) as caught:
                call()
            self.assertIn("no atomic update", str(caught.exception))
        with self.assertRaises(rtft.InvalidArgumentError):
            rtft.torch.Store(rtft.Runtime(), timeout=0)


@unittest.skipIf(TORCH2, "torch 2.x registers the backend (Torch2BackendTest)")
class Torch1Test(unittest.TestCase):
    def test_init_process_group_is_refused_with_the_way_to_go(self):
        with self.assertRaises(NotImplementedError) as caught:
            rtft.torch.init_process_group(rtft.Protector(rtft.Runtime()))
        self.assertIn("torch 2.0 or later", str(caught.exception))
        self.assertIn("process_group=rtft.torch.ProcessGroup(protector)", str(caught.exception))
        self.assertFalse(dist.is_initialized())


@unittest.skipUnless(TORCH2, "torch 1.13 has no DeviceMesh or DTensor")
class Torch2BackendTest(unittest.TestCase):
    def test_default_group_new_group_mesh_and_dtensor_state(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
        rt = rtft.Runtime()
        protector = rtft.Protector(rt)
        default = rtft.torch.init_process_group(protector)
        try:
            self.assertIsInstance(default, rtft.torch.ProcessGroup)
            self.assertEqual(dist.get_backend(), "rtft")
            with self.assertRaises(rtft.FailedPreconditionError):
                rtft.torch.init_process_group(protector)  # once
            sub = dist.new_group([0])
            self.assertIsInstance(sub, rtft.torch.ProcessGroup)
            mesh = init_device_mesh("cpu", (1,))
            self.assertIsInstance(mesh.get_group(), rtft.torch.ProcessGroup)
            # Each group keeps the name torch gave it, for Python and for torch's C++ registry
            # (DeviceMesh finds its groups by name; a Python group registers no backend).
            self.assertNotEqual(default.group_name, sub.group_name)
            for g in (default, sub, mesh.get_group()):
                self.assertIs(dist.distributed_c10d._resolve_process_group(g.group_name), g)
            full = torch.arange(12.0).reshape(4, 3)
            # Outside a step a scatter from a source rank is refused, naming the local split
            # (a rank other than the source holds nothing to take its piece from).
            with self.assertRaises(rtft.FailedPreconditionError) as caught:
                distribute_tensor(full, mesh, [Shard(0)])
            self.assertIn("src_data_rank=None", str(caught.exception))
            sharded = distribute_tensor(full, mesh, [Shard(0)], src_data_rank=None)
            replicated = distribute_tensor(full, mesh, [Replicate()], src_data_rank=None)
            self.assertEqual(sharded._local_tensor.tolist(), full.tolist())  # a world of one
            self.assertIsInstance(sharded, DTensor)
            # Described by their local tensors' own memory (a DTensor's __dlpack__ would be a
            # gathered copy), the shard with its global shape and offset.
            info = {i["name"]: i for i in rtft.State({"s": sharded, "r": replicated}).tensor_info()}
            self.assertEqual(info["s"]["data_ptr"], sharded._local_tensor.data_ptr())
            self.assertEqual(info["r"]["data_ptr"], replicated._local_tensor.data_ptr())
            self.assertEqual(info["s"].get("global_shape", [4, 3]), [4, 3])
            self.assertEqual(info["s"].get("offset", [0, 0]), [0, 0])
            self.assertNotIn("global_shape", info["r"])
            w = torch.zeros(1)
            protector.protect(rtft.State({"w": w, "s": sharded}))

            def compute(ctx):
                x = torch.ones(3)
                dist.all_reduce(x)  # the default group, bound for the step
                dist.all_reduce(x, group=sub)
                dist.barrier()

            def update(ctx):
                w.add_(1)
            self.assertEqual(protector.run(2, compute, update).outcome, rtft.RunOutcome.DONE)
        finally:
            dist.destroy_process_group()
            protector.close()


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
class CudaStagingTest(unittest.TestCase):
    def test_cuda_tensors_through_host_buffers(self):
        def body(g, comm):
            r, dev, out = g.rank(), torch.device("cuda", 0), {}
            big = torch.empty(1 << 22, device=dev)
            big.fill_(0.0).add_(1.0 + r)  # queued on the caller's stream right before the call
            g.allreduce([big]).wait()
            torch.cuda.current_stream().synchronize()
            out["allreduce"] = big[:2].tolist() + big[-1:].tolist()
            flat = torch.zeros(2 * WORLD, device=dev)
            flat[2 * r:2 * r + 2] = torch.tensor([r, -r], dtype=torch.float32, device=dev)
            g._allgather_base(flat, flat[2 * r:2 * r + 2]).wait()  # the input a view of it
            out["allgather"] = flat.tolist()
            scattered = torch.zeros(2, device=dev)
            g._reduce_scatter_base(scattered, torch.arange(2.0 * WORLD, device=dev) + r).wait()
            out["reduce_scatter"] = scattered.tolist()
            b = torch.full((3,), float(r), device=dev)
            g.broadcast([b], opts(dist.BroadcastOptions, rootRank=2)).wait()
            out["broadcast"] = b.tolist()
            return out

        for r, out in enumerate(on_ranks(body)):
            self.assertEqual(out["allreduce"], [6.0] * 3)
            self.assertEqual(out["allgather"], [0.0, 0.0, 1.0, -1.0, 2.0, -2.0])
            self.assertEqual(out["reduce_scatter"], [3 * 2.0 * r + 3, 3 * (2.0 * r + 1) + 3])
            self.assertEqual(out["broadcast"], [2.0] * 3)


if __name__ == "__main__":
    unittest.main()
