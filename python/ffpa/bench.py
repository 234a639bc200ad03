"""ffpa beside PyTorch SDPA on your machine: python -m ffpa.bench

    python -m ffpa.bench                         # a few large-head-dim shapes on the GPU
    python -m ffpa.bench --shape 2,16,16,4096,4096,512 --causal --backward
    python -m ffpa.bench --device cpu --shape 1,4,4,256,256,64 --csv out.csv --plot out.png

Each shape is B,H,Hkv,Nq,Nkv,D[,Dv]; both run the same random bf16 inputs
(fp32 on the cpu), timed as the median of --reps calls after warm-up (CUDA
events on a GPU). Prints a progress line per run and a table (ms, TFLOP/s,
speedup), writes --csv, and with matplotlib installed draws --plot. TFLOP/s
counts 4*B*H*Nq*Nkv*(D+Dv)/2 per forward, half when causal, and 3.5x that
for forward + backward (the backward counted as 2.5 forwards). SDPA rows that fail (out of memory at large D) say so.
"""
import argparse
import csv
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import ffpa

DEFAULT_SHAPES = ["1,16,16,4096,4096,256", "1,16,16,4096,4096,512", "1,8,8,4096,4096,1024",
                  "4,16,4,2048,2048,512"]


def parse_shape(text):
    parts = [int(x) for x in text.split(",")]
    if len(parts) not in (6, 7) or min(parts) < 1 or parts[1] % parts[2]:
        raise argparse.ArgumentTypeError(
            "shape '%s': expected B,H,Hkv,Nq,Nkv,D[,Dv] (sizes >= 1, H a multiple of Hkv)" % text)
    return tuple(parts) if len(parts) == 7 else tuple(parts) + (parts[5],)


def timed(fn, device, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def sdpa(q, k, v, causal):
    if q.shape[1] != k.shape[1]:  # GQA without enable_gqa (older PyTorch): repeat K/V
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # PyTorch < 2.0: the math path
    if causal:
        nq, nkv = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nkv, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def run(shape, args, device):
    b, h, hkv, nq, nkv, d, dv = shape
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.empty(b, h, nq, d, device=device, dtype=dtype).uniform_(-1, 1, generator=gen)
    k = torch.empty(b, hkv, nkv, d, device=device, dtype=dtype).uniform_(-1, 1, generator=gen)
    v = torch.empty(b, hkv, nkv, dv, device=device, dtype=dtype).uniform_(-1, 1, generator=gen)
    causal = args.causal and nq == nkv
    flops = 2.0 * b * h * nq * nkv * (d + dv) * (0.5 if causal else 1.0) * (3.5 if args.backward else 1.0)
    rows = []
    for name, fn in (("ffpa", lambda *t: ffpa.scaled_dot_product_attention(*t, is_causal=causal,
                                                                            enable_gqa=h != hkv)),
                     ("sdpa", lambda *t: sdpa(*t, causal))):
        print("  %s %s ..." % (name, ",".join(map(str, shape))), end="", flush=True, file=sys.stderr)
        try:
            if args.backward:
                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                grad = torch.ones(b, h, nq, dv, device=device, dtype=dtype)

                def step():
                    out = fn(qg, kg, vg)
                    torch.autograd.grad(out, (qg, kg, vg), grad)
            else:
                def step():
                    with torch.no_grad():
                        fn(q, k, v)
            ms = timed(step, device, args.warmup, args.reps)
            rows.append((name, ms, flops / ms * 1e-9))
            print(" %.3f ms" % ms, file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - a failed row is reported, the others still run
            rows.append((name, float("nan"), float("nan")))
            print(" failed: %s" % str(e).splitlines()[0][:100], file=sys.stderr)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return causal, rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ffpa.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", type=parse_shape, help="B,H,Hkv,Nq,Nkv,D[,Dv] (repeatable)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backward", action="store_true", help="time forward + backward")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--csv", help="write the table here")
    ap.add_argument("--plot", help="draw TFLOP/s per shape here (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be >= 1 and --warmup >= 0")
    device = torch.device(args.device)
    shapes = args.shape or [parse_shape(s) for s in DEFAULT_SHAPES]
    print("# ffpa %s (libffpa %s) beside PyTorch %s on %s" % (
        ffpa.__version__, ffpa.library_version(), torch.__version__,
        torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"))
    table = []
    for shape in shapes:
        causal, rows = run(shape, args, device)
        (_, f_ms, f_tf), (_, s_ms, s_tf) = rows
        table.append((",".join(map(str, shape)) + (",c" if causal else ""), f_ms, f_tf, s_ms, s_tf,
                      s_ms / f_ms if f_ms == f_ms and s_ms == s_ms else float("nan")))
    print("%-28s %10s %9s %10s %9s %8s" % ("shape", "ffpa ms", "TFLOP/s", "sdpa ms", "TFLOP/s", "speedup"))
    for r in table:
        print("%-28s %10.3f %9.1f %10.3f %9.1f %7.2fx" % r)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["shape", "ffpa_ms", "ffpa_tflops", "sdpa_ms", "sdpa_tflops", "speedup"])
            w.writerows(table)
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("# --plot: matplotlib is not installed; no plot", file=sys.stderr)
        else:
            x = range(len(table))
            plt.figure(figsize=(max(6, len(table) * 1.2), 4))
            plt.bar([i - 0.2 for i in x], [r[2] for r in table], 0.4, label="ffpa")
            plt.bar([i + 0.2 for i in x], [r[4] for r in table], 0.4, label="PyTorch SDPA")
            plt.xticks(list(x), [r[0] for r in table], rotation=30, ha="right", fontsize=7)
            plt.ylabel("TFLOP/s")
            plt.legend()
            plt.tight_layout()
            plt.savefig(args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
