"""Contexts, tensor descriptors and the calls into libffpa.

Everything here works on real tensors (no autograd): _ops.py builds the
differentiable functions on top.
"""

import contextlib
import ctypes
import threading

import torch

from . import _clib


class FFPAError(RuntimeError):
    """libffpa refused or failed a call; str() is the library's message."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class FFPAValueError(FFPAError, ValueError):
    """Bad argument (FFPA_ERR_INVALID_ARGUMENT, or rejected before the call)."""


class FFPAUnsupportedError(FFPAError, NotImplementedError):
    """Valid arguments this backend cannot handle (FFPA_ERR_UNSUPPORTED)."""


def _error(message, status):
    if status == _clib.ERR_INVALID_ARGUMENT:
        return FFPAValueError(message, status)
    if status == _clib.ERR_UNSUPPORTED:
        return FFPAUnsupportedError(message, status)
    return FFPAError(message, status)


_DTYPES = {
    torch.float16: _clib.F16,
    torch.bfloat16: _clib.BF16,
    torch.float32: _clib.F32,
}


def ffpa_dtype(dtype, argument):
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise FFPAValueError(
            "%s: dtype %s is not supported; expected torch.float16, torch.bfloat16 or torch.float32"
            % (argument, dtype)) from None


# ------------------------------------------------------------------ contexts

class Context:
    """One libffpa context (backend, device), used by one thread at a time."""

    def __init__(self, backend, device_index):
        lib = _clib.library()
        handle = ctypes.c_void_p()
        status = lib.ffpa_create(ctypes.byref(handle), backend.encode())
        if status != _clib.OK:
            message = lib.ffpa_last_error(None).decode()
            raise _error("backend %r: %s" % (backend, message or _clib.status_string(status)),
                         status)
        self._lib = lib
        self.handle = handle
        self.backend = backend
        self.device_index = device_index
        self.lock = threading.Lock()

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle:
            try:
                self._lib.ffpa_destroy(handle)
            except Exception:  # interpreter shutdown: the library may be gone
                pass
            self.handle = None

    @property
    def device_name(self):
        return self._lib.ffpa_device_name(self.handle).decode()

    def check(self, status):
        if status != _clib.OK:
            message = self._lib.ffpa_last_error(self.handle).decode()
            raise _error(message or _clib.status_string(status), status)


_contexts = {}
_contexts_lock = threading.Lock()


def context_for(device):
    """The cached context for a torch device (cpu -> "cpu", cuda:i -> "cuda" on device i)."""
    if device.type == "cpu":
        key = ("cpu", None)
    elif device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        # torch builds for ROCm also call their devices "cuda".
        backend = "hip" if getattr(torch.version, "hip", None) else "cuda"
        key = (backend, index)
    else:
        raise FFPAValueError("q: device %s is not supported; expected a cpu or cuda tensor"
                             % device)
    ctx = _contexts.get(key)
    if ctx is None:
        with _contexts_lock:
            ctx = _contexts.get(key)
            if ctx is None:
                with _device_guard(key[1]):
                    ctx = Context(key[0], key[1])
                _contexts[key] = ctx
    return ctx


def _device_guard(index):
    if index is None:
        return contextlib.nullcontext()
    return torch.cuda.device(index)


@contextlib.contextmanager
def _call(ctx):
    """Holds ctx for one call on the current device and PyTorch's current stream."""
    with ctx.lock, _device_guard(ctx.device_index):
        if ctx.device_index is not None:
            stream = torch.cuda.current_stream(ctx.device_index).cuda_stream
            ctx.check(ctx._lib.ffpa_set_stream(ctx.handle, ctypes.c_void_p(stream)))
        yield ctx._lib


# ------------------------------------------------------------------ descriptors

def describe(t, argument, shape=None, stride=None, dtype=None):
    """ffpa_tensor over t; shape/stride default to t's own (t must then be 4-D)."""
    desc = _clib.Tensor()
    desc.data = t.data_ptr() if t.numel() > 0 else None
    desc.dtype = ffpa_dtype(dtype or t.dtype, argument)
    shape = tuple(t.shape) if shape is None else shape
    stride = tuple(t.stride()) if stride is None else stride
    for i in range(4):
        desc.shape[i] = shape[i]
        desc.stride[i] = stride[i]
    return desc


