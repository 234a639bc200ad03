"""ffpa's PyTorch front end on libffpa's cpu backend, against a float64 oracle.

Run with FFPA_LIBRARY pointing at a built libffpa.so (see python/README)."""

import os
import subprocess
import sys

import pytest
import torch

import ffpa
import reference

# Max error relative to max(1, max |reference|), per input dtype.
TOLERANCE = {torch.float32: 2e-4, torch.float16: 6e-3, torch.bfloat16: 4e-2}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def randn(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def leaf(t):
    return t.clone().requires_grad_()


def oracle_bias(mask, is_causal, causal_alignment, nq, nkv):
    """(float64 bias or None, bottom-right causal flag) of the oracle for these arguments."""
    bias = None
    if mask is not None:
        if mask.dtype == torch.bool:
            bias = torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, float("-inf"))
        else:
            bias = mask
    causal = bool(is_causal)
    if causal and causal_alignment == "top_left" and nq != nkv:
        tl = reference.top_left_causal_bias(nq, nkv)
        bias = tl if bias is None else bias.double() + tl
        causal = False
    return bias, causal


def check(name, actual, expected, tol):
    assert actual.shape == expected.shape, name
    assert not torch.isnan(actual.float()).any(), "%s has NaN" % name
    err = reference.max_rel_error(actual, expected)
    assert err <= tol, "%s: error %.3g > %.3g" % (name, err, tol)


def compare(dtype, q, k, v, mask=None, is_causal=False, scale=None, enable_gqa=False,
            causal_alignment="top_left", grad_mask=False, seed=7):
    """Runs ffpa forward + backward and the oracle on the same values; checks all outputs.

    q, k, v are leaves (or views of leaves) of the test dtype; returns ffpa's out."""
    tol = TOLERANCE[dtype]
    if grad_mask:
        mask.requires_grad_()
    out, lse = ffpa.attention_with_lse(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
                                       enable_gqa=enable_gqa, causal_alignment=causal_alignment)
    dout = randn(*out.shape, dtype=dtype, seed=seed)
    grads = torch.autograd.grad(out, [q, k, v] + ([mask] if grad_mask else []), dout)

    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    mask_r = None
    if mask is not None:
        mask_r = mask.detach() if mask.dtype == torch.bool else mask.detach().double()
        if grad_mask:
            mask_r.requires_grad_()
    bias, causal = oracle_bias(mask_r, is_causal, causal_alignment, q.shape[-2], k.shape[-2])
    out_r, lse_r = reference.attention(qr, kr, vr, bias=bias, causal=causal, scale=scale)
    grads_r = torch.autograd.grad(out_r, [qr, kr, vr] + ([mask_r] if grad_mask else []),
                                  dout.double())

    assert out.dtype == dtype and lse.dtype == torch.float32
    check("out", out, out_r, tol)
    check("lse", lse, lse_r, tol)
    for name, g, g_r in zip(("dq", "dk", "dv", "dmask"), grads, grads_r):
        assert g.dtype == (mask.dtype if name == "dmask" else dtype), name
        check(name, g, g_r, 2 * tol)
    return out


# name -> shapes and options (b, hq, hkv, nq, nkv, d, dv defaults below)
CASES = {
    "plain": {},
    "causal": dict(is_causal=True),
    "causal_nq_lt_nkv": dict(nq=17, nkv=40, is_causal=True),
    "causal_nq_gt_nkv": dict(nq=40, nkv=17, is_causal=True),
    "decode_causal": dict(nq=1, nkv=50, is_causal=True),
    "bottom_right_nq_gt_nkv": dict(nq=30, nkv=12, is_causal=True, align="bottom_right"),
    "bottom_right_nq_lt_nkv": dict(nq=12, nkv=30, is_causal=True, align="bottom_right"),
    "gqa": dict(hq=4, hkv=2, gqa=True),
    "mqa_causal": dict(hq=4, hkv=1, gqa=True, is_causal=True),
    "cross": dict(nq=21, nkv=45),
    "dqk_ne_dv": dict(d=64, dv=40),
    "scale": dict(scale=0.3),
    "bool_mask": dict(mask="bool"),
    "float_mask_grad": dict(mask="float_heads"),
    "float_mask_2d_grad": dict(mask="float_2d"),
    "mask_and_top_left_causal": dict(nq=20, nkv=31, is_causal=True, mask="float_heads"),
    "large_d": dict(b=1, hq=2, hkv=2, nq=9, nkv=13, d=576, dv=512),
}


