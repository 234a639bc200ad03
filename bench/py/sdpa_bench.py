#!/usr/bin/env python3
"""Times PyTorch SDPA on the shapes ffpa-bench ran, in the same session on the
GPU machine, and prints them side by side.

  python3 bench/py/sdpa_bench.py --merge ffpa.csv [--csv sdpa.csv] [--backward] [SHAPE ...]

SHAPE is ffpa-bench's B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags] (flags c = causal; other
flags are ignored: SDPA runs the plain problem). Without SHAPEs the shapes of
--merge are used. Same FLOP formula as ffpa-bench: 4*B*Hq*Nq*Nkv*(Dqk+Dv)/2,
half for causal. Timing: CUDA events, 3 warm-up, median of 20.

--gemm: also prints the GEMM ceiling of this run (a bf16 8192^3 torch.matmul,
cuBLAS), the tensor-core rate the attention kernels are measured against.

--sdpa-backend flash|efficient|cudnn|math: SDPA forced to one backend
(torch.nn.attention.sdpa_kernel); flash is FlashAttention-2, the peer of the
generic mma.sync kernels (bench/gpu.sh fa2). A shape the backend does not
take (flash: D > 256) prints nan. Default auto: SDPA's own choice.

--backward (with ffpa-bench --backward's CSV): also times the SDPA backward,
torch.autograd.grad of the output w.r.t. q, k, v for a random grad_output on
a graph kept from one untimed forward (only the backward is timed), FLOPs
2.5x the forward's, beside ffpa's rows with pass=bwd. The table and --csv
then get a pass column (fwd|bwd); without --backward they are as before.
"""
import argparse
import contextlib
import csv
import sys

import torch
import torch.nn.functional as F


def parse(shape):
    parts = shape.split(",")
    b, hq, hkv, nq, nkv, dqk, dv = (int(x) for x in parts[:7])
    flags = parts[7] if len(parts) > 7 else ""
    return b, hq, hkv, nq, nkv, dqk, dv, "c" in flags


def inputs(shape, grad=False):
    """q, k, v (uniform in [-1, 1), bf16), SDPA's keyword arguments, forward FLOPs."""
    b, hq, hkv, nq, nkv, dqk, dv, causal = parse(shape)
    dev = "cuda"
    q = torch.rand(b, hq, nq, dqk, device=dev, dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(b, hkv, nkv, dqk, device=dev, dtype=torch.bfloat16) * 2 - 1
    v = torch.rand(b, hkv, nkv, dv, device=dev, dtype=torch.bfloat16) * 2 - 1
    if grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
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
    flops = 2.0 * b * hq * nq * nkv * (dqk + dv) * (0.5 if causal else 1.0)
    return q, k, v, kw, flops


def median_ms(fn, reps):
    """3 warm-up calls, then the median over reps of fn timed by CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def time_sdpa(shape, reps=20):
    try:
        q, k, v, kw, flops = inputs(shape)
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, **kw), reps)
    except Exception as ex:  # OOM or unsupported: report, keep going
        print(f"# sdpa {shape}: {type(ex).__name__}: {ex}".splitlines()[0], file=sys.stderr)
        return float("nan"), float("nan")
    return ms, flops / (ms * 1e-3) * 1e-12


def time_sdpa_backward(shape, reps=20):
    """Backward only: the graph of one untimed forward is kept (retain_graph)
    and differentiated again each call. FLOPs 2.5x the forward's."""
    try:
        q, k, v, kw, flops = inputs(shape, grad=True)
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        dout = torch.rand_like(out) * 2 - 1
        ms = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), reps)
    except Exception as ex:  # OOM or unsupported: report, keep going
        print(f"# sdpa bwd {shape}: {type(ex).__name__}: {ex}".splitlines()[0], file=sys.stderr)
        return float("nan"), float("nan")
    return ms, 2.5 * flops / (ms * 1e-3) * 1e-12


def gemm_tflops(n=8192, reps=20):
    """bf16 n x n x n matmul through cuBLAS: TFLOP/s (median)."""
    a = torch.rand(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.rand(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(a, b), reps)
    return 2.0 * n ** 3 / (ms * 1e-3) * 1e-12


def sdpa_backend(name):
    """The context that forces SDPA to backend `name` (auto: none)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[name])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*")
    ap.add_argument("--merge", help="ffpa-bench CSV to put beside SDPA")
    ap.add_argument("--csv", help="write the merged table here")
    ap.add_argument("--backward", action="store_true",
                    help="also time the SDPA backward, beside ffpa's pass=bwd rows")
    ap.add_argument("--gemm", action="store_true", help="also print the bf16 GEMM ceiling of this run")
    ap.add_argument("--sdpa-backend", default="auto", choices=["auto", "flash", "efficient", "cudnn", "math"],
                    help="force SDPA to one backend (flash = FlashAttention-2)")
    args = ap.parse_args()
    if args.gemm:
        print(f"gemm ceiling: {gemm_tflops():.0f} TFLOP/s (bf16 8192^3 matmul)")
    # ffpa-bench's CSV: one row per shape, or with --backward one per shape and
    # pass (fwd, bwd); a CSV without the pass column holds forward rows only.
    ours = {}
    if args.merge:
        with open(args.merge) as f:
            for row in csv.DictReader(f):
                ours[(row["shape"], row.get("pass") or "fwd")] = row
    shapes = args.shapes or list(dict.fromkeys(s for s, _ in ours))
    passes = ("fwd", "bwd") if args.backward else ("fwd",)
    print(f"# device {torch.cuda.get_device_name()} torch {torch.__version__} sdpa backend {args.sdpa_backend}")
    rows = []
    for s in shapes:
        for p in passes:
            with sdpa_backend(args.sdpa_backend):
                ms, tf = time_sdpa(s) if p == "fwd" else time_sdpa_backward(s)
            o = ours.get((s, p), {})
            ot = float(o.get("tflops", "nan") or "nan")
            om = float(o.get("ms", "nan") or "nan")
            row = (s, o.get("path", "-"), om, ot, ms, tf, ot / tf if tf == tf and tf > 0 else float("nan"))
            rows.append(row + (p,) if args.backward else row)
    pass_hdr = f" {'pass':4}" if args.backward else ""
    hdr = (f"{'shape':34}{pass_hdr} {'path':15} {'ffpa ms':>9} {'ffpa TF':>8} {'sdpa ms':>9} {'sdpa TF':>8}"
           f" {'ratio':>6}")
    print(hdr)
    for r in rows:
        pass_col = f" {r[7]:4}" if args.backward else ""
        print(f"{r[0]:34}{pass_col} {r[1]:15} {r[2]:9.3f} {r[3]:8.1f} {r[4]:9.3f} {r[5]:8.1f} {r[6]:6.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            cols = ["shape", "path", "ffpa_ms", "ffpa_tflops", "sdpa_ms", "sdpa_tflops", "ratio"]
            w.writerow(cols + ["pass"] if args.backward else cols)
            w.writerows(rows)


if __name__ == "__main__":
    main()