def describe_qkv(t, argument, packed):
    """[B, H, N, D] as is, or a packed varlen [total, H, D] as [1, H, total, D] (sb = 0)."""
    if packed:
        total, heads, dim = t.shape
        s_row, s_head, s_dim = t.stride()
        return describe(t, argument, (1, heads, total, dim), (0, s_head, s_row, s_dim))
    return describe(t, argument)


def describe_lse(lse, packed):
    """LSE as float32 [B, H, N, 1]: dense lse is [B, H, N], packed lse is [H, total]."""
    if packed:
        heads, total = lse.shape
        return describe(lse, "lse", (1, heads, total, 1), (0, lse.stride(0), lse.stride(1), 1))
    b, h, n = lse.shape
    return describe(lse, "lse", (b, h, n, 1), tuple(lse.stride()) + (1,))


def describe_bias(bias, argument):
    """A 4-D bias; dimensions of size 1 broadcast (stride 0)."""
    stride = tuple(0 if size == 1 else s for size, s in zip(bias.shape, bias.stride()))
    return describe(bias, argument, stride=stride)


def describe_alibi(slopes):
    """ALiBi slopes, FlashAttention's float32 [Hq] or [B, Hq], as libffpa's [B|1, Hq, 1, 1]."""
    if slopes.dim() == 1:
        return describe(slopes, "alibi_slopes", (1, slopes.shape[0], 1, 1), (0, slopes.stride(0), 0, 0))
    if slopes.dim() == 2:
        b, h = slopes.shape
        sb = 0 if b == 1 else slopes.stride(0)
        return describe(slopes, "alibi_slopes", (b, h, 1, 1), (sb, slopes.stride(1), 0, 0))
    raise FFPAValueError("alibi_slopes: has %d dims; expected [Hq] or [B, Hq]" % slopes.dim())


def set_variants(opt, variants):
    """window (left, right; both -1: none), softcap (0: none), ALiBi slopes (or None)
    into opt; returns the slopes' descriptor, which must outlive the call."""
    window_left, window_right, softcap, slopes = variants
    if window_left != -1 or window_right != -1:
        opt.window = 1
        opt.window_left = window_left
        opt.window_right = window_right
    opt.softcap = softcap
    if slopes is None:
        return None
    desc = describe_alibi(slopes)
    opt.alibi_slopes = ctypes.pointer(desc)
    return desc


NO_VARIANTS = (-1, -1, 0.0, None)


def make_options(causal, scale, dropout_p, seed, bias_desc, cu_q, cu_k, max_seqlen=(-1, -1)):
    """max_seqlen (q, k) >= 0: cu_q / cu_k are in the device's memory (never read
    on the host, so the call can be captured in a CUDA graph)."""
    lib = _clib.library()
    opt = lib.ffpa_options_default()
    opt.scale = scale
    opt.causal = 1 if causal else 0
    opt.dropout_p = dropout_p
    opt.dropout_seed = seed & 0xFFFFFFFFFFFFFFFF
    opt.dropout_offset = 0
    if bias_desc is not None:
        opt.bias = ctypes.pointer(bias_desc)
    if cu_q is not None:
        opt.cu_seqlens_q = ctypes.cast(cu_q.data_ptr(), ctypes.POINTER(ctypes.c_int32))
        opt.cu_seqlens_k = ctypes.cast(cu_k.data_ptr(), ctypes.POINTER(ctypes.c_int32))
        opt.varlen_batch = cu_q.numel() - 1
        if max_seqlen[0] >= 0:
            opt.cu_seqlens_on_device = 1
            opt.max_seqlen_q, opt.max_seqlen_k = int(max_seqlen[0]), int(max_seqlen[1])
    return opt


