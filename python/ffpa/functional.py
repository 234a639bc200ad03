"""Public attention functions with PyTorch semantics."""

import math

import torch

from . import _ops
from ._runtime import FFPAValueError

# libffpa reads scale == 0 as "use 1/sqrt(D)"; an explicit 0 becomes the smallest
# normal float, which gives the same uniform softmax for any finite scores.
_TINY_SCALE = math.ldexp(1.0, -126)


def _scale_arg(scale):
    if scale is None:
        return 0.0
    scale = float(scale)
    return _TINY_SCALE if scale == 0.0 else scale


def _seed_tensor(dropout_p, dropout_seed):
    """The dropout seed as a CPU int64 tensor (a tensor so torch.compile keeps it an input).

    A fresh seed is drawn from PyTorch's default CPU generator, so torch.manual_seed
    makes runs repeatable; backward reuses the forward's seed."""
    if dropout_seed is not None:
        seed = int(dropout_seed) & 0xFFFFFFFFFFFFFFFF
        if seed >= 1 << 63:
            seed -= 1 << 64
        return torch.tensor([seed], dtype=torch.int64)
    if dropout_p > 0.0:
        return torch.randint(-(1 << 63), (1 << 63) - 1, (1,), dtype=torch.int64)
    return torch.zeros((1,), dtype=torch.int64)


def _same_device(tensor, name, query):
    if tensor.device != query.device:
        raise FFPAValueError("%s: is on %s; expected query's device %s"
                             % (name, tensor.device, query.device))


def _additive_bias(attn_mask, query):
    """attn_mask as a 4-D additive float bias (size-1 dims broadcast), or None."""
    if attn_mask is None:
        return None
    _same_device(attn_mask, "attn_mask", query)
    if attn_mask.dim() > 4:
        raise FFPAValueError("attn_mask: has %d dims; expected at most 4 (broadcastable to "
                             "[B, H, Nq, Nkv])" % attn_mask.dim())
    mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    if mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape, dtype=query.dtype, device=query.device)
        return bias.masked_fill(mask.logical_not(), float("-inf"))
    if mask.dtype in (torch.float16, torch.bfloat16, torch.float32):
        return mask
    if mask.dtype == torch.float64:
        return mask.to(torch.float32)
    raise FFPAValueError("attn_mask: dtype %s is not supported; expected torch.bool or a "
                         "floating dtype" % mask.dtype)


def _top_left_causal_bias(nq, nkv, query):
    """PyTorch's is_causal mask (row i sees columns j <= i) as an additive [1, 1, Nq, Nkv] bias."""
    rows = torch.arange(nq, device=query.device).unsqueeze(1)
    cols = torch.arange(nkv, device=query.device).unsqueeze(0)
    bias = torch.zeros((nq, nkv), dtype=query.dtype, device=query.device)
    return bias.masked_fill(cols > rows, float("-inf")).reshape(1, 1, nq, nkv)


