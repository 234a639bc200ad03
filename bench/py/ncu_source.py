#!/usr/bin/env python3
"""Where a kernel's instructions and stalls go, by source line: reads the CSV of
`ncu -i REPORT --page source --csv --print-source cuda,sass` (a build with
-lineinfo; gpu.sh's profile step with PROFILE_SOURCE=1 writes it) and prints the
lines with the most warp-stall samples or executed instructions, instructions
per UNIT (e.g. the number of warp x query-tile iterations, to compare kernels
per tile).

  python3 bench/py/ncu_source.py FILE.csv[.gz] [--by stalls|insts] [--unit N] [--top N]
"""
import argparse
import collections
import csv
import gzip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--by", choices=["stalls", "insts"], default="insts")
    ap.add_argument("--unit", type=float, default=1.0)
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt", errors="replace") as f:
        rows = list(csv.reader(f))
    stalls, insts, text = collections.Counter(), collections.Counter(), {}
    cols, where = None, None
    for r in rows:
        if not r:
            continue
        if r[0] == "File Path":
            where = r[1].rsplit("/", 1)[-1]
        elif r[0] == "Line No":  # the header of a file's table
            cols = {}
            for i, name in enumerate(r):
                cols.setdefault(name, i)  # "Source" twice: the source text's column
        elif r[0] not in ("", "Function Name") and cols and where:
            try:  # a source line row (its SASS rows follow with an empty first field)
                key = (where, int(r[0]))
                stalls[key] += float(r[cols["Warp Stall Sampling (All Samples)"]] or 0)
                insts[key] += float(r[cols["Instructions Executed"]] or 0)
                text[key] = r[1].strip()[:80]
            except (ValueError, KeyError, IndexError):
                continue
    total_s, total_i = sum(stalls.values()) or 1, sum(insts.values())
    print(f"instructions executed {total_i / a.unit:.0f} per unit, stall samples {total_s:.0f}")
    order = stalls if a.by == "stalls" else insts
    for key, _ in order.most_common(a.top):
        print(f"{100 * stalls[key] / total_s:5.1f}% stalls {insts[key] / a.unit:10.1f} insts  "
              f"{key[0]}:{key[1]}  {text[key]}")


if __name__ == "__main__":
    main()
