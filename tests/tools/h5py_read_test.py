#!/usr/bin/env python3
"""Reads a checkpoint written by the real engine (rtft-demo-ckpt) with h5py and xxhash only,
as docs/format.md says any user can: every dataset's dtype, shape and values agree with the raw
bytes at the manifest's offsets, every chunk checksum recomputes, and MANIFEST.json names the
file's manifest by its checksum. Exits 77 (skipped) where h5py, numpy or xxhash is missing."""
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
          "uint8": "u1"}


def decode(raw, dtype, shape):
    if dtype == "bfloat16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape)


def check_file(path):
    with open(path, "rb") as raw_file:
        blob = raw_file.read()
    with h5py.File(path, "r") as f:
        assert f.attrs["rtft_format_version"] == 1
        manifest_text = f["rtft_manifest"][()]
        manifest = json.loads(manifest_text)
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
            assert np.array_equal(values, expected), t["name"]
            if t["dtype"] == "bfloat16":
                assert values.dtype == np.float32  # h5py widens the documented bf16 type exactly
        for o in manifest["objects"]:
            data = bytes(f[o["dataset"]][()])
            assert data == blob[o["offset"]:o["offset"] + o["bytes"]], o["name"]
            assert xxhash.xxh3_64_hexdigest(data) == o["xxh3"], o["name"]
    return manifest_text, manifest


def main():
    demo = sys.argv[1]
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        subprocess.run([demo, "--dir", d, "--steps", "4", "--every", "2", "--layers", "2",
                        "--params-per-layer", "70000"], check=True, stdout=subprocess.DEVNULL)
        latest = int(open(os.path.join(d, "LATEST")).read())
        vdir = os.path.join(d, "v%012d" % latest)
        glob = json.load(open(os.path.join(vdir, "MANIFEST.json")))
        assert glob["version"] == latest and glob["world_size"] == 1
        for entry in glob["files"]:
            path = os.path.join(vdir, entry["file"])
            assert os.path.getsize(path) == entry["bytes"]
            text, manifest = check_file(path)
            assert xxhash.xxh3_64_hexdigest(text) == entry["manifest_xxh3"]
            assert manifest["version"] == latest
            names = {t["name"] for t in manifest["tensors"]}
            assert {"layer0/weights", "layer1/adam_v"} <= names, names
    print("h5py read back every tensor and object; all checksums match")


if __name__ == "__main__":
    main()
