"""ffpa on libffpa's cuda backend against torch's own scaled_dot_product_attention.

Skips without a CUDA device or without the cuda backend. Each comparison
measures ffpa's and SDPA's error (both in fp16/bf16) against SDPA run in
float32 on the same values, and asks ffpa's error to be at most twice SDPA's
plus a small floor."""

import pytest
import torch
import torch.nn.functional as F

import ffpa


def _cuda_backend_ready():
    if not torch.cuda.is_available() or not hasattr(F, "scaled_dot_product_attention"):
        return False, "needs a CUDA device and torch >= 2.0"
    try:
        backends = {b.name: (b.available, b.detail) for b in ffpa.backends()}
    except ffpa.LibraryNotFoundError as exc:
        return False, str(exc)
    if not backends.get("cuda", (False, ""))[0]:
        return False, "libffpa cuda backend unavailable: %s" % (backends.get("cuda", (0, "absent"))[1],)
    return True, ""


_READY, _WHY = _cuda_backend_ready()
pytestmark = pytest.mark.skipif(not _READY, reason=_WHY)

FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
DTYPES = [torch.float16, torch.bfloat16]
DIMS = [64, 320, 512, 1024]


def rel_error(actual, expected):
    actual, expected = actual.double(), expected.double()
    return float((actual - expected).abs().max()) / max(1.0, float(expected.abs().max()))


def randn(*shape, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)


def run(fn, inputs, dout):
    """(out, grads of the inputs that require grad) of fn(*inputs)."""
    out = fn(*inputs)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return out, torch.autograd.grad(out, wrt, dout)


def compare_to_sdpa(q, k, v, mask=None, **kwargs):
    """q, k, v (and a float mask) are leaves; checks out and every gradient."""
    dtype = q.dtype
    leaves = [q, k, v] + ([mask] if mask is not None and mask.requires_grad else [])

    def call(fn, tensors, cast):
        inputs = [t.detach().to(cast).requires_grad_(t.requires_grad) for t in tensors]
        m = None
        if mask is not None:
            m = inputs[3] if mask.requires_grad else (mask if mask.dtype == torch.bool else mask.to(cast))
        return fn(inputs[0], inputs[1], inputs[2], attn_mask=m, **kwargs), inputs

    out_f, ins_f = call(ffpa.scaled_dot_product_attention, leaves, dtype)
    out_t, ins_t = call(F.scaled_dot_product_attention, leaves, dtype)
    out_r, ins_r = call(F.scaled_dot_product_attention, leaves, torch.float32)
    dout = randn(*out_f.shape, dtype=dtype, seed=99)
    g_f = torch.autograd.grad(out_f, ins_f, dout)
    g_t = torch.autograd.grad(out_t, ins_t, dout)
    g_r = torch.autograd.grad(out_r, ins_r, dout.float())
    floor = FLOOR[dtype]
    names = ["out", "dq", "dk", "dv", "dmask"]
    for name, a, t, r in zip(names, [out_f] + list(g_f), [out_t] + list(g_t),
                             [out_r] + list(g_r)):
        assert a.shape == r.shape and a.dtype == t.dtype, name
        assert torch.isfinite(a).all(), "%s is not finite" % name
        err, err_sdpa = rel_error(a, r), rel_error(t, r)
        assert err <= 2 * err_sdpa + floor, "%s: ffpa error %.3g, SDPA error %.3g" % (
            name, err, err_sdpa)
    return out_f


def make(b, hq, hkv, nq, nkv, d, dtype, layout="bhnd"):
    def tensor(h, n, seed):
        if layout == "bnhd":  # memory [B, N, H, D], seen as [B, H, N, D]
            return randn(b, n, h, d, dtype=dtype, seed=seed).transpose(1, 2).requires_grad_()
        return randn(b, h, n, d, dtype=dtype, seed=seed).requires_grad_()
    return tensor(hq, nq, 1), tensor(hkv, nkv, 2), tensor(hkv, nkv, 3)


CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "gqa_causal": dict(hkv=2, causal=True),
    "cross": dict(nq=192, nkv=320),
    "cross_causal_top_left": dict(nq=160, nkv=288, causal=True),
    "float_mask_grad": dict(mask="float"),
    "bool_mask": dict(mask="bool"),
    "bnhd_causal": dict(layout="bnhd", causal=True),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_sdpa(case, d, dtype):
    spec = CASES[case]
    b, hq, hkv = 2, 4, spec.get("hkv", 4)
    nq, nkv = spec.get("nq", 256), spec.get("nkv", 256)
    q, k, v = make(b, hq, hkv, nq, nkv, d, dtype, spec.get("layout", "bhnd"))
    mask = None
    if spec.get("mask") == "float":
        mask = randn(1, hq, nq, nkv, dtype=dtype, seed=4).requires_grad_()
    elif spec.get("mask") == "bool":
        mask = randn(b, 1, nq, nkv, dtype=torch.float32, seed=5) > -0.5
        mask[..., 0] = True  # SDPA gives NaN for rows that see nothing
    out = compare_to_sdpa(q, k, v, mask=mask, is_causal=spec.get("causal", False),
                          enable_gqa=hq != hkv)
    if spec.get("layout") == "bnhd":
        assert out.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("d", [64, 512])