def _dense(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
           causal_alignment, dropout_seed):
    for tensor, name in ((key, "key"), (value, "value")):
        if not isinstance(tensor, torch.Tensor):
            raise FFPAValueError("%s: is %s; expected a torch.Tensor" % (name, type(tensor)))
        _same_device(tensor, name, query)
    squeeze = query.dim() == 3
    if squeeze:  # [H, N, D]: one batch
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    for tensor, name in ((query, "query"), (key, "key"), (value, "value")):
        if tensor.dim() != 4:
            raise FFPAValueError("%s: has %d dims; expected [B, H, N, D] (or [H, N, D])"
                                 % (name, tensor.dim() - squeeze))
    hq, hkv = query.shape[1], key.shape[1]
    if hq != hkv and not enable_gqa:
        raise FFPAValueError("key: has %d heads but query has %d; expected equal head counts, "
                             "or enable_gqa=True for grouped-query attention" % (hkv, hq))
    if causal_alignment not in ("top_left", "bottom_right"):
        raise FFPAValueError("causal_alignment: is %r; expected 'top_left' or 'bottom_right'"
                             % (causal_alignment,))

    bias = _additive_bias(attn_mask, query)
    nq, nkv = query.shape[2], key.shape[2]
    causal = bool(is_causal)
    if causal and causal_alignment == "top_left" and nq != nkv:
        # libffpa's causal is bottom-right aligned; PyTorch's is_causal is top-left
        # aligned. They agree when Nq == Nkv; otherwise mask explicitly.
        causal_bias = _top_left_causal_bias(nq, nkv, query)
        bias = causal_bias if bias is None else bias + causal_bias
        causal = False

    dropout_p = float(dropout_p)
    seed = _seed_tensor(dropout_p, dropout_seed)
    out, lse = _ops.attention(_ops._no_zero_strides(query), _ops._no_zero_strides(key),
                              _ops._no_zero_strides(value), bias, None, None, seed, causal,
                              _scale_arg(scale), dropout_p)
    if squeeze:
        out, lse = out.squeeze(0), lse.squeeze(0)
    return out, lse


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """Drop-in for torch.nn.functional.scaled_dot_product_attention.

    query [B, Hq, Nq, D], key [B, Hkv, Nkv, D], value [B, Hkv, Nkv, Dv] (or the
    same without B); fp16, bf16 or fp32, on the CPU or a CUDA device. Any strides
    work without a copy (e.g. [B, N, H, D] memory seen through .transpose(1, 2)).

    attn_mask: bool (True = attend) or float (added to the scores), broadcastable
    to [B, Hq, Nq, Nkv]; a float mask that requires grad gets a gradient.
    is_causal: PyTorch's top-left aligned causal mask (row i sees keys j <= i).
    It runs natively when Nq == Nkv; otherwise it becomes an explicit additive
    mask. It may be combined with attn_mask (PyTorch refuses that combination).
    dropout_p is applied whatever the module's training mode, as in PyTorch; the
    mask's seed comes from torch's default CPU generator.
    Rows that see no key give 0 (PyTorch's math kernel gives NaN there).
    """
    out, _ = _dense(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    "top_left", None)
    return out


def attention_with_lse(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                       scale=None, enable_gqa=False, *, causal_alignment="top_left",
                       dropout_seed=None):
    """scaled_dot_product_attention that also returns the float32 log-sum-exp.

    Returns (out, lse), lse [B, Hq, Nq]: natural-log logsumexp of the scaled,
    biased, masked scores of each row (before dropout; -inf for rows that see no
    key). lse carries no gradient.
    causal_alignment="bottom_right" gives libffpa's / FlashAttention's causal mask
    (row i sees keys j <= i + Nkv - Nq), which never needs an explicit mask.
    dropout_seed fixes the dropout mask (see common/philox.h for its definition).
    """
    return _dense(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                  causal_alignment, dropout_seed)


def _host_cu_seqlens(cu, name):
    if not isinstance(cu, torch.Tensor):
        cu = torch.as_tensor(cu)
    if cu.dim() != 1 or cu.numel() < 2:
        raise FFPAValueError("%s: has shape %s; expected [batch + 1] cumulative offsets"
                             % (name, tuple(cu.shape)))
    if cu.dtype.is_floating_point or cu.dtype == torch.bool:
        raise FFPAValueError("%s: dtype %s; expected an integer tensor" % (name, cu.dtype))
    return cu.to(device="cpu", dtype=torch.int32).contiguous()


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None,
                     dropout_p=0.0, *, return_lse=False, dropout_seed=None):
    """Attention over a batch of variable-length sequences packed along the rows.

    q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv] (like
    flash_attn_varlen_func); sequence b owns rows cu_seqlens_q[b] ..
    cu_seqlens_q[b+1]-1 of q (likewise k/v with cu_seqlens_k). cu_seqlens may
    live on any device; they are copied to the host (a synchronisation for
    CUDA tensors). Hq must be a multiple of Hkv (GQA).
    causal is bottom-right aligned per sequence (row i sees keys
    j <= i + len_k - len_q), as in FlashAttention.
    Returns out [total_q, Hq, Dv], and with return_lse=True (out, lse [Hq, total_q]).
    """
    for tensor, name in ((k, "k"), (v, "v")):
        _same_device(tensor, name, q)
    for tensor, name in ((q, "q"), (k, "k"), (v, "v")):
        if tensor.dim() != 3:
            raise FFPAValueError("%s: has %d dims; expected packed [total, H, D]"
                                 % (name, tensor.dim()))
    cu_q = _host_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
    cu_k = _host_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
    dropout_p = float(dropout_p)
    seed = _seed_tensor(dropout_p, dropout_seed)
    out, lse = _ops.attention(_ops._no_zero_strides(q), _ops._no_zero_strides(k),
                              _ops._no_zero_strides(v), None, cu_q, cu_k, seed, bool(causal),
                              _scale_arg(scale), dropout_p)
    return (out, lse) if return_lse else out
