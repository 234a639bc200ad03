"""Public attention functions with PyTorch semantics."""

import math

import torch

from . import _clib, _ops, _runtime
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


def _variants(window_size, softcap, alibi_slopes, query):
    """FlashAttention's window_size (left, right; -1: unbounded), softcap (0: none)
    and alibi_slopes (float32 [Hq] or [B, Hq]) as the op's (window, softcap, slopes)."""
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise FFPAValueError("window_size: is %r; expected a pair (left, right) of ints, -1 for "
                             "unbounded" % (window_size,)) from None
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor):
            raise FFPAValueError("alibi_slopes: is %s; expected a float32 torch.Tensor"
                                 % type(alibi_slopes))
        _same_device(alibi_slopes, "alibi_slopes", query)
    return (left, right), float(softcap), alibi_slopes


def _top_left_causal_bias(nq, nkv, query):
    """PyTorch's is_causal mask (row i sees columns j <= i) as an additive [1, 1, Nq, Nkv] bias."""
    rows = torch.arange(nq, device=query.device).unsqueeze(1)
    cols = torch.arange(nkv, device=query.device).unsqueeze(0)
    bias = torch.zeros((nq, nkv), dtype=query.dtype, device=query.device)
    return bias.masked_fill(cols > rows, float("-inf")).reshape(1, 1, nq, nkv)


def _dense(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
           causal_alignment, dropout_seed, variants):
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
    window, softcap, slopes = _variants(*variants, query)
    out, lse = _ops.attention(_ops._no_zero_strides(query), _ops._no_zero_strides(key),
                              _ops._no_zero_strides(value), bias, None, None, seed, causal,
                              _scale_arg(scale), dropout_p, window, softcap, slopes)
    if squeeze:
        out, lse = out.squeeze(0), lse.squeeze(0)
    return out, lse


_VARIANTS_DOC = """
    window_size=(left, right), softcap, alibi_slopes: FlashAttention's variants
    (keyword only). The window keeps keys j with
    i + Nkv - Nq - left <= j <= i + Nkv - Nq + right (bottom-right aligned, as in
    FlashAttention; -1 leaves a side unbounded; (-1, -1): no window); softcap > 0
    turns the scaled scores s into softcap * tanh(s / softcap) before the mask and
    ALiBi; alibi_slopes (float32 [Hq] or [B, Hq]) adds -slope * |i + Nkv - Nq - j|
    and gets no gradient.
"""


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
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
                    "top_left", None, (window_size, softcap, alibi_slopes))
    return out


