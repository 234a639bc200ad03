#!/usr/bin/env python3
"""Merges the CSVs of the grid step of bench/gpu.sh into the README-style grid and a plot.

  python3 bench/py/plot_grid.py --tuned ffpa_tuned.csv --untuned ffpa_untuned.csv \
      --sdpa sdpa.csv --out DIR

Inputs: ffpa-bench CSVs (shape,backend,device,dtype,path,ms,tflops,check) with
and without the tuning table, and bench/py/sdpa_bench.py's merged CSV
(shape,...,sdpa_tflops). Writes DIR/grid.csv (one row per shape, every
figure), DIR/grid.md (head dims across; rows SDPA, ffpa per kernel path,
speedup, and the table-vs-heuristics ratio) and DIR/grid.png (TFLOP/s against
D per kernel path and SDPA). Prints grid.md and the A/B verdict. Only the
PNG needs matplotlib; without it the rest is still written.
"""
import argparse
import csv
import math
import os

# A/B differences within this fraction are measurement noise (same plan twice
# differs by about this much on the H100).
NOISE = 0.03


def read(path, key="shape"):
    with open(path) as f:
        return {row[key]: row for row in csv.DictReader(f)}


def num(x):
    try:
        v = float(x)
        return v if math.isfinite(v) else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def variant(shape):
    p = shape.split(",")
    b, hq, hkv, nq, nkv, dqk, dv = (int(x) for x in p[:7])
    flags = p[7] if len(p) > 7 else ""
    if nq <= 16:
        kind = "decode"
    elif "c" in flags:
        kind = "causal"
    elif hq != hkv:
        kind = "gqa"
    else:
        kind = "dense"
    return kind, max(dqk, dv), b, hq, hkv, nq, nkv


def title(kind, b, hq, hkv, nq, nkv):
    if kind == "decode":
        return f"decode: B={b}, Hq={hq}, Nq={nq}, Nkv={nkv}"
    extra = {"causal": ", causal", "gqa": f", GQA Hkv={hkv}", "dense": ""}[kind]
    return f"{kind}: B={b}, Hq={hq}, N={nq}{extra}"


