"""Context parallelism: one attention over a sequence sharded across ranks.

    import torch.distributed as dist, ffpa.distributed as cp
    q_r, k_r, v_r = (cp.shard(t, causal=True) for t in (q, k, v))   # this rank's rows
    out_r = cp.ring_attention(q_r, k_r, v_r, causal=True)           # differentiable
    out = cp.unshard(out_r, q.shape[2], causal=True)                 # if the whole is wanted

Tensors are laid out as for torch.nn.functional.scaled_dot_product_attention,
[B, H, N, D] (any strides), and every rank passes its slice of the sequence
dimension. Two layouts:

* "contiguous": rank r holds one run of rows, the runs in rank order (any
  lengths, 0 included).
* "zigzag" (the default with causal=True): the sequence is cut into 2W pieces
  (torch.tensor_split's sizes, W ranks) and rank r holds pieces r and
  2W-1-r, one after the other, so that every rank has the same causal work.
  shard() makes this layout.

ring_attention: K/V blocks travel around the ring (isend/irecv to the next
rank, overlapped with the attention of the block in hand); each block's
partial result is merged into a float32 accumulator by LSE with libffpa's
merge (ffpa.merge_partials). The backward sends the blocks around again,
with their float32 dK/dV accumulators one hop behind, and returns each
block's gradient to its owner.

allgather_kv_attention: K and V are gathered whole on every rank (cheap
when they are small: GQA/MQA, MLA), each local piece of queries attends to
the keys it can see in one call, and dK/dV are summed back (all-reduce).

Both work on any torch.distributed backend with point-to-point and
all-gather support: NCCL for CUDA tensors, gloo for CPU tensors (libffpa's
cpu backend). Dropout, masks and the attention variants are not offered
here; the mask is causal or none.
"""

import math

import torch
import torch.distributed as dist

from . import _ops, _runtime
from ._runtime import FFPAValueError

__all__ = ["shard", "unshard", "ring_attention", "allgather_kv_attention"]

_SEQ = 2  # the sequence dimension of [B, H, N, D]


# ------------------------------------------------------------------ geometry

def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _global_rank(group, rank):
    if group is None:
        return rank
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, rank)
    return dist.distributed_c10d._get_global_rank(group, rank)