def attention_with_lse(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                       scale=None, enable_gqa=False, *, causal_alignment="top_left",
                       dropout_seed=None, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """scaled_dot_product_attention that also returns the float32 log-sum-exp.

    Returns (out, lse), lse [B, Hq, Nq]: natural-log logsumexp of the scaled,
    biased, masked scores of each row (before dropout; -inf for rows that see no
    key). lse carries no gradient.
    causal_alignment="bottom_right" gives libffpa's / FlashAttention's causal mask
    (row i sees keys j <= i + Nkv - Nq), which never needs an explicit mask.
    dropout_seed fixes the dropout mask (see common/philox.h for its definition).
    """
    return _dense(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                  causal_alignment, dropout_seed, (window_size, softcap, alibi_slopes))


def _host_cu_seqlens(cu, name):
    if not isinstance(cu, torch.Tensor):
        cu = torch.as_tensor(cu)
    if cu.dim() != 1 or cu.numel() < 2:
        raise FFPAValueError("%s: has shape %s; expected [batch + 1] cumulative offsets"
                             % (name, tuple(cu.shape)))
    if cu.dtype.is_floating_point or cu.dtype == torch.bool:
        raise FFPAValueError("%s: dtype %s; expected an integer tensor" % (name, cu.dtype))
    return cu.to(device="cpu", dtype=torch.int32).contiguous()


def _device_cu_seqlens(cu, name, query):
    """Offsets already on query's (GPU) device as int32, or None: they go to the
    kernels as they are, never to the host."""
    if not isinstance(cu, torch.Tensor) or query.device.type == "cpu" or cu.device != query.device:
        return None
    if cu.dim() != 1 or cu.numel() < 2:
        raise FFPAValueError("%s: has shape %s; expected [batch + 1] cumulative offsets"
                             % (name, tuple(cu.shape)))
    if cu.dtype.is_floating_point or cu.dtype == torch.bool:
        raise FFPAValueError("%s: dtype %s; expected an integer tensor" % (name, cu.dtype))
    return cu.to(dtype=torch.int32).contiguous()


def _max_seqlen(value, name, rows):
    value = int(value)
    if value < 0 or value > rows:
        raise FFPAValueError("%s: %d; expected 0 <= %s <= %d (the packed rows)" % (name, value, name, rows))
    return value


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None,
                     dropout_p=0.0, *, return_lse=False, dropout_seed=None, window_size=(-1, -1),
                     softcap=0.0, alibi_slopes=None, max_seqlen_q=None, max_seqlen_k=None):
    """Attention over a batch of variable-length sequences packed along the rows.

    q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv] (like
    flash_attn_varlen_func); sequence b owns rows cu_seqlens_q[b] ..
    cu_seqlens_q[b+1]-1 of q (likewise k/v with cu_seqlens_k). With
    max_seqlen_q and max_seqlen_k (the longest sequences, as
    flash_attn_varlen_func takes them) and cu_seqlens on q's GPU, the offsets
    stay there: no synchronisation, so the call can be captured in a CUDA
    graph; they are trusted then (0 first, non-decreasing, the packed rows
    last, no sequence longer than its maximum). Otherwise cu_seqlens may live
    on any device; they are copied to the host and checked (a
    synchronisation for CUDA tensors). Hq must be a multiple of Hkv (GQA).
    causal is bottom-right aligned per sequence (row i sees keys
    j <= i + len_k - len_q), as in FlashAttention.
    Returns out [total_q, Hq, Dv], and with return_lse=True (out, lse [Hq, total_q]).
    The window is bottom-right aligned per sequence; alibi_slopes [B, Hq] are per
    sequence.
    """
    for tensor, name in ((k, "k"), (v, "v")):
        _same_device(tensor, name, q)
    for tensor, name in ((q, "q"), (k, "k"), (v, "v")):
        if tensor.dim() != 3:
            raise FFPAValueError("%s: has %d dims; expected packed [total, H, D]"
                                 % (name, tensor.dim()))
    if (max_seqlen_q is None) != (max_seqlen_k is None):
        raise FFPAValueError("max_seqlen_q, max_seqlen_k: one is given; expected both or neither")
    max_seqlen = (-1, -1)
    cu_q = cu_k = None
    if max_seqlen_q is not None:
        cu_q = _device_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q)
        cu_k = _device_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q)
        if cu_q is not None and cu_k is not None:
            if cu_q.numel() != cu_k.numel():
                raise FFPAValueError("cu_seqlens_k: %d offsets; expected %d, as cu_seqlens_q"
                                     % (cu_k.numel(), cu_q.numel()))
            max_seqlen = (_max_seqlen(max_seqlen_q, "max_seqlen_q", q.shape[0]),
                          _max_seqlen(max_seqlen_k, "max_seqlen_k", k.shape[0]))
    if max_seqlen[0] < 0:
        cu_q = _host_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
        cu_k = _host_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
    dropout_p = float(dropout_p)
    seed = _seed_tensor(dropout_p, dropout_seed)
    window, softcap, slopes = _variants(window_size, softcap, alibi_slopes, q)
    out, lse = _ops.attention(_ops._no_zero_strides(q), _ops._no_zero_strides(k),
                              _ops._no_zero_strides(v), None, cu_q, cu_k, seed, bool(causal),
                              _scale_arg(scale), dropout_p, window, softcap, slopes, max_seqlen)
    return (out, lse) if return_lse else out


