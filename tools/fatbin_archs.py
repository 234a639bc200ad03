#!/usr/bin/env python3
"""The GPU code a CUDA plugin carries, read from its .nv_fatbin section.

    fatbin_archs.py LIB [--sass 90a,80] [--ptx 80,120a]

Prints, per architecture, how many SASS images (cubins, code=sm_X) and PTX
images (code=compute_X, JIT-compiled by the driver at load) the library
embeds. With --sass / --ptx it checks that every listed architecture is
there, in as many translation units as the others (a unit built without
one would show as fewer), and exits 1 naming what is missing: the
test behind meson's -Dcuda-archs / -Dcuda-ptx-archs (a wrong -gencode
would otherwise show only on a machine of that architecture).

Standard library only: the fatbin's container headers are read, not its
(zstd-compressed) payloads. Layout: a .nv_fatbin section holds one fatbin
per translation unit (magic 0xBA55ED50, u16 version, u16 header size, u64
payload size), each a run of images whose 16-word header gives the kind
(1 PTX, 2 ELF) in the low half of word 0, the header size in word 1, the
padded payload size in word 2, the architecture (80, 90, 120, ...) in word
7 and, in word 10, bit 20 for an architecture-specific target (90a, 120a).
Images of architectures not asked for (the plugin carries one small sm_75
cubin, nvcc's default target) are listed, not checked.
"""
import argparse
import struct
import sys
from collections import Counter

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2


def fatbin_section(path):
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit(f"fatbin_archs: {path}: not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    for name_off, _type, _flags, _addr, offset, size, *_ in headers:
        end = data.index(b"\0", names_at + name_off)
        if data[names_at + name_off:end] == b".nv_fatbin":
            return data[offset:offset + size]
    sys.exit(f"fatbin_archs: {path}: no .nv_fatbin section (no device code)")


ARCH_SPECIFIC = 1 << 20


def images(section):
    """(kind, arch name such as '90a') of every image."""
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", section, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned in the section
            continue
        entry, end = pos + header_size, pos + header_size + size
        while entry + 64 <= end:
            words = struct.unpack_from("<16I", section, entry)
            yield words[0] & 0xFFFF, f"{words[7]}{'a' if words[10] & ARCH_SPECIFIC else ''}"
            entry += words[1] + words[2]
        pos = end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lib")
    ap.add_argument("--sass", default="", help="architectures that must be there as SASS (comma-separated)")
    ap.add_argument("--ptx", default="", help="architectures that must be there as PTX (comma-separated)")
    args = ap.parse_args()

    found = Counter()
    for kind, arch in images(fatbin_section(args.lib)):
        label = {KIND_PTX: "PTX", KIND_ELF: "SASS"}.get(kind, f"kind {kind}")
        found[(label, arch)] += 1
    for (label, arch), n in sorted(found.items()):
        print(f"{label} {arch}: {n} translation units")

    wanted = [("SASS", a) for a in args.sass.split(",") if a] + [("PTX", a) for a in args.ptx.split(",") if a]
    counts = {(label, a): found[(label, a)] for label, a in wanted}
    missing = [f"{label} {a}" for (label, a), n in counts.items() if n == 0]
    if missing:
        print("fatbin_archs: missing: " + ", ".join(missing), file=sys.stderr)
        return 1
    if len(set(counts.values())) > 1:
        uneven = ", ".join(f"{label} {a}: {n}" for (label, a), n in counts.items())
        print(f"fatbin_archs: not every translation unit carries every architecture ({uneven})", file=sys.stderr)
        return 1
    if wanted:
        print(f"ok: {', '.join(f'{label} {a}' for label, a in wanted)}, each in {max(counts.values())} "
              "translation units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
