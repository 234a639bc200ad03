"""End-to-end training check: the same small transformer with D=512 heads trained
twice from the same seed on the same synthetic data, once with
torch.nn.functional.scaled_dot_product_attention and once with
ffpa.scaled_dot_product_attention. Records both loss curves and step times
(CSV, PNG plot, summary).

Task: a fixed random grammar (each token has `branches` possible successors)
generates a block of `period` tokens, repeated to fill the sequence. The loss
is next-token cross entropy after the first block: learning the grammar takes
it from ln(vocab) to ln(branches), copying the block (attention looking
`period` tokens back) towards 0.

    FFPA_LIBRARY=build/libffpa.so python3 python/train_check.py --out bench/results/<device>/train_check

Needs a CUDA device and libffpa's cuda backend. bf16 autocast, fp32 weights.
"""

import argparse
import csv
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ffpa  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio, attention):
        super().__init__()
        self.heads = heads
        self.attention = attention
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        b, n, c = x.shape
        # [B, N, 3, H, D] straight from the projection: q, k, v are strided
        # [B, H, N, D] views of it (no copies on the ffpa side).
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        y = self.attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, vocab, seq, dim, heads, layers, mlp_ratio, attention):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, attention) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def successor_table(gen, vocab, branches, device):
    """The fixed "grammar": each token may be followed by one of `branches` tokens."""
    return torch.randint(0, vocab, (vocab, branches), generator=gen, device=device)


def copy_batch(gen, succ, batch, seq, period, device):
    """Blocks of `period` tokens from the grammar, each block repeated to fill the sequence."""
    vocab, branches = succ.shape
    picks = torch.randint(0, branches, (batch, period), generator=gen, device=device)
    token = torch.randint(0, vocab, (batch,), generator=gen, device=device)
    block = [token]
    for i in range(1, period):
        token = succ[token, picks[:, i]]
        block.append(token)
    block = torch.stack(block, dim=1)
    return block.repeat(1, (seq + period - 1) // period)[:, :seq]


def train(name, attention, args, device):
    torch.manual_seed(args.seed)
    model = Model(args.vocab, args.seq, args.dim, args.heads, args.layers, args.mlp_ratio,
                  attention).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup) *
        0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    succ = successor_table(gen, args.vocab, args.branches, device)
    period = args.period
    losses = torch.empty(args.steps, device=device)
    timer = StepTimer(args.steps, device)
    wall = time.perf_counter()
    for step in range(args.steps):
        tokens = copy_batch(gen, succ, args.batch, args.seq, period, device)
        timer.start(step)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        # Score only the repeats: predicting token t+1 for t >= period-1.
        loss = F.cross_entropy(logits[:, period - 1:].float().reshape(-1, args.vocab),
                               tokens[:, period:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        timer.stop(step)
        losses[step] = loss.detach()
    step_ms = timer.milliseconds()
    wall = time.perf_counter() - wall
    print("%-5s final loss %.4f, median step %.2f ms, wall %.1f s"
          % (name, float(losses[-20:].mean()), median(step_ms[args.skip:]), wall), flush=True)
    return losses.tolist(), step_ms


class StepTimer:
    """CUDA events on a GPU (no synchronisation per step), wall clock on the CPU."""

    def __init__(self, steps, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
            self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
        else:
            self.starts, self.ends = [0.0] * steps, [0.0] * steps

    def start(self, i):
        if self.cuda:
            self.starts[i].record()
        else:
            self.starts[i] = time.perf_counter()

    def stop(self, i):
        if self.cuda:
            self.ends[i].record()
        else:
            self.ends[i] = time.perf_counter()

    def milliseconds(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [s.elapsed_time(e) for s, e in zip(self.starts, self.ends)]
        return [1e3 * (e - s) for s, e in zip(self.starts, self.ends)]


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def time_attention(attention, args, device):
    """Median ms of one causal attention forward+backward at the training shape."""
    b, h, n, d = args.batch, args.heads, args.seq - 1, args.dim // args.heads
    qkv = torch.randn(b, n, 3, h, d, device=device, dtype=torch.bfloat16, requires_grad=True)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    timer = StepTimer(25, device)
    for i in range(25):
        timer.start(i)
        out = attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, [qkv], torch.ones_like(out))
        timer.stop(i)
    return median(timer.milliseconds()[5:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim", type=int, default=1024, help="model dim; head dim = dim / heads")
    p.add_argument("--mlp-ratio", type=int, default=4)
    p.add_argument("--seq", type=int, default=1025, help="tokens per sample (model sees seq-1)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--period", type=int, default=16, help="length of the repeated random block")
    p.add_argument("--branches", type=int, default=4, help="successors of each token")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--skip", type=int, default=20, help="warm-up steps left out of step times")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    p.add_argument("--impls", default="sdpa,ffpa", help="comma-separated subset of sdpa,ffpa")
    p.add_argument("--out", default="train_check", help="folder for the CSV, JSON and plot")
    args = p.parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False

    known = {"sdpa": getattr(F, "scaled_dot_product_attention", None),
             "ffpa": ffpa.scaled_dot_product_attention}
    impls = {name: known[name] for name in args.impls.split(",")}
    if "sdpa" in impls and impls["sdpa"] is None:
        sys.exit("this torch has no scaled_dot_product_attention; use --impls ffpa")
    attn_ms = {name: time_attention(fn, args, device) for name, fn in impls.items()}
    results = {name: train(name, fn, args, device) for name, fn in impls.items()}

    names = list(results)
    with open(os.path.join(args.out, "train_check.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + ["loss_" + n for n in names] + ["step_ms_" + n for n in names])
        for i in range(args.steps):
            w.writerow([i] + ["%.6f" % results[n][0][i] for n in names] +
                       ["%.3f" % results[n][1][i] for n in names])

    tail = max(1, args.steps // 10)
    summary = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "head_dim": args.dim // args.heads,
    }
    for n in names:
        losses, step_ms = results[n]
        summary["final_loss_" + n] = sum(losses[-tail:]) / tail
        summary["median_step_ms_" + n] = median(step_ms[args.skip:])
        summary["attention_fwd_bwd_ms_" + n] = attn_ms[n]
    if len(names) == 2:
        a, b = (results[n][0] for n in names)
        summary["max_abs_loss_diff"] = max(abs(x - y) for x, y in zip(a, b))
        summary["max_abs_loss_diff_last_10pct"] = max(abs(x - y) for x, y in
                                                      zip(a[-tail:], b[-tail:]))
    with open(os.path.join(args.out, "train_check.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    label = {"sdpa": "torch SDPA", "ffpa": "ffpa"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    steps = range(args.steps)
    for n, style in zip(names, ("-", "--")):
        ax1.plot(steps, results[n][0], label=label[n], lw=1.2, ls=style)
        ax2.plot(steps, results[n][1], lw=0.8, label="%s (median %.1f ms)"
                 % (label[n], summary["median_step_ms_" + n]))
    ax1.set_yscale("log")
    ax1.set_xlabel("step")
    ax1.set_ylabel("copy-task loss (bf16 autocast)")
    ax1.set_title("%d layers, %d heads x D=%d, seq %d, batch %d"
                  % (args.layers, args.heads, args.dim // args.heads, args.seq - 1, args.batch))
    ax1.legend()
    ax2.set_ylim(0, 2 * max(summary["median_step_ms_" + n] for n in names))
    ax2.set_xlabel("step")
    ax2.set_ylabel("step time (ms)")
    ax2.set_title(summary["device"])
    ax2.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "train_check.png"), dpi=110)


if __name__ == "__main__":
    main()
