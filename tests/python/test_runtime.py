"""rtft.Runtime without dp-launch (a standalone rank 0 of 1): its place, events, the key-value
store and communicators; blocking calls release the GIL (a thread blocked in kv_get is woken by
another Python thread's kv_put, which could not run if the GIL were held)."""

import threading
import unittest

import torch

import rtft


class RuntimeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rt = rtft.Runtime()

    def test_standalone_place(self):
        info = self.rt.info
        self.assertEqual(info.role, rtft.RuntimeRole.STANDALONE)
        self.assertEqual((info.rank, info.world_size, info.epoch), (0, 1, 0))
        self.assertEqual(self.rt.current().world_size, 1)
        self.assertIsNone(self.rt.poll_event())

    def test_listeners(self):
        token = self.rt.subscribe(lambda event: None)
        self.rt.unsubscribe(token)
        self.rt.on_failure(lambda event: None)
        self.rt.on_failure(None)
        with self.assertRaises(TypeError):
            self.rt.subscribe(42)
        self.rt.report_step(3)

    def test_kv_get_releases_the_gil(self):
        # The writer runs Python code (it needs the GIL) once this thread is about to wait in
        # kv_get: were the GIL held there, the key would never come and kv_get would time out.
        go = threading.Event()

        def writer():
            go.wait()
            self.rt.kv_put("py/key", b"\x00value")

        thread = threading.Thread(target=writer)
        thread.start()
        go.set()
        self.assertEqual(self.rt.kv_get("py/key", timeout=60), b"\x00value")
        thread.join(60)

    def test_kv_get_times_out_with_its_code(self):
        with self.assertRaises(rtft.DeadlineExceededError) as caught:
            self.rt.kv_get("py/never", timeout=0.05)
        self.assertEqual(caught.exception.code, rtft.StatusCode.DEADLINE_EXCEEDED)
        with self.assertRaises(rtft.InvalidArgumentError):
            self.rt.kv_get("py/never", timeout=float("nan"))

    def test_communicator_of_the_epoch(self):
        comm = self.rt.create_communicator("py-one")
        self.assertEqual((comm.rank, comm.world_size, comm.backend), (0, 1, "gloo"))
        x = torch.arange(4, dtype=torch.float32)
        comm.all_reduce(x, op="sum")
        self.assertTrue(torch.equal(x, torch.arange(4, dtype=torch.float32)))
        comm.close()
        with self.assertRaises(rtft.FailedPreconditionError):
            comm.barrier()
        with self.assertRaises(rtft.InvalidArgumentError):
            self.rt.create_communicator("py-two", backend="mpi")

    def test_a_group_communicator_takes_its_members_job_ranks(self):
        # What rtft.torch passes for a group's communicator (its calls then count as the step's
        # for the hang detector): checked in C++, so each refusal below proves it got there.
        comm = self.rt.create_group_communicator("py-group", 0, 1, job_ranks=[0])
        x = torch.ones(3)
        comm.all_reduce(x, op="sum")
        self.assertTrue(torch.equal(x, torch.ones(3)))
        comm.close()
        with self.assertRaisesRegex(rtft.InvalidArgumentError, "2 job ranks for a world of 1"):
            self.rt.create_group_communicator("py-group2", 0, 1, job_ranks=[0, 1])
        with self.assertRaisesRegex(rtft.InvalidArgumentError, "job rank -1 is negative"):
            self.rt.create_group_communicator("py-group3", 0, 1, job_ranks=[-1])


if __name__ == "__main__":
    unittest.main()
