#!/usr/bin/python3
"""An independent model of heatdis's scheme (examples/heatdis, docs/solvers.md) in numpy.

Recomputes the field of R x C cells after I Jacobi iterations and compares a solver's output with
it bit for bit: the HDF5 dataset /field (float64, [R, C]) and every "iter K residual X" line of
its log (each residual printed with 17 significant digits reads back as the exact double). Run by
the heatdis tests through Debian's /usr/bin/python3 (python3-numpy, python3-h5py).

  heatdis_check.py --rows R --cols C --iterations I [--residual-every N] [--same-as REF.h5]
                   FIELD.h5 [LOG ...]

Prints "PASS: ..." and exits 0 when everything matches, else prints what differs and exits 1.
"""
import argparse
import re
import sys

import h5py
import numpy as np


def model(rows, cols, iterations, residual_every):
    """The field after `iterations` and the residual of every iteration that prints one."""
    u = np.zeros((rows, cols), dtype=np.float64)
    u[0, :] = 100.0
    v = u.copy()
    residuals = {}
    for k in range(1, iterations + 1):
        # Left to right, as the scheme says: ((up + down) + left) + right, then times 0.25.
        v[1:-1, 1:-1] = 0.25 * (((u[:-2, 1:-1] + u[2:, 1:-1]) + u[1:-1, :-2]) + u[1:-1, 2:])
        if k % residual_every == 0 or k == iterations:
            residuals[k] = float(np.max(np.abs(v[1:-1, 1:-1] - u[1:-1, 1:-1])))
        u, v = v, u
    return u, residuals


def read_field(path, rows, cols):
    with h5py.File(path, "r") as f:
        if "field" not in f:
            raise ValueError(f"{path}: no dataset /field")
        d = f["field"]
        if d.dtype != np.float64 or d.shape != (rows, cols):
            raise ValueError(f"{path}: /field is {d.dtype} {d.shape}, want float64 {(rows, cols)}")
        return d[...]


def check_log(path, residuals, seen, errors):
    """Every residual line equals the model's; adds the iterations printed to `seen`."""
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(r"\biter (\d+) residual (\S+)$", line.rstrip("\n"))
            if not m:
                continue
            k, value = int(m.group(1)), float(m.group(2))
            seen.add(k)
            if k not in residuals:
                errors.append(f"{path}: residual at iteration {k}, which prints none")
            elif value != residuals[k]:
                errors.append(f"{path}: iteration {k}: residual {m.group(2)}, "
                              f"model {residuals[k]:.17g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--cols", type=int, required=True)
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--residual-every", type=int, default=100)
    ap.add_argument("--expect-subnormal", action="store_true",
                    help="fail unless the field holds subnormal values (the test's grid must)")
    ap.add_argument("--same-as", metavar="REF",
                    help="another run's field, which must be this one bit for bit")
    ap.add_argument("field")
    ap.add_argument("logs", nargs="*")
    a = ap.parse_args()

    want, residuals = model(a.rows, a.cols, a.iterations, a.residual_every)
    errors = []
    try:
        got = read_field(a.field, a.rows, a.cols)
    except (OSError, ValueError) as e:
        print(f"FAIL: {e}")
        return 1
    # Bit for bit: the same 64-bit patterns (a NaN or -0.0 would not compare equal as floats).
    others = [("the model", want)]
    try:
        if a.same_as:
            others.append((a.same_as, read_field(a.same_as, a.rows, a.cols)))
    except (OSError, ValueError) as e:
        print(f"FAIL: {e}")
        return 1
    for name, other in others:
        diff = got.view(np.uint64) != other.view(np.uint64)
        if diff.any():
            i, j = np.argwhere(diff)[0]
            errors.append(f"{a.field}: {int(diff.sum())} cells differ from {name}, first "
                          f"[{i}, {j}]: {got[i, j]!r} against {other[i, j]!r}")
    subnormal = int(np.count_nonzero((want != 0) & (np.abs(want) < np.finfo(np.float64).tiny)))
    if a.expect_subnormal and subnormal == 0:
        errors.append("the model's field has no subnormal value: the test grid is too small")
    # Every residual the model has is printed by one of the logs (a job started again from a
    # checkpoint prints those after it, its first run those before).
    seen = set()
    for log in a.logs:
        check_log(log, residuals, seen, errors)
    if a.logs:
        for k in sorted(set(residuals) - seen):
            errors.append(f"no residual printed at iteration {k} ({', '.join(a.logs)})")
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        return 1
    same = f" and {a.same_as}" if a.same_as else ""
    print(f"PASS: {a.field} equals the model{same} bit for bit ({a.rows} x {a.cols}, {a.iterations} "
          f"iterations, {subnormal} subnormal cells, {len(residuals)} residuals)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
