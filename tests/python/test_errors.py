"""rt-ft's status codes as Python exceptions: one class per code, the code as an attribute, the
built-in exception of the same meaning as a base, and no torch library loaded by the module."""

import subprocess
import sys
import unittest

import rtft


class ErrorsTest(unittest.TestCase):
    def test_every_code_raises_its_class_with_the_code(self):
        for code in range(1, rtft._core.LAST_STATUS_CODE + 1):
            cls = rtft.error_class(code)
            self.assertTrue(issubclass(cls, rtft.Error))
            self.assertIsNot(cls, rtft.Error, f"code {code} has no class of its own")
            with self.assertRaises(cls) as caught:
                rtft._core._raise_status(code, f"message {code}")
            err = caught.exception
            self.assertEqual(err.code, rtft.StatusCode(code))
            self.assertEqual(err.message, f"message {code}")
            self.assertEqual(str(err), f"{rtft.StatusCode(code).name}: message {code}")

    def test_builtin_bases(self):
        self.assertTrue(issubclass(rtft.InvalidArgumentError, ValueError))
        self.assertTrue(issubclass(rtft.NotFoundError, LookupError))
        self.assertTrue(issubclass(rtft.DeadlineExceededError, TimeoutError))
        self.assertTrue(issubclass(rtft.PermissionDeniedError, PermissionError))
        self.assertTrue(issubclass(rtft.IoError, OSError))
        self.assertTrue(issubclass(rtft.UnimplementedError, NotImplementedError))
        with self.assertRaises(OSError) as caught:
            rtft._core._raise_status(int(rtft.StatusCode.IO_ERROR), "disk")
        self.assertEqual(caught.exception.code, rtft.StatusCode.IO_ERROR)

    def test_names_match_the_codes(self):
        self.assertEqual(rtft.AbortedError.code, rtft.StatusCode.ABORTED)
        self.assertEqual(rtft.DataLossError.code, rtft.StatusCode.DATA_LOSS)
        self.assertEqual(rtft.ShutdownError.code, rtft.StatusCode.SHUTDOWN)
        self.assertIs(rtft.error_class(999), rtft.Error)
        with self.assertRaises(ValueError):
            rtft._core._raise_status(0, "OK is no error")

    def test_every_class_is_exported_by_the_package(self):
        # rtft/__init__.py names them one by one: a class added to rtft.errors must join it.
        import rtft.errors
        for name in rtft.errors.__all__:
            self.assertIn(name, rtft.__all__)
            self.assertIs(getattr(rtft, name), getattr(rtft.errors, name))

    def test_the_module_loads_no_torch_library(self):
        code = ("import sys, rtft; assert 'torch' not in sys.modules; "
                "maps = open('/proc/self/maps').read(); "
                "assert 'libtorch' not in maps and 'libc10' not in maps, maps; "
                "assert 'librt-ft' in maps")
        subprocess.run([sys.executable, "-c", code], check=True)


if __name__ == "__main__":
    unittest.main()