def build_case(spec, dtype):
    b, hq, hkv = spec.get("b", 2), spec.get("hq", 3), spec.get("hkv", 3)
    nq, nkv = spec.get("nq", 33), spec.get("nkv", 33)
    d = spec.get("d", 48)
    dv = spec.get("dv", d)
    q = leaf(randn(b, hq, nq, d, dtype=dtype, seed=1))
    k = leaf(randn(b, hkv, nkv, d, dtype=dtype, seed=2))
    v = leaf(randn(b, hkv, nkv, dv, dtype=dtype, seed=3))
    mask, grad_mask = None, False
    kind = spec.get("mask")
    if kind == "bool":
        mask = randn(b, 1, nq, nkv, seed=4) > -0.8
        mask[:, :, :, 0] = True
        mask[0, 0, 3, :] = False  # a row that sees nothing: O = 0, LSE = -inf
    elif kind == "float_heads":
        mask, grad_mask = randn(1, hq, nq, nkv, dtype=dtype, seed=5), True
    elif kind == "float_2d":
        mask, grad_mask = randn(nq, nkv, dtype=torch.float32, seed=6), True
    return q, k, v, mask, grad_mask


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_oracle(case, dtype):
    spec = CASES[case]
    q, k, v, mask, grad_mask = build_case(spec, dtype)
    compare(dtype, q, k, v, mask=mask, is_causal=spec.get("is_causal", False),
            scale=spec.get("scale"), enable_gqa=spec.get("gqa", False),
            causal_alignment=spec.get("align", "top_left"), grad_mask=grad_mask)


