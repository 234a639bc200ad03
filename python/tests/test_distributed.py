"""Context parallelism (ffpa.distributed) in 2 and 4 processes on the gloo
backend with libffpa's cpu backend, against one process's attention over the
whole sequence: forward and gradients, ring and all-gather variants, causal
(zigzag and contiguous layouts) and not, GQA, lengths that do not divide
evenly (one rank empty), float32 and bfloat16. Also ffpa.merge_partials
against the attention over all keys, and the arguments it refuses."""

import os
import tempfile
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import ffpa
import ffpa.distributed as cp

# (name, variant, B, Hq, Hkv, N, Dqk, Dv, causal, layout, dtype)
CASES = [
    ("ring causal zigzag GQA", "ring", 2, 4, 2, 37, 24, 16, True, None, torch.float32),
    ("ring not causal", "ring", 1, 2, 2, 29, 40, 40, False, None, torch.float32),
    ("ring causal contiguous", "ring", 1, 2, 1, 23, 16, 24, True, "contiguous", torch.float32),
    ("ring causal bf16", "ring", 1, 2, 2, 45, 64, 64, True, None, torch.bfloat16),
    ("all-gather causal zigzag MQA", "allgather", 1, 4, 1, 37, 24, 16, True, None, torch.float32),
    ("all-gather not causal", "allgather", 2, 2, 2, 19, 8, 8, False, None, torch.float32),
    ("ring: fewer rows than pieces", "ring", 1, 2, 2, 5, 16, 16, True, None, torch.float32),
    ("ring not causal, a rank empty", "ring", 1, 2, 2, 3, 16, 16, False, "contiguous", torch.float32),
]
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2}


def _inputs(case):
    _, _, b, hq, hkv, n, dqk, dv, _, _, dtype = case
    gen = torch.Generator().manual_seed(n * 131 + hq)
    q = torch.randn(b, hq, n, dqk, generator=gen).to(dtype)
    k = torch.randn(b, hkv, n, dqk, generator=gen).to(dtype)
    v = torch.randn(b, hkv, n, dv, generator=gen).to(dtype)
    dout = torch.randn(b, hq, n, dv, generator=gen).to(dtype)
    return q, k, v, dout


def _reference(case):
    """One process over the whole sequence: out and grads in float32 (from float64 math)."""
    q, k, v, dout = (t.double().requires_grad_() for t in _inputs(case))
    causal = case[8]
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ kk.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, -1) @ vv
    out.backward(dout.detach())
    return out.detach(), q.grad, k.grad, v.grad


def _worker(rank, world, init_file, result_file):
    try:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
        errors = []
        for case in CASES:
            name, variant, _, _, _, n, _, _, causal, layout, dtype = case
            q, k, v, dout = _inputs(case)
            ql, kl, vl, dl = (cp.shard(t, causal=causal, layout=layout) for t in (q, k, v, dout))
            ql, kl, vl = (t.clone().requires_grad_() for t in (ql, kl, vl))
            fn = cp.ring_attention if variant == "ring" else cp.allgather_kv_attention
            out_l, lse_l = fn(ql, kl, vl, causal=causal, layout=layout, return_lse=True)
            out_l.backward(dl)
            got = [cp.unshard(t, n, causal=causal, layout=layout)
                   for t in (out_l.detach(), ql.grad, kl.grad, vl.grad)]
            want = _reference(case)
            for label, g, w in zip(("out", "dq", "dk", "dv"), got, want):
                scale = max(1.0, w.abs().max().item())
                err = (g.double() - w).abs().max().item() / scale
                if not err <= TOLERANCE[dtype] or torch.isnan(g).any():
                    errors.append("%s, %d ranks: %s error %.3g > %.3g" % (name, world, label, err, TOLERANCE[dtype]))
            if lse_l.shape != ql.shape[:3] or torch.isnan(lse_l).any():
                errors.append("%s: lse shape %s or NaN" % (name, tuple(lse_l.shape)))
        if errors:
            raise AssertionError("; ".join(errors))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # reported to the parent through the file
        with open(result_file + ".%d" % rank, "w") as f:
            f.write(traceback.format_exc())
        raise


@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_matches_one_process(world):
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        result = os.path.join(tmp, "result")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        try:
            mp.spawn(_worker, args=(world, init_file, result), nprocs=world, join=True)
        except Exception:
            reports = [open(os.path.join(tmp, f)).read() for f in sorted(os.listdir(tmp)) if f.startswith("result")]
            pytest.fail("\n".join(reports) or "a worker failed")


def test_merge_partials_joins_key_ranges():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 3, 11, 24, generator=gen)
    k = torch.randn(2, 3, 40, 24, generator=gen)
    v = torch.randn(2, 3, 40, 16, generator=gen)
    parts = [ffpa.attention_with_lse(q, k[:, :, a:b], v[:, :, a:b]) for a, b in ((0, 9), (9, 9), (9, 40))]
    out, lse = ffpa.merge_partials([p[0] for p in parts], [p[1] for p in parts])
    want, want_lse = ffpa.attention_with_lse(q, k, v)
    assert (out - want).abs().max().item() < 1e-5
    assert (lse - want_lse).abs().max().item() < 1e-5
    # In place into a float32 accumulator (a ring's).
    acc, acc_lse = parts[0][0].clone(), parts[0][1].clone()
    for o, l in parts[1:]:
        ffpa.merge_partials([acc, o], [acc_lse, l], out=acc, lse=acc_lse)
    assert (acc - want).abs().max().item() < 1e-5


def test_merge_partials_refuses_bad_arguments():
    o = torch.zeros(1, 2, 3, 8)
    lse = torch.zeros(1, 2, 3)
    with pytest.raises(ffpa.FFPAValueError, match="outs"):
        ffpa.merge_partials([], [])
    with pytest.raises(ffpa.FFPAValueError, match="lses"):
        ffpa.merge_partials([o], [lse.unsqueeze(-1)])
    with pytest.raises(ffpa.FFPAValueError, match="lse_parts"):
        ffpa.merge_partials([o, o], [lse, lse.half()])
    with pytest.raises(ffpa.FFPAValueError, match="o_parts"):
        ffpa.merge_partials([o, o[:, :, :2]], [lse, lse])


def test_ring_attention_needs_an_initialized_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized here")
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ffpa.FFPAValueError, match="init_process_group"):
        cp.ring_attention(q, q, q)