def _int32_on(t, name, query, dims):
    """An int32 index tensor on query's device (converted when it is not one)."""
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t, dtype=torch.int32, device=query.device)
    if t.dim() != dims:
        raise FFPAValueError("%s: has %d dims; expected %d" % (name, t.dim(), dims))
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise FFPAValueError("%s: dtype %s; expected torch.int32" % (name, t.dtype))
    if t.device != query.device or t.dtype != torch.int32 or t.stride(-1) != 1:
        t = t.to(device=query.device, dtype=torch.int32).contiguous()
    return t


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale=None, causal=False, return_softmax_lse=False, *, out=None,
                            check_tables=None, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """Attention of new tokens against a (paged) KV cache, as FlashAttention's
    flash_attn_with_kvcache, for decode, speculative decode and chunked prefill.

    q [B, Nq, Hq, D]; k_cache / v_cache [num_pages, page_size, Hkv, D / Dv] with
    block_table int32 [B, max_pages] (page_size a multiple of 16), or without it a
    dense cache [B, capacity, Hkv, D]. cache_seqlens: int32 [B] tokens already
    cached (an int for all). k, v [B, Nq, Hkv, D]: appended to the cache at
    cache_seqlens[b] before attending (the cache is updated in place; advancing
    cache_seqlens is the caller's). causal: token i of the step sees cached and
    new keys up to its own position (bottom-right aligned per sequence).
    Absorbed MLA: pass v_cache = k_cache[..., :Dv] (a view, no copy) and v=None.
    Hq must be a multiple of Hkv; the query heads of a KV head are computed together.

    window_size, softcap, alibi_slopes (float32 [Hq] or [B, Hq]): FlashAttention's,
    bottom-right aligned on each sequence's keys (token i of the step sits at
    cache position cache_seqlens[b] + i).

    Returns out [B, Nq, Hq, Dv] (written into `out` when given), and with
    return_softmax_lse=True (out, lse float32 [B, Hq, Nq]).

    check_tables: True copies block_table and cache_seqlens to the host and
    checks them (a synchronisation; bad entries raise FFPAValueError); False
    trusts them (GPU kernels still never read outside the pool). None: check,
    except while the current CUDA stream is being captured into a graph. With
    out given and check_tables False a call allocates nothing once warm (the
    workspace is kept per device), so it can be captured and replayed with new
    cache_seqlens and block_table contents.
    """
    for tensor, name in ((k_cache, "k_cache"), (v_cache, "v_cache"), (k, "k"), (v, "v")):
        if tensor is not None:
            _same_device(tensor, name, q)
            if tensor.dim() != 4:
                raise FFPAValueError("%s: has %d dims; expected 4" % (name, tensor.dim()))
    if q.dim() != 4:
        raise FFPAValueError("q: has %d dims; expected [B, Nq, Hq, D]" % q.dim())
    if cache_seqlens is None:
        raise FFPAValueError("cache_seqlens: is None; expected int32 [B] cached lengths (or an int)")
    if not isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = torch.full((q.shape[0],), int(cache_seqlens), dtype=torch.int32, device=q.device)
    cache_seqlens = _int32_on(cache_seqlens, "cache_seqlens", q, 1)
    if block_table is not None:
        block_table = _int32_on(block_table, "block_table", q, 2)
    b, nq, hq, _ = q.shape
    dv = v_cache.shape[3]
    if out is None:
        out = torch.empty((b, nq, hq, dv), dtype=q.dtype, device=q.device)
    elif out.shape != (b, nq, hq, dv) or out.dtype != q.dtype or out.device != q.device:
        raise FFPAValueError("out: is %s %s on %s; expected %s %s on %s"
                             % (tuple(out.shape), out.dtype, out.device, (b, nq, hq, dv), q.dtype, q.device))
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device) if return_softmax_lse else None
    if check_tables is None:
        check_tables = not (q.is_cuda and torch.cuda.is_current_stream_capturing())
    window, softcap, slopes = _variants(window_size, softcap, alibi_slopes, q)
    _runtime.forward_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, out, lse, bool(causal),
                             _scale_arg(softmax_scale), bool(check_tables),
                             (window[0], window[1], softcap, slopes))
    return (out, lse) if return_softmax_lse else out


for _fn in (scaled_dot_product_attention, attention_with_lse, varlen_attention):
    _fn.__doc__ += _VARIANTS_DOC


def merge_partials(outs, lses, out=None, lse=None):
    """Joins attention computed over disjoint key ranges, by log-sum-exp:

        lse = log(sum_i exp(lses[i])),   out = sum_i exp(lses[i] - lse) * outs[i]

    in float32 (context parallelism, split-KV). outs: 1..16 tensors [B, H, N, Dv]
    (float16, bfloat16 or float32, dtypes may differ); lses: float32 [B, H, N], as
    attention_with_lse returns them. A part whose LSE is -inf saw no key and adds
    nothing. out (default: a new tensor of outs[0]'s dtype) and lse (default: a
    new float32 tensor) may be outs[i] and lses[j] themselves, to accumulate in
    place. Returns (out, lse). Not differentiable (ring attention's backward
    uses the merged LSE instead)."""
    outs, lses = list(outs), list(lses)
    if not 1 <= len(outs) <= _clib.MERGE_MAX_PARTS or len(lses) != len(outs):
        raise FFPAValueError("merge_partials: %d outs and %d lses; expected the same count, 1..%d"
                             % (len(outs), len(lses), _clib.MERGE_MAX_PARTS))
    for i, t in enumerate(outs + lses):
        name = ("outs[%d]" % i) if i < len(outs) else ("lses[%d]" % (i - len(outs)))
        want = 4 if i < len(outs) else 3
        if t.dim() != want:
            raise FFPAValueError("merge_partials: %s has %d dims; expected %d" % (name, t.dim(), want))
        _same_device(t, name, outs[0])
    if out is None:
        out = torch.empty(outs[0].shape, dtype=outs[0].dtype, device=outs[0].device)
    if lse is None:
        lse = torch.empty(outs[0].shape[:3], dtype=torch.float32, device=outs[0].device)
    _runtime.merge_partials(outs, lses, out, lse)
    return out, lse
