"""GPU reliability checks (not in CI; the reliability step of bench/gpu.sh runs them).

oom:  the device nearly full; 1000 backward calls whose workspace cannot be
      allocated: through the C API with libffpa's own workspace each must
      return FFPA_ERR_OUT_OF_MEMORY with a message; through the binding
      (PyTorch allocates the workspace) each raises PyTorch's
      torch.cuda.OutOfMemoryError. Either way the device's free memory stays
      where it was and the context works once memory is free.
big:  forward and backward with tensors of more than 2^31 elements
      (B=1, Hq=32, N=131136, D=512, bf16), checked on sampled rows at both
      ends of the sequence against float64 (scores, O, dQ) and against
      float32 reductions over all rows (dK, dV need every row's P).
Prints one line per check and "FAIL" on any failure; exit status 1 then.
"""
import argparse
import ctypes
import sys

import torch

import ffpa
from ffpa import _clib, _runtime
from ffpa._runtime import FFPAError

failures = 0


def report(ok, text):
    global failures
    failures += 0 if ok else 1
    print(("ok   " if ok else "FAIL ") + text, flush=True)


def _library_backward(q, k, v, out, lse, grad, dq, dk, dv):
    """ffpa_backward straight through the C API with no workspace set, so that
    libffpa allocates its own (the binding always lends a PyTorch buffer)."""
    ctx = _runtime.context_for(q.device)
    descs = [_runtime.describe(t, name) for t, name in
             ((grad, "dout"), (q, "q"), (k, "k"), (v, "v"), (out, "out"))]
    descs.append(_runtime.describe_lse(lse, False))
    descs += [_runtime.describe(t, name) for t, name in ((dq, "dq"), (dk, "dk"), (dv, "dv"))]
    opt = _runtime.make_options(False, q.shape[-1] ** -0.5, 0.0, 0, None, None, None)
    with _runtime._call(ctx) as lib:
        status = lib.ffpa_backward(ctx.handle, *[ctypes.byref(d) for d in descs], ctypes.byref(opt))
        return status, lib.ffpa_last_error(ctx.handle).decode()


def check_oom(calls):
    """Device memory full but for a margin that holds no dQ workspace, twice:
    libffpa's own workspace allocation (FFPA_ERR_OUT_OF_MEMORY expected) and
    the binding's (PyTorch allocates the workspace: torch.cuda.OutOfMemoryError,
    as for any PyTorch op). Either way nothing may leak, and the context must
    work once memory is free."""
    dev = torch.device("cuda")
    shape = (1, 32, 8192, 512)
    q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out_graph = ffpa.scaled_dot_product_attention(q, k, v)  # the binding's backward, retained
    out, lse = ffpa.attention_with_lse(q, k, v)
    out, lse = out.detach(), lse.detach()
    grad = torch.randn_like(out)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    dets = [t.detach() for t in (q, k, v)]
    margin = 96 << 20  # < the fp32 dQ workspace of 512 MiB
    for path in ("library", "binding"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free0 = torch.cuda.mem_get_info()[0]
        room = 3 * q.numel() * q.element_size() if path == "binding" else 0  # torch's own dq, dk, dv
        hog = torch.empty(free0 - room - margin, dtype=torch.uint8, device=dev)
        statuses, message = {}, ""

        def attempt():
            nonlocal message
            try:
                if path == "library":
                    status, text = _library_backward(*dets, out, lse, grad, dq, dk, dv)
                else:
                    torch.autograd.grad(out_graph, (q, k, v), grad, retain_graph=True)
                    status, text = _clib.OK, ""
            except FFPAError as e:
                status, text = e.status, str(e)
            except torch.cuda.OutOfMemoryError as e:
                status, text = "torch.cuda.OutOfMemoryError", str(e).split("\n")[0][:80]
            statuses[status] = statuses.get(status, 0) + 1
            message = text or message

        attempt()  # the first failure may leave PyTorch's cache warmer; measure from here
        torch.cuda.synchronize()
        free1 = torch.cuda.mem_get_info()[0]
        for _ in range(calls - 1):
            attempt()
        torch.cuda.synchronize()
        free2 = torch.cuda.mem_get_info()[0]
        expected = _clib.ERR_OUT_OF_MEMORY if path == "library" else "torch.cuda.OutOfMemoryError"
        report(statuses.get(expected, 0) == calls and message != "",
               "oom %s: %d backward calls with the device full: statuses %s; message '%s'"
               % (path, calls, statuses, message))
        report(free1 == free2, "oom %s: device free memory %d MiB after the first failing call, %d MiB after %d"
               % (path, free1 >> 20, free2 >> 20, calls))
        del hog
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the hog's block back to the device, not just to PyTorch's cache
        try:
            if path == "library":
                status, text = _library_backward(*dets, out, lse, grad, dq, dk, dv)
                torch.cuda.synchronize()
                ok = status == _clib.OK and bool(torch.isfinite(dq).all())
            else:
                g, _, _ = torch.autograd.grad(out_graph, (q, k, v), grad, retain_graph=True)
                ok, text = bool(torch.isfinite(g).all()), ""
            report(ok, "oom %s: the context works again once memory is free %s" % (path, text))
        except Exception as e:  # noqa: BLE001 - any failure here is the finding
            report(False, "oom %s: the context after the failures: %r" % (path, e))


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