def _with_workspace(lib, ctx, size_fn, args, opt, device, run):
    """Queries the workspace size, hands libffpa a PyTorch buffer, runs, lets it go."""
    size = ctypes.c_size_t(0)
    ctx.check(size_fn(ctx.handle, *args, ctypes.byref(opt), ctypes.byref(size)))
    workspace = None
    if size.value:
        # The caching allocator reuses this block only in stream order, so freeing
        # it right after an asynchronous launch on the current stream is safe.
        workspace = torch.empty(size.value, dtype=torch.uint8, device=device)
        ctx.check(lib.ffpa_set_workspace(ctx.handle, ctypes.c_void_p(workspace.data_ptr()),
                                         size.value))
    try:
        ctx.check(run())
    finally:
        if workspace is not None:
            lib.ffpa_set_workspace(ctx.handle, None, 0)


# ------------------------------------------------------------------ calls

def forward(q, k, v, out, lse, bias, cu_q, cu_k, seed, causal, scale, dropout_p,
            variants=NO_VARIANTS, max_seqlen=(-1, -1)):
    """Fills out and lse. Tensors are [B, H, N, D] (lse [B, H, N]) or, when cu_q is
    given, packed [total, H, D] (lse [H, total]); bias is 4-D or None; cu_* are
    host int32 tensors; variants: (window_left, window_right, softcap, alibi_slopes)."""
    packed = cu_q is not None
    qd = describe_qkv(q, "q", packed)
    kd = describe_qkv(k, "k", packed)
    vd = describe_qkv(v, "v", packed)
    od = describe_qkv(out, "o", packed)
    ld = describe_lse(lse, packed)
    bd = describe_bias(bias, "bias") if bias is not None else None
    opt = make_options(causal, scale, dropout_p, seed, bd, cu_q, cu_k, max_seqlen)
    alibi = set_variants(opt, variants)  # noqa: F841 (kept alive through the call)
    ctx = context_for(q.device)
    refs = (ctypes.byref(qd), ctypes.byref(kd), ctypes.byref(vd))
    with _call(ctx) as lib:
        _with_workspace(lib, ctx, lib.ffpa_forward_workspace_size, refs, opt, q.device,
                        lambda: lib.ffpa_forward(ctx.handle, *refs, ctypes.byref(od),
                                                 ctypes.byref(ld), ctypes.byref(opt)))


def backward(dout, q, k, v, out, lse, dq, dk, dv, bias, dbias, cu_q, cu_k, seed, causal,
             scale, dropout_p, deterministic=False, variants=NO_VARIANTS, max_seqlen=(-1, -1)):
    """Fills dq, dk, dv (and dbias when given, float32 shaped like bias)."""
    packed = cu_q is not None
    bd = describe_bias(bias, "bias") if bias is not None else None
    dbd = describe_bias(dbias, "dbias") if dbias is not None else None
    opt = make_options(causal, scale, dropout_p, seed, bd, cu_q, cu_k, max_seqlen)
    if dbd is not None:
        opt.dbias = ctypes.pointer(dbd)
    opt.deterministic = 1 if deterministic else 0
    alibi = set_variants(opt, variants)  # noqa: F841 (kept alive through the call)
    descs = [describe_qkv(t, name, packed) for t, name in
             ((dout, "dout"), (q, "q"), (k, "k"), (v, "v"), (out, "out"))]
    descs.append(describe_lse(lse, packed))
    descs += [describe_qkv(t, name, packed) for t, name in ((dq, "dq"), (dk, "dk"), (dv, "dv"))]
    refs = [ctypes.byref(d) for d in descs]
    ctx = context_for(q.device)
    with _call(ctx) as lib:
        _with_workspace(lib, ctx, lib.ffpa_backward_workspace_size, refs[1:4], opt, q.device,
                        lambda: lib.ffpa_backward(ctx.handle, *refs, ctypes.byref(opt)))


# ------------------------------------------------------------------ KV cache

def _bhnd_of_bnhd(t, argument):
    """A [B, N, H, D] tensor (FlashAttention's layout) as ffpa's [B, H, N, D] view."""
    b, n, h, d = t.shape
    s = t.stride()
    return describe(t, argument, (b, h, n, d), (s[0], s[2], s[1], s[3]))


def _int32_ptr(t):
    return ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_int32))