def _piece_sizes(n, pieces):
    """Row counts of torch.tensor_split(x, pieces) over n rows."""
    return [n // pieces + (1 if i < n % pieces else 0) for i in range(pieces)]


def _layout(layout, causal):
    layout = layout or ("zigzag" if causal else "contiguous")
    if layout not in ("zigzag", "contiguous"):
        raise FFPAValueError("layout: %r; expected 'zigzag' or 'contiguous'" % (layout,))
    return layout


class _Chunk:
    """A run of rows: global start, length, offset in its rank's local tensor."""

    __slots__ = ("start", "length", "offset")

    def __init__(self, start, length, offset):
        self.start, self.length, self.offset = start, length, offset


def _chunks_of(n, world, layout, lengths=None):
    """[rank] -> [_Chunk] for a sequence of n rows (contiguous: the ranks' lengths)."""
    if layout == "contiguous":
        out, start = [], 0
        for length in lengths:
            out.append([_Chunk(start, length, 0)])
            start += length
        return out
    sizes = _piece_sizes(n, 2 * world)
    starts = [sum(sizes[:i]) for i in range(2 * world)]
    out = []
    for r in range(world):
        a, b = r, 2 * world - 1 - r
        out.append([_Chunk(starts[a], sizes[a], 0), _Chunk(starts[b], sizes[b], sizes[a])])
    return out


def _gather_lengths(length, group, device):
    world, _ = _world(group)
    mine = torch.tensor([length], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    return [int(t.item()) for t in every]


def _comm_device(x, group):
    """Where collectives' small tensors live: the GPU for NCCL, else the CPU."""
    backend = dist.get_backend(group)
    return x.device if str(backend).lower() == "nccl" else torch.device("cpu")


class _Geometry:
    """Who holds which rows: world size, this rank, every rank's chunks, n rows in all."""

    __slots__ = ("world", "rank", "chunks", "n")

    def __init__(self, world, rank, chunks, n):
        self.world, self.rank, self.chunks, self.n = world, rank, chunks, n


def _geometry(q, k, group, layout, causal):
    """Every rank's query and key chunks, checked against the layout (the ranks'
    row counts all-gathered: once per call, kept for the backward)."""
    world, rank = _world(group)
    layout = _layout(layout, causal)
    device = _comm_device(q, group)
    lq = _gather_lengths(q.shape[_SEQ], group, device)
    lk = lq if k is None else _gather_lengths(k.shape[_SEQ], group, device)
    if lq != lk:
        raise FFPAValueError("k: ranks hold %s key rows and %s query rows; expected the same split of one "
                             "sequence (self-attention)" % (lk, lq))
    n = sum(lq)
    chunks = _chunks_of(n, world, layout, lq)
    want = [sum(c.length for c in cs) for cs in chunks]
    if want != lq:
        raise FFPAValueError("q: ranks hold %s rows; the %s layout of %d rows has %s (make the slices with "
                             "ffpa.distributed.shard)" % (lq, layout, n, want))
    return _Geometry(world, rank, chunks, n)


def _visibility(qc, kc, causal):
    """'full', 'diag' (causal inside the same rows), or None (nothing visible)."""
    if qc.length == 0 or kc.length == 0:
        return None
    if not causal or kc.start + kc.length - 1 <= qc.start:
        return "full"
    if kc.start > qc.start + qc.length - 1:
        return None
    if kc.start == qc.start and kc.length == qc.length:
        return "diag"
    raise FFPAValueError("internal: query rows [%d, %d) and key rows [%d, %d) overlap partially"
                         % (qc.start, qc.start + qc.length, kc.start, kc.start + kc.length))


def _segments(q_chunks, k_chunks, causal):
    """(q chunk, key offset, key length, causal) calls for one block of keys:
    adjacent fully visible key chunks go in one call, and so does a diagonal
    chunk right after them (libffpa's causal mask is bottom-right aligned: the
    queries then see all the keys before the diagonal and the diagonal's
    lower triangle, which is the zigzag layout's step-0 case)."""
    calls = []
    for qc in q_chunks:
        run = None  # [offset, length] of the current run of fully visible keys
        for kc in k_chunks:
            mode = _visibility(qc, kc, causal)
            adjacent = run is not None and run[0] + run[1] == kc.offset
            if mode == "full" and adjacent:
                run[1] += kc.length
                continue
            if mode == "diag" and adjacent:
                calls.append((qc, run[0], run[1] + kc.length, True))
                run = None
                continue
            if run is not None:
                calls.append((qc, run[0], run[1], False))
                run = None
            if mode == "full":
                run = [kc.offset, kc.length]
            elif mode == "diag":
                calls.append((qc, kc.offset, kc.length, True))
        if run is not None:
            calls.append((qc, run[0], run[1], False))
    return calls


def _rows(x, offset, length):
    return x.narrow(_SEQ, offset, length)


# ------------------------------------------------------------------ sharding helpers

def shard(x, group=None, causal=False, layout=None):
    """This rank's rows of a full [B, H, N, D] tensor in the layout ring_attention
    expects (zigzag by default with causal=True, contiguous otherwise)."""
    world, rank = _world(group)
    layout = _layout(layout, causal)
    n = x.shape[_SEQ]
    if layout == "contiguous":
        return torch.tensor_split(x, world, dim=_SEQ)[rank].contiguous()
    chunks = _chunks_of(n, world, layout)[rank]
    return torch.cat([x.narrow(_SEQ, c.start, c.length) for c in chunks], dim=_SEQ).contiguous()


def unshard(x, n, group=None, causal=False, layout=None):
    """The full [B, H, n, D] tensor from every rank's rows (shard's inverse)."""
    world, rank = _world(group)
    layout = _layout(layout, causal)
    lengths = _gather_lengths(x.shape[_SEQ], group, _comm_device(x, group)) if layout == "contiguous" else None
    return _assemble(x, _chunks_of(n, world, layout, lengths), group, n)


def _assemble(x, chunks, group, n):
    """The whole [.., n, ..] tensor in sequence order from every rank's rows of x
    (chunks: every rank's _Chunk list)."""
    pieces = _all_gather_rows(x.contiguous(), [sum(c.length for c in cs) for cs in chunks], group)
    whole = x.new_empty(x.shape[:_SEQ] + (n,) + x.shape[_SEQ + 1:])
    for r, cs in enumerate(chunks):
        for c in cs:
            whole.narrow(_SEQ, c.start, c.length).copy_(_rows(pieces[r], c.offset, c.length))
    return whole


def _wire(t):
    """t as the bytes that travel: 16-bit floats as bytes (gloo has no bfloat16;
    nothing is reduced, so the bits are all that matter)."""
    return t.view(torch.uint8) if t.dtype in (torch.bfloat16, torch.float16) else t


def _all_gather_rows(x, lengths, group):
    """Every rank's x (rows differing in number) gathered: padded to the longest."""
    longest = max(lengths)
    shape = x.shape[:_SEQ] + (longest,) + x.shape[_SEQ + 1:]
    mine = x.new_zeros(shape)
    mine.narrow(_SEQ, 0, x.shape[_SEQ]).copy_(x)
    every = [torch.empty_like(mine) for _ in lengths]
    dist.all_gather([_wire(t) for t in every], _wire(mine), group=group)
    return [t.narrow(_SEQ, 0, length) for t, length in zip(every, lengths)]


# ------------------------------------------------------------------ local attention pieces

_NO_SEED = None


def _seed():
    global _NO_SEED
    if _NO_SEED is None:
        _NO_SEED = torch.zeros((), dtype=torch.int64)
    return _NO_SEED


def _attend(q, k, v, causal, scale):
    """(out, lse) of one local call (libffpa's causal mask is bottom-right aligned)."""
    return _ops._forward(q, k, v, None, None, None, _seed(), causal, scale, 0.0, -1, -1, 0.0, None)


def _attend_backward(dout, q, k, v, out, lse, causal, scale):
    dq, dk, dv, _ = _ops._backward(dout, q, k, v, out, lse, None, None, None, _seed(), causal, scale, 0.0,
                                   -1, -1, 0.0, None, False)
    return dq, dk, dv


def _merge_into(acc_o, acc_lse, out, lse):
    """acc (float32) <- merge(acc, part) by LSE, in place (libffpa's merge)."""
    _runtime.merge_partials([acc_o, out], [acc_lse, lse], acc_o, acc_lse)


def _block_attention(q, q_chunks, k, v, k_chunks, causal, scale, acc_o, acc_lse):
    for qc, k_off, k_len, diag in _segments(q_chunks, k_chunks, causal):
        out, lse = _attend(_rows(q, qc.offset, qc.length), _rows(k, k_off, k_len), _rows(v, k_off, k_len),
                           diag, scale)
        _merge_into(_rows(acc_o, qc.offset, qc.length), acc_lse.narrow(_SEQ, qc.offset, qc.length), out, lse)


def _block_gradients(dout, q, out, lse, q_chunks, k, v, k_chunks, causal, scale, dq_acc, dk_acc, dv_acc):
    for qc, k_off, k_len, diag in _segments(q_chunks, k_chunks, causal):
        rows = lambda t: _rows(t, qc.offset, qc.length)  # noqa: E731
        dq, dk, dv = _attend_backward(rows(dout), rows(q), _rows(k, k_off, k_len), _rows(v, k_off, k_len),
                                      rows(out), lse.narrow(_SEQ, qc.offset, qc.length), diag, scale)
        rows(dq_acc).add_(dq)
        _rows(dk_acc, k_off, k_len).add_(dk)
        _rows(dv_acc, k_off, k_len).add_(dv)


# ------------------------------------------------------------------ ring

class _Ring:
    """Point-to-point traffic to the next rank and from the previous one."""

    def __init__(self, group):
        self.group = group
        world, rank = _world(group)
        self.next = _global_rank(group, (rank + 1) % world)
        self.prev = _global_rank(group, (rank - 1) % world)

    def post(self, sends, recvs):
        """isend each of sends to next, irecv each of recvs from prev (empty ones
        skipped), as one group: every step's traffic goes in one call, because
        NCCL runs a rank's point-to-point operations in order on one stream and
        a large send waits for its receiver, so a send posted alone, ahead of
        the next step's receives, closes a cycle around the ring."""
        ops = [dist.P2POp(dist.isend, _wire(t), self.next, self.group) for t in sends if t.numel()]
        ops += [dist.P2POp(dist.irecv, _wire(t), self.prev, self.group) for t in recvs if t.numel()]
        return dist.batch_isend_irecv(ops) if ops else []


def _wait(requests):
    for r in requests:
        r.wait()


class _Slots:
    """Buffers that blocks of rows travel into, reused: `count` flat buffers
    for each of `like`'s tensors, each the size of the longest block; a block
    of `length` rows is a contiguous view of a buffer's head."""

    def __init__(self, like, longest, dtype=None, count=2):
        self.like = like
        self.flat = [[t.new_empty(self._numel(t, longest), dtype=dtype or t.dtype) for t in like]
                     for _ in range(count)]

    @staticmethod
    def _shape(t, length):
        return t.shape[:_SEQ] + (length,) + t.shape[_SEQ + 1:]

    @classmethod
    def _numel(cls, t, length):
        return math.prod(cls._shape(t, length))

    def views(self, slot, length):
        return tuple(f[:self._numel(t, length)].view(self._shape(t, length))
                     for f, t in zip(self.flat[slot], self.like))


def _rows_held(geo):
    return [sum(c.length for c in cs) for cs in geo.chunks]


def _ring_forward(q, k, v, causal, scale, group, geo):
    world, rank, chunks = geo.world, geo.rank, geo.chunks
    ring = _Ring(group)
    rows = _rows_held(geo)
    acc_o = q.new_zeros(q.shape[:_SEQ + 1] + (v.shape[-1],), dtype=torch.float32)
    acc_lse = torch.full(q.shape[:_SEQ + 1], float("-inf"), dtype=torch.float32, device=q.device)
    slots = _Slots((k, v), max(rows)) if world > 1 else None
    blk = (k.contiguous(), v.contiguous())
    for step in range(world):
        src = (rank - step) % world
        # The next block arrives in the slot the block before this one used.
        nxt = slots.views(step % 2, rows[(src - 1) % world]) if step < world - 1 else ()
        pending = ring.post(blk if nxt else (), nxt)
        _block_attention(q, chunks[rank], blk[0], blk[1], chunks[src], causal, scale, acc_o, acc_lse)
        _wait(pending)
        blk = nxt or blk
    return acc_o.to(q.dtype), acc_lse


def _ring_backward(dout, q, k, v, out, lse, causal, scale, group, geo):
    world, rank, chunks = geo.world, geo.rank, geo.chunks
    ring = _Ring(group)
    rows = _rows_held(geo)
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    longest = max(rows)
    grads = _Slots((k, v), longest, torch.float32)  # the blocks' dK/dV, travelling one hop behind them
    if world > 1:
        blocks = _Slots((k, v), longest)
        incoming = _Slots((k, v), longest, torch.float32, count=1)
    blk = (k.contiguous(), v.contiguous())
    carry = ()  # the last step's dK/dV, on to the rank that holds that block next
    for step in range(world):
        src = (rank - step) % world
        dk_part, dv_part = grads.views(step % 2, rows[src])
        dk_part.zero_()
        dv_part.zero_()
        acc_in = incoming.views(0, rows[src]) if step > 0 else ()
        nxt = blocks.views(step % 2, rows[(src - 1) % world]) if step < world - 1 else ()
        # Sent and received in one order on every rank: the accumulator, then the block.
        pending = ring.post(carry + (blk if nxt else ()), acc_in + nxt)
        _block_gradients(dout, q, out, lse, chunks[rank], blk[0], blk[1], chunks[src], causal, scale, dq_acc,
                         dk_part, dv_part)
        _wait(pending)
        if acc_in:
            dk_part.add_(acc_in[0])
            dv_part.add_(acc_in[1])
        carry = (dk_part, dv_part)
        blk = nxt or blk
    if world == 1:
        return dq_acc.to(q.dtype), carry[0].to(k.dtype), carry[1].to(v.dtype)
    # After the last step each accumulator goes to its block's owner.
    own = (torch.empty(k.shape, dtype=torch.float32, device=q.device),
           torch.empty(v.shape, dtype=torch.float32, device=q.device))
    _wait(ring.post(carry, own))
    return dq_acc.to(q.dtype), own[0].to(k.dtype), own[1].to(v.dtype)


# ------------------------------------------------------------------ all-gather KV

def _visible_keys(qc, n, causal):
    return qc.start + qc.length if causal else n


def _allgather_forward(q, k, v, causal, scale, group, geo):
    rank, chunks, n = geo.rank, geo.chunks, geo.n
    k_all, v_all = (_assemble(t, chunks, group, n) for t in (k, v))
    out = q.new_empty(q.shape[:_SEQ + 1] + (v.shape[-1],))
    lse = torch.empty(q.shape[:_SEQ + 1], dtype=torch.float32, device=q.device)
    for qc in chunks[rank]:
        if qc.length == 0:
            continue
        keys = _visible_keys(qc, n, causal)
        o_c, l_c = _attend(_rows(q, qc.offset, qc.length), _rows(k_all, 0, keys), _rows(v_all, 0, keys),
                           causal, scale)
        _rows(out, qc.offset, qc.length).copy_(o_c)
        lse.narrow(_SEQ, qc.offset, qc.length).copy_(l_c)
    return out, lse


def _allgather_backward(dout, q, k, v, out, lse, causal, scale, group, geo):
    rank, chunks, n = geo.rank, geo.chunks, geo.n
    k_all, v_all = (_assemble(t, chunks, group, n) for t in (k, v))
    dq = torch.zeros_like(q)
    dk_all = torch.zeros(k_all.shape, dtype=torch.float32, device=q.device)
    dv_all = torch.zeros(v_all.shape, dtype=torch.float32, device=q.device)
    for qc in chunks[rank]:
        if qc.length == 0:
            continue
        keys = _visible_keys(qc, n, causal)
        rows = lambda t: _rows(t, qc.offset, qc.length)  # noqa: E731
        dq_c, dk_c, dv_c = _attend_backward(rows(dout), rows(q), _rows(k_all, 0, keys), _rows(v_all, 0, keys),
                                            rows(out), lse.narrow(_SEQ, qc.offset, qc.length), causal, scale)
        rows(dq).copy_(dq_c)
        _rows(dk_all, 0, keys).add_(dk_c)
        _rows(dv_all, 0, keys).add_(dv_c)
    dist.all_reduce(dk_all, group=group)
    dist.all_reduce(dv_all, group=group)
    dk = torch.cat([_rows(dk_all, c.start, c.length) for c in chunks[rank]], dim=_SEQ)
    dv = torch.cat([_rows(dv_all, c.start, c.length) for c in chunks[rank]], dim=_SEQ)
    return dq, dk.to(k.dtype), dv.to(v.dtype)


# ------------------------------------------------------------------ autograd

class _ContextParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, group, geo, forward_fn, backward_fn):
        out, lse = forward_fn(q, k, v, causal, scale, group, geo)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.params = (causal, scale, group, geo, backward_fn)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, group, geo, backward_fn = ctx.params
        dout = dout.contiguous() if any(s == 0 for s in dout.stride()) else dout
        dq, dk, dv = backward_fn(dout, q, k, v, out, lse, causal, scale, group, geo)
        return dq, dk, dv, None, None, None, None, None, None


def _check(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise FFPAValueError("%s: has %d dims; expected [B, H, N, D]" % (name, t.dim()))
    if not (q.dtype == k.dtype == v.dtype):
        raise FFPAValueError("k, v: dtypes %s, %s; expected q's %s" % (k.dtype, v.dtype, q.dtype))
    if not dist.is_available() or not dist.is_initialized():
        raise FFPAValueError("group: torch.distributed is not initialized; call "
                             "torch.distributed.init_process_group first")


def _run(q, k, v, causal, softmax_scale, group, layout, return_lse, forward_fn, backward_fn):
    _check(q, k, v)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    geo = _geometry(q, k, group, layout, bool(causal))
    out, lse = _ContextParallel.apply(q, k, v, bool(causal), float(scale), group, geo, forward_fn, backward_fn)
    return (out, lse) if return_lse else out


def ring_attention(q, k, v, causal=False, softmax_scale=None, group=None, *, layout=None, return_lse=False):
    """Attention over a sequence sharded across the ranks of group (see the module
    docstring for the layouts): q [B, Hq, n_r, Dqk], k [B, Hkv, n_r, Dqk],
    v [B, Hkv, n_r, Dv], this rank's n_r rows; Hq a multiple of Hkv. Returns this
    rank's rows of the output (and, with return_lse, of the float32 LSE
    [B, Hq, n_r]). Differentiable in q, k, v."""
    return _run(q, k, v, causal, softmax_scale, group, layout, return_lse, _ring_forward, _ring_backward)


def allgather_kv_attention(q, k, v, causal=False, softmax_scale=None, group=None, *, layout=None,
                           return_lse=False):
    """ring_attention's result with K and V gathered whole on every rank first
    (one all-gather each; dK and dV summed back with an all-reduce): the better
    choice when K/V are small beside Q (GQA/MQA with few KV heads, MLA)."""
    return _run(q, k, v, causal, softmax_scale, group, layout, return_lse, _allgather_forward,
                _allgather_backward)