def test_packed_qkv(d):
    # q, k, v are strided slices of one [B, N, 3, H, D] buffer, passed as they are.
    dtype = torch.bfloat16
    qkv = randn(2, 200, 3, 4, d, dtype=dtype, seed=7).requires_grad_()
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    out = ffpa.scaled_dot_product_attention(q, k, v, is_causal=True)
    dout = randn(*out.shape, dtype=dtype, seed=8)
    (grad,) = torch.autograd.grad(out, [qkv], dout)
    qkv_r = qkv.detach().float().requires_grad_()
    q, k, v = (qkv_r[:, :, i].transpose(1, 2) for i in range(3))
    out_r = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (grad_r,) = torch.autograd.grad(out_r, [qkv_r], dout.float())
    assert rel_error(out, out_r) <= FLOOR[dtype]
    assert rel_error(grad, grad_r) <= 2 * FLOOR[dtype]


def test_side_stream():
    q, k, v = make(2, 4, 4, 256, 256, 512, torch.bfloat16)
    expected = ffpa.scaled_dot_product_attention(q, k, v, is_causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = ffpa.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("d", [64, 512])
def test_dropout_matches_cpu_backend(d):
    # The keep mask is the same function on every backend (common/philox.h).
    dtype = torch.bfloat16
    q, k, v = make(1, 2, 2, 96, 112, d, dtype)
    out, _ = ffpa.attention_with_lse(q, k, v, dropout_p=0.3, dropout_seed=2024, is_causal=True)
    dout = randn(*out.shape, dtype=dtype, seed=6)
    grads = torch.autograd.grad(out, [q, k, v], dout)
    qc, kc, vc = (t.detach().cpu().float().requires_grad_() for t in (q, k, v))
    out_c, _ = ffpa.attention_with_lse(qc, kc, vc, dropout_p=0.3, dropout_seed=2024,
                                       is_causal=True)
    grads_c = torch.autograd.grad(out_c, [qc, kc, vc], dout.cpu().float())
    assert rel_error(out.cpu(), out_c) <= FLOOR[dtype]
    for g, g_c in zip(grads, grads_c):
        assert rel_error(g.cpu(), g_c) <= 2 * FLOOR[dtype]


@pytest.mark.parametrize("d", [128, 512])
def test_varlen_matches_sdpa_per_sequence(d):
    dtype = torch.bfloat16
    cu = [0, 100, 101, 357, 512]
    hq, hkv = 4, 2
    q = randn(cu[-1], hq, d, dtype=dtype, seed=1).requires_grad_()
    k = randn(cu[-1], hkv, d, dtype=dtype, seed=2).requires_grad_()
    v = randn(cu[-1], hkv, d, dtype=dtype, seed=3).requires_grad_()
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    out = ffpa.varlen_attention(q, k, v, cu_t, cu_t, causal=True)
    dout = randn(*out.shape, dtype=dtype, seed=4)
    grads = torch.autograd.grad(out, [q, k, v], dout)
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    outs = []
    for b in range(len(cu) - 1):
        sl = slice(cu[b], cu[b + 1])
        o = F.scaled_dot_product_attention(qr[sl].transpose(0, 1), kr[sl].transpose(0, 1),
                                           vr[sl].transpose(0, 1), is_causal=True,
                                           enable_gqa=True)
        outs.append(o.transpose(0, 1))
    out_r = torch.cat(outs)
    grads_r = torch.autograd.grad(out_r, [qr, kr, vr], dout.float())
    assert rel_error(out, out_r) <= FLOOR[dtype]
    for g, g_r in zip(grads, grads_r):
        assert rel_error(g, g_r) <= 2 * FLOOR[dtype]


@pytest.mark.parametrize("d", [128, 512])
def test_varlen_device_offsets_in_a_cuda_graph(d):
    """cu_seqlens on the GPU with max_seqlen: no host read, so the call is captured
    in a CUDA graph; replays with new inputs and new offsets (same maxima) match the
    host-offset call."""
    dtype = torch.bfloat16
    hq, hkv, total = 4, 2, 512
    q = randn(total, hq, d, dtype=dtype, seed=11)
    k = randn(total, hkv, d, dtype=dtype, seed=12)
    v = randn(total, hkv, d, dtype=dtype, seed=13)
    cu = torch.tensor([0, 100, 101, 357, 512], dtype=torch.int32, device="cuda")
    max_len = 256

    def call():
        return ffpa.varlen_attention(q, k, v, cu, cu, causal=True, window_size=(64, -1),
                                     max_seqlen_q=max_len, max_seqlen_k=max_len)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm: the workspace and the library's state exist before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for seed, offsets in ((21, [0, 100, 101, 357, 512]), (31, [0, 256, 256, 300, 512])):
        q.copy_(randn(total, hq, d, dtype=dtype, seed=seed))
        cu.copy_(torch.tensor(offsets, dtype=torch.int32, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        host = torch.tensor(offsets, dtype=torch.int32)
        ref = ffpa.varlen_attention(q, k, v, host, host, causal=True, window_size=(64, -1))
        assert torch.equal(out, ref)


def test_varlen_device_offsets_bad_maxima_are_clear_errors():
    q = randn(10, 2, 64, dtype=torch.bfloat16, seed=1)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    with pytest.raises(ffpa.FFPAValueError, match="max_seqlen_q"):
        ffpa.varlen_attention(q, q, q, cu, cu, max_seqlen_q=11, max_seqlen_k=6)
    with pytest.raises(ffpa.FFPAValueError, match="both or neither"):
        ffpa.varlen_attention(q, q, q, cu, cu, max_seqlen_q=6)


@pytest.mark.skipif(not ffpa.USES_CUSTOM_OP, reason="needs torch >= 2.4")
def test_torch_compile_on_cuda():
    q, k, v = make(2, 4, 4, 256, 256, 512, torch.bfloat16)

    def fn(q, k, v):
        return ffpa.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0

    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    out = compiled(q, k, v)
    grads = torch.autograd.grad(out.float().sum(), [q, k, v])
    out_e = fn(q, k, v)
    grads_e = torch.autograd.grad(out_e.float().sum(), [q, k, v])
    assert torch.equal(out, out_e)
    for g, g_e in zip(grads, grads_e):
        assert torch.equal(g, g_e)


@pytest.mark.parametrize("what", ["window_size", "softcap", "alibi_slopes", "all"])
@pytest.mark.parametrize("d", [64, 320])
def test_variants_match_reference(what, d):
    """FlashAttention's variants on the generic cuda kernels against the float64 reference."""
    import reference

    hq, hkv, nq, nkv = 4, 2, 150, 200
    q = randn(2, hq, nq, d, dtype=torch.bfloat16, seed=1).requires_grad_()
    k = randn(2, hkv, nkv, d, dtype=torch.bfloat16, seed=2).requires_grad_()
    v = randn(2, hkv, nkv, d, dtype=torch.bfloat16, seed=3).requires_grad_()
    slopes = torch.rand(hq, device="cuda") * 0.5
    kw = {"window_size": dict(window_size=(40, 7)), "softcap": dict(softcap=5.0),
          "alibi_slopes": dict(alibi_slopes=slopes),
          "all": dict(window_size=(33, -1), softcap=10.0, alibi_slopes=slopes)}[what]
    out, _ = ffpa.attention_with_lse(q, k, v, enable_gqa=True, causal_alignment="bottom_right", **kw)
    dout = randn(*out.shape, dtype=torch.bfloat16, seed=4)
    grads = torch.autograd.grad(out, [q, k, v], dout)
    ref_in = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    out_r, _ = reference.attention(*ref_in, window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0),
                                   alibi_slopes=kw["alibi_slopes"].cpu() if "alibi_slopes" in kw else None)
    grads_r = torch.autograd.grad(out_r, ref_in, dout.cpu().double())
    assert rel_error(out.cpu(), out_r) < 2e-2
    for g, g_r in zip(grads, grads_r):
        assert rel_error(g.cpu(), g_r) < 4e-2


@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_partials_on_cuda_joins_key_ranges(dtype):
    q = randn(2, 4, 77, 512, dtype=dtype, seed=20).cuda()
    k = randn(2, 4, 300, 512, dtype=dtype, seed=21).cuda()
    v = randn(2, 4, 300, 512, dtype=dtype, seed=22).cuda()
    parts = [ffpa.attention_with_lse(q, k[:, :, a:b], v[:, :, a:b]) for a, b in ((0, 100), (100, 100), (100, 300))]
    acc = torch.zeros(2, 4, 77, 512, dtype=torch.float32, device="cuda")
    acc_lse = torch.full((2, 4, 77), float("-inf"), device="cuda")
    for o, lse in parts:  # a ring's float32 accumulator, merged into in place
        ffpa.merge_partials([acc, o], [acc_lse, lse], out=acc, lse=acc_lse)
    out, lse = ffpa.merge_partials([p[0] for p in parts], [p[1] for p in parts])
    want, want_lse = ffpa.attention_with_lse(q.float().cpu(), k.float().cpu(), v.float().cpu())
    assert out.dtype == dtype
    assert rel_error(out.cpu(), want) <= FLOOR[dtype]
    assert rel_error(acc.cpu(), want) <= FLOOR[dtype]
    assert rel_error(lse.cpu(), want_lse) <= 1e-3
    assert rel_error(acc_lse.cpu(), want_lse) <= 1e-3