# name -> (b, hq, hkv, nq, nkv, d, options): FlashAttention's variants
VARIANTS = {
    "window": (2, 3, 3, 40, 40, 48, dict(window_size=(5, 2))),
    "window_left_only_causal": (1, 2, 2, 33, 50, 40, dict(window_size=(7, -1), is_causal=True)),
    "window_cross_empty_rows": (1, 2, 1, 30, 12, 40, dict(window_size=(1, 0))),
    "softcap": (2, 2, 2, 30, 35, 48, dict(softcap=2.0)),
    "softcap_mask_grad": (1, 2, 2, 25, 25, 40, dict(softcap=1.5, mask=True)),
    "alibi_heads": (2, 4, 2, 30, 41, 40, dict(alibi="heads")),
    "alibi_batch_causal": (2, 2, 2, 30, 30, 40, dict(alibi="batch", is_causal=True)),
    "all": (2, 4, 1, 37, 45, 72, dict(window_size=(9, 20), softcap=4.0, alibi="heads", mask=True)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(VARIANTS))
def test_variants_match_oracle(case, dtype):
    b, hq, hkv, nq, nkv, d, opts = VARIANTS[case]
    q = leaf(randn(b, hq, nq, d, dtype=dtype, seed=11))
    k = leaf(randn(b, hkv, nkv, d, dtype=dtype, seed=12))
    v = leaf(randn(b, hkv, nkv, d, dtype=dtype, seed=13))
    mask = leaf(randn(1, hq, nq, nkv, dtype=dtype, seed=14)) if opts.get("mask") else None
    slopes = None
    if opts.get("alibi"):
        shape = (hq,) if opts["alibi"] == "heads" else (b, hq)
        slopes = torch.rand(*shape, generator=torch.Generator().manual_seed(15)) * 0.5
    kw = dict(window_size=opts.get("window_size", (-1, -1)), softcap=opts.get("softcap", 0.0),
              alibi_slopes=slopes)
    causal = opts.get("is_causal", False)
    out, lse = ffpa.attention_with_lse(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=hq != hkv,
                                       causal_alignment="bottom_right", **kw)
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    dout = randn(*out.shape, dtype=dtype, seed=16)
    grads = torch.autograd.grad(out, inputs, dout)
    ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
    out_r, lse_r = reference.attention(*ref_inputs[:3], bias=ref_inputs[3] if mask is not None else None,
                                       causal=causal, window=kw["window_size"], softcap=kw["softcap"],
                                       alibi_slopes=slopes)
    grads_r = torch.autograd.grad(out_r, ref_inputs, dout.double())
    tol = TOLERANCE[dtype]
    check("out", out, out_r, tol)
    check("lse", lse, lse_r, tol)
    for name, g, g_r in zip(("dq", "dk", "dv", "dmask"), grads, grads_r):
        check(name, g, g_r, 2 * tol)


def test_varlen_variants_match_oracle():
    lens_q, lens_k = [9, 0, 21], [14, 5, 21]
    cu_q = torch.tensor([0, 9, 9, 30], dtype=torch.int32)
    cu_k = torch.tensor([0, 14, 19, 40], dtype=torch.int32)
    hq, hkv, d = 4, 2, 40
    q = leaf(randn(30, hq, d, seed=21))
    k = leaf(randn(40, hkv, d, seed=22))
    v = leaf(randn(40, hkv, d, seed=23))
    slopes = torch.rand(3, hq, generator=torch.Generator().manual_seed(24)) * 0.5
    out = ffpa.varlen_attention(q, k, v, cu_q, cu_k, causal=True, window_size=(6, -1), softcap=3.0,
                                alibi_slopes=slopes)
    out.sum().backward()
    for s in range(3):
        if lens_q[s] == 0:
            continue
        rows = slice(int(cu_q[s]), int(cu_q[s + 1]))
        keys = slice(int(cu_k[s]), int(cu_k[s + 1]))
        qs, ks, vs = (t.detach()[r].transpose(0, 1).unsqueeze(0).double().requires_grad_()
                      for t, r in ((q, rows), (k, keys), (v, keys)))
        out_r, _ = reference.attention(qs, ks, vs, causal=True, window=(6, -1), softcap=3.0,
                                       alibi_slopes=slopes[s])
        check("out (sequence %d)" % s, out[rows], out_r[0].transpose(0, 1), TOLERANCE[torch.float32])
        gq, = torch.autograd.grad(out_r, [qs], torch.ones_like(out_r))
        check("dq (sequence %d)" % s, q.grad[rows], gq[0].transpose(0, 1), 2 * TOLERANCE[torch.float32])


def test_variants_bad_arguments_are_clear_errors():
    q = randn(1, 2, 8, 16)
    with pytest.raises(ffpa.FFPAValueError, match="window_size"):
        ffpa.scaled_dot_product_attention(q, q, q, window_size=3)
    with pytest.raises(ffpa.FFPAValueError, match="opt.window_left"):
        ffpa.scaled_dot_product_attention(q, q, q, window_size=(-3, 0))
    with pytest.raises(ffpa.FFPAValueError, match="opt.softcap"):
        ffpa.scaled_dot_product_attention(q, q, q, softcap=-1.0)
    with pytest.raises(ffpa.FFPAValueError, match="opt.alibi_slopes"):
        ffpa.scaled_dot_product_attention(q, q, q, alibi_slopes=torch.ones(3))
    with pytest.raises(ffpa.FFPAValueError, match="opt.alibi_slopes: dtype f16; expected f32"):
        ffpa.scaled_dot_product_attention(q, q, q, alibi_slopes=torch.ones(2, dtype=torch.float16))
    with pytest.raises(ffpa.FFPAValueError, match="alibi_slopes: dtype torch.float64"):
        ffpa.scaled_dot_product_attention(q, q, q, alibi_slopes=torch.ones(2, dtype=torch.float64))


def test_sdpa_returns_attention_with_lse_out():
    q, k, v, _, _ = build_case(dict(hq=4, hkv=2), torch.float32)
    out = ffpa.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out2, _ = ffpa.attention_with_lse(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.equal(out, out2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_bnhd_layout_without_copies(dtype):
    # Memory [B, N, H, D] seen as [B, H, N, D]; out keeps that layout.
    b, n, h, d = 2, 29, 3, 32
    q_mem = leaf(randn(b, n, h, d, dtype=dtype, seed=1))
    k_mem = leaf(randn(b, n + 5, h, d, dtype=dtype, seed=2))
    v_mem = leaf(randn(b, n + 5, h, d, dtype=dtype, seed=3))
    out = compare(dtype, q_mem.transpose(1, 2), k_mem.transpose(1, 2), v_mem.transpose(1, 2),
                  is_causal=True)
    assert out.transpose(1, 2).is_contiguous()


def test_packed_qkv_layout():
    # One [B, N, 3, H, D] buffer: q, k, v are strided slices of it.
    dtype = torch.float32
    qkv = leaf(randn(2, 25, 3, 4, 16, dtype=dtype, seed=9))
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    compare(dtype, q, k, v, is_causal=True)


def test_three_dim_inputs():
    q, k, v, _, _ = build_case({}, torch.float32)
    out = ffpa.scaled_dot_product_attention(q[1], k[1], v[1], is_causal=True)
    full = ffpa.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.shape == full[1].shape
    assert torch.allclose(out, full[1], atol=1e-6)


def test_no_keys_gives_zeros():
    q = randn(1, 2, 5, 16)
    k = randn(1, 2, 0, 16)
    out, lse = ffpa.attention_with_lse(q, k, k)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.isinf(lse).all()


# ------------------------------------------------------------------ dropout

def dropout_case(dtype, seed, p, causal=False, hq=4, hkv=2):
    b, nq, nkv, d = 2, 19, 27, 24
    q = leaf(randn(b, hq, nq, d, dtype=dtype, seed=1))
    k = leaf(randn(b, hkv, nkv, d, dtype=dtype, seed=2))
    v = leaf(randn(b, hkv, nkv, d, dtype=dtype, seed=3))
    out, lse = ffpa.attention_with_lse(q, k, v, dropout_p=p, is_causal=causal, enable_gqa=True,
                                       causal_alignment="bottom_right", dropout_seed=seed)
    dout = randn(*out.shape, dtype=dtype, seed=4)
    grads = torch.autograd.grad(out, [q, k, v], dout)
    keep = reference.dropout_keep(seed, 0, p, hq, range(b), hq, nq, nkv)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    out_r, lse_r = reference.attention(qr, kr, vr, causal=causal, keep=keep, dropout_p=p)
    grads_r = torch.autograd.grad(out_r, [qr, kr, vr], dout.double())
    tol = TOLERANCE[dtype]
    check("out", out, out_r, tol)
    check("lse", lse, lse_r, tol)
    for name, g, g_r in zip(("dq", "dk", "dv"), grads, grads_r):
        check(name, g, g_r, 2 * tol)
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [12345, 0xFEDCBA9876543210])
def test_dropout_matches_philox_mask(seed, causal):
    dropout_case(torch.float32, seed, 0.3, causal=causal)


def test_dropout_bf16():
    dropout_case(torch.bfloat16, 99, 0.5)


def test_dropout_seed_from_torch_generator():
    q, k, v, _, _ = build_case({}, torch.float32)
    torch.manual_seed(5)
    a = ffpa.scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    b = ffpa.scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    torch.manual_seed(5)
    a2 = ffpa.scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    assert torch.equal(a, a2)
    assert not torch.equal(a, b)
    no_dropout = ffpa.scaled_dot_product_attention(q, k, v)
    assert torch.equal(ffpa.scaled_dot_product_attention(q, k, v, dropout_p=0.0), no_dropout)


def test_dropout_backward_reuses_forward_seed():
    # Gradients must use the forward's mask even if the generator moved on.
    q, k, v, _, _ = build_case({}, torch.float32)
    torch.manual_seed(3)
    out = ffpa.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(4)
    grads = torch.autograd.grad(out.sum(), [q, k, v])
    torch.manual_seed(3)
    out2 = ffpa.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    grads2 = torch.autograd.grad(out2.sum(), [q, k, v])
    for g, g2 in zip(grads, grads2):
        assert torch.equal(g, g2)


# ------------------------------------------------------------------ varlen

def varlen_case(dtype, causal, dropout=None):
    cu_q = [0, 5, 5, 17, 30]  # includes an empty sequence
    cu_k = [0, 9, 12, 20, 41]
    hq, hkv, d = 4, 2, 32
    q = leaf(randn(cu_q[-1], hq, d, dtype=dtype, seed=1))
    k = leaf(randn(cu_k[-1], hkv, d, dtype=dtype, seed=2))
    v = leaf(randn(cu_k[-1], hkv, d, dtype=dtype, seed=3))
    seed, p = (dropout or (0, 0.0))
    out, lse = ffpa.varlen_attention(q, k, v, torch.tensor(cu_q), torch.tensor(cu_k),
                                     causal=causal, dropout_p=p, return_lse=True,
                                     dropout_seed=seed)
    dout = randn(*out.shape, dtype=dtype, seed=4)
    grads = torch.autograd.grad(out, [q, k, v], dout)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    out_r, lse_r = reference.varlen_attention(
        qr, kr, vr, cu_q, cu_k, causal=causal,
        dropout=(seed, 0, p) if dropout else None)
    grads_r = torch.autograd.grad(out_r, [qr, kr, vr], dout.double())
    tol = TOLERANCE[dtype]
    check("out", out, out_r, tol)
    check("lse", lse, lse_r, tol)
    for name, g, g_r in zip(("dq", "dk", "dv"), grads, grads_r):
        check(name, g, g_r, 2 * tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_oracle(dtype, causal):
    varlen_case(dtype, causal)


def test_varlen_dropout_matches_philox_mask():
    varlen_case(torch.float32, True, dropout=(777, 0.25))


# ------------------------------------------------------------------ errors

def test_error_gqa_not_enabled():
    q, k, v, _, _ = build_case(dict(hq=4, hkv=2), torch.float32)
    with pytest.raises(ffpa.FFPAValueError, match="enable_gqa"):
        ffpa.scaled_dot_product_attention(q, k, v)


def test_error_unsupported_dtype():
    q = randn(1, 2, 8, 16).double()
    with pytest.raises(ffpa.FFPAValueError, match="float64"):
        ffpa.scaled_dot_product_attention(q, q, q)


@pytest.mark.parametrize("what, argument", [
    ("dtype_mismatch", "k"),
    ("head_dim_too_large", "q"),
    ("dqk_mismatch", "k"),
    ("heads_not_multiple", "k"),
    ("dropout_p", "opt.dropout_p"),
    ("mask_shape", "bias"),
    ("batch_mismatch", "k"),
])
def test_library_rejects_bad_input_with_its_message(what, argument):
    q = randn(2, 4, 8, 16)
    k = randn(2, 4, 10, 16)
    v = randn(2, 4, 10, 16)
    kwargs = {}
    if what == "dtype_mismatch":
        k = k.half()
    elif what == "head_dim_too_large":
        q, k, v = randn(1, 1, 2, 1100), randn(1, 1, 2, 1100), randn(1, 1, 2, 1100)
    elif what == "dqk_mismatch":
        k = randn(2, 4, 10, 8)
    elif what == "heads_not_multiple":
        k, v = randn(2, 3, 10, 16), randn(2, 3, 10, 16)
        kwargs["enable_gqa"] = True
    elif what == "dropout_p":
        kwargs["dropout_p"] = 1.5
    elif what == "mask_shape":
        kwargs["attn_mask"] = randn(2, 4, 7, 10)
    elif what == "batch_mismatch":
        k, v = randn(3, 4, 10, 16), randn(3, 4, 10, 16)
    with pytest.raises(ffpa.FFPAError) as info:
        ffpa.scaled_dot_product_attention(q, k, v, **kwargs)
    message = str(info.value)
    assert isinstance(info.value, ValueError), message
    assert message.startswith(argument + ":"), message
    assert "expected" in message, message


def test_library_rejects_bad_cu_seqlens():
    q = randn(10, 2, 16)
    with pytest.raises(ffpa.FFPAValueError, match="^opt.cu_seqlens_q:"):
        ffpa.varlen_attention(q, q, q, torch.tensor([0, 6, 4, 10]), torch.tensor([0, 3, 6, 10]))
    with pytest.raises(ffpa.FFPAValueError, match="cu_seqlens_k"):
        ffpa.varlen_attention(q, q, q, torch.tensor([0, 5, 10]), torch.tensor([0, 3, 6, 10]))


def test_missing_library_is_a_clear_error(tmp_path):
    code = ("import ffpa, torch\n"
            "try:\n"
            "    ffpa.scaled_dot_product_attention(*[torch.randn(1, 1, 2, 4)] * 3)\n"
            "except ffpa.LibraryNotFoundError as e:\n"
            "    print('FFPA_LIBRARY' in str(e))\n")
    env = dict(os.environ, FFPA_LIBRARY=str(tmp_path / "nope.so"))
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.stdout.strip() == "True", result.stderr


def test_cpu_backend_is_listed():
    names = [b.name for b in ffpa.backends()]
    assert "cpu" in names


# ------------------------------------------------------------------ torch.compile

@pytest.mark.skipif(not ffpa.USES_CUSTOM_OP, reason="needs torch >= 2.4 (torch.library.custom_op)")
def test_torch_compile_traces_through_custom_op():
    q, k, v, _, _ = build_case(dict(hq=4, hkv=2), torch.float32)
    mask = leaf(randn(1, 4, 33, 33, seed=5))

    def fn(q, k, v, mask):
        return ffpa.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    out = compiled(q, k, v, mask)
    grads = torch.autograd.grad(out.sum(), [q, k, v, mask])
    out_e = fn(q, k, v, mask)
    grads_e = torch.autograd.grad(out_e.sum(), [q, k, v, mask])
    assert torch.allclose(out, out_e)
    for g, g_e in zip(grads, grads_e):
        assert torch.allclose(g, g_e)
