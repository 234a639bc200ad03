#!/usr/bin/env python3
"""Checks that a HIP plugin carries AMD GPU code objects for every target.

  check_code_objects.py libffpa-hip.so gfx90a gfx942 gfx1100 [--expect=NAME,NAME...]

Reads the .hip_fatbin section of the shared object (one clang offload
bundle per HIP translation unit), and for each requested target requires,
in every bundle, an entry 'hip*-amdgcn-amd-amdhsa--<target>' holding an
AMDGPU ELF whose e_flags name that processor and that defines kernels
(symbols ending in '.kd'). With --expect, every NAME must also occur in
some kernel's (mangled) name for every target, e.g. the forward and the
backward entry points. Prints one line per target; exit 1 on a miss.
Plain Python on purpose: no ROCm tool is needed to run it.
"""
import struct
import sys

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
EM_AMDGPU = 224
# EF_AMDGPU_MACH values (LLVM's AMDGPU ELF ABI).
MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx1100": 0x41, "gfx908": 0x30, "gfx1030": 0x36}


def sections(elf):
    """{name: (offset, size)} of a 64-bit little-endian ELF."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    str_off = heads[shstrndx][4]
    out = {}
    for h in heads:
        name_end = elf.index(b"\0", str_off + h[0])
        out[elf[str_off + h[0]:name_end].decode()] = (h[4], h[5], h[1], h[6])
    return out


def kernel_names(code):
    """Names of the '.kd' symbols (kernel descriptors) of an AMDGPU code object."""
    secs = sections(code)
    if ".symtab" not in secs or ".strtab" not in secs:
        return []
    sym_off, sym_size = secs[".symtab"][:2]
    str_off = secs[".strtab"][0]
    names = []
    for i in range(sym_size // 24):
        name_idx, = struct.unpack_from("<I", code, sym_off + 24 * i)
        end = code.index(b"\0", str_off + name_idx)
        name = code[str_off + name_idx:end]
        if name.endswith(b".kd"):
            names.append(name[:-3].decode())
    return names


def bundles(blob):
    """Yields {triple: code} for each offload bundle in blob."""
    pos = blob.find(BUNDLE_MAGIC)
    while pos >= 0:
        count, = struct.unpack_from("<Q", blob, pos + 24)
        entries = {}
        at = pos + 32
        for _ in range(count):
            off, size, tlen = struct.unpack_from("<QQQ", blob, at)
            triple = blob[at + 24:at + 24 + tlen].decode()
            entries[triple] = blob[pos + off:pos + off + size]
            at += 24 + tlen
        yield entries
        pos = blob.find(BUNDLE_MAGIC, at)


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    expect = [n for a in argv[2:] if a.startswith("--expect=") for n in a[len("--expect="):].split(",") if n]
    path, targets = argv[1], [a for a in argv[2:] if not a.startswith("--")]
    data = open(path, "rb").read()
    secs = sections(data)
    if ".hip_fatbin" not in secs:
        print(f"{path}: no .hip_fatbin section: not a HIP (AMD) build")
        return 1
    off, size = secs[".hip_fatbin"][:2]
    found = list(bundles(data[off:off + size]))
    if not found:
        print(f"{path}: .hip_fatbin holds no offload bundle")
        return 1
    ok = True
    for t in targets:
        names = set()
        missing = 0
        for b in found:
            code = next((c for trip, c in b.items() if trip.endswith("-amdgcn-amd-amdhsa--" + t)), None)
            if code is None or code[:4] != b"\x7fELF":
                missing += 1
                continue
            machine, = struct.unpack_from("<H", code, 0x12)
            flags, = struct.unpack_from("<I", code, 0x30)
            if machine != EM_AMDGPU or (t in MACH and (flags & 0xFF) != MACH[t]):
                print(f"{t}: code object with wrong machine/flags (e_machine {machine}, e_flags {flags:#x})")
                missing += 1
                continue
            names.update(kernel_names(code))
        absent = [e for e in expect if not any(e in n for n in names)]
        if missing or not names:
            print(f"{t}: MISSING in {missing} of {len(found)} bundles ({len(names)} kernels found)")
            ok = False
        elif absent:
            print(f"{t}: {len(names)} kernels, none named like: {', '.join(absent)}")
            ok = False
        else:
            named = "".join(f", {e} x{sum(e in n for n in names)}" for e in expect)
            print(f"{t}: {len(found)} code objects, {len(names)} kernels{named}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