def fmt(v, spec=".0f"):
    return "-" if v != v else format(v, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuned", required=True)
    ap.add_argument("--untuned", required=True)
    ap.add_argument("--sdpa", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tuned, untuned, sdpa = read(args.tuned), read(args.untuned), read(args.sdpa)
    device = next(iter(tuned.values()))["device"] if tuned else "?"

    rows = []
    for shape, t in tuned.items():
        kind, d, b, hq, hkv, nq, nkv = variant(shape)
        u = untuned.get(shape, {})
        s = sdpa.get(shape, {})
        tt, ut, st = num(t["tflops"]), num(u.get("tflops")), num(s.get("sdpa_tflops"))
        rows.append({
            "shape": shape, "variant": kind, "d": d, "b": b, "hq": hq, "hkv": hkv, "nq": nq, "nkv": nkv,
            "path": t["path"], "sdpa_tflops": st, "ffpa_tflops": tt, "ffpa_untuned_tflops": ut,
            "ffpa_ms": num(t["ms"]), "ffpa_untuned_ms": num(u.get("ms")), "sdpa_ms": num(s.get("sdpa_ms")),
            "speedup_vs_sdpa": tt / st if st > 0 else float("nan"),
            "table_vs_heuristics": tt / ut if ut > 0 else float("nan"),
        })
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "grid.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})

    # README-style tables: one per problem family with more than one head dim.
    groups = {}
    for r in rows:
        groups.setdefault((r["variant"], r["b"], r["hq"], r["hkv"], r["nq"], r["nkv"]), []).append(r)
    md = [f"# ffpa vs PyTorch SDPA, bf16 forward, {device}", "",
          "TFLOP/s (4·B·Hq·Nq·Nkv·D, half for causal); median of the repetitions. "
          "'table/heuristics' is ffpa with the tuning table over ffpa with FFPA_TUNING=0.", ""]
    for key, grp in groups.items():
        if len(grp) < 3:
            continue
        grp.sort(key=lambda r: r["d"])
        ds = [r["d"] for r in grp]
        md.append(f"## {title(*key)}")
        md.append("")
        md.append("| | " + " | ".join(f"D={d}" for d in ds) + " |")
        md.append("|---|" + "---|" * len(ds))
        md.append("| SDPA TFLOP/s | " + " | ".join(fmt(r["sdpa_tflops"]) for r in grp) + " |")
        for path in sorted({r["path"] for r in grp}):
            md.append(f"| ffpa {path} TFLOP/s | "
                      + " | ".join(fmt(r["ffpa_tflops"]) if r["path"] == path else "" for r in grp) + " |")
        md.append("| speedup vs SDPA | " + " | ".join(fmt(r["speedup_vs_sdpa"], ".2f") + "x" for r in grp) + " |")
        md.append("| ffpa heuristics TFLOP/s | " + " | ".join(fmt(r["ffpa_untuned_tflops"]) for r in grp) + " |")
        md.append("| table/heuristics | " + " | ".join(fmt(r["table_vs_heuristics"], ".3f") for r in grp) + " |")
        md.append("")
    others = [r for key, grp in groups.items() if len(grp) < 3 for r in grp]
    if others:
        md.append("## Off-grid shapes")
        md.append("")
        md.append("| shape | path | SDPA TFLOP/s | ffpa TFLOP/s | heuristics TFLOP/s | table/heuristics |")
        md.append("|---|---|---|---|---|---|")
        for r in others:
            md.append(f"| {r['shape']} | {r['path']} | {fmt(r['sdpa_tflops'])} | {fmt(r['ffpa_tflops'])} | "
                      f"{fmt(r['ffpa_untuned_tflops'])} | {fmt(r['table_vs_heuristics'], '.3f')} |")
        md.append("")
    ratios = [r for r in rows if r["table_vs_heuristics"] == r["table_vs_heuristics"]]
    faster = [r for r in ratios if r["table_vs_heuristics"] > 1 + NOISE]
    slower = [r for r in ratios if r["table_vs_heuristics"] < 1 - NOISE]
    md.append(f"## Table vs heuristics (A/B, noise band ±{NOISE:.0%})")
    md.append("")
    md.append(f"{len(ratios)} shapes: {len(faster)} faster with the table, {len(slower)} slower, "
              f"{len(ratios) - len(faster) - len(slower)} within noise; "
              f"geometric mean {math.exp(sum(math.log(r['table_vs_heuristics']) for r in ratios) / max(1, len(ratios))):.3f}.")
    for label, lst in (("faster", faster), ("slower", slower)):
        for r in lst:
            md.append(f"- {label}: {r['shape']} ({r['path']}): {fmt(r['ffpa_untuned_tflops'], '.1f')} -> "
                      f"{fmt(r['ffpa_tflops'], '.1f')} TFLOP/s (x{r['table_vs_heuristics']:.3f})")
    md.append("")
    text = "\n".join(md)
    with open(os.path.join(args.out, "grid.md"), "w") as f:
        f.write(text)
    print(text)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# matplotlib missing: no grid.png")
        return
    fams = [(k, sorted(g, key=lambda r: r["d"])) for k, g in groups.items() if len(g) >= 3]
    cols = min(4, len(fams))
    nrows = (len(fams) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 4.0 * nrows), squeeze=False)
    for ax in axes.flat[len(fams):]:
        ax.axis("off")
    markers = {"small-d": "o", "split-d": "s", "decode/small-d": "^", "decode/split-d": "v"}
    for ax, (key, grp) in zip(axes.flat, fams):
        ds = [r["d"] for r in grp]
        ax.plot(ds, [r["sdpa_tflops"] for r in grp], "k--", marker="x", label="PyTorch SDPA")
        ax.plot(ds, [r["ffpa_untuned_tflops"] for r in grp], color="0.6", lw=1, marker=".",
                label="ffpa, heuristics")
        for path in sorted({r["path"] for r in grp}):
            pts = [(r["d"], r["ffpa_tflops"]) for r in grp if r["path"] == path]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers.get(path, "o"), lw=2,
                    label=f"ffpa {path}, tuned")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ds)
        ax.set_xticklabels([str(d) for d in ds], fontsize=7, rotation=45)
        ax.minorticks_off()
        ax.set_xlabel("head dim D")
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.set_title(title(*key), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"bf16 forward, {device}", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "grid.png"), dpi=110)
    print(f"# wrote {os.path.join(args.out, 'grid.png')}")


if __name__ == "__main__":
    main()
