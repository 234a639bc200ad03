"""The ctypes mirrors in ffpa._clib against what the C compiler says about
api/ffpa.h: every struct's size and every field's offset and size, and the
enum constants. A header change that the mirror misses (a wrong array
length let the library write past a Python buffer once) fails here."""

import ctypes
import os
import shutil
import subprocess
import tempfile

import pytest

from ffpa import _clib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER_DIR = os.path.join(REPO, "api")

# mirror class -> C struct
STRUCTS = {
    _clib.Tensor: "ffpa_tensor",
    _clib.Options: "ffpa_options",
    _clib.KvCache: "ffpa_kv_cache",
    _clib.BackendInfo: "ffpa_backend_info",
}

# module constant -> C enumerator
CONSTANTS = {
    "OK": "FFPA_OK",
    "ERR_INVALID_ARGUMENT": "FFPA_ERR_INVALID_ARGUMENT",
    "ERR_UNSUPPORTED": "FFPA_ERR_UNSUPPORTED",
    "ERR_NO_BACKEND": "FFPA_ERR_NO_BACKEND",
    "ERR_OUT_OF_MEMORY": "FFPA_ERR_OUT_OF_MEMORY",
    "ERR_DEVICE": "FFPA_ERR_DEVICE",
    "ERR_INTERNAL": "FFPA_ERR_INTERNAL",
    "F16": "FFPA_F16",
    "BF16": "FFPA_BF16",
    "F32": "FFPA_F32",
    "GRAD_ACCUM_F32": "FFPA_GRAD_ACCUM_F32",
    "GRAD_ACCUM_OUTPUT": "FFPA_GRAD_ACCUM_OUTPUT",
    "MAX_HEAD_DIM": "FFPA_MAX_HEAD_DIM",
}


def test_library_version_is_the_header_version():
    import ffpa
    from ffpa import _clib as clib
    hdr = open(os.path.join(HEADER_DIR, "ffpa.h")).read()
    parts = [hdr.split("#define FFPA_VERSION_%s " % k)[1].split()[0] for k in ("MAJOR", "MINOR", "PATCH")]
    assert ffpa.library_version() == ".".join(parts)
    assert clib.library().ffpa_version() == int(parts[0]) * 10000 + int(parts[1]) * 100 + int(parts[2])
    assert ffpa.__version__ == ffpa.library_version()
    assert all(b.version == ffpa.library_version() for b in ffpa.backends() if b.available)


def c_layout():
    """{(struct, field or None): (offset, size)} and {enumerator: value},
    printed by a program the C compiler builds from api/ffpa.h."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no C compiler (cc/gcc/clang) to read api/ffpa.h's layout with")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "ffpa.h"', "int main(void) {"]
    for cls, name in STRUCTS.items():
        lines.append(f'printf("{name} - 0 %zu\\n", sizeof({name}));')
        for field, _ in cls._fields_:
            lines.append(
                f'printf("{name} {field} %zu %zu\\n", offsetof({name}, {field}), '
                f"sizeof((({name} *)0)->{field}));"
            )
    for const in CONSTANTS.values():
        lines.append(f'printf("= {const} %lld\\n", (long long)({const}));')
    lines += ["return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        build = subprocess.run([cc, "-std=c11", "-I", HEADER_DIR, src, "-o", exe], capture_output=True, text=True)
        assert build.returncode == 0, "a mirror names what api/ffpa.h lacks:\n" + build.stderr
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    layout, values = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "=":
            values[parts[1]] = int(parts[2])
        else:
            layout[(parts[0], None if parts[1] == "-" else parts[1])] = (int(parts[2]), int(parts[3]))
    return layout, values


@pytest.fixture(scope="module")
def layout():
    return c_layout()


@pytest.mark.parametrize("cls", list(STRUCTS), ids=lambda c: STRUCTS[c])
def test_struct_matches_c(cls, layout):
    structs, _ = layout
    name = STRUCTS[cls]
    assert ctypes.sizeof(cls) == structs[(name, None)][1], f"sizeof({name})"
    for field, _ in cls._fields_:
        offset, size = structs[(name, field)]
        assert getattr(cls, field).offset == offset, f"{name}.{field} offset"
        assert getattr(cls, field).size == size, f"{name}.{field} size"


def test_constants_match_c(layout):
    _, values = layout
    for py, c in CONSTANTS.items():
        assert getattr(_clib, py) == values[c], f"{py} != {c}"
