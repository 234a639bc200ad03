"""The differentiable attention op.

One op, ffpa::attention, covers dense [B, H, N, D] and packed varlen
[total, H, D] inputs: (q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed,
causal, scale, dropout_p, window_left, window_right, softcap, alibi_slopes,
max_seqlen_q, max_seqlen_k) -> (out, lse). max_seqlen_* >= 0: the offsets
are on q's device (read there only, so the call can be captured in a CUDA
graph); -1: host offsets. causal and the window are libffpa's (bottom-right aligned;
window bounds -1: unbounded, both -1: no window); the public functions turn
PyTorch's and FlashAttention's semantics into these arguments.

With torch >= 2.4 it is a torch.library custom op (with a fake kernel and an
autograd formula) so torch.compile traces through it; older torch gets the
same functions wrapped in a torch.autograd.Function.
"""

import os
from typing import Optional, Tuple

import torch

from . import _runtime


# ------------------------------------------------------------------ allocation

def _empty_out(q, dv):
    """Output shaped like q with head dim dv, in q's layout (BNHD stays BNHD)."""
    if q.dim() == 3:
        return q.new_empty((q.shape[0], q.shape[1], dv))
    b, h, n, _ = q.shape
    if h > 1 and n > 1 and q.stride(1) < q.stride(2):
        return q.new_empty((b, n, h, dv)).transpose(1, 2)
    return q.new_empty((b, h, n, dv))


def _empty_lse(q):
    """float32 LSE: [B, H, N] for dense q, [H, total] for packed q (flash-attn's layout)."""
    if q.dim() == 3:
        return torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    return torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)


def _empty_dbias(bias, needed):
    if needed:
        return torch.empty(bias.shape, dtype=torch.float32, device=bias.device)
    return torch.empty((0,), dtype=torch.float32, device=bias.device if bias is not None else "cpu")


def _no_zero_strides(t):
    """libffpa accepts stride 0 only on size-1 dims (outside bias): expanded grads get copied."""
    if any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape)):
        return t.contiguous()
    return t


def _no_keys(q, k, cu_k):
    return q.dim() == 4 and k.shape[2] == 0 and cu_k is None


# ------------------------------------------------------------------ real kernels

def _forward(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale, dropout_p,
             window_left, window_right, softcap, alibi_slopes, max_seqlen_q=-1, max_seqlen_k=-1):
    out = _empty_out(q, v.shape[-1])
    lse = _empty_lse(q)
    if out.numel() == 0:
        return out, lse
    if _no_keys(q, k, cu_seqlens_k):  # no keys: every row sees nothing
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    _runtime.forward(q, k, v, out, lse, bias, cu_seqlens_q, cu_seqlens_k, int(seed.item()),
                     causal, scale, dropout_p, (window_left, window_right, softcap, alibi_slopes),
                     (max_seqlen_q, max_seqlen_k))
    return out, lse


def _backward(dout, q, k, v, out, lse, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale,
              dropout_p, window_left, window_right, softcap, alibi_slopes, bias_grad,
              max_seqlen_q=-1, max_seqlen_k=-1):
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    dbias = _empty_dbias(bias, bias_grad)
    if out.numel() == 0 or _no_keys(q, k, cu_seqlens_k):
        for t in (dq, dk, dv, dbias):
            t.zero_()
    else:
        _runtime.backward(_no_zero_strides(dout), q, k, v, out, lse, dq, dk, dv, bias,
                          dbias if bias_grad else None, cu_seqlens_q, cu_seqlens_k,
                          int(seed.item()), causal, scale, dropout_p,
                          variants=(window_left, window_right, softcap, alibi_slopes),
                          max_seqlen=(max_seqlen_q, max_seqlen_k))
    if bias_grad:
        dbias = dbias.to(bias.dtype)
    return dq, dk, dv, dbias


def _fake_forward(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale, dropout_p,
                  window_left, window_right, softcap, alibi_slopes, max_seqlen_q=-1, max_seqlen_k=-1):
    return _empty_out(q, v.shape[-1]), _empty_lse(q)


def _fake_backward(dout, q, k, v, out, lse, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale,
                   dropout_p, window_left, window_right, softcap, alibi_slopes, bias_grad,
                   max_seqlen_q=-1, max_seqlen_k=-1):
    dbias = _empty_dbias(bias, bias_grad)
    if bias_grad:
        dbias = dbias.to(bias.dtype)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dbias


# ------------------------------------------------------------------ registration

# The op's inputs after q, k, v and bias that take no gradient: cu_seqlens_q,
# cu_seqlens_k, seed, causal, scale, dropout_p, window_left, window_right,
# softcap, alibi_slopes (ALiBi slopes are constants, as in FlashAttention),
# max_seqlen_q, max_seqlen_k.
_NON_TENSOR_INPUTS = 12

USES_CUSTOM_OP = (hasattr(torch, "library") and hasattr(torch.library, "custom_op")
                  and os.environ.get("FFPA_DISABLE_CUSTOM_OP", "0") in ("", "0"))

