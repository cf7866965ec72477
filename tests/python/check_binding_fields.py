#!/usr/bin/env python3
"""Fails when a C++ struct of the public API that the Python module binds (``py::class_<S>`` in
src/python/*.cc) has a data member the binding does not expose (``&S::field``), unless
binding_fields.txt lists it as deliberately absent. The option structs are checked against C by
tests/capi/check_option_fields.py; C++17 has no reflection, so both read the headers.

    check_binding_fields.py REPO_ROOT
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "capi"))
from check_option_fields import cpp_fields  # noqa: E402


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: check_binding_fields.py REPO_ROOT")
    root = pathlib.Path(argv[1])
    absent = set()
    table = pathlib.Path(__file__).with_name("binding_fields.txt")
    for line in table.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            absent.add(line)
    bound, classes = set(), set()
    for source in sorted((root / "src" / "python").glob("*.cc")):
        text = source.read_text()
        classes.update(re.findall(r"py::class_<(\w+)[,>]", text))
        bound.update(f"{s}::{f}" for s, f in re.findall(r"&(\w+)::(\w+)\s*[,)]", text))
    headers = sorted((root / "include" / "rtft").glob("*.h"))
    problems, checked = [], 0
    for name in sorted(classes):
        header = next((h for h in headers
                       if re.search(r"^struct\s+%s\s*\{" % name, h.read_text(), re.M)), None)
        if header is None:
            continue  # a class of the module itself (PyRuntime, ...), not a public struct
        checked += 1
        for field in cpp_fields(header, name):
            key = f"{name}::{field}"
            if key not in bound and key not in absent:
                problems.append(f"{key} ({header.name}) is not bound in src/python and not "
                                f"listed in {table.name}")
    for key in sorted(absent):
        if key in bound:
            problems.append(f"{key} is listed as absent in {table.name} but is bound")
    for p in problems:
        print("FAIL: " + p)
    if problems:
        return 1
    if checked == 0:
        print("FAIL: no bound public struct found (did the binding's spelling change?)")
        return 1
    print(f"PASS: every field of the {checked} public structs the Python module binds is bound")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
