"""float64 oracle for the Python tests, written with plain torch ops (no SDPA, so
it runs on torch 1.13), and a NumPy Philox4x32-10 that reproduces libffpa's
dropout mask (common/philox.h)."""

import math

import numpy as np
import torch

_M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(x, y, z, w, key0, key1):
    """Vectorised Philox4x32-10 on uint64 arrays holding 32-bit values."""
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    w0, w1 = 0x9E3779B9, 0xBB67AE85
    k0, k1 = key0 & 0xFFFFFFFF, key1 & 0xFFFFFFFF
    for _ in range(10):
        p0 = m0 * x  # both < 2^32: the product fits in uint64
        p1 = m1 * z
        hi0, lo0 = p0 >> np.uint64(32), p0 & _M32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _M32
        x, y, z, w = hi1 ^ y ^ np.uint64(k0), lo1, hi0 ^ w ^ np.uint64(k1), lo0
        k0 = (k0 + w0) & 0xFFFFFFFF
        k1 = (k1 + w1) & 0xFFFFFFFF
    return x, y, z, w


def dropout_threshold(p):
    t = float(np.float32(p)) * 4294967296.0  # libffpa stores p as a C float
    return 0xFFFFFFFF if t >= 4294967295.0 else int(t)


def dropout_keep(seed, offset, p, hq, batch_indices, heads, nq, nkv):
    """bool [len(batch_indices), heads, nq, nkv]: libffpa's keep mask."""
    seed &= 0xFFFFFFFFFFFFFFFF
    b = np.asarray(batch_indices, dtype=np.uint64).reshape(-1, 1, 1, 1)
    h = np.arange(heads, dtype=np.uint64).reshape(1, -1, 1, 1)
    i = np.arange(nq, dtype=np.uint64).reshape(1, 1, -1, 1)
    j = np.arange(nkv, dtype=np.uint64).reshape(1, 1, 1, -1)
    stream = np.uint64(offset) + b * np.uint64(hq) + h
    shape = (b.shape[0], heads, nq, nkv)
    x = np.broadcast_to(j >> np.uint64(2), shape)
    y = np.broadcast_to(i & _M32, shape)
    z = np.broadcast_to(stream & _M32, shape)
    w = np.broadcast_to(stream >> np.uint64(32), shape)
    words = philox4x32_10(x, y, z, w, seed & 0xFFFFFFFF, seed >> 32)
    lane = np.broadcast_to(j & np.uint64(3), shape)
    word = np.choose(lane.astype(np.int64), words)
    return torch.from_numpy(word >= np.uint64(dropout_threshold(p)))


def attention(q, k, v, bias=None, causal=False, scale=None, keep=None, dropout_p=0.0,
              window=(-1, -1), softcap=0.0, alibi_slopes=None):
    """float64 attention on [B, H, N, D] tensors (autograd-friendly).

    causal is bottom-right aligned (libffpa's); bias is additive and broadcasts;
    keep is the dropout keep mask [B, Hq, Nq, Nkv]; window (left, right; -1:
    unbounded), softcap and alibi_slopes ([Hq] or [B, Hq]) as FlashAttention's.
    Rows that see no key give O = 0 and LSE = -inf. Returns (out, lse)."""
    q, k, v = q.double(), k.double(), v.double()
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    nq, nkv = q.shape[2], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    s = scale * torch.matmul(q, k.transpose(-1, -2))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.double()
    rows = torch.arange(nq).unsqueeze(1)
    cols = torch.arange(nkv).unsqueeze(0)
    diag = rows + (nkv - nq)
    if alibi_slopes is not None:
        slopes = alibi_slopes.double().reshape(-1 if alibi_slopes.dim() == 2 else 1, q.shape[1], 1, 1)
        s = s - slopes * (diag - cols).abs().double()
    if causal:
        s = s.masked_fill(cols > diag, float("-inf"))
    if window[0] >= 0:
        s = s.masked_fill(cols < diag - window[0], float("-inf"))
    if window[1] >= 0:
        s = s.masked_fill(cols > diag + window[1], float("-inf"))
    with torch.no_grad():
        lse = torch.logsumexp(s, dim=-1)
        dead = torch.isinf(s).all(dim=-1, keepdim=True)  # rows that see nothing
    p = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    if keep is not None:
        p = p * keep.double() / (1.0 - float(np.float32(dropout_p)))
    return torch.matmul(p, v), lse


def top_left_causal_bias(nq, nkv):
    """PyTorch's is_causal (row i sees j <= i) as an additive float64 bias."""
    rows = torch.arange(nq).unsqueeze(1)
    cols = torch.arange(nkv).unsqueeze(0)
    return torch.zeros(nq, nkv, dtype=torch.float64).masked_fill(cols > rows, float("-inf"))


def varlen_attention(q, k, v, cu_q, cu_k, causal=False, scale=None, dropout=None):
    """Packed [total, H, D] attention, one dense oracle call per sequence.

    dropout: (seed, offset, p) or None. Returns (out [total_q, H, Dv], lse [H, total_q])."""
    outs, lses = [], []
    hq = q.shape[1]
    for b in range(len(cu_q) - 1):
        qs = q[cu_q[b]:cu_q[b + 1]].transpose(0, 1).unsqueeze(0)
        ks = k[cu_k[b]:cu_k[b + 1]].transpose(0, 1).unsqueeze(0)
        vs = v[cu_k[b]:cu_k[b + 1]].transpose(0, 1).unsqueeze(0)
        keep, p = None, 0.0
        if dropout is not None:
            seed, offset, p = dropout
            keep = dropout_keep(seed, offset, p, hq, [b], hq, qs.shape[2], ks.shape[2])
        o, lse = attention(qs, ks, vs, causal=causal, scale=scale, keep=keep, dropout_p=p)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


def max_rel_error(actual, expected):
    """max |a - e| / max(1, max |e|), ignoring positions where both are -inf."""
    actual = actual.detach().double()
    expected = expected.detach().double()
    both_inf = torch.isinf(actual) & torch.isinf(expected) & (actual.sign() == expected.sign())
    diff = (actual - expected).abs().masked_fill(both_inf, 0.0)
    finite = expected.masked_fill(torch.isinf(expected), 0.0)
    return float(diff.max()) / max(1.0, float(finite.abs().max())) if diff.numel() else 0.0