if USES_CUSTOM_OP:
    Tensor = torch.Tensor

    @torch.library.custom_op("ffpa::attention", mutates_args=())
    def _attention_op(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                      cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                      seed: Tensor, causal: bool, scale: float, dropout_p: float,
                      window_left: int, window_right: int, softcap: float,
                      alibi_slopes: Optional[Tensor], max_seqlen_q: int,
                      max_seqlen_k: int) -> Tuple[Tensor, Tensor]:
        return _forward(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale, dropout_p,
                        window_left, window_right, softcap, alibi_slopes, max_seqlen_q, max_seqlen_k)

    @torch.library.custom_op("ffpa::attention_backward", mutates_args=())
    def _attention_backward_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                               lse: Tensor, bias: Optional[Tensor],
                               cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                               seed: Tensor, causal: bool, scale: float, dropout_p: float,
                               window_left: int, window_right: int, softcap: float,
                               alibi_slopes: Optional[Tensor], bias_grad: bool,
                               max_seqlen_q: int,
                               max_seqlen_k: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return _backward(dout, q, k, v, out, lse, bias, cu_seqlens_q, cu_seqlens_k, seed, causal,
                         scale, dropout_p, window_left, window_right, softcap, alibi_slopes,
                         bias_grad, max_seqlen_q, max_seqlen_k)

    _attention_op.register_fake(_fake_forward)
    _attention_backward_op.register_fake(_fake_backward)

    def _setup_context(ctx, inputs, output):
        (q, k, v, bias, cu_q, cu_k, seed, causal, scale, dropout_p, window_left, window_right,
         softcap, alibi_slopes, max_seqlen_q, max_seqlen_k) = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, bias, cu_q, cu_k, seed, alibi_slopes)
        ctx.params = (causal, scale, dropout_p, window_left, window_right, softcap, max_seqlen_q,
                      max_seqlen_k)
        ctx.mark_non_differentiable(lse)

    def _op_backward(ctx, dout, dlse):
        q, k, v, out, lse, bias, cu_q, cu_k, seed, alibi_slopes = ctx.saved_tensors
        causal, scale, dropout_p, window_left, window_right, softcap, max_q, max_k = ctx.params
        bias_grad = bias is not None and ctx.needs_input_grad[3]
        dq, dk, dv, dbias = _attention_backward_op(dout, q, k, v, out, lse, bias, cu_q, cu_k, seed,
                                                   causal, scale, dropout_p, window_left,
                                                   window_right, softcap, alibi_slopes, bias_grad,
                                                   max_q, max_k)
        return (dq, dk, dv, (dbias if bias_grad else None)) + (None,) * _NON_TENSOR_INPUTS

    _attention_op.register_autograd(_op_backward, setup_context=_setup_context)

    def attention(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale, dropout_p,
                  window=(-1, -1), softcap=0.0, alibi_slopes=None, max_seqlen=(-1, -1)):
        return _attention_op(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, bool(causal),
                             float(scale), float(dropout_p), int(window[0]), int(window[1]),
                             float(softcap), alibi_slopes, int(max_seqlen[0]), int(max_seqlen[1]))

else:
    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, bias, cu_q, cu_k, seed, causal, scale, dropout_p, window_left,
                    window_right, softcap, alibi_slopes, max_seqlen_q, max_seqlen_k):
            out, lse = _forward(q, k, v, bias, cu_q, cu_k, seed, causal, scale, dropout_p,
                                window_left, window_right, softcap, alibi_slopes, max_seqlen_q,
                                max_seqlen_k)
            ctx.save_for_backward(q, k, v, out, lse, bias, cu_q, cu_k, seed, alibi_slopes)
            ctx.params = (causal, scale, dropout_p, window_left, window_right, softcap,
                          max_seqlen_q, max_seqlen_k)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, dout, dlse):
            q, k, v, out, lse, bias, cu_q, cu_k, seed, alibi_slopes = ctx.saved_tensors
            causal, scale, dropout_p, window_left, window_right, softcap, max_q, max_k = ctx.params
            bias_grad = bias is not None and ctx.needs_input_grad[3]
            dq, dk, dv, dbias = _backward(dout, q, k, v, out, lse, bias, cu_q, cu_k, seed, causal,
                                          scale, dropout_p, window_left, window_right, softcap,
                                          alibi_slopes, bias_grad, max_q, max_k)
            return (dq, dk, dv, (dbias if bias_grad else None)) + (None,) * _NON_TENSOR_INPUTS

    def attention(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, causal, scale, dropout_p,
                  window=(-1, -1), softcap=0.0, alibi_slopes=None, max_seqlen=(-1, -1)):
        return _Attention.apply(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, seed, bool(causal),
                                float(scale), float(dropout_p), int(window[0]), int(window[1]),
                                float(softcap), alibi_slopes, int(max_seqlen[0]),
                                int(max_seqlen[1]))
