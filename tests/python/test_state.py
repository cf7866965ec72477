"""rtft.State: tensors from state dicts, modules and optimizers by their memory (DLPack, no copy),
the dtypes rt-ft saves and clear errors for the rest, hostile input refused, names, and
init_optimizer_state leaving Adam, AdamW, SGD, RMSprop and Adadelta exactly as their first step
would, and refusing what it cannot make exactly."""

import shutil
import tempfile
import unittest

import numpy as np
import torch

import rtft
import rtft.torch


def entry(info, name):
    return next(t for t in info if t["name"] == name)


class DtypeTest(unittest.TestCase):
    def test_supported_dtypes(self):
        cases = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
                 torch.float64: "float64", torch.int8: "int8", torch.int32: "int32",
                 torch.int64: "int64", torch.uint8: "uint8"}
        state = rtft.State()
        for dtype, name in cases.items():
            self.assertEqual(state.add_tensor(name, torch.zeros(3, dtype=dtype)), name)
        info = {t["name"]: t for t in state.tensor_info()}
        for name in cases.values():
            self.assertEqual(info[name]["dtype"], name)

    def test_bool_goes_as_uint8_with_its_logical_dtype(self):
        flags = torch.tensor([True, False, True])
        state = rtft.State({"flags": flags})
        info = state.tensor_info()[0]
        self.assertEqual((info["dtype"], info["logical_dtype"]), ("uint8", "bool"))
        self.assertEqual(state.logical_dtypes, {"flags": "bool"})
        self.assertIn("rtft/logical_dtypes", state.object_names())

    def test_unsupported_dtypes_are_refused_clearly(self):
        for tensor in (torch.zeros(2, dtype=torch.int16), torch.zeros(2, dtype=torch.complex64),
                       np.zeros(2, dtype=np.uint16), np.zeros(2, dtype=np.uint64)):
            with self.assertRaises(rtft.InvalidArgumentError) as caught:
                rtft.State({"t": tensor})
            self.assertIn("is not one rt-ft saves", str(caught.exception))
            self.assertIn("tensor 't'", str(caught.exception))

    def test_wrapped_and_compiled_models_have_the_plain_names(self):
        # DDP's "module." and torch.compile's "_orig_mod." are left out: a state saved from a
        # wrapped model restores into a plain one and back.
        def names(value):
            return [i["name"] for i in rtft.State({"model": value}, rng=False).tensor_info()]
        plain = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
        group = rtft.torch.ProcessGroup(rank=0, size=1)  # unbound: DDP's construction only
        ddp = torch.nn.parallel.DistributedDataParallel(plain, process_group=group)
        self.assertEqual(names(ddp), names(plain))
        self.assertIn("model/0.weight", names(plain))
        info = rtft.State({"m": ddp}, rng=False).tensor_info()
        self.assertEqual(info[0]["data_ptr"], plain[0].weight.data_ptr())  # the live memory
        if hasattr(torch, "compile"):
            compiled = torch.compile(plain)
            self.assertEqual(names(compiled), names(plain))
            outer = torch.nn.Sequential(torch.compile(torch.nn.Linear(2, 2)))
            self.assertEqual(names(outer), ["model/0.weight", "model/0.bias"])

    def test_channels_last_in_its_storage_order(self):
        # The same memory, described in the order it lies in (N, H, W, C), without a copy; a
        # restore writes it back in place.
        conv = torch.nn.Conv2d(3, 4, 2).to(memory_format=torch.channels_last)
        w = conv.weight
        self.assertFalse(w.is_contiguous())
        info = {i["name"]: i for i in rtft.State({"m": conv}, rng=False).tensor_info()}
        self.assertEqual(info["m/weight"]["shape"], [4, 2, 2, 3])
        self.assertEqual(info["m/weight"]["data_ptr"], w.data_ptr())
        v = torch.zeros(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d)
        self.assertEqual(rtft.State({"v": v}, rng=False).tensor_info()[0]["shape"],
                         [2, 4, 5, 6, 3])
        d = tempfile.mkdtemp(prefix="rtft-py-cl-")
        try:
            before = w.detach().clone()
            engine = rtft.CheckpointEngine(d, pool_bytes=16 << 20, chunk_bytes=1 << 20)
            engine.checkpoint(1, rtft.State({"m": conv}, rng=False))
            engine.wait_persisted(1)
            engine.close()
            with torch.no_grad():
                w.zero_()
            rtft.restore(d, rtft.State({"m": conv}, rng=False))
            self.assertTrue(torch.equal(w, before))
            self.assertFalse(w.is_contiguous())  # in place: still channels_last
        finally:
            shutil.rmtree(d, ignore_errors=True)
        with self.assertRaises(rtft.InvalidArgumentError):  # other strides stay refused
            rtft.State({"t": torch.zeros(4, 2).t()}, rng=False)

    def test_tensor_subclasses_are_refused_by_name(self):
        # A subclass's DLPack need not be its memory (a real DTensor is described as its local
        # shard: test_dtensor.py, torch 2.x); one merely named DTensor is a subclass like any.
        class DTensor(torch.Tensor):
            pass

        class Other(torch.Tensor):
            pass

        for cls, text in ((DTensor, "tensor subclass"), (Other, "tensor subclass")):
            value = torch.Tensor._make_subclass(cls, torch.zeros(3))
            for state in ({"model": {"w": value}}, {"s": rtft.Shard(value, [6], [0])}):
                with self.assertRaises(rtft.InvalidArgumentError) as caught:
                    rtft.State(state)
                self.assertIn(cls.__name__, str(caught.exception))
                self.assertIn(text, str(caught.exception))
        rtft.State({"p": torch.nn.Parameter(torch.zeros(2))})  # a parameter is no subclass

    def test_numpy_arrays_by_their_memory(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        info = rtft.State({"a": a}).tensor_info()[0]
        self.assertEqual((info["shape"], info["nbytes"]), ([2, 3], 24))
        self.assertEqual(info["data_ptr"], a.ctypes.data)


class HostileInputTest(unittest.TestCase):
    def test_not_contiguous_is_refused(self):
        base = torch.zeros(4, 6)
        for view in (base.t(), base[:, ::2], base[::2]):
            with self.assertRaises(rtft.InvalidArgumentError) as caught:
                rtft.State({"v": view})
            self.assertIn("not contiguous", str(caught.exception))
        rtft.State({"ok": base[1:3]})  # a contiguous slice is fine
        rtft.State({"column": torch.zeros(4, 1)[:, :1]})  # dimensions of one: any stride

    def test_things_that_are_no_tensor(self):
        with self.assertRaises(TypeError):
            rtft.State().add_tensor("x", [1.0, 2.0])
        with self.assertRaises(TypeError):
            rtft.State().add_tensor("x", torch.Tensor)  # the class, not a tensor
        with self.assertRaises(TypeError):
            rtft.State([torch.zeros(1)])
        with self.assertRaises(TypeError):
            rtft.State({(1, 2): torch.zeros(1)})

    def test_read_only_and_meta_memory(self):
        frozen = np.zeros(3, dtype=np.float32)
        frozen.flags.writeable = False
        with self.assertRaises(Exception):  # NumPy refuses to export it
            rtft.State({"ro": frozen})
        with self.assertRaises(Exception):
            rtft.State({"meta": torch.empty(3, device="meta")})

    def test_names(self):
        state = rtft.State({"a/b": torch.zeros(1), "c%d": torch.zeros(1), 7: torch.zeros(1)})
        self.assertEqual([t["name"] for t in state.tensor_info()], ["a%2Fb", "c%25d", "7"])
        with self.assertRaises(rtft.InvalidArgumentError):
            state.add_tensor("7", torch.zeros(1))  # used twice
        with self.assertRaises(rtft.InvalidArgumentError):
            state.add_tensor("", torch.zeros(1))
        with self.assertRaises(rtft.InvalidArgumentError):
            state.add_tensor("bad\nname", torch.zeros(1))
        with self.assertRaises(rtft.InvalidArgumentError):
            state.add_tensor("s", torch.zeros(4), global_shape=[3], offset=[0])  # outside

    def test_shards(self):
        state = rtft.State({"m": rtft.Shard(torch.zeros(2, 3), [8, 3], [4, 0])})
        info = state.tensor_info()[0]
        self.assertEqual((info["global_shape"], info["offset"]), ([8, 3], [4, 0]))
        self.assertEqual(rtft.split_evenly(10, 4, 1), (3, 3))
        self.assertEqual(rtft.split_evenly(10, 4, 3), (8, 2))
        with self.assertRaises(rtft.InvalidArgumentError):
            rtft.split_evenly(10, 0, 0)

    def test_a_shard_the_data_parallel_group_shares(self):
        # HSDP's: replicated says every rank of the data-parallel group holds the same shard.
        state = rtft.State({"m": rtft.Shard(torch.zeros(2, 3), [8, 3], [4, 0], replicated=True),
                            "own": rtft.Shard(torch.zeros(2, 3), [8, 3], [0, 0])}, rng=False)
        info = {t["name"]: t for t in state.tensor_info()}
        self.assertTrue(info["m"]["replicated"])
        self.assertFalse(info["own"]["replicated"])
        state._set_replicated("own", True)
        self.assertTrue({t["name"]: t for t in state.tensor_info()}["own"]["replicated"])
        with self.assertRaises(rtft.InvalidArgumentError) as caught:
            state.add_tensor("whole", torch.zeros(2), replicated=True)  # no coordinates
        self.assertIn("replicated applies to a shard", str(caught.exception))
        plain = rtft.State({"w": torch.zeros(2)}, rng=False)
        for name in ("w", "nothing"):
            with self.assertRaises(rtft.InvalidArgumentError):
                plain._set_replicated(name, True)

    def test_places_in_a_grid(self):
        grid = rtft.Grid(tensor=2)  # HSDP 2 x 2: rank = s + 2 r
        place = rtft.place_in_grid(grid, 4, 3)
        self.assertEqual((place.t, place.p, place.d, place.data), (1, 0, 1, 2))
        self.assertEqual([rtft.rank_in_grid(grid, 4, 1, 0, d) for d in range(2)], [1, 3])
        with self.assertRaises(rtft.InvalidArgumentError):
            rtft.place_in_grid(rtft.Grid(tensor=3), 4, 0)  # 3 does not divide 4


class ModelTest(unittest.TestCase):
    def test_module_and_optimizer_by_their_memory(self):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        rtft.init_optimizer_state(optimizer)
        info = rtft.State({"model": model, "optim": optimizer}).tensor_info()
        names = [t["name"] for t in info]
        self.assertIn("model/0.weight", names)
        self.assertIn("model/1.running_mean", names)
        self.assertIn("optim/state/0/exp_avg", names)
        # No copy: the described memory is the parameter's and the moment's own.
        weight = entry(info, "model/0.weight")
        self.assertEqual(weight["shape"], [8, 4])
        self.assertEqual(weight["data_ptr"], model[0].weight.data_ptr())
        self.assertEqual(entry(info, "optim/state/0/exp_avg")["data_ptr"],
                         optimizer.state[model[0].weight]["exp_avg"].data_ptr())

    def test_an_optimizer_without_state_is_refused_clearly(self):
        model = torch.nn.Linear(2, 2)
        with self.assertRaises(ValueError) as caught:
            rtft.State({"optim": torch.optim.AdamW(model.parameters())})
        self.assertIn("init_optimizer_state", str(caught.exception))

    def test_init_optimizer_state_is_the_first_steps_state(self):
        # Each optimizer trained with and without it ends on the same bits (L2 decay, momentum,
        # a centred RMSprop and Nesterov included: a zero step must not add decay to the
        # moments).
        makers = {
            "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
            "Adam+L2": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
            "SGD+momentum": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9,
                                                       weight_decay=0.1, nesterov=True),
            "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True,
                                                      weight_decay=0.1),
            "Adadelta": lambda ps: torch.optim.Adadelta(ps, weight_decay=0.1),
        }
        for name, make in makers.items():
            with self.subTest(optimizer=name):
                self.check_first_step(make)

    def test_init_optimizer_state_refuses_what_it_cannot_make_exactly(self):
        model = torch.nn.Linear(2, 2)
        for make, text in (
                (lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                         dampening=0.1), "dampening"),
                (lambda: torch.optim.NAdam(model.parameters()), "NAdam"),
                (lambda: torch.optim.Rprop(model.parameters()), "Rprop")):
            opt = make()
            with self.assertRaises(rtft.InvalidArgumentError) as caught:
                rtft.init_optimizer_state(opt)
            self.assertIn(text, str(caught.exception))
            self.assertEqual(len(opt.state), 0)  # refused before anything was made

    def check_first_step(self, make):
        def train(init):
            torch.manual_seed(0)
            model = torch.nn.Linear(5, 3)
            opt = make(model.parameters())
            before = [p.detach().clone() for p in model.parameters()]
            if init:
                rtft.init_optimizer_state(opt)
                for p, b in zip(model.parameters(), before):
                    self.assertTrue(torch.equal(p, b), "init changed a parameter")
                    self.assertIsNone(p.grad)
                if "step" in opt.state[model.weight]:
                    self.assertEqual(float(opt.state[model.weight]["step"]), 0.0)
            for step in range(5):
                x = torch.linspace(-1, 1, 10 * 5).reshape(10, 5) * (step + 1)
                opt.zero_grad()
                model(x).square().sum().backward()
                opt.step()
            return [p.detach().clone() for p in model.parameters()] + [
                torch.as_tensor(opt.state[p][k]).clone() for p in model.parameters()
                for k in opt.state[p] if opt.state[p][k] is not None]

        for a, b in zip(train(False), train(True)):
            self.assertTrue(torch.equal(a, b))


class ValuesTest(unittest.TestCase):
    def test_values_are_read_when_saved_and_put_back_when_restored(self):
        extra = {"epoch": 1, "tags": ["a"], "nested": {"lr": 0.5}}
        state = rtft.State({"extra": extra})
        self.assertEqual(sorted(state.object_names()),
                         ["extra/epoch", "extra/nested/lr", "extra/tags/0", "rtft/rng"])

    def test_frozen_after_protect(self):
        state = rtft.State({"w": torch.zeros(4)})
        protector = rtft.Protector(rtft.Runtime())
        protector.protect(state)
        self.assertTrue(state.frozen)
        with self.assertRaises(rtft.FailedPreconditionError):
            state.add_tensor("late", torch.zeros(1))
        protector.close()


if __name__ == "__main__":
    unittest.main()
