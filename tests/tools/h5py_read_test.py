#!/usr/bin/env python3
"""Reads a checkpoint written by the real engine (example-01-checkpoint) with h5py and xxhash only,
as docs/format.md says any user can: every dataset's dtype, shape and values agree with the raw
bytes at the manifest's offsets, every chunk checksum recomputes, and MANIFEST.json names the
file's manifest by its checksum. Exits 77 (skipped) where h5py, numpy or xxhash is missing.

  h5py_read_test.py EXAMPLE_01_CHECKPOINT                    the engine's files (format version 1)
  h5py_read_test.py --float64 MAKE_TEST_CHECKPOINT    float64 shards (format version 2): h5py
                                                      reads numpy.float64 values, bit for bit"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import xxhash
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

DTYPES = {"float32": "<f4", "float16": "<f2", "int8": "i1", "int32": "<i4", "int64": "<i8",
          "uint8": "u1", "float64": "<f8"}


def decode(raw, dtype, shape):
    if dtype == "bfloat16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape)


def check_file(path):
    with open(path, "rb") as raw_file:
        blob = raw_file.read()
    with h5py.File(path, "r") as f:
        manifest_text = f["rtft_manifest"][()]
        manifest = json.loads(manifest_text)
        # The oldest version that has every dtype of the file (docs/format.md, "Format versions").
        want_version = 2 if any(t["dtype"] == "float64" for t in manifest["tensors"]) else 1
        assert f.attrs["rtft_format_version"] == want_version, f.attrs["rtft_format_version"]
        assert manifest["format_version"] == want_version
        chunk = manifest["chunk_bytes"]
        assert manifest["tensors"], "no tensors"
        for t in manifest["tensors"]:
            ds = f[t["dataset"]]
            assert list(ds.shape) == t["shape"], (t["name"], ds.shape, t["shape"])
            raw = blob[t["offset"]:t["offset"] + t["bytes"]]
            assert len(raw) == t["bytes"], t["name"]
            sums = [xxhash.xxh3_64_hexdigest(raw[i:i + chunk]) for i in range(0, max(len(raw), 1), chunk)]
            assert sums == t["xxh3"], (t["name"], sums[:2], t["xxh3"][:2])
            expected = decode(raw, t["dtype"], t["shape"])
            values = ds[()]
            if t["dtype"] == "float64":
                # Bit for bit, -0.0 and infinities included: compared as integers.
                assert values.dtype == np.float64, values.dtype
                assert np.array_equal(np.asarray(values).view(np.uint64),
                                      expected.view(np.uint64)), t["name"]
            else:
                assert np.array_equal(values, expected), t["name"]
            if t["dtype"] == "bfloat16":
                assert values.dtype == np.float32  # h5py widens the documented bf16 type exactly
        for o in manifest["objects"]:
            data = bytes(f[o["dataset"]][()])
            assert data == blob[o["offset"]:o["offset"] + o["bytes"]], o["name"]
            assert xxhash.xxh3_64_hexdigest(data) == o["xxh3"], o["name"]
    return manifest_text, manifest


# What make-test-checkpoint --float64 writes (tests/tools/make_test_checkpoint.cc).
FLOAT64_VALUES = [0.1, -2.5, 1e-300, 3.141592653589793, -0.0, 5e-324, 1.7976931348623157e308,
                  0.30000000000000004, -1234567.890625, 2.5, float("inf"), float("-inf")]


def check_version_dir(vdir, version):
    glob = json.load(open(os.path.join(vdir, "MANIFEST.json")))
    assert glob["version"] == version
    manifests = []
    for entry in glob["files"]:
        path = os.path.join(vdir, entry["file"])
        assert os.path.getsize(path) == entry["bytes"]
        text, manifest = check_file(path)
        assert xxhash.xxh3_64_hexdigest(text) == entry["manifest_xxh3"]
        assert manifest["version"] == version
        assert manifest["format_version"] <= glob["format_version"]
        manifests.append((path, manifest))
    return glob, manifests


def main_float64(make):
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        subprocess.run([make, d, "--float64"], check=True)
        glob, manifests = check_version_dir(os.path.join(d, "v%012d" % 1), 1)
        assert glob["format_version"] == 2 and glob["world_size"] == 2
        # The two row halves, read by h5py, assemble the field exactly.
        field = np.empty((4, 3), dtype=np.float64)
        for path, manifest in manifests:
            with h5py.File(path, "r") as f:
                u = f["tensors/solver/u"]
                lo = int(u.attrs["shard_offset"][0])
                field[lo:lo + 2] = u[()]
                assert f["tensors/solver/dt"][()] == 0.001
        want = np.array(FLOAT64_VALUES, dtype=np.float64).reshape(4, 3)
        assert np.array_equal(field.view(np.uint64), want.view(np.uint64)), field
    print("h5py read back the float64 shards bit for bit; all checksums match")


def main():
    if sys.argv[1] == "--float64":
        return main_float64(sys.argv[2])
    demo = sys.argv[1]
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        subprocess.run([demo, "--dir", d, "--steps", "4", "--every", "2", "--layers", "2",
                        "--params-per-layer", "70000"], check=True, stdout=subprocess.DEVNULL)
        latest = int(open(os.path.join(d, "LATEST")).read())
        glob, manifests = check_version_dir(os.path.join(d, "v%012d" % latest), latest)
        # No float64 in the demo: format version 1, which every rt-ft reads.
        assert glob["world_size"] == 1 and glob["format_version"] == 1
        for _, manifest in manifests:
            names = {t["name"] for t in manifest["tensors"]}
            assert {"layer0/weights", "layer1/adam_v"} <= names, names
    print("h5py read back every tensor and object; all checksums match")


if __name__ == "__main__":
    main()
