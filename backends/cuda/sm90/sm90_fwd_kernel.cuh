/*
 * The Hopper forward (sm_90a), composed from its pieces:
 *   sm90_mainloop.cuh  producer TMA ring + consumer wgmma GEMMs
 *   sm90_exchange.cuh  Split-D across the cluster (reduce-scatter of the
 *                      partial S, all-gather of P, through DSMEM)
 *   sm90_softmax.cuh   masking, online softmax, dropout of a tile (over the
 *                      shared ../../gpu pieces)
 *   ../../gpu/tile_scheduler.cuh   work order, shared with the generic path
 *   sm90_epilogue.cuh  O and LSE stores
 *
 * Warp specialisation: warpgroup 0 gives its registers away (setmaxnreg) and
 * one of its threads issues every TMA load; warpgroups 1 and 2 (and 3 at
 * D = 64) each own 64 query rows and run QK^T, the exchange, masking, online softmax (base 2)
 * and PV per key tile. While one consumer is in its softmax the other's
 * wgmma keeps the tensor cores busy.
 */
#ifndef FFPA_CUDA_SM90_FWD_KERNEL_CUH
#define FFPA_CUDA_SM90_FWD_KERNEL_CUH

/* The arch layer first: the shared pieces of backends/gpu are written against it. */
#include "sm90_arch.cuh"
#include "sm90_epilogue.cuh"
#include "sm90_exchange.cuh"
#include "sm90_fwd_config.cuh"
#include "sm90_mainloop.cuh"
#include "sm90_softmax.cuh"

#include "fwd_params.h"
#include "tile_scheduler.cuh"

