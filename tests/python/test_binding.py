"""The ctypes declarations against include/kvfold.h: every KVF_API function
bound, every public struct's fields in the header's order with the C
compiler's size and offsets, and the enums' values."""
import ctypes
import os
import re
import subprocess

import pytest

from conftest import ROOT
from kvfold import _lib

HEADER = os.path.join(ROOT, "include", "kvfold.h")


def header():
    text = open(HEADER).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def test_every_function_bound():
    api = set(re.findall(r"KVF_API[^;{]*?\b(kvf_\w+)\s*\(", header()))
    assert len(api) > 80
    assert api - set(_lib.FUNCTIONS) == set(), "functions of kvfold.h not bound"
    assert set(_lib.FUNCTIONS) - api == set(), "bound functions kvfold.h does not declare"
    for name in api:
        assert getattr(_lib.lib, name).argtypes is not None or not _lib.FUNCTIONS[name][1]


def c_params(decl):
    """The parameters of a declaration's parameter list: whether each is a pointer."""
    inner = decl[decl.index("(") + 1:decl.rindex(")")].strip()
    if inner in ("", "void"):
        return []
    return ["*" in p for p in inner.split(",")]


def test_arguments_match_the_header():
    """Every function's parameter count, and pointers where the header has
    pointers, scalars where it has scalars; results likewise."""
    pointerish = (ctypes.c_char_p, ctypes.c_void_p, ctypes._Pointer)
    checked = 0
    for m in re.finditer(r"KVF_API\s+([^;{]*?)\b(kvf_\w+)\s*(\([^;]*?\))\s*;", header(), re.S):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        res, args = _lib.FUNCTIONS[name]
        want = c_params(params)
        assert len(args) == len(want), f"{name}: {len(args)} arguments bound, the header has {len(want)}"
        for i, (arg, ptr) in enumerate(zip(args, want)):
            is_ptr = isinstance(arg, type) and issubclass(arg, pointerish)
            assert is_ptr == ptr, f"{name}: argument {i} is {'not ' if ptr else ''}a pointer in the binding"
        if "*" in ret:
            assert isinstance(res, type) and issubclass(res, pointerish), f"{name}: its result is a pointer"
        elif ret.split()[-1] == "void":
            assert res is None, f"{name} returns nothing"
        checked += 1
    assert checked == len(_lib.FUNCTIONS)


def c_fields(name):
    """The field names of struct `name` as the header declares them, in order."""
    body = re.search(r"struct\s+" + name + r"\s*\{(.*?)\};", header(), re.S)
    assert body, f"struct {name} not in kvfold.h"
    names = []
    for decl in body.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        fn = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)  # a function pointer: bool (*progress)(int, ...)
        if fn:
            names.append(fn.group(1))
            continue
        first, *rest = decl.split(",")
        names.append(re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*$", first)[0])
        names += [re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*$", r)[0] for r in rest]
    return names


@pytest.mark.parametrize("name", sorted(_lib.STRUCTS))
def test_struct_fields_in_order(name):
    py = [_lib.FIELD_NAMES.get((name, f), f) for f, _ in _lib.STRUCTS[name]._fields_]
    assert py == c_fields(name)


def test_layouts_match_the_compiler(tmp_path):
    cc = os.environ.get("CC", "cc")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "kvfold.h"', "int main(void) {"]
    for name, cls in sorted(_lib.STRUCTS.items()):
        lines.append(f'printf("{name} %zu\\n", sizeof(struct {name}));')
        for f, _ in cls._fields_:
            c = _lib.FIELD_NAMES.get((name, f), f)
            lines.append(f'printf("{name}.{f} %zu\\n", offsetof(struct {name}, {c}));')
    enums = ["KVF_OK", "KVF_ERR_INVALID_ARG", "KVF_ERR_IO", "KVF_ERR_FORMAT", "KVF_ERR_UNSUPPORTED", "KVF_ERR_SHAPE",
             "KVF_ERR_CONTEXT", "KVF_ERR_NOMEM", "KVF_ERR_INTERNAL", "KVF_ERR_BUFFER", "KVF_MOD_TEXT", "KVF_MOD_IMAGE",
             "KVF_MOD_VIDEO", "KVF_KV_F32", "KVF_KV_F16", "KVF_KV_Q8_0", "KVF_KV_Q4_0", "KVF_KV_Q4_0H", "KVF_ROPE_NORM", "KVF_ROPE_NEOX"]
    lines += [f'printf("{e} %d\\n", (int){e});' for e in enums]
    lines.append("return 0; }")
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines))
    try:
        res = subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)],
                             capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip(f"no C compiler ({cc})")
    assert res.returncode == 0, res.stderr
    got = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                               check=True).stdout.splitlines())
    for name, cls in _lib.STRUCTS.items():
        assert ctypes.sizeof(cls) == int(got[name]), f"sizeof(struct {name})"
        for f, _ in cls._fields_:
            assert getattr(cls, f).offset == int(got[f"{name}.{f}"]), f"offsetof(struct {name}, {f})"
    for e in enums:
        assert getattr(_lib, e) == int(got[e]), e
