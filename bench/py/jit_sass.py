#!/usr/bin/env python3
"""The OpenCL programs' SASS from NVIDIA's OpenCL JIT beside the CUDA driver's
JIT of the same PTX (bench/gpu.sh opencl-sass).

NVIDIA's OpenCL stores a program as PTX and JITs it at build time; nothing in
OpenCL shows the machine code. Both JITs leave it in the driver's compute
cache (CUDA_CACHE_PATH), so each program of an ffpa OpenCL cache
(FFPA_OPENCL_CACHE) is JIT-ed twice, once by each (tools/cl-ptx-replay with
FFPA_REPLAY_JIT_ONLY), into its own cache directory, disassembled (nvdisasm)
and compared per kernel: instructions and shared-memory accesses by width.
The tiled forward once ran 1.88x slower through OpenCL because its JIT left
four 4-byte LDS where the CUDA JIT made one LDS.128 (docs/notes/opencl.md);
a kernel flagged here has a gap of that kind.

    jit_sass.py --replay build-gpu/tools/cl-ptx-replay --cache DIR [--work DIR]
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

SHARED = ("LDS", "LDS.64", "LDS.128", "STS", "STS.64", "STS.128", "LDSM")


def sass_by_function(cubin):
    """{function: Counter of opcodes} of one cubin (nvdisasm -c)."""
    out = subprocess.run(["nvdisasm", "-c", cubin], capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.([^,\s]+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), collections.Counter())
            continue
        if cur is None or "*/" not in line or ";" not in line:
            continue
        ins = line.split("*/", 1)[1].strip().rstrip(";").split()
        if ins and ins[0].startswith("@"):
            ins = ins[1:]
        if ins:
            cur[ins[0]] += 1
    return funcs


def jit(replay, ptx, which, cache_dir):
    """One JIT of ptx into cache_dir; {function: opcodes} of what it left."""
    env = dict(os.environ, CUDA_CACHE_PATH=cache_dir, FFPA_REPLAY_JIT_ONLY=which)
    r = subprocess.run([replay, ptx], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write("%s JIT of %s failed: %s\n" % (which, ptx, r.stderr.strip()[:300]))
        return {}
    funcs = {}
    for root, _, files in os.walk(cache_dir):
        for f in files:
            data = open(os.path.join(root, f), "rb").read()
            at = data.find(b"\x7fELF")
            if at < 0:
                continue
            cubin = os.path.join(root, f + ".cubin")
            with open(cubin, "wb") as o:
                o.write(data[at:])
            funcs.update(sass_by_function(cubin))
    return funcs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replay", required=True)
    ap.add_argument("--cache", required=True, help="an ffpa OpenCL program cache (FFPA_OPENCL_CACHE)")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="jit-sass-")
    cols = ("instr",) + SHARED
    print("%-26s %-22s %-7s %s" % ("program", "kernel", "jit", " ".join("%8s" % c for c in cols)))
    flagged = 0
    for name in sorted(os.listdir(a.cache)):
        data = open(os.path.join(a.cache, name), "rb").read().replace(b"\0", b"")
        if b".entry" not in data:
            continue
        ptx = os.path.join(work, name + ".ptx")
        with open(ptx, "wb") as o:
            o.write(data)
        entries = set(re.findall(rb"\.entry\s+([A-Za-z_][A-Za-z0-9_]*)", data))
        by = {w: jit(a.replay, ptx, w, os.path.join(work, name + "-" + w)) for w in ("cuda", "opencl")}
        for fn in sorted(e.decode() for e in entries):
            rows = {w: by[w].get(fn) for w in by}
            if not all(rows.values()):
                continue
            for w in ("cuda", "opencl"):
                ops = rows[w]
                counts = (sum(ops.values()),) + tuple(ops[c] for c in SHARED)
                print("%-26s %-22s %-7s %s" % (name[:26], fn[:22], w, " ".join("%8d" % c for c in counts)))
            c, o = rows["cuda"], rows["opencl"]
            narrow = lambda ops: ops["LDS"] + ops["STS"] + ops["LDS.64"] + ops["STS.64"]
            if sum(o.values()) > 1.02 * sum(c.values()) or narrow(o) > narrow(c):
                flagged += 1
                print("  ^ FLAG: the OpenCL JIT's code is longer or its shared accesses narrower")
    print("opencl-sass: %d kernel(s) flagged" % flagged)


if __name__ == "__main__":
    main()