namespace ffpa {
namespace sm90 {

/* The work of one CTA: which rows, keys and slice. */
struct CtaWork {
    FwdWork w;
    int64_t q_start; /* packed row of the sequence's first query (varlen), else 0 */
    int seqlen_q, seqlen_k, q0, rows_valid;
    int tile0, n_tiles; /* key tiles [tile0, tile0 + n_tiles) */
    TileCoords tc;
};

template <class Cfg> FFPA_DEV bool cta_work(const ffpa_gpu_fwd_params &p, uint32_t rank, CtaWork &cw)
{
    cw.w = fwd_work(p, blockIdx.x / Cfg::kCluster);
    int64_t k_start = 0;
    cw.q_start = 0;
    cw.seqlen_q = p.nq;
    cw.seqlen_k = p.nkv;
    if (p.cu_q) {
        cw.q_start = p.cu_q[cw.w.b];
        cw.seqlen_q = p.cu_q[cw.w.b + 1] - p.cu_q[cw.w.b];
        k_start = p.cu_k[cw.w.b];
        cw.seqlen_k = p.cu_k[cw.w.b + 1] - p.cu_k[cw.w.b];
    }
    cw.q0 = cw.w.q_block * Cfg::kBr;
    if (cw.q0 >= cw.seqlen_q)
        return false; /* same answer in every CTA of the cluster */
    cw.rows_valid = min(Cfg::kBr, cw.seqlen_q - cw.q0);
    /* Only the key tiles some row of the block may see (causal, window):
     * a window's cost scales with the window, not with seqlen_k. */
    const int tile_end = visible_key_tiles(p, cw.q0, cw.q0 + cw.rows_valid - 1, cw.seqlen_k - cw.seqlen_q,
                                           cw.seqlen_k, Cfg::kBc, &cw.tile0);
    cw.n_tiles = max(0, tile_end - cw.tile0);
    TileCoords &tc = cw.tc;
    tc.q_row0 = (int)cw.q_start + cw.q0;
    tc.k_row0 = (int)k_start + cw.tile0 * Cfg::kBc; /* the producer's tile 0 is key tile tile0 */
    tc.h = cw.w.h;
    tc.kvh = cw.w.h / p.group;
    tc.b = p.cu_q ? 0 : cw.w.b;
    tc.col0 = (int)rank * Cfg::kSlice;
    tc.col0_v = (int)rank * Cfg::kSliceV;
    return true;
}

/*
 * One consumer warpgroup. GEMM phase k issues QK^T of tile k and PV of tile
 * k-1 back to back, as two wgmma groups (phase 0: QK^T only; phase n: PV
 * only); the partial S leaves for the peer CTAs as soon as its group is done,
 * and between phases the warpgroup completes the exchange and the softmax of
 * tile k. The plain clusters of 4 and the 4-slot pairs run QK^T one tile
 * further ahead (kQkTwoAhead: PV of tile k-1 and QK^T of tile k+1, the
 * exchange and softmax of tile k under both). The consumers take turns
 * issuing, round robin on named barriers 1 .. kConsumers (consumer c waits
 * on barrier 1 + c, then arrives on the next one), so one warpgroup's
 * softmax and DSMEM exchange overlap the others' tensor-core work.
 */
template <class Cfg>
FFPA_DEV void consumer(const ffpa_gpu_fwd_params &p, uint8_t *smem, RingBarriers *bars, const CtaWork &cw,
                       uint32_t rank, int consumer_idx, int ctid)
{
    using T = typename Cfg::T;
    using L = FwdSmemLayout<Cfg>;
    using R = Ring<Cfg>;
    const int warp = ctid / 32, lane = ctid & 31;
    const int row_in_block = consumer_idx * 64 + warp * 16; /* the warp's first row */
    constexpr int kLast = Cfg::kConsumers - 1;
    const int bar_mine = 1 + consumer_idx, bar_other = 1 + (consumer_idx == kLast ? 0 : consumer_idx + 1);
    /* Pairs: PV(t) completes under the exchange and the softmax of tile t+1
     * (which touch neither O nor P); the wait moves to just before O's
     * rescale and P's packing (H200: D = 512 +1.5-2%, MLA 576/512 +4%).
     * Clusters of 3 and 4 keep the early wait: P live through the softmax
     * spills them (16 -> 64 bytes of stores) and D = 768 lost 3%. The
     * single-CTA plain kernels wait late too (FlashAttention-3's
     * intra-warpgroup overlap: their softmax under their own PV as well as
     * the other consumer's GEMMs; H200: D = 128 +3.5%, D = 64 +4%). */
    constexpr bool kLatePv = Cfg::kCluster == 2 || (Cfg::kCluster == 1 && Cfg::kPlain);
    /* QK^T two tiles ahead (plain clusters of 4, and pairs on rings of 4+ slots):
     * phase t issues PV(t) and QK(t+2); tile t+1's partial S left for the
     * peers at the end of the phase before, so the exchange's DSMEM round
     * trips run under this consumer's own GEMMs as well as the other
     * consumer's. The second S costs 32 registers, paid back by keeping our
     * column block first (ClusterExchange::own_first) and waiting for PV(t)
     * before the all-gather, which frees P (H200: D = 512 +4%, 1024 +9%).
     * Not the MLA pair (3 slots of 40 KiB: -3%), nor the variants' code
     * (their dropout follows the key order), nor clusters of 3: blocks of 3,
     * 3 and 2 n8-blocks cannot go first (P's k16 steps would straddle them),
     * and per-rank copies of the consumer (constant block positions) still
     * spill 420 bytes (1912 with the rank at run time). */
    constexpr bool kQkTwoAhead =
        Cfg::kPlain && (Cfg::kCluster == 4 || (Cfg::kCluster == 2 && Cfg::kSlots >= 4));
    /* P in own_first's order: its k16 step kk holds the keys of step kk ^ step_xor. That holds when the
     * column blocks are equal, whole k16 steps, a power of two of them each (pairs: 2, fours: 1). */
    constexpr int kStepsPerBlock = Cfg::kBlockNT / 2;
    static_assert(!kQkTwoAhead || (Cfg::kNT == Cfg::kCluster * Cfg::kBlockNT && Cfg::kBlockNT % 2 == 0 &&
                                   (kStepsPerBlock & (kStepsPerBlock - 1)) == 0),
                  "own block first: equal column blocks of a power of two of k16 steps");
    const int step_xor = kQkTwoAhead ? (int)rank * kStepsPerBlock : 0;

    float o[Cfg::kOAcc];
#pragma unroll
    for (int i = 0; i < Cfg::kOAcc; ++i)
        o[i] = 0.0f;
    TileSoftmax<Cfg> ts;
    const ClusterExchange<Cfg> xch(smem + L::x, bars, consumer_idx, rank, ctid);
    ts.sm.init();
    ts.mc.row0 = cw.q0 + row_in_block;
    ts.mc.seqlen_q = cw.seqlen_q;
    ts.mc.seqlen_k = cw.seqlen_k;
    ts.mc.set_head(p, cw.w.b, cw.w.h);
    ts.diag = cw.seqlen_k - cw.seqlen_q;
    ts.tile0 = cw.tile0;

    const int n = cw.n_tiles;
    const uint32_t q_addr = smem_u32(smem + L::q + (size_t)consumer_idx * Cfg::kBoxes * kBoxBytes);
    auto release = [&](int slab) {
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&bars->empty[R::slot(slab)]);
    };
    if (n > 0) {
        float s[Cfg::kSAcc];
        uint32_t pf[Cfg::kPSteps][4];
        if (consumer_idx == kLast)
            named_barrier_arrive(bar_other, 256); /* consumer 0 issues first */
        mbar_wait(&bars->q_full, 0);
        const int k0 = R::k_slab(0);
        R::wait_full(bars, k0);
        named_barrier_sync(bar_mine, 256);
        if constexpr (kQkTwoAhead) {
            float sn[Cfg::kSAcc]; /* the next tile's partial S (key order), in flight under this tile's softmax */
            /* The next tile's partial S is done: its peers' blocks leave, ours moves to block 0 of s. */
            auto take_next = [&](int k_slab) {
                wgmma_wait<0>();
                fence_operands(sn);
                release(k_slab);
                xch.scatter(sn);
                xch.own_first(sn, s);
            };
            fence_operands(sn);
            wgmma_fence();
            ConsumerGemms<Cfg>::qk_issue(sn, q_addr, R::addr(smem, k0));
            wgmma_commit();
            named_barrier_arrive(bar_other, 256);
            take_next(k0);
            /* Phase -1: QK(1) alone; tile 0's exchange and softmax under it. */
            const int k1 = R::k_slab(1);
            if (n > 1) {
                R::wait_full(bars, k1);
                named_barrier_sync(bar_mine, 256);
                fence_operands(sn);
                wgmma_fence();
                ConsumerGemms<Cfg>::qk_issue(sn, q_addr, R::addr(smem, k1));
                wgmma_commit();
                named_barrier_arrive(bar_other, 256);
            }
            xch.template reduce<true>(s, 0);
            ts.template run<true>(s, o, pf, xch, p, lane, 0, [] {}); /* no PV in flight yet */
            if (n > 1)
                take_next(k1);
            /* Phase t: PV(t), then QK(t+2) (wgmma groups in that order, so
             * waiting for all but one is PV(t) done); tile t+1's exchange and
             * softmax run under both. */
            for (int t = 0; t + 2 < n; ++t) {
                const int v_cur = R::v_slab(t, n), k_next = R::k_slab(t + 2);
                R::wait_full(bars, v_cur);
                if constexpr (!R::kLateV)
                    R::wait_full(bars, k_next);
                named_barrier_sync(bar_mine, 256);
                fence_operands(o);
                fence_operands(sn);
                wgmma_fence();
                ConsumerGemms<Cfg>::pv_issue(o, pf, R::addr(smem, v_cur), step_xor);
                wgmma_commit(); /* group 1: PV(t) */
                if constexpr (R::kLateV) {
                    /* K(t+2) may still be landing in V(t-1)'s slot (3 slots): PV(t) runs meanwhile. */
                    R::wait_full(bars, k_next);
                    wgmma_fence();
                }
                ConsumerGemms<Cfg>::qk_issue(sn, q_addr, R::addr(smem, k_next));
                wgmma_commit(); /* group 2: QK(t+2) */
                named_barrier_arrive(bar_other, 256);
                xch.template reduce<true>(s, t + 1);
                ts.template run<true>(s, o, pf, xch, p, lane, t + 1, [&] {
                    wgmma_wait<1>();
                    fence_operands(o);
                    release(v_cur);
                });
                take_next(k_next);
            }
            /* Phase n-2: PV(n-2) alone; the last tile's exchange and softmax under it. */
            if (n > 1) {
                const int v_cur = R::v_slab(n - 2, n);
                R::wait_full(bars, v_cur);
                named_barrier_sync(bar_mine, 256);
                fence_operands(o);
                wgmma_fence();
                ConsumerGemms<Cfg>::pv_issue(o, pf, R::addr(smem, v_cur), step_xor);
                wgmma_commit();
                named_barrier_arrive(bar_other, 256);
                xch.template reduce<true>(s, n - 1);
                ts.template run<true>(s, o, pf, xch, p, lane, n - 1, [&] {
                    wgmma_wait<0>();
                    fence_operands(o);
                    release(v_cur);
                });
            }
        } else {
            fence_operands(s);
            wgmma_fence();
            ConsumerGemms<Cfg>::qk_issue(s, q_addr, R::addr(smem, k0));
            wgmma_commit();
            named_barrier_arrive(bar_other, 256);
            wgmma_wait<0>();
            fence_operands(s);
            release(k0);
            if constexpr (Cfg::kCluster > 1) {
                xch.scatter(s);
                xch.reduce(s, 0);
            }
            ts.run(s, o, pf, xch, p, lane, 0, [] {}); /* no PV in flight yet */
#ifdef FFPA_SM90_DIAG_TIMELINE
            /* Diagnostic builds only: mean cycles per tile of each step of the
             * steady loop, printed by the first cluster's consumers. */
            long long diag[8] = {0, 0, 0, 0, 0, 0, 0, 0}, diag_t = clock64();
#define FFPA_SM90_DIAG_MARK(i)                                                                         \
        do {                                                                                               \
            const long long now = clock64();                                                               \
            diag[i] += now - diag_t;                                                                       \
            diag_t = now;                                                                                  \
        } while (0)
#else
#define FFPA_SM90_DIAG_MARK(i) ((void)0)
#endif
            /* Steady state (straight-line wgmma batches: no branch around them). */
            for (int t = 0; t + 1 < n; ++t) {
                const int k_next = R::k_slab(t + 1), v_cur = R::v_slab(t, n);
                FFPA_SM90_DIAG_MARK(7);
                R::wait_full(bars, k_next);
                if constexpr (!R::kLateV)
                    R::wait_full(bars, v_cur);
                FFPA_SM90_DIAG_MARK(0);
                named_barrier_sync(bar_mine, 256);
                FFPA_SM90_DIAG_MARK(1);
                fence_operands(s);
                fence_operands(o);
                wgmma_fence();
                ConsumerGemms<Cfg>::qk_issue(s, q_addr, R::addr(smem, k_next));
                wgmma_commit(); /* group 1: QK(t+1) */
                if constexpr (R::kLateV) {
                    /* V(t) may still be landing (a 3-slot ring): QK(t+1) runs meanwhile. */
                    R::wait_full(bars, v_cur);
                    wgmma_fence(); /* ours, after the wait: one ptxas injects inside it serialises the wgmmas (C7520) */
                }
                ConsumerGemms<Cfg>::pv_issue(o, pf, R::addr(smem, v_cur));
                wgmma_commit(); /* group 2: PV(t) */
                named_barrier_arrive(bar_other, 256);
                FFPA_SM90_DIAG_MARK(2);
                /* The partial S leaves for the peer CTAs while PV(t) still runs. */
                wgmma_wait<1>();
                fence_operands(s);
                release(k_next);
                FFPA_SM90_DIAG_MARK(3);
                if constexpr (Cfg::kCluster > 1)
                    xch.scatter(s);
                FFPA_SM90_DIAG_MARK(4);
                /* PV(t) done: O may be rescaled, P rewritten, V's slot reused. */
                auto pv_done = [&]() {
                    wgmma_wait<0>();
                    fence_operands(o);
                    release(v_cur);
                };
                if constexpr (!kLatePv)
                    pv_done();
                FFPA_SM90_DIAG_MARK(5);
                if constexpr (Cfg::kCluster > 1)
                    xch.reduce(s, t + 1);
                FFPA_SM90_DIAG_MARK(6);
                ts.run(s, o, pf, xch, p, lane, t + 1, [&] {
                    if constexpr (kLatePv)
                        pv_done();
                });
            }
#ifdef FFPA_SM90_DIAG_TIMELINE
            if (ctid == 0 && blockIdx.x < Cfg::kCluster && n > 1)
                printf("diag slice %d cta %u consumer %d tiles %d cycles/tile: data %lld turn %lld issue %lld "
                       "qk-wait %lld scatter %lld pv-wait %lld reduce %lld softmax+gather %lld%s\n",
                       Cfg::kSlice, rank, consumer_idx, n - 1, diag[0] / (n - 1), diag[1] / (n - 1), diag[2] / (n - 1),
                       diag[3] / (n - 1), diag[4] / (n - 1), diag[5] / (n - 1), diag[6] / (n - 1), diag[7] / (n - 1),
                       kLatePv ? " (late PV: its wait is in softmax+gather)" : "");
#endif
        }
        /* Last phase: PV of the last tile (the turn after the last consumer's has no taker). */
        const int v_last = R::v_slab(n - 1, n);
        R::wait_full(bars, v_last);
        named_barrier_sync(bar_mine, 256);
        fence_operands(o);
        wgmma_fence();
        ConsumerGemms<Cfg>::pv_issue(o, pf, R::addr(smem, v_last), step_xor);
        wgmma_commit();
        if (consumer_idx != kLast)
            named_barrier_arrive(bar_other, 256);
        wgmma_wait<0>();
        fence_operands(o);
        release(v_last);
    }

