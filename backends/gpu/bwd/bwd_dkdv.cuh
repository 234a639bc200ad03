/*
 * dK/dV kernel (paper Algorithm 2, dKdV half). A block owns kBc key rows of
 * one kv head: K_j and V_j (all of Dqk / Dv, as 64-column slabs) stay in
 * shared memory while the query blocks of every query head of the group
 * stream through a cp.async ring in B::kChunk-column chunks:
 *   Q chunks   S = Q K^T (Split-D over Dqk)           -> P from the saved LSE
 *   dO chunks  dP = dO V^T (Split-D over Dv), and dV_c += P_dropped^T dO_c
 *   Q chunks   dK_c += scale * dS^T Q_c
 * With B::kStreamKV (the small-shared-memory configuration) K_j and V_j are
 * not resident: the K (resp. V) chunk travels in the same ring slot as the
 * Q (resp. dO) chunk it multiplies, so shared memory does not grow with D.
 * dK/dV partial sums live in the gradient accumulator (fp32 workspace or the
 * output), read-modify-written once per query tile by this block only: no
 * atomics, a fixed order, the same bits on every run. Where one chunk
 * covers Dqk and Dv (kResident, dkdv_resident()), they stay in the warps'
 * registers across the query tiles instead and are written once at the end
 * (FlashAttention-2's form): the per-tile read-modify-write of 2 x kBc x
 * kChunk fp32 (64 KiB each way at D = 128) otherwise costs about as much as
 * the tile's GEMMs in L2 traffic. Warp w owns query rows
 * [16 w, 16 w + 16) of S/dP; for dV/dK the warps tile the kBc x kChunk chunk.
 * With kDqAtomic (the fp32 dQ buffer zeroed by the host, not
 * deterministic) the block also adds its part of dQ = scale dS K_j into
 * that buffer with reductions, FlashAttention-2's form: five GEMMs per
 * (query tile, key tile) instead of the split launch's seven, and no dQ
 * kernel re-reading Q, K, V and dO. K_j comes from its resident slabs, or,
 * streamed, beside the dK phase's Q chunks.
 */
#ifndef FFPA_GPU_BWD_DKDV_CUH
#define FFPA_GPU_BWD_DKDV_CUH

#include "bwd_common.cuh"

