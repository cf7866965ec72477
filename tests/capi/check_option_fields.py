#!/usr/bin/env python3
"""Fails when a field of a C++ option struct has no C counterpart and is not listed as
deliberately absent, and when a Fortran options type differs from its C struct.

C++17 has no reflection, so this reads the headers: the C++ structs named in the table
(tests/capi/option_fields.txt), their C structs in include/rtft/rtft.h and the Fortran types of
include/rtft/rtft_c.f90.

    check_option_fields.py REPO_ROOT [TABLE]
"""
import pathlib
import re
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def cpp_fields(header, struct):
    """The data members of `struct ... {` ... `};` in `header`, in order."""
    text = strip_comments(header.read_text())
    m = re.search(r"^struct\s+%s\s*\{(.*?)^\};" % re.escape(struct), text, flags=re.S | re.M)
    if not m:
        raise SystemExit(f"FAIL: struct {struct} not found in {header}")
    fields = []
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        decl = re.sub(r"\s*(=.*|\{[^{}]*\})$", "", decl)  # the default
        # A member function has parentheses outside a template argument list.
        if "(" in re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", "", decl):
            continue
        fields.append(re.findall(r"[A-Za-z_]\w*", decl)[-1])
    return fields


C_KINDS = {"size_t": "integer(c_size_t)", "int32_t": "integer(c_int32_t)",
           "int64_t": "integer(c_int64_t)", "uint64_t": "integer(c_int64_t)"}


def c_fields(headers, struct):
    """(name, Fortran kind) of each field of `typedef struct struct {...}` in the C headers."""
    text = strip_comments("\n".join(h.read_text() for h in headers))
    m = re.search(r"typedef\s+struct\s+%s\s*\{(.*?)\}" % re.escape(struct), text, flags=re.S)
    if not m:
        raise SystemExit(f"FAIL: struct {struct} not found in {', '.join(map(str, headers))}")
    fields = []
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        name = re.findall(r"[A-Za-z_]\w*", decl)[-1]
        if "*" in decl:
            kind = "type(c_ptr)"
        elif re.match(r"rtft_\w+_fn\b", decl):
            kind = "type(c_funptr)"
        else:
            kind = C_KINDS.get(decl.split()[0], "unknown C type " + decl.split()[0])
        fields.append((name, kind))
    return fields


def fortran_fields(source, struct):
    text = source.read_text()
    m = re.search(r"^\s*type,\s*bind\(c\)\s*::\s*%s\s*$(.*?)^\s*end type" % re.escape(struct),
                  text, flags=re.S | re.M | re.I)
    if not m:
        raise SystemExit(f"FAIL: type {struct} not found in {source}")
    fields = []
    for line in m.group(1).splitlines():
        line = line.split("!")[0].strip()
        if not line:
            continue
        kind, names = (part.strip() for part in line.split("::"))
        fields += [(n.strip(), kind.replace(" ", "").lower()) for n in names.split(",")]
    return fields


def main():
    root = pathlib.Path(sys.argv[1])
    table = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else root / "tests/capi/option_fields.txt")
    # The C API's headers: rtft.h and the protection's, which it includes.
    rtft_h = [root / "include/rtft/rtft.h", root / "include/rtft/rtft_protect.h"]
    rtft_f90 = root / "include/rtft/rtft_c.f90"
    structs, failures, cpp_struct = [], [], None
    for n, line in enumerate(table.read_text().splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        if line.startswith("fortran "):  # structs whose Fortran type only is checked
            structs += [{"name": None, "c": name, "rows": {}} for name in line.split()[1:]]
            cpp_struct = None
        elif line.startswith("struct "):
            _, name, header, c_struct = line.split()
            cpp_struct = {"name": name, "header": root / header, "c": c_struct, "rows": {}}
            structs.append(cpp_struct)
        elif cpp_struct and (m := re.match(r"(\w+)\s*(=\s*(.+)|absent:\s*(.+))$", line)):
            cpp_struct["rows"][m.group(1)] = (m.group(3) or "").split() if m.group(3) else None
        else:
            failures.append(f"{table}:{n}: not understood: {line}")

    checked = 0
    for s in structs:
        c = c_fields(rtft_h, s["c"])
        fortran = fortran_fields(rtft_f90, s["c"])
        if fortran != c:
            failures.append(f"the Fortran type {s['c']} (rtft_c.f90) differs from the C struct:\n"
                            f"  C:       {c}\n  Fortran: {fortran}")
        if s["name"] is None:
            continue
        cpp = cpp_fields(s["header"], s["name"])
        c_names = [name for name, _ in c]
        claimed = {"size"}  # every options struct's first field: its size
        for field in cpp:
            if field not in s["rows"]:
                failures.append(f"{s['name']}::{field} ({s['header'].name}) has no C counterpart in "
                                f"{s['c']} and is not listed as absent in {table.name}")
        for field, carried in s["rows"].items():
            if field not in cpp:
                failures.append(f"{table.name}: {s['name']}::{field} is not a field of {s['name']}")
            for name in carried or []:
                if name not in c_names:
                    failures.append(f"{table.name}: {s['name']}::{field} is carried by "
                                    f"{s['c']}.{name}, which the C headers do not declare")
                claimed.add(name)
        for name in c_names:
            if name not in claimed:
                failures.append(f"{s['c']}.{name} carries no field of {s['name']} in {table.name}")
        if not c_names or c_names[0] != "size":
            failures.append(f"{s['c']}: its first field must be its size")
        checked += len(cpp)

    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print(f"PASS: the {checked} fields of the C++ option structs all have C "
          "counterparts or are listed as absent, and the Fortran types match the C structs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