    float inv_l[2], lse[2];
    ts.sm.finish(inv_l, lse);
    T *og = static_cast<T *>(p.o) + (p.cu_q ? cw.q_start * p.o_sn : (int64_t)cw.w.b * p.o_sb) +
            (int64_t)cw.w.h * p.o_sh + (int64_t)cw.q0 * p.o_sn;
    store_o<Cfg>(o, inv_l, og, p.o_sn, row_in_block, cw.rows_valid, cw.tc.col0_v, p.dv, lane);
    if (rank == 0 && p.lse) {
        float *lg = p.lse + (p.cu_q ? cw.q_start * p.lse_sn : (int64_t)cw.w.b * p.lse_sb) +
                    (int64_t)cw.w.h * p.lse_sh + (int64_t)cw.q0 * p.lse_sn;
        store_lse(lse, lg, p.lse_sn, row_in_block, cw.rows_valid, lane);
    }
}

template <class Cfg> FFPA_DEV void fwd_body(const FwdMaps &maps, const ffpa_gpu_fwd_params &p)
{
    /* 128-byte swizzled tiles want 1024-byte aligned atoms. The single-CTA
     * kernels (D <= 320) align without leaving the shared address space, so
     * the softmax's plain accesses are LDS/STS (aligned_dynamic_smem); the
     * cluster kernels keep the integer round trip, which measured faster
     * around their DSMEM exchange (docs/notes/forward.md, "shared memory
     * through generic pointers"). */
    uint8_t *smem;
    if constexpr (Cfg::kCluster == 1) {
        smem = aligned_dynamic_smem<1024>();
    } else {
        extern __shared__ uint8_t smem_dyn[];
        smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_dyn) + 1023) & ~(uintptr_t)1023);
    }
    using L = FwdSmemLayout<Cfg>;
    RingBarriers *bars = reinterpret_cast<RingBarriers *>(smem + L::bars);
    const uint32_t rank = Cfg::kCluster > 1 ? cluster_rank() : 0;
    const int tid = threadIdx.x;

    CtaWork cw;
    if (!cta_work<Cfg>(p, rank, cw))
        return;

    if (tid == 0) {
        mbar_init(&bars->q_full, 1);
        for (int s = 0; s < Cfg::kSlots; ++s) {
            mbar_init(&bars->full[s], 1);
            mbar_init(&bars->empty[s], Cfg::kConsumers * 4);
        }
        for (int c = 0; c < Cfg::kConsumers; ++c) {
            mbar_init(&bars->rs_full[c], 1);
            mbar_init(&bars->ag_full[c], 1);
        }
        fence_barrier_init();
    }
    if (Cfg::kCluster > 1)
        cluster_sync(); /* peers arrive on our barriers: they must exist first */
    else
        __syncthreads();

    const int wg = tid / 128;
    if (wg == 0) {
        setmaxnreg_dec<Cfg::kProducerRegs>();
        if (tid == 0 && cw.n_tiles > 0) {
            prefetch_tensormap(&maps.q);
            prefetch_tensormap(&maps.k);
            prefetch_tensormap(&maps.v);
            Producer<Cfg>::run(maps, smem, bars, cw.tc, cw.n_tiles);
        }
        __syncwarp();
    } else {
        setmaxnreg_inc<Cfg::kConsumerRegs>();
        consumer<Cfg>(p, smem, bars, cw, rank, wg - 1, tid - 128 * wg);
    }
    if (Cfg::kCluster > 1)
        cluster_sync(); /* no CTA leaves while a peer may still write into it */
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
