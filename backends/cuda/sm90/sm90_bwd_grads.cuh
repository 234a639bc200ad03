/*
 * The gradient-split consumer of the Hopper backward (BwdConfig::kGradSplit,
 * 256 < D <= 320, one CTA of 64 keys): one pass over the query tiles where
 * the 64-key kernel takes two.
 *
 * The 64-key kernel's consumers each own 128 columns of both dK and dV
 * (128 registers), so a pass covers 256 columns and D = 320 ran a second
 * pass that recomputed S^T and dP^T over all of D for its last 64 columns
 * (17.5 units of 64 x 64 x 64 per consumer and tile). Here consumer 0 owns
 * dV and consumer 1 dK, each over all five boxes (160 registers):
 *   phase 1 as there: S^T = K Q^T (consumer 0), dP^T = V dO^T (consumer 1),
 *     the last slab's empty sixth box skipped;
 *   the softmax gradient as there (each consumer finishes half the tile,
 *     P^T and dS^T into shared memory);
 *   phase 2: dV += P^T dO over ring 1's slabs (consumer 0), dK += dS^T Q
 *     over ring 0's (consumer 1), then dQ = dS K one 64-column box at a
 *     time (boxes 0, 2, 4 on consumer 0, 1, 3 and one past D on consumer
 *     1: 32 registers beside the 160), staged in shared memory and added
 *     into the fp32 buffer by TMA reductions.
 * 13 units a tile per consumer instead of 17.5. Plain only: with a bias,
 * dropout or a variant (softmax_grad's extras) it spilled 380 bytes and
 * lost to the two passes, which keep those calls (sm90_bwd_launch.cu). Every slab of a tile is read in
 * both phases, by different consumers: the rings hold all three (3 slots
 * each) until the other consumer's phase-2 GEMM has read it, and that
 * consumer releases it (BwdRing::col_of keeps the stream in column order).
 * The ordering arguments of sm90_bwd_kernel.cuh hold unchanged: a consumer
 * waits in phase 2 on the other ring's slabs of this tile, whose phase
 * the other consumer waited for before kBarPdsFull and which are not
 * refilled before this consumer releases them.
 */
#ifndef FFPA_CUDA_SM90_BWD_GRADS_CUH
#define FFPA_CUDA_SM90_BWD_GRADS_CUH

#include "sm90_arch.cuh"
#include "sm90_bwd_config.cuh"
#include "sm90_bwd_epilogue.cuh"
#include "sm90_bwd_mainloop.cuh"
#include "sm90_bwd_softmax.cuh"

