"""GPU reliability checks (not in CI; bench/reliability-check.sh runs them).

oom:  the device nearly full; 1000 backward calls whose workspace cannot be
      allocated must each raise FFPAError with status FFPA_ERR_OUT_OF_MEMORY
      and a message, leave the device's free memory where it was, and leave
      the context usable.
big:  forward and backward with tensors of more than 2^31 elements
      (B=1, Hq=32, N=131136, D=512, bf16), checked on sampled rows at both
      ends of the sequence against float64 (scores, O, dQ) and against
      float32 reductions over all rows (dK, dV need every row's P).
Prints one line per check and "FAIL" on any failure; exit status 1 then.
"""
import argparse
import sys

import torch

import ffpa
from ffpa import _clib
from ffpa._runtime import FFPAError

failures = 0


def report(ok, text):
    global failures
    failures += 0 if ok else 1
    print(("ok   " if ok else "FAIL ") + text, flush=True)


def check_oom(calls):
    dev = torch.device("cuda")
    shape = (1, 32, 8192, 512)
    q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = ffpa.scaled_dot_product_attention(q, k, v)
    grad = torch.randn_like(out)
    # Room for torch's three gradients, not for the library's fp32 dQ workspace.
    grads_bytes = 3 * q.numel() * q.element_size()
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    hog = torch.empty(free0 - grads_bytes - (96 << 20), dtype=torch.uint8, device=dev)
    statuses, message = {}, ""

    def attempt():
        nonlocal message
        try:
            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
            statuses["ok"] = statuses.get("ok", 0) + 1
        except FFPAError as e:
            statuses[e.status] = statuses.get(e.status, 0) + 1
            message = str(e)
        except torch.cuda.OutOfMemoryError:
            statuses["torch"] = statuses.get("torch", 0) + 1

    attempt()  # torch's caching allocator keeps the gradients' blocks from here on
    torch.cuda.synchronize()
    free1 = torch.cuda.mem_get_info()[0]
    for _ in range(calls - 1):
        attempt()
    torch.cuda.synchronize()
    free2 = torch.cuda.mem_get_info()[0]
    report(statuses.get(_clib.ERR_OUT_OF_MEMORY, 0) == calls and message != "",
           "oom: %d backward calls with the device full: statuses %s; message '%s'" % (calls, statuses, message))
    report(free1 == free2, "oom: device free memory %d MiB after the first failing call, %d MiB after %d"
           % (free1 >> 20, free2 >> 20, calls))
    del hog
    torch.cuda.synchronize()
    try:
        dq, _, _ = torch.autograd.grad(out, (q, k, v), grad)
        report(bool(torch.isfinite(dq).all()), "oom: the context works again once memory is free")
    except Exception as e:  # noqa: BLE001 - any failure here is the finding
        report(False, "oom: the context after the failures: %r" % e)


def check_big(n, device="cuda", h=32):
    dev = torch.device(device)
    b, d = 1, 512
    gen = torch.Generator(device=dev).manual_seed(5)
    q, k, v = (torch.empty((b, h, n, d), device=dev, dtype=torch.bfloat16).uniform_(-1, 1, generator=gen)
               .requires_grad_() for _ in range(3))
    print("big: %d elements per tensor (2^31 = %d)" % (q.numel(), 2 ** 31), flush=True)
    out, lse = ffpa.attention_with_lse(q, k, v)
    grad = torch.empty_like(out).uniform_(-1, 1, generator=gen)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    scale = d ** -0.5
    rows = [0, 1, n // 2, n - 2, n - 1]
    for head in (0, h - 1):
        Q, K, V, G = (t[0, head].double() for t in (q.detach(), k.detach(), v.detach(), grad))
        O = out[0, head].double()
        s = (Q[rows] @ K.T) * scale                        # [rows, n]
        ref_lse = torch.logsumexp(s, dim=1)
        p = torch.exp(s - ref_lse[:, None])
        ref_o = p @ V
        dp = G[rows] @ V.T
        delta = (G[rows] * ref_o).sum(1)
        ref_dq = ((p * (dp - delta[:, None])) @ K) * scale

        def err(x, ref):
            return float((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

        e_o, e_lse = err(out[0, head, rows], ref_o), err(lse[0, head, rows], ref_lse)
        e_dq = err(dq[0, head, rows], ref_dq)
        # dK, dV at sampled key rows need P over every query row: fp32, in chunks.
        cols = rows
        acc_dk = torch.zeros(len(cols), d, device=dev, dtype=torch.float64)
        acc_dv = torch.zeros_like(acc_dk)
        Kc = K[cols].float()
        Vc = V[cols].float()
        delta_all = (G.float() * O.float()).sum(1)
        lse_all = lse[0, head].float()
        for i0 in range(0, n, 16384):
            Qi = Q[i0:i0 + 16384].float()
            Gi = G[i0:i0 + 16384].float()
            pi = torch.exp(Qi @ Kc.T * scale - lse_all[i0:i0 + 16384, None])   # [chunk, cols]
            dpi = Gi @ Vc.T
            dsi = pi * (dpi - delta_all[i0:i0 + 16384, None])
            acc_dk += (dsi.T @ Qi).double() * scale
            acc_dv += (pi.T @ Gi).double()
        e_dk, e_dv = err(dk[0, head, cols], acc_dk), err(dv[0, head, cols], acc_dv)
        worst = max(e_o, e_lse, e_dq, e_dk, e_dv)
        report(worst < 3e-2, "big: head %d rows %s: relative error O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e"
               % (head, rows, e_o, e_lse, e_dq, e_dk, e_dv))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checks", nargs="*", default=["oom", "big"])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--n", type=int, default=131136)
    ap.add_argument("--device", default="cuda", help="big: cpu for a dry run of the check at small --n")
    ap.add_argument("--heads", type=int, default=32)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    if "oom" in a.checks:
        check_oom(a.calls)
        torch.cuda.empty_cache()
    if "big" in a.checks:
        check_big(a.n, a.device, a.heads)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