namespace ffpa {
namespace bwd {

template <int kBc_, class B> struct DkdvCfg {
    static constexpr int kBc = kBc_;
    static constexpr int kKW = kBc / B::kKeyWarps;    /* keys of a warp in S / dP */
    static constexpr int kNT = kKW / 8;               /* S n-tiles per warp */
    static constexpr int kPElems = ptile_elems<kBc>(B::kBr); /* P or dS tile (swizzled or padded) */
    static constexpr int kGridRows = kBc / 32;        /* dV/dK warp grid: 32 key rows per warp */
    static constexpr int kGridCols = B::kWarps / kGridRows;
    static constexpr int kGCols = B::kChunk / kGridCols; /* chunk columns per warp */
    static constexpr int kGNT = kGCols / 8;
    /* Ring slot: [Q or dO chunk: kBr x kChunk][K or V chunk: kBc x kChunk, streamed only]. */
    static constexpr int kSlotElems = (B::kBr + (B::kStreamKV ? kBc : 0)) * B::kChunk;
    static_assert(kBc == 32 || kBc == 64 || kBc == 128, "key tile");
    static_assert(kGNT % 2 == 0 && kSlab % kGCols == 0, "a warp's dV/dK columns lie in one slab");
    static_assert(B::kKeyWarps == 1 || !B::kStreamKV, "2-D S tiling: K / V resident (dQ from their slabs)");
};

/* dK and dV of a block fit the warps' registers for the whole query loop:
 * one chunk of B covers both head dimensions (BigCfg: D <= 128, 32 fp32
 * registers a thread each; SmallCfg: D <= 64). */
template <class B> __host__ __device__ constexpr bool dkdv_resident(int dqk, int dv)
{
    return dqk <= B::kChunk && dv <= B::kChunk;
}

/* Row statistics of a tile in shared memory: [kStatBufs][LSE, Delta][kBr] fp32. */
template <class B> constexpr size_t dkdv_stats_bytes()
{
    return B::kStatsInSmem ? (size_t)kStatBufs * 2 * B::kBr * sizeof(float) : 0;
}

/* Shared memory of the dK/dV kernel: [K slabs][V slabs][P][dS][ring][row
 * statistics] (no K/V slabs when streamed: the ring slots carry them). */
template <class B> inline size_t dkdv_smem_bytes(int bc, int dqk, int dv, int stages, size_t elt)
{
    size_t kslabs = (size_t)(dqk + kSlab - 1) / kSlab, vslabs = (size_t)(dv + kSlab - 1) / kSlab;
    const size_t ptile = bc % 64 == 0 ? (size_t)B::kBr * bc : (size_t)B::kBr * (bc + 8);
    const size_t resident = B::kStreamKV ? 0 : (kslabs + vslabs) * bc * kSlab;
    const size_t slot = (size_t)(B::kBr + (B::kStreamKV ? bc : 0)) * B::kChunk;
    return (resident + 2 * ptile + (size_t)stages * slot) * elt + dkdv_stats_bytes<B>();
}

/* kPlain: the twin for calls without softcap, bias, ALiBi or dropout
 * (bwd_host.h choose_tiles): their code is not compiled in. */
template <typename T, int kBc, class B, bool kResident = false, bool kDqAtomic = false, bool kPlain = false>
__device__ __forceinline__ void dkdv_body(const ffpa_bwd_params &p)
{
    using Cfg = DkdvCfg<kBc, B>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* S / dP: the warp's row group and its keys (kKeyWarps = 1: all of them). */
    const int wr = warp / B::kKeyWarps, kcol0 = (warp % B::kKeyWarps) * Cfg::kKW;
    const int kb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const SeqGeom g = seq_geom(p, b);
    const int kv0 = kb * kBc;
    if (kv0 >= g.seqlen_k)
        return;
    const int kv_valid = min(kBc, g.seqlen_k - kv0);
    const bool varlen = p.cu_q != nullptr;
    const int kslabs = (p.dqk + kSlab - 1) / kSlab, vslabs = (p.dv + kSlab - 1) / kSlab;
    const int nq2 = (p.dqk + B::kChunk - 1) / B::kChunk, nv2 = (p.dv + B::kChunk - 1) / B::kChunk;

    const int64_t dk_base = acc_row0(p.dk, p.cu_k, b, hk) + (int64_t)kv0 * p.dk.sn;
    const int64_t dv_base = acc_row0(p.dv_acc, p.cu_k, b, hk) + (int64_t)kv0 * p.dv_acc.sn;

    /* Query blocks that see this key block (causal: from the diagonal on;
     * window: up to the last row whose window reaches it); the rest are skipped. */
    const int diag = g.seqlen_k - g.seqlen_q;
    int row_begin;
    const int row_end = visible_rows(p.mask, kv0, kv0 + kv_valid - 1, diag, g.seqlen_q, &row_begin);
    const int first_qb = row_begin / B::kBr;
    const int n_qb = row_end > row_begin ? (row_end + B::kBr - 1) / B::kBr - first_qb : 0;
    const int n_tiles = n_qb * p.group;
    if (n_tiles == 0) { /* no query row sees these keys: zero gradients */
        for (int i = tid; i < kv_valid * (p.dqk / 2); i += B::kThreads)
            AccPair<T>::store(p.dk, dk_base + (int64_t)(i / (p.dqk / 2)) * p.dk.sn + 2 * (i % (p.dqk / 2)), 0.f, 0.f);
        for (int i = tid; i < kv_valid * (p.dv / 2); i += B::kThreads)
            AccPair<T>::store(p.dv_acc, dv_base + (int64_t)(i / (p.dv / 2)) * p.dv_acc.sn + 2 * (i % (p.dv / 2)), 0.f,
                              0.f);
        return;
    }

    /* The tiles as 32-bit shared addresses (SmemAddr) for the MMAs and
     * copies; P and dS also as pointers for the fragment stores. */
    using SA = SmemAddr<sizeof(T)>;
    const SA ks = {arch::smem_u32(smem_raw)};
    const SA vs = ks + (B::kStreamKV ? 0 : kslabs * kBc * kSlab);
    const SA ps = vs + (B::kStreamKV ? 0 : vslabs * kBc * kSlab);
    const SA dss = ps + Cfg::kPElems;
    const SA ring = dss + Cfg::kPElems;
    T *const ps_ptr = reinterpret_cast<T *>(smem_raw) + (B::kStreamKV ? 0 : (kslabs + vslabs) * kBc * kSlab);
    T *const dss_ptr = ps_ptr + Cfg::kPElems;
    constexpr int kSlotElems = Cfg::kSlotElems;
    /* After the ring: the tiles' LSE and Delta rows (kStatBufs buffers),
     * used by the kernels with dK / dV in registers (D = 64 to 256: +1-2%
     * on the H200); the per-tile kernels above D = 256 read them into
     * registers after the S GEMM (the buffers: -0.4% at D = 512). */
    constexpr bool kStatsSmem = B::kStatsInSmem && kResident;
    const int64_t stats_off = (int64_t)(ring.a - ks.a) + (int64_t)p.stages * kSlotElems * sizeof(T);
    const uint32_t stats_u32 = ks.a + (uint32_t)stats_off;
    const float *const stats = reinterpret_cast<const float *>(smem_raw + stats_off);

    const T *kg = static_cast<const T *>(p.k) + row0_offset(p.k_sb, p.k_sh, p.k_sn, g.k_start, varlen, b, hk) +
                  (int64_t)kv0 * p.k_sn;
    const T *vg = static_cast<const T *>(p.v) + row0_offset(p.v_sb, p.v_sh, p.v_sn, g.k_start, varlen, b, hk) +
                  (int64_t)kv0 * p.v_sn;

    /* hold (kResident, p.dkdv_hold_q): the ring keeps the tile's Q chunk
     * until the dK phase, so a tile is two items (Q, dO), not three, and
     * the loads run stages - 2 items ahead instead of stages - 1. */
    const bool hold = kResident && !B::kStreamKV && p.dkdv_hold_q;
    const int items_per_tile = hold ? nq2 + nv2 : 2 * nq2 + nv2;
    const int total_items = n_tiles * items_per_tile;
    const int ahead = hold ? p.stages - 2 : p.stages - 1;

    /* The items in order: chunk of Q (S phase), dO (dP/dV phase) or Q again
     * (dK phase), per tile; ld says where the next one to load lies. */
    ItemCursor ld = {};
    /* Row q0 of the tile the next item belongs to, in Q, dO, LSE and Delta.
     * kStepRows: kept, stepped by a query block from tile to tile and
     * rebuilt when the group's next head begins (no 64-bit multiplies per
     * item or tile: D = 256 +3%, 512 +2% on the H200). The 128-key kernels
     * and the streamed configurations rebuild them per item from the
     * group's row 0 instead: at their register limit the kept pointers
     * spill (-7% at D <= 128; the StreamCfg kernel -1% at D = 1024). */
    constexpr bool kStepRows = kBc != 128 && !B::kStreamKV;
    /* The dQ rows' base alone steps in the D <= 64 128-key kernel too
     * (ptxas sm_90a: its spill 4 / 8 -> 0 bytes; the D in (64, 128] one
     * would go 32 / 28 -> 40 / 48, so it rebuilds). */
    constexpr bool kStepDq = kStepRows || (!B::kStreamKV && B::kChunk == kSlab);
    struct TileRows {
        const T *q, *dout;
        const float *lse, *delta;
        int q0;
    };
    /* Row q0 of query head `head` of the group. */
    auto rows_of = [&](int head, int q0) -> TileRows {
        const int h = hk * p.group + head;
        return {static_cast<const T *>(p.q) + row0_offset(p.q_sb, p.q_sh, p.q_sn, g.q_start, varlen, b, h) +
                    (int64_t)q0 * p.q_sn,
                static_cast<const T *>(p.dout) + row0_offset(p.do_sb, p.do_sh, p.do_sn, g.q_start, varlen, b, h) +
                    (int64_t)q0 * p.do_sn,
                p.lse + row0_offset(p.lse_sb, p.lse_sh, p.lse_sn, g.q_start, varlen, b, h) + (int64_t)q0 * p.lse_sn,
                p.delta + (int64_t)h * p.total_q + (varlen ? g.q_start : (int64_t)b * p.nq) + q0, q0};
    };
    /* kStepRows: the next item's tile; else row 0 of the group's first
     * head, for good (the rows of an item are offsets from it). */
    TileRows lt = rows_of(0, kStepRows ? first_qb * B::kBr : 0);
    auto load_next = [&]() {
        const int it = ld.it;
        const int q0 = kStepRows ? lt.q0 : (first_qb + ld.qb) * B::kBr;
        const bool is_do = it >= nq2 && it < nq2 + nv2;
        const int chunk = it < nq2 ? it : is_do ? it - nq2 : it - nq2 - nv2;
        const int64_t stride = is_do ? p.do_sn : p.q_sn;
        const int dim = is_do ? p.dv : p.dqk;
        const T *base;
        if constexpr (kStepRows)
            base = is_do ? lt.dout : lt.q;
        else
            base = (is_do ? lt.dout + (int64_t)ld.head * p.do_sh : lt.q + (int64_t)ld.head * p.q_sh) +
                   (int64_t)q0 * stride;
        const SA slot = ring + ld.slot * kSlotElems;
        /* A tile's first item brings its rows' LSE and Delta (rows past the
         * sequence: zero-filled; the LSE read makes them +inf, Delta 0 is
         * right as it is). */
        if (kStatsSmem && it == 0)
            for (int i = tid; i < 2 * B::kBr; i += B::kThreads) {
                const bool is_delta = i >= B::kBr;
                const int r = is_delta ? i - B::kBr : i;
                const bool ok = q0 + r < g.seqlen_q;
                const float *src;
                if constexpr (kStepRows)
                    src = is_delta ? lt.delta + r : lt.lse + (int64_t)r * p.lse_sn;
                else
                    src = is_delta ? lt.delta + (int64_t)ld.head * p.total_q + q0 + r
                                   : lt.lse + (int64_t)ld.head * p.lse_sh + (int64_t)(q0 + r) * p.lse_sn;
                arch::cp_async_4(stats_u32 + (uint32_t)(((ld.stats * 2 + is_delta) * B::kBr + r) * sizeof(float)),
                                 ok ? src : p.lse, ok ? 4 : 0);
            }
#pragma unroll
        for (int sl = 0; sl < B::kSlabs; ++sl) {
            const int col0 = chunk * B::kChunk + sl * kSlab;
            if (col0 < dim)
                load_tile_async<T, B::kBr, kSlab, B::kThreads>(slot + sl * B::kBr * kSlab, base, stride,
                                                               g.seqlen_q - q0, col0, dim, tid);
            /* Streamed: the K (S phase; dK phase for kDqAtomic's dS K) or V (dP
             * phase) chunk of the same columns. */
            if constexpr (B::kStreamKV) {
                if (col0 < dim && (kDqAtomic || it < nq2 + nv2))
                    load_tile_async<T, kBc, kSlab, B::kThreads>(slot + B::kBr * B::kChunk + sl * kBc * kSlab,
                                                                is_do ? vg : kg, is_do ? p.v_sn : p.k_sn, kv_valid,
                                                                col0, dim, tid);
            }
        }
        ld.next(items_per_tile, n_qb, p.stages);
        if (kStepRows && ld.it == 0) {
            if (ld.qb == 0) {
                if (ld.head < p.group) /* else past the last tile */
                    lt = rows_of(ld.head, first_qb * B::kBr);
            } else {
                lt.q += (int64_t)B::kBr * p.q_sn;
                lt.dout += (int64_t)B::kBr * p.do_sn;
                lt.lse += (int64_t)B::kBr * p.lse_sn;
                lt.delta += B::kBr;
                lt.q0 += B::kBr;
            }
        }
    };

    /* Prologue: K_j and V_j (resident) join the first group. */
    if constexpr (!B::kStreamKV) {
        for (int s = 0; s < kslabs; ++s)
            load_tile_async<T, kBc, kSlab, B::kThreads>(ks + s * kBc * kSlab, kg, p.k_sn, kv_valid, s * kSlab,
                                                        p.dqk, tid);
        for (int s = 0; s < vslabs; ++s)
            load_tile_async<T, kBc, kSlab, B::kThreads>(vs + s * kBc * kSlab, vg, p.v_sn, kv_valid, s * kSlab, p.dv,
                                                        tid);
    }
    for (int i = 0; i < ahead; ++i) {
        if (i < total_items)
            load_next();
        arch::cp_async_commit();
    }
    /* Item t has landed; the slot of item t + ahead - stages (t - 1, or
     * t - 2 when holding) is free for item t + ahead. Returns item t's slot. */
    int use_slot = 0;
    auto item_begin = [&](int t) -> SA {
        arch::cp_async_wait_dyn(ahead - 1);
        __syncthreads();
        if (t + ahead < total_items)
            load_next();
        arch::cp_async_commit();
        const SA slot = ring + use_slot * kSlotElems;
        use_slot = use_slot + 1 == p.stages ? 0 : use_slot + 1;
        return slot;
    };

    /* dV/dK chunk c: gradient rows = key rows, A^T from the P or dS tile. */
    const int wm2 = warp / Cfg::kGridCols, wn2 = warp % Cfg::kGridCols;
    const int gcol = wn2 * Cfg::kGCols;
    /* kResident: the block's dV and dK chunks, [key m-tile][n-tile]. */
    arch::FragC dv_res[kResident ? 2 : 1][kResident ? Cfg::kGNT : 1] = {};
    arch::FragC dk_res[kResident ? 2 : 1][kResident ? Cfg::kGNT : 1] = {};
    auto grad_chunk = [&](const ffpa_bwd_acc &acc, int64_t base, SA slot, SA atile, int c, int dim,
                          bool first) {
        const int col0 = c * B::kChunk + gcol;
        if (col0 >= dim)
            return;
        AccTile<T, 2, Cfg::kGNT> at;
        at.prefetch(acc, base, wm2 * 32, kv_valid, col0, dim, first, lane);
        arch::FragC cc[2][Cfg::kGNT];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < Cfg::kGNT; ++nt)
                cc[mt][nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
        warp_atb<T, Cfg::kGNT, B::kBr, kBc>(cc, atile, wm2 * 32, slot + (gcol / kSlab) * B::kBr * kSlab,
                                            gcol % kSlab, lane);
        at.commit(cc, acc, base, wm2 * 32, kv_valid, col0, dim, lane);
    };

    /* kResident: the same product into registers (one chunk: c = 0). */
    using ResTile = arch::FragC[kResident ? 2 : 1][kResident ? Cfg::kGNT : 1];
    auto grad_resident = [&](ResTile &res, SA slot, SA atile, int dim) {
        if constexpr (kResident) {
            if (gcol < dim)
                warp_atb<T, Cfg::kGNT, B::kBr, kBc>(res, atile, wm2 * 32, slot + (gcol / kSlab) * B::kBr * kSlab,
                                                    gcol % kSlab, lane);
        }
    };

    /* A warp's fragments, packed as A fragments (ds_afrags), into a
     * 16-bit kBc-wide tile in shared memory: af[kk][j] holds n-tile
     * 2 kk + j / 2, fragment rows of half j % 2. Swizzled tiles: the
     * lane's rows share one swizzle key (row & 7), and the warp's first
     * n-tile kcol0 / 8 has no bit in common with m < kKW / 8 (kKW a power
     * of two), so n-tile m sits at the lane's base offset XOR (m & 7) << 3
     * (plus 64 columns per m / 8): one LOP3 a store, no address rebuilt. */
    static_assert((Cfg::kKW & (Cfg::kKW - 1)) == 0, "a power-of-two key width a warp");
    const int afrag_base = ptile_off<kBc>(wr * 16 + arch::frag_c_row(lane, 0), kcol0 + arch::frag_c_col(lane, 0));
    auto store_afrags = [&](const uint32_t(&af)[Cfg::kKW / 16][4], T *tile) {
#pragma unroll
        for (int kk = 0; kk < Cfg::kKW / 16; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int m = 2 * kk + (j >> 1), dr = 8 * (j & 1); /* n-tile, row offset */
                int off;
                if constexpr (kBc % 64 == 0)
                    off = (afrag_base ^ ((m & 7) << 3)) + (m >> 3) * 64 + dr * kBc;
                else
                    off = afrag_base + m * 8 + dr * (kBc + 8);
                *reinterpret_cast<uint32_t *>(tile + off) = af[kk][j];
            }
    };

    int t = 0, qb = 0, head = 0; /* the tile's query block and head of the group */
    int sbuf = 0;                 /* its row-statistics buffer */
    float *dq_tile = nullptr;     /* kDqAtomic: row q0 of the tile in dQ (kStepDq: stepped) */
    for (int tile = 0; tile < n_tiles; ++tile) {
        const int h = hk * p.group + head;
        const int q0 = (first_qb + qb) * B::kBr;
        const bool first = tile == 0;
        if constexpr (kDqAtomic)
            dq_tile = qb == 0 || !kStepDq
                          ? static_cast<float *>(p.dq.data) + acc_row0(p.dq, p.cu_q, b, h) + (int64_t)q0 * p.dq.sn
                          : dq_tile + (int64_t)B::kBr * p.dq.sn;
        if (++qb == n_qb) {
            qb = 0;
            ++head;
        }
        const float *const lse_rows = stats + sbuf * 2 * B::kBr, *const delta_rows = lse_rows + B::kBr;
        sbuf = sbuf + 1 == kStatBufs ? 0 : sbuf + 1;
        SA held = ring; /* hold: the tile's Q slot */

        /* S = Q K^T over Dqk chunks. */
        arch::FragC s[Cfg::kNT];
#pragma unroll
        for (int nt = 0; nt < Cfg::kNT; ++nt)
            s[nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
        for (int c = 0; c < nq2; ++c, ++t) {
            const SA slot = item_begin(t);
            held = slot;
#pragma unroll
            for (int sl = 0; sl < B::kSlabs; ++sl) {
                const int slab = B::kSlabs * c + sl;
                if (slab * kSlab >= p.dqk)
                    break;
                /* K: a resident slab, or streamed beside the Q chunk. */
                warp_abt<T, Cfg::kNT>(s, slot + sl * B::kBr * kSlab, wr * 16,
                                      (B::kStreamKV ? slot + B::kBr * B::kChunk + sl * kBc * kSlab
                                                    : ks + slab * kBc * kSlab) +
                                          kcol0 * kSlab,
                                      p.dqk - slab * kSlab, lane);
            }
        }

        /* P = exp(scale S + bias - LSE), masked; P_dropped to shared memory. */
        MaskCtx mc;
        mc.row0 = q0 + wr * 16;
        mc.col0 = kv0 + kcol0;
        mc.seqlen_q = g.seqlen_q;
        mc.seqlen_k = g.seqlen_k;
        mc.set_head(p.mask, b, h);
        mc.need_bounds = mc.col0 + Cfg::kKW > g.seqlen_k;
        mc.need_diag = crosses_diag(p.mask, mc.row0, mc.row0 + 15, mc.col0, mc.col0 + Cfg::kKW - 1, diag);
        /* Plain: the scale goes into recompute_p's FFMA (the variants need
         * scaled scores first). */
        mask_scores<Cfg::kNT, !kPlain, !kPlain>(s, p.mask, mc, lane);
        float lse2[2], delta[2] = {0.f, 0.f};
        if constexpr (kStatsSmem) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = wr * 16 + arch::frag_c_row(lane, 2 * half);
                lse2[half] = q0 + r < g.seqlen_q ? lse2_of(lse_rows[r]) : INFINITY;
            }
        } else {
            row_stats(p, g, b, h, mc.row0, lane, lse2, delta);
        }
        recompute_p<Cfg::kNT>(s, lse2, kPlain ? p.mask.scale_log2 : 1.0f);
        {
            arch::FragC pd[Cfg::kNT];
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
                pd[nt] = s[nt];
            if (!kPlain && p.has_dropout)
                apply_dropout<Cfg::kNT>(pd, p.mask, mc, lane);
            uint32_t pa[Cfg::kKW / 16][4];
            ds_afrags<T, Cfg::kKW>(pd, 1.0f, pa);
            store_afrags(pa, ps_ptr);
        }

        /* dP = dO V^T over Dv chunks; dV += P_dropped^T dO chunk by chunk. */
        arch::FragC dp[Cfg::kNT];
#pragma unroll
        for (int nt = 0; nt < Cfg::kNT; ++nt)
            dp[nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
        for (int c = 0; c < nv2; ++c, ++t) {
            const SA slot = item_begin(t);
#pragma unroll
            for (int sl = 0; sl < B::kSlabs; ++sl) {
                const int slab = B::kSlabs * c + sl;
                if (slab * kSlab >= p.dv)
                    break;
                warp_abt<T, Cfg::kNT>(dp, slot + sl * B::kBr * kSlab, wr * 16,
                                      (B::kStreamKV ? slot + B::kBr * B::kChunk + sl * kBc * kSlab
                                                    : vs + slab * kBc * kSlab) +
                                          kcol0 * kSlab,
                                      p.dv - slab * kSlab, lane);
            }
            if constexpr (kResident)
                grad_resident(dv_res, slot, ps, p.dv);
            else
                grad_chunk(p.dv_acc, dv_base, slot, ps, c, p.dv, first);
        }

        /* dS = P (dP Z - Delta) in place in dp, Z = keep * dropout_scale (the
         * kept P entries are the nonzero ones this lane wrote); with softcap
         * times its derivative; scale * dS to shared memory. */
#pragma unroll
        for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = wr * 16 + arch::frag_c_row(lane, 2 * half);
                const int c = kcol0 + nt * 8 + arch::frag_c_col(lane, 0);
                float z0 = 1.f, z1 = 1.f;
                if (!kPlain && p.has_dropout) {
                    uint32_t u = *reinterpret_cast<const uint32_t *>(ps_ptr + ptile_off<kBc>(r, c));
                    const T *pv = reinterpret_cast<const T *>(&u);
                    z0 = arch::to_f32<T>(pv[0]) != 0.f ? p.mask.dropout_scale : 0.f;
                    z1 = arch::to_f32<T>(pv[1]) != 0.f ? p.mask.dropout_scale : 0.f;
                }
                const float dl = kStatsSmem ? delta_rows[r] : delta[half]; /* 0 past the sequence */
                dp[nt].r[2 * half] = s[nt].r[2 * half] * (dp[nt].r[2 * half] * z0 - dl);
                dp[nt].r[2 * half + 1] = s[nt].r[2 * half + 1] * (dp[nt].r[2 * half + 1] * z1 - dl);
            }
        if (!kPlain && p.mask.softcap_out > 0.0f)
            softcap_grad<Cfg::kNT>(dp, s, lse2, p.mask, mc, lane);
        uint32_t dsa[Cfg::kKW / 16][4];
        ds_afrags<T, Cfg::kKW>(dp, p.scale, dsa);
        store_afrags(dsa, dss_ptr);

        /* kDqAtomic: dQ rows of this warp += scale dS K_j, one 64-column
         * slab at a time, added with reductions: from the resident K slabs
         * (after the held dK GEMM, else before the dK phase), or from the K
         * chunks streamed beside the dK phase's Q chunks. */
        const RedRows dq_red(dq_tile, p.dq.sn, wr * 16, g.seqlen_q - q0, lane); /* unused without kDqAtomic */
        auto dq_slab = [&](SA kslab, int slab) {
            /* In two halves of 32 columns: the first half's reductions
             * drain while the second half's MMAs run, into other registers. */
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                arch::FragC o[kSlab / 16];
#pragma unroll
                for (int nt = 0; nt < kSlab / 16; ++nt)
                    o[nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
                if constexpr (B::kKeyWarps == 1)
                    warp_ab_reg<T, kBc, kSlab / 16>(o, dsa, kslab, half * (kSlab / 2), lane);
                else /* the row group's dS is in kKeyWarps warps: read it whole from the tile */
                    warp_ab_smem<T, kBc, kBc, kSlab / 16>(o, dss, wr * 16, kslab, half * (kSlab / 2), lane);
                red_tile<kSlab / 16>(o, dq_red, slab * kSlab + half * (kSlab / 2), p.dqk, lane);
            }
        };
        /* dQ over every slab from the resident K slabs (2-D S tiling: the
         * key-group warps of a row group take every kKeyWarps-th slab, after
         * the barrier that completes the dS tile). */
        auto dq_resident_k = [&]() {
            if constexpr (kDqAtomic && !B::kStreamKV) {
                if constexpr (B::kKeyWarps > 1)
                    if (!hold)
                        __syncthreads();
                for (int slab = (int)(warp % B::kKeyWarps); slab < kslabs; slab += B::kKeyWarps)
                    dq_slab(ks + slab * kBc * kSlab, slab);
            }
        };
        /* dK += scale dS^T Q chunk by chunk: the held Q chunk once every
         * warp's dS rows are in (then dQ: its reductions drain under the
         * next tile's loads and S GEMM; measured 1-2 % over dQ first), or
         * Q streamed again. */
        if (hold) {
            __syncthreads();
            grad_resident(dk_res, held, dss, p.dqk);
            dq_resident_k();
            continue;
        }
        dq_resident_k();
        for (int c = 0; c < nq2; ++c, ++t) {
            const SA slot = item_begin(t);
            if constexpr (kDqAtomic && B::kStreamKV) {
#pragma unroll
                for (int sl = 0; sl < B::kSlabs; ++sl) {
                    const int slab = B::kSlabs * c + sl;
                    if (slab * kSlab >= p.dqk)
                        break;
                    dq_slab(slot + B::kBr * B::kChunk + sl * kBc * kSlab, slab);
                }
            }
            if constexpr (kResident)
                grad_resident(dk_res, slot, dss, p.dqk);
            else
                grad_chunk(p.dk, dk_base, slot, dss, c, p.dqk, first);
        }
    }
    arch::cp_async_wait<0>();
    if constexpr (kResident) { /* the one write of dV and dK */
        AccTile<T, 2, Cfg::kGNT> zero;
        zero.prefetch(p.dv_acc, dv_base, wm2 * 32, kv_valid, gcol, p.dv, true, lane);
        if (gcol < p.dv)
            zero.commit(dv_res, p.dv_acc, dv_base, wm2 * 32, kv_valid, gcol, p.dv, lane);
        if (gcol < p.dqk)
            zero.commit(dk_res, p.dk, dk_base, wm2 * 32, kv_valid, gcol, p.dqk, lane);
    }
}

} /* namespace bwd */
} /* namespace ffpa */

#endif