namespace ffpa {
namespace sm90 {

/* Consumer c's dQ stage: consumer 1 the first 16 KiB of the region, with
 * its half of dp at 8 KiB; consumer 0 the second, its half at its start. */
template <class Cfg> FFPA_DEV uint8_t *grads_stage(uint8_t *smem, int consumer)
{
    return smem + BwdSmemLayout<Cfg>::dqs + (consumer == 0 ? Cfg::kDqStageBytes / 2 : 0);
}

/* The dQ boxes of consumer c, one per step j of kDqSteps: c, c + 2, c + 4
 * (the last of consumer 1 lies past D = 320). The consumer and its
 * reducer walk the same ones. */
constexpr int kDqSteps = 3;
FFPA_DEV int grads_dq_box(int consumer, int j)
{
    return consumer + 2 * j;
}

template <class Cfg, bool kExtras>
FFPA_DEV void bwd_consumer_grads(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, uint8_t *smem,
                                 BwdBarriers *bars, const BwdWork &w, int consumer, int ctid)
{
    static_assert(Cfg::kGradSplit && Cfg::kSlabs == 3 && Cfg::kRingSlots == 3 && Cfg::kGradBoxes == 5,
                  "three slabs a tile, all held; five boxes of gradient");
    static_assert(!kExtras, "plain only: the bias / dropout build spilled 380 bytes (sm90_bwd_kernels.cuh)");
    using T = typename Cfg::T;
    using L = BwdSmemLayout<Cfg>;
    using R = BwdRing<Cfg>;
    using G = BwdGemms<Cfg>;
    const GradBlocks<Cfg> blocks;
    const BwdConsumerBase<Cfg> base(smem, bars, ctid);
    const int lane = base.lane;
    const uint32_t k_addr = base.k_addr, v_addr = base.v_addr, pt_addr = base.pt_addr, dst_addr = base.dst_addr;
    float *dp = reinterpret_cast<float *>(smem + L::dp);
    /* This consumer's dQ stage, around its half of dp (BwdConfig::kDqStageBytes),
     * and the boxes staged so far: before it writes the stage again (a box,
     * or its half of dp) the reducer has read the last one. */
    uint8_t *stage = grads_stage<Cfg>(smem, consumer);
    int staged = 0;
    auto stage_free = [&]() {
        if (staged > 0)
            bwd_wait(&bars->dq_empty[consumer], (uint32_t)(staged - 1) & 1, false, 9, staged);
    };
    float *rows = base.rows;
    auto release = [&](int ring, int n) { base.release(ring, n); };

    const int items = w.items();
    base.wait_kv(items);
    float next_row = consumer == 0 && items > 0 ? fetch_row(p, w, w.head(0), w.q0(0), ctid) : 0.0f;

    /* dV (consumer 0) or dK (consumer 1): columns [0, 256) in two slab
     * accumulators, [256, 320) in the box one. */
    float g0[64], g1[64], g2[32];
#pragma unroll
    for (int i = 0; i < 64; ++i)
        g0[i] = g1[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i)
        g2[i] = 0.0f;

    const int ring_own = consumer, ring_other = 1 - consumer;
    int n = 0; /* slabs per ring so far */
#pragma unroll 1
    for (int it = 0; it < items; ++it, n += Cfg::kSlabs) {
        const int h = w.head(it), q0 = w.q0(it);
        float acc[32];
        if (consumer == 0)
            rows[ctid] = row_value(next_row, ctid); /* the previous tile's readers are past kBarPdsFull */
        BwdBiasTile<Cfg> bias; /* (plain only: never loaded or read) */

        /* Phase 1 over the five boxes; every slab stays for phase 2. */
        const uint32_t kv = consumer == 0 ? k_addr : v_addr;
#pragma unroll
        for (int s = 0; s < Cfg::kSlabs; ++s) {
            bwd_wait(R::full(bars, ring_own, n + s), R::parity(n + s), false, 2, n + s);
            fence_operands(acc);
            wgmma_fence();
            const uint32_t slab = smem_u32(R::ptr(smem, ring_own, n + s));
            if (s + 1 < Cfg::kSlabs)
                G::scores_slab(acc, kv, slab, s, s == 0);
            else
                G::template scores_slab<1>(acc, kv, slab, s, false);
            wgmma_commit();
        }
        wgmma_wait<0>();
        fence_operands(acc);

        /* The softmax gradient, half the tile each (sm90_bwd_kernel.cuh).
         * Our half of dp lies in our dQ stage: free once the reducer has
         * read the last box (the mbarrier chain orders it; the named
         * barrier says so to compute-sanitizer racecheck as well, which
         * does not follow a chain through the reducer thread). */
        if (p.dq.is_f32) {
            stage_free();
            named_barrier_sync(kBarDq + consumer, 128);
        }
        store_half(acc, dp, consumer, ctid);
        named_barrier_sync(kBarDpFull, 256);
        softmax_grad<Cfg, kExtras>(SharedScores<Cfg>{acc, dp, consumer, ctid}, rows, smem + L::pt, smem + L::dst, p,
                                   w, h, q0, ctid, 0, blocks.first(0, consumer), blocks.count(0, consumer),
                                   &bars->ag_full, true, bias);
        fence_proxy_async_shared();
        named_barrier_sync(kBarPdsFull, 256);
        if (consumer == 0 && it + 1 < items)
            next_row = fetch_row(p, w, w.head(it + 1), w.q0(it + 1), ctid);

        /* Phase 2: this consumer's gradient over the other ring's slabs,
         * each slab released as soon as its GEMM is done. */
        const uint32_t a_addr = consumer == 0 ? pt_addr : dst_addr;
#pragma unroll
        for (int s = 0; s < Cfg::kSlabs; ++s) /* complete: the other consumer waited for them */
            bwd_wait(R::full(bars, ring_other, n + s), R::parity(n + s), false, 3, n + s);
        fence_operands(g0);
        fence_operands(g1);
        fence_operands(g2);
        wgmma_fence();
        G::grad_slab(g0, a_addr, smem_u32(R::ptr(smem, ring_other, n)));
        wgmma_commit();
        G::grad_slab(g1, a_addr, smem_u32(R::ptr(smem, ring_other, n + 1)));
        wgmma_commit();
        G::template grad_slab<64>(g2, a_addr, smem_u32(R::ptr(smem, ring_other, n + 2)));
        wgmma_commit();

        /* dQ's boxes of this consumer, one at a time: 0, 2, 4 and 1, 3 (and
         * a sixth past D, computed from K's box 4 so that no wgmma sits
         * behind a branch, where ptxas would serialise them all, and
         * dropped). The fp32 buffer takes each box by TMA reductions from
         * the consumer's stage, issued by a producer thread
         * (bwd_grads_dq_reducer): the consumer stages, arrives on
         * dq_full and goes on; it waits on dq_empty only before it writes
         * the stage again. FFPA_GRAD_ACCUM_OUTPUT reduces from registers. */
        const int rows_q = min(Cfg::kBr, w.seqlen_q - q0);
#pragma unroll
        for (int j = 0; j < kDqSteps; ++j) {
            const int b = grads_dq_box(consumer, j);
            float dq[32];
            fence_operands(dq);
            wgmma_fence();
            G::template dq_gemm<64>(dq, dst_addr, k_addr + (uint32_t)min(b, Cfg::kKVBoxes - 1) * kBoxBytes);
            wgmma_commit();
            if (j == 0) { /* the gradient GEMMs are ahead of it */
                wgmma_wait<3>();
                release(ring_other, n);
                wgmma_wait<2>();
                release(ring_other, n + 1);
                wgmma_wait<1>();
                release(ring_other, n + 2);
                fence_operands(g0);
                fence_operands(g1);
                fence_operands(g2);
            }
            wgmma_wait<0>();
            fence_operands(dq);
            const int dq_col = w.col0 + 64 * b;
            if (dq_col >= p.dqk)
                continue; /* uniform: the box past D */
            if (p.dq.is_f32) {
                stage_free();
                stage_dq(dq, stage, stage, rows_q, ctid);
                fence_proxy_async_shared();
                __syncwarp();
                if (lane == 0)
                    mbar_arrive(&bars->dq_full[consumer]);
                ++staged;
            } else {
                int mine = 0;
                int *turn = p.dq_turn ? w.dq_turn(p, h, q0 / 64, dq_col, Cfg::kBc, mine) : nullptr;
                if (turn)
                    dq_turn_wait(turn, mine, kBarDq + consumer, ctid);
                if constexpr (!kDiagSkipDq)
                    reduce_dq<T>(dq, p.dq, w.dq_row(p, h, q0), rows_q, dq_col, p.dqk, ctid);
                if (turn)
                    dq_turn_pass(turn, mine, kBarDq + consumer, ctid);
            }
        }
    }

    const int rows_valid = min(Cfg::kBc, w.seqlen_k - w.kb0);
    const bool varlen = p.cu_q != nullptr;
    const int dim = consumer == 0 ? p.dv : p.dqk;
    T *grad = consumer == 0 ? w.key_block<T>(out.dv, out.dv_sb, out.dv_sh, out.dv_sn, varlen)
                            : w.key_block<T>(out.dk, out.dk_sb, out.dk_sh, out.dk_sn, varlen);
    const int64_t sn = consumer == 0 ? out.dv_sn : out.dk_sn, sd = consumer == 0 ? out.dv_sd : out.dk_sd;
    store_grad<T>(g0, grad, sn, sd, rows_valid, w.col0, dim, ctid);
    store_grad<T>(g1, grad, sn, sd, rows_valid, w.col0 + 128, dim, ctid);
    store_grad<T>(g2, grad, sn, sd, rows_valid, w.col0 + 256, dim, ctid);
}

/* One producer thread per consumer: each staged dQ box (the consumer's 4
 * warps arrive on dq_full[c]) added into the fp32 buffer's two 64 x 32
 * boxes by TMA reductions, then dq_empty[c] once the TMA has read the
 * stage. The same boxes as the consumer, in the same order (those past Dqk
 * are not staged). Deterministic mode: at this key block's turn for the
 * box's columns (tma_add_dq_boxes), while the consumer runs on. */
template <class Cfg>
FFPA_DEV void bwd_grads_dq_reducer(const BwdMaps &maps, const ffpa_bwd_params &p, uint8_t *smem, BwdBarriers *bars,
                                   const BwdWork &w, int consumer)
{
    uint8_t *stage = grads_stage<Cfg>(smem, consumer);
    const int items = w.items();
    int staged = 0;
    for (int it = 0; it < items; ++it) {
        const int h = w.head(it), q0 = w.q0(it);
        for (int j = 0; j < kDqSteps; ++j) {
            const int dq_col = w.col0 + 64 * grads_dq_box(consumer, j);
            if (dq_col >= p.dqk)
                continue;
            bwd_wait(&bars->dq_full[consumer], (uint32_t)staged & 1, false, 10, staged);
            int mine = 0;
            int *turn = p.dq_turn ? w.dq_turn(p, h, q0 / 64, dq_col, Cfg::kBc, mine) : nullptr;
            tma_add_dq_boxes<2>(stage, stage, &maps.dq, dq_col, (int)w.q_start + q0, h, w.tma_b, turn, mine);
            mbar_arrive(&bars->dq_empty[consumer]);
            ++staged;
        }
    }
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
