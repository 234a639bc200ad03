"""ffpa.flash_attn_with_kvcache against a float64 reference written here:
paged and dense caches, appends, causal speculative decode, MLA's V inside K,
bad tables, and (on a GPU) a CUDA-graph capture replayed with new lengths."""

import pytest
import torch

import ffpa


def _devices():
    devices = ["cpu"]
    try:
        ready = torch.cuda.is_available() and any(b.name == "cuda" and b.available for b in ffpa.backends())
    except ffpa.LibraryNotFoundError:
        ready = False
    if ready:
        devices.append("cuda")
    return devices


DEVICES = _devices()
needs_cuda = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA device and libffpa's cuda backend")


def dtype_for(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def tolerance(dtype):
    return 1e-4 if dtype == torch.float32 else 2e-2


def reference(q, k_cache, v_cache, k, v, lens, block_table, scale, causal, mla, window=(-1, -1), softcap=0.0,
              alibi=None):
    """(out [B, Nq, Hq, Dv], lse [B, Hq, Nq], k_cache, v_cache after the append), float64 on the cpu.
    window / softcap / alibi ([B, Hq]): FlashAttention's, bottom-right aligned per sequence."""
    q = q.double().cpu()
    kc = k_cache.double().cpu().clone()
    vc = v_cache.double().cpu().clone()
    table = block_table.cpu() if block_table is not None else None
    lens = [int(x) for x in lens.cpu()]
    b_, nq, hq, d = q.shape
    ps, hkv, dv = kc.shape[1], kc.shape[2], vc.shape[3]
    group = hq // hkv

    def where(b, j):
        return (int(table[b, j // ps]) if table is not None else b), j % ps

    if k is not None:
        for b in range(b_):
            for t in range(nq):
                page, row = where(b, lens[b] + t)
                kc[page, row] = k[b, t].double().cpu()
                if not mla:
                    vc[page, row] = v[b, t].double().cpu()
    if mla:
        vc = kc[..., :dv]
    scale = scale if scale is not None else d ** -0.5
    out = torch.zeros(b_, nq, hq, dv, dtype=torch.float64)
    lse = torch.full((b_, hq, nq), float("-inf"), dtype=torch.float64)
    for b in range(b_):
        length = lens[b] + (nq if k is not None else 0)
        if length == 0:
            continue
        rows = [where(b, j) for j in range(length)]
        keys = torch.stack([kc[p, r] for p, r in rows])      # [L, Hkv, D]
        values = torch.stack([vc[p, r] for p, r in rows])    # [L, Hkv, Dv]
        for h in range(hq):
            s = q[b, :, h] @ keys[:, h // group].T * scale  # [Nq, L]
            i = torch.arange(nq).unsqueeze(1)
            j = torch.arange(length).unsqueeze(0)
            diag = i + length - nq
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if alibi is not None:
                s = s - float(alibi[b, h]) * (diag - j).abs()
            if causal:
                s = s.masked_fill(j > diag, float("-inf"))
            if window[0] >= 0:
                s = s.masked_fill(j < diag - window[0], float("-inf"))
            if window[1] >= 0:
                s = s.masked_fill(j > diag + window[1], float("-inf"))
            row_lse = torch.logsumexp(s, dim=1)
            seen = row_lse > float("-inf")
            p = torch.where(seen.unsqueeze(1), torch.exp(s - row_lse.unsqueeze(1)), torch.zeros_like(s))
            out[b, :, h] = p @ values[:, h // group]
            lse[b, h] = row_lse
    return out, lse, kc, vc


def make_cache(device, dtype, batch, hkv, d, dv, page, lens, extra, paged, mla, gen):
    """Caches with room for `extra` more tokens, a shuffled block table, int32 lengths."""
    need = [(int(x) + extra + page - 1) // page for x in lens]
    max_pages = max(max(need), 1)
    if paged:
        pages = batch * max_pages + 2
        kc = torch.randn(pages, page, hkv, d, generator=gen).to(dtype).to(device)
        perm = torch.randperm(pages, generator=gen)[:batch * max_pages]
        table = perm.reshape(batch, max_pages).to(torch.int32).to(device)
    else:
        kc = torch.randn(batch, max_pages * page, hkv, d, generator=gen).to(dtype).to(device)
        table = None
    vc = kc[..., :dv] if mla else torch.randn(kc.shape[:3] + (dv,), generator=gen).to(dtype).to(device)
    return kc, vc, table, torch.tensor(lens, dtype=torch.int32, device=device)


CASES = [
    # batch, hq, hkv, nq, d, dv, page, lens, append, causal, paged, mla
    (3, 8, 2, 1, 64, 64, 16, [0, 17, 40], False, False, True, False),
    (2, 8, 2, 4, 128, 128, 64, [5, 130], True, True, True, False),
    (2, 4, 4, 2, 64, 64, 16, [15, 16], True, True, False, False),
    (2, 16, 1, 2, 576, 512, 64, [63, 1], True, True, True, True),
    (1, 8, 1, 40, 64, 64, 16, [90], True, True, True, False),
]


def check_against_reference(device, case, seed, window=(-1, -1), softcap=0.0, use_alibi=False):
    """One call on fresh random inputs against the float64 reference: out, lse, the cache after the append."""
    batch, hq, hkv, nq, d, dv, page, lens, append, causal, paged, mla = case
    dtype = dtype_for(device)
    gen = torch.Generator().manual_seed(seed + nq + d)
    kc, vc, table, sl = make_cache(device, dtype, batch, hkv, d, dv, page, lens, nq if append else 0, paged,
                                   mla, gen)
    q = torch.randn(batch, nq, hq, d, generator=gen).to(dtype).to(device)
    k = torch.randn(batch, nq, hkv, d, generator=gen).to(dtype).to(device) if append else None
    v = None if not append or mla else torch.randn(batch, nq, hkv, dv, generator=gen).to(dtype).to(device)
    slopes = torch.rand(batch, hq, generator=gen).mul(0.5).to(device) if use_alibi else None
    ref_out, ref_lse, ref_kc, ref_vc = reference(q, kc, vc, k, v, sl, table, None, causal, mla, window, softcap,
                                                 slopes.cpu() if slopes is not None else None)
    out, lse = ffpa.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=sl, block_table=table, causal=causal,
                                           return_softmax_lse=True, window_size=window, softcap=softcap,
                                           alibi_slopes=slopes)
    tol = tolerance(dtype)
    assert torch.isfinite(out).all()
    assert (out.double().cpu() - ref_out).abs().max() <= tol * max(1.0, float(ref_out.abs().max()))
    finite = ref_lse > float("-inf")
    assert torch.equal(lse.cpu() > float("-inf"), finite)
    assert (lse.double().cpu()[finite] - ref_lse[finite]).abs().max() <= tol * 10
    # the append landed, nothing else changed
    assert torch.equal(kc.double().cpu(), ref_kc)
    assert torch.equal(vc.double().cpu(), ref_vc)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_against_reference(device, case):
    check_against_reference(device, case, 7)


VARIANT_CASES = [  # the CASES fields (paged always), then window, softcap, ALiBi
    ((3, 8, 2, 1, 128, 128, 16, [300, 7, 0], False, False, True, False), (40, -1), 0.0, False),
    ((3, 8, 2, 1, 64, 64, 16, [300, 7, 50], False, False, True, False), (3, -1), 5.0, True),
    ((2, 4, 4, 4, 64, 64, 32, [90, 33], True, True, True, False), (9, 0), 20.0, True),
    ((2, 4, 1, 3, 96, 96, 16, [40, 17], True, False, True, False), (5, 2), 0.0, False),
    ((2, 16, 1, 2, 576, 512, 64, [200, 65], True, True, True, True), (100, -1), 0.0, True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", VARIANT_CASES)
def test_variants_against_reference(device, case):
    shape, window, softcap, use_alibi = case
    check_against_reference(device, shape, 11, window, softcap, use_alibi)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_tables_raise_and_write_nothing(device):
    dtype = dtype_for(device)
    gen = torch.Generator().manual_seed(3)
    kc, vc, table, sl = make_cache(device, dtype, 2, 2, 64, 64, 16, [20, 33], 1, True, False, gen)
    q = torch.randn(2, 1, 4, 64, generator=gen).to(dtype).to(device)
    k = torch.randn(2, 1, 2, 64, generator=gen).to(dtype).to(device)
    out = torch.full((2, 1, 4, 64), float("nan"), dtype=dtype, device=device)
    before = kc.clone()
    bad = table.clone()
    bad[1, 0] = kc.shape[0] + 5
    with pytest.raises(ffpa.FFPAValueError, match="cache.block_table"):
        ffpa.flash_attn_with_kvcache(q, kc, vc, k, k.clone(), cache_seqlens=sl, block_table=bad, out=out)
    too_long = torch.tensor([20, table.shape[1] * 16], dtype=torch.int32, device=device)
    with pytest.raises(ffpa.FFPAValueError, match="cache.cache_seqlens"):
        ffpa.flash_attn_with_kvcache(q, kc, vc, k, k.clone(), cache_seqlens=too_long, block_table=table, out=out)
    with pytest.raises(ffpa.FFPAValueError, match="cache_seqlens"):
        ffpa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=None, block_table=table)
    assert torch.equal(kc, before)
    assert torch.isnan(out).all()


@needs_cuda
def test_cuda_graph_replay_with_new_lengths():
    """Captured once, replayed with other cache lengths: no host synchronisation
    and no allocation inside the call (both would break the capture)."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(11)
    kc, vc, table, sl = make_cache("cuda", dtype, 4, 2, 128, 128, 16, [700, 5, 300, 64], 0, True, False, gen)
    q = torch.randn(4, 1, 16, 128, generator=gen).to(dtype).cuda()
    out = torch.empty(4, 1, 16, 128, dtype=dtype, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: the workspace is allocated here
        for _ in range(2):
            ffpa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=sl, block_table=table, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ffpa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=sl, block_table=table, out=out)
    for lens in ([700, 5, 300, 64], [1, 700, 0, 17], [640, 640, 640, 640]):
        sl.copy_(torch.tensor(lens, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref, _, _, _ = reference(q, kc, vc, None, None, sl, table, None, False, False)
        assert torch.isfinite(out).all(), lens
        assert (out.double().cpu() - ref).abs().max() <= 2e-2 * max(1.0, float(ref.abs().max())), lens
