#!/usr/bin/env python3
"""Times PyTorch SDPA on the shapes ffpa-bench ran, in the same session on the
GPU machine, and prints them side by side.

  python3 bench/sdpa_bench.py --merge ffpa.csv [--csv sdpa.csv] [SHAPE ...]

SHAPE is ffpa-bench's B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags] (flags c = causal; other
flags are ignored: SDPA runs the plain problem). Without SHAPEs the shapes of
--merge are used. Same FLOP formula as ffpa-bench: 4*B*Hq*Nq*Nkv*(Dqk+Dv)/2,
half for causal. Timing: CUDA events, 3 warm-up, median of 20.
"""
import argparse
import csv
import sys

import torch
import torch.nn.functional as F


def parse(shape):
    parts = shape.split(",")
    b, hq, hkv, nq, nkv, dqk, dv = (int(x) for x in parts[:7])
    flags = parts[7] if len(parts) > 7 else ""
    return b, hq, hkv, nq, nkv, dqk, dv, "c" in flags


def time_sdpa(shape, reps=20):
    b, hq, hkv, nq, nkv, dqk, dv, causal = parse(shape)
    dev = "cuda"
    q = torch.rand(b, hq, nq, dqk, device=dev, dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(b, hkv, nkv, dqk, device=dev, dtype=torch.bfloat16) * 2 - 1
    v = torch.rand(b, hkv, nkv, dv, device=dev, dtype=torch.bfloat16) * 2 - 1
    kw = {"is_causal": causal}
    if hq != hkv:
        kw["enable_gqa"] = True
    if causal and nq != nkv:
        # SDPA's is_causal is top-left aligned; ours is bottom-right.
        i = torch.arange(nq, device=dev)[:, None]
        j = torch.arange(nkv, device=dev)[None, :]
        kw = {"attn_mask": j <= i + (nkv - nq)}
        if hq != hkv:
            kw["enable_gqa"] = True
    try:
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, **kw)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            F.scaled_dot_product_attention(q, k, v, **kw)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        ms = times[len(times) // 2]
    except Exception as ex:  # OOM or unsupported: report, keep going
        print(f"# sdpa {shape}: {type(ex).__name__}: {ex}".splitlines()[0], file=sys.stderr)
        return float("nan"), float("nan")
    flops = 2.0 * b * hq * nq * nkv * (dqk + dv) * (0.5 if causal else 1.0)
    return ms, flops / (ms * 1e-3) * 1e-12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*")
    ap.add_argument("--merge", help="ffpa-bench CSV to put beside SDPA")
    ap.add_argument("--csv", help="write the merged table here")
    args = ap.parse_args()
    ours = {}
    if args.merge:
        with open(args.merge) as f:
            for row in csv.DictReader(f):
                ours[row["shape"]] = row
    shapes = args.shapes or list(ours)
    print(f"# device {torch.cuda.get_device_name()} torch {torch.__version__}")
    rows = []
    for s in shapes:
        ms, tf = time_sdpa(s)
        o = ours.get(s, {})
        ot = float(o.get("tflops", "nan") or "nan")
        om = float(o.get("ms", "nan") or "nan")
        rows.append((s, o.get("path", "-"), om, ot, ms, tf, ot / tf if tf == tf and tf > 0 else float("nan")))
    hdr = f"{'shape':34} {'path':15} {'ffpa ms':>9} {'ffpa TF':>8} {'sdpa ms':>9} {'sdpa TF':>8} {'ratio':>6}"
    print(hdr)
    for r in rows:
        print(f"{r[0]:34} {r[1]:15} {r[2]:9.3f} {r[3]:8.1f} {r[4]:9.3f} {r[5]:8.1f} {r[6]:6.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["shape", "path", "ffpa_ms", "ffpa_tflops", "sdpa_ms", "sdpa_tflops", "ratio"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
