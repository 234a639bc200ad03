"""Zero-size dimensions through the PyTorch binding (cpu backend), forward
and backward, against PyTorch's own math on the same tensors: each of B, H,
Nq, Nkv, Dqk, Dv set to 0 in turn (scale given: PyTorch's default
1/sqrt(0) is inf)."""

import pytest
import torch

import ffpa

SHAPES = {
    "B": ((0, 4, 3, 8), (0, 2, 5, 8), (0, 2, 5, 6)),
    "H": ((2, 0, 3, 8), (2, 0, 5, 8), (2, 0, 5, 6)),
    "Nq": ((2, 4, 0, 8), (2, 2, 5, 8), (2, 2, 5, 6)),
    "Nkv": ((2, 4, 3, 8), (2, 2, 0, 8), (2, 2, 0, 6)),
    "Dqk": ((2, 4, 3, 0), (2, 2, 5, 0), (2, 2, 5, 6)),
    "Dv": ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 0)),
}


def reference(q, k, v, scale):
    group = q.shape[1] // k.shape[1] if k.shape[1] else 1
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    if k.shape[2] == 0:  # softmax over no key: PyTorch's math gives an empty sum, O = 0
        return q.new_zeros(q.shape[:3] + (v.shape[3],)) + 0 * v.sum() + 0 * q.sum() + 0 * k.sum()
    p = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
    return p @ v


@pytest.mark.parametrize("zero", list(SHAPES))
def test_zero_dim_forward_backward(zero):
    torch.manual_seed(3)
    sq, sk, sv = SHAPES[zero]
    q, k, v = (torch.randn(s, dtype=torch.float64).float().requires_grad_() for s in (sq, sk, sv))
    out = ffpa.scaled_dot_product_attention(q, k, v, scale=0.5, enable_gqa=True)
    ref = reference(q, k, v, 0.5)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad, allow_unused=True)
    want = torch.autograd.grad(ref, (q, k, v), grad, allow_unused=True)
    for name, g, w in zip("qkv", got, want):
        w = torch.zeros_like(g) if w is None else w
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5, msg=lambda m: "d%s: %s" % (name, m))