def _kv_workspace(ctx, lib, size, device):
    """The context's KV-cache workspace: grown when a call needs more, else
    reused, so steady-state calls (and CUDA-graph replays) allocate nothing."""
    ws = getattr(ctx, "kv_workspace", None)
    if size and (ws is None or ws.numel() < size):
        ws = torch.empty(size, dtype=torch.uint8, device=device)
        ctx.kv_workspace = ws
    if ws is None:
        return lib.ffpa_set_workspace(ctx.handle, None, 0)
    return lib.ffpa_set_workspace(ctx.handle, ctypes.c_void_p(ws.data_ptr()), ws.numel())


def forward_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, out, lse, causal, scale,
                    check_tables, variants=NO_VARIANTS):
    """Fills out [B, Nq, Hq, Dv] and lse [B, Hq, Nq] (may be None); q, k, v in
    [B, N, H, D], caches [pages, page_size, Hkv, D] (dense: [B, capacity, Hkv, D]);
    cache_seqlens int32 [B] and block_table int32 [B, max_pages] on q's device."""
    cache = _clib.KvCache()
    cache.k = _bhnd_of_bnhd(k_cache, "k_cache")
    cache.v = _bhnd_of_bnhd(v_cache, "v_cache")
    if block_table is not None:
        cache.block_table = _int32_ptr(block_table)
        cache.max_pages_per_seq = block_table.shape[1]
        cache.block_table_stride = block_table.stride(0)
    cache.cache_seqlens = _int32_ptr(cache_seqlens)
    cache.trusted_tables = 0 if check_tables else 1
    qd = _bhnd_of_bnhd(q, "q")
    od = _bhnd_of_bnhd(out, "out")
    kd = _bhnd_of_bnhd(k, "k") if k is not None else None
    vd = _bhnd_of_bnhd(v, "v") if v is not None else None
    ld = None
    if lse is not None:
        b, h, n = lse.shape
        ld = describe(lse, "softmax_lse", (b, h, n, 1), tuple(lse.stride()) + (1,))
    opt = make_options(causal, scale, 0.0, 0, None, None, None)
    alibi = set_variants(opt, variants)  # noqa: F841 (kept alive through the call)
    ctx = context_for(q.device)
    ref = lambda d: ctypes.byref(d) if d is not None else None  # noqa: E731
    with _call(ctx) as lib:
        size = ctypes.c_size_t(0)
        ctx.check(lib.ffpa_forward_kvcache_workspace_size(ctx.handle, ref(qd), ctypes.byref(cache),
                                                          ctypes.byref(opt), ctypes.byref(size)))
        ctx.check(_kv_workspace(ctx, lib, size.value, q.device))
        try:
            ctx.check(lib.ffpa_forward_kvcache(ctx.handle, ref(qd), ctypes.byref(cache), ref(kd), ref(vd),
                                               ref(od), ref(ld), ctypes.byref(opt)))
        finally:
            lib.ffpa_set_workspace(ctx.handle, None, 0)


# ------------------------------------------------------------------ merging partial results

def merge_partials(outs, lses, out, lse):
    """ffpa_merge_partials: out [B, H, N, Dv] (any dtype; may be outs[i] itself) and
    lse float32 [B, H, N] (may be lses[j] itself, or None) from the parts outs[i]
    [B, H, N, Dv] and lses[i] float32 [B, H, N], all on one device."""
    parts = len(outs)
    o_arr = (_clib.Tensor * max(parts, 1))()
    l_arr = (_clib.Tensor * max(parts, 1))()
    for i, (o_i, l_i) in enumerate(zip(outs, lses)):
        o_arr[i] = describe(o_i, "o_parts[%d]" % i)
        b, h, n = l_i.shape
        l_arr[i] = describe(l_i, "lse_parts[%d]" % i, (b, h, n, 1), tuple(l_i.stride()) + (1,))
    od = describe(out, "out")
    ld = None
    if lse is not None:
        b, h, n = lse.shape
        ld = describe(lse, "lse", (b, h, n, 1), tuple(lse.stride()) + (1,))
    ctx = context_for(out.device)
    with _call(ctx) as lib:
        ctx.check(lib.ffpa_merge_partials(ctx.handle, parts, o_arr, l_arr, ctypes.byref(od),
                                          ctypes.byref(ld) if ld is not None else None))
