#!/usr/bin/env python3
"""Instruction mix of each forward kernel in a `cuobjdump -sass` listing:
HMMA, LDSM, other instructions per HMMA, barriers, branches, local memory.

  python3 bench/py/sass_mix.py FILE.sass
"""
import re
import sys
from collections import Counter

KEYS = ["HMMA", "LDSM", "LDGSTS", "BAR", "BRA", "MUFU", "FFMA", "FMUL", "FMNMX", "F2FP",
        "SHFL", "IMAD", "IADD3", "LOP3", "LDL", "STL", "ISETP", "FSETP", "FSEL", "SEL", "MOV"]


def main(path):
    func, mix = None, {}
    for line in open(path, errors="replace"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            func = m.group(1)
            mix[func] = Counter()
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
        if m and func:
            op = m.group(2).split(".")[0]
            mix[func][op] += 1
            mix[func]["_total"] += 1
    for func, c in mix.items():
        dv = re.search(r"Li(\d+)ELi(\d+)ELi(\d+)E", func)
        name = f"Dv{dv.group(1)}" if dv else func[:40]
        h = max(c["HMMA"], 1)
        parts = " ".join(f"{k}={c[k]}" for k in KEYS if c[k])
        print(f"{name}: total={c['_total']} per-HMMA={c['_total'] / h:.2f} {parts}")


if __name__ == "__main__":
    main(sys.argv[1])
