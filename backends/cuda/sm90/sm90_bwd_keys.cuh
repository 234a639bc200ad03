/*
 * The small-D consumer of the Hopper backward (BwdConfig::kKeySplit, D <=
 * 128): the FlashAttention-3 split of the work. A CTA owns 128 keys and
 * consumer c the 64 keys [64 c, 64 c + 64) of them; each streams every
 * query tile (Q and dO, read by both consumers) and per tile:
 *   S^T_c = K_c Q^T, then dP^T_c = V_c dO^T (wgmma SS over D), both in its
 *     registers: no exchange between the GEMM phases;
 *   P^T_c while dP^T_c is in flight (grad_probs), then dV_c += P^T_c Z dO
 *     with P^T from registers (wgmma RS);
 *   dS^T_c while that runs (grad_dscores), into its registers and its
 *     shared tile;
 *   one barrier: both consumers' dS^T are written;
 *   dQ's columns [64 c, 64 c + 64) = dS K over all 128 keys, then dK_c +=
 *     dS^T_c Q from registers, under which dQ is staged in shared memory;
 *     a producer warp adds the tile into the fp32 buffer by TMA reductions
 *     (bwd_dq_reducer), so the consumers do not wait on them. With
 *     FFPA_GRAD_ACCUM_OUTPUT they reduce into the output from registers.
 * (Staging tile t's dQ under tile t+1's first GEMM instead needs dQ's
 * wgmma group waited for across the loop's back edge: ptxas 13.0 then
 * cannot tell the group is done when dQ's registers are read and
 * serialises every wgmma of the kernel, C7514 / C7515.)
 * Against the 64-key kernel (sm90_bwd_kernel.cuh) each Q / dO tile and each
 * dQ reduction serves twice the keys, and a tile has one barrier instead of
 * two.
 *
 * Buffers shared by the consumers alternate by tile: dS^T (the other
 * consumer may still read tile t's for dQ while this one writes tile t+1's)
 * and the rows' LSE / Delta (consumer 0 writes tile t+1's during tile t).
 * Both are written during tile t, after the writer passed the barrier of
 * tile t-1, and the buffer's previous readers (tile t-2's dQ GEMMs, tile
 * t-1's softmax gradient) were done before that barrier.
 *
 * kExtras as there (dropout, the variants), without a bias or dbias: its
 * 32 values a thread would spill beside dK, dV, S^T and dP^T, so
 * sm90_bwd_launch.cu keeps a bias on the 64-key kernel, as deterministic
 * mode with FFPA_GRAD_ACCUM_OUTPUT.
 */
#ifndef FFPA_CUDA_SM90_BWD_KEYS_CUH
#define FFPA_CUDA_SM90_BWD_KEYS_CUH

#include "sm90_arch.cuh"
#include "sm90_bwd_config.cuh"
#include "sm90_bwd_epilogue.cuh"
#include "sm90_bwd_mainloop.cuh"
#include "sm90_bwd_softmax.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg, bool kExtras>
FFPA_DEV void bwd_consumer_keys(const ffpa_bwd_params &p, const BwdOutViews &out, uint8_t *smem, BwdBarriers *bars,
                                const BwdWork &w, int consumer, int ctid)
{
    static_assert(Cfg::kKeySplit && Cfg::kSlabs == 1 && Cfg::kPasses == 1, "one slab, one pass");
    using T = typename Cfg::T;
    using L = BwdSmemLayout<Cfg>;
    using R = BwdRing<Cfg>;
    using G = BwdGemms<Cfg>;
    const BwdConsumerBase<Cfg> base(smem, bars, ctid);
    const int lane = base.lane;
    constexpr uint32_t kHalf = 2 * kBoxBytes; /* K or V of 64 keys (load_kv's layout) */
    const uint32_t k_addr = base.k_addr, v_addr = base.v_addr;
    float *rows = base.rows;
    BwdWork mine = w; /* this consumer's 64 keys, for the masks */
    mine.kb0 += 64 * consumer;
    auto release = [&](int ring, int n) { base.release(ring, n); };

    const int items = w.items();
    base.wait_kv(items);
    /* Consumer 0: tile 0's LSE / Delta now, then this thread's value of the
     * tile after next a tile ahead (fetch_row). */
    float next_row = 0.0f;
    BwdWork::Step step = w.first_step(); /* tile it's query head and tile */
    if (consumer == 0 && items > 0) {
        rows[ctid] = row_value(fetch_row(p, w, step.h, w.q0_of(step), ctid), ctid);
        BwdWork::Step next = step;
        w.advance(next);
        if (items > 1)
            next_row = fetch_row(p, w, next.h, w.q0_of(next), ctid);
    }
    named_barrier_sync(kBarDpFull, 256); /* tile 0's rows */

    /* Tile t's dQ, once its GEMMs are done: staged for the reducer (the
     * stage is free once the reducer has read tile t-1's), or reduced into
     * the output from registers. */
    auto finish_dq = [&](float(&dq)[32], int t, int h, int q0) {
        const int rows_q = min(Cfg::kBr, w.seqlen_q - q0);
        if (p.dq.is_f32) {
            if (t > 0)
                bwd_wait(&bars->dq_empty[0], (uint32_t)(t - 1) & 1, false, 9, t);
            uint8_t *stage = smem + L::dqs + consumer * (2 * 8192); /* its two 64 x 32 boxes */
            stage_dq(dq, stage, stage, rows_q, ctid);
            fence_proxy_async_shared();
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&bars->dq_full[0]);
        } else {
            reduce_dq<T>(dq, p.dq, w.dq_row(p, h, q0), rows_q, 64 * consumer, p.dqk, ctid);
        }
    };

    float dv[64], dk[64];
#pragma unroll
    for (int i = 0; i < 64; ++i)
        dv[i] = dk[i] = 0.0f;
#pragma unroll 1
    for (int it = 0; it < items; ++it, w.advance(step)) {
        /* (The extras build divides: the cursor's registers spill there, softcap -5%.) */
        const int h = kExtras ? w.head(it) : step.h, q0 = kExtras ? w.q0(it) : w.q0_of(step);
        if (consumer == 0 && it + 1 < items) {
            rows[((it + 1) & 1) * 128 + ctid] = row_value(next_row, ctid);
            if (it + 2 < items) {
                BwdWork::Step ahead = step;
                w.advance(ahead);
                w.advance(ahead);
                next_row = fetch_row(p, w, ahead.h, w.q0_of(ahead), ctid);
            }
        }
        const uint32_t q_slab = smem_u32(R::ptr(smem, 0, it)), do_slab = smem_u32(R::ptr(smem, 1, it));
        const float *tile_rows = rows + (it & 1) * 128;
        uint8_t *dst = smem + L::dst + (it & 1) * Cfg::kDsTileBytes; /* this tile's dS^T, both consumers' keys */

        /* Phase 1: S^T, then dP^T, of this consumer's keys; the dropout
         * draws while they run. */
        float s[32], dpt[32];
        bwd_wait(R::full(bars, 0, it), R::parity(it), false, 2, it);
        fence_operands(s);
        fence_operands(dpt);
        wgmma_fence();
        G::scores_slab(s, k_addr + consumer * kHalf, q_slab, 0, true);
        wgmma_commit();
        bwd_wait(R::full(bars, 1, it), R::parity(it), false, 2, it);
        G::scores_slab(dpt, v_addr + consumer * kHalf, do_slab, 0, true);
        wgmma_commit();
        const uint32_t keep =
            kExtras && p.mask.has_dropout ? keep_bits<Cfg>(p.mask, mine, h, q0, ctid, 0, 8) : 0xFFFFFFFFu;

        /* P^T under the dP^T GEMM, then dV_c += P^T Z dO from registers. */
        wgmma_wait<1>();
        fence_operands(s);
        uint32_t pf[4][4], df[4][4];
        grad_probs<Cfg, kExtras>(s, pf, tile_rows, keep, p, mine, h, q0, ctid);
        fence_operands(dv);
        wgmma_fence();
        G::grad_slab_regs(dv, pf, do_slab);
        wgmma_commit();

        /* dS^T under the dV GEMM; once both consumers' are written, dQ's
         * columns of this consumer over all 128 keys, then dK_c += dS^T Q
         * from registers, under which dQ is finished. */
        wgmma_wait<1>();
        fence_operands(dpt);
        grad_dscores<Cfg, kExtras>(s, dpt, df, dst + consumer * Cfg::kPdsBytes, tile_rows, keep, p, ctid);
        fence_proxy_async_shared();
        named_barrier_sync(kBarPdsFull, 256);
        float dq[32];
        const uint32_t dst_addr = smem_u32(dst);
        wgmma_fence();
        G::template dq_gemm<64>(dq, dst_addr, k_addr + consumer * kBoxBytes);
        G::template dq_gemm<64>(dq, dst_addr + (uint32_t)Cfg::kPdsBytes, k_addr + kHalf + consumer * kBoxBytes, true);
        wgmma_commit();
        fence_operands(dk);
        G::grad_slab_regs(dk, df, q_slab);
        wgmma_commit();
        wgmma_wait<1>(); /* dV (the dO slab is read) and dQ */
        release(1, it);
        fence_operands(dq);
        finish_dq(dq, it, h, q0);
        wgmma_wait<0>(); /* dK: the Q slab is read */
        release(0, it);
        fence_operands(dv);
        fence_operands(dk);
    }

    const int rows_valid = min(64, w.seqlen_k - mine.kb0);
    if (rows_valid <= 0)
        return;
    const bool varlen = p.cu_q != nullptr;
    store_grad<T>(dk, mine.key_block<T>(out.dk, out.dk_sb, out.dk_sh, out.dk_sn, varlen), out.dk_sn, out.dk_sd,
                  rows_valid, 0, p.dqk, ctid);
    store_grad<T>(dv, mine.key_block<T>(out.dv, out.dv_sb, out.dv_sh, out.dv_sn, varlen), out.dv_sn, out.dv_sd,
                  rows_valid, 0, p.dv, ctid);
}

/* One producer thread: each tile's staged dQ (both consumers' 8 warps
 * arrive on dq_full) added into the fp32 buffer's 64 x 32 boxes by TMA
 * reductions; dq_empty once the TMA has read the stage. Rows past the
 * sequence were staged as zeros (stage_dq); boxes past Dqk fall outside
 * the map. Deterministic mode: at this key block's turn for the tile (one
 * counter for its 128 columns, BwdWork::dq_turn), passed on once the
 * reductions are performed; the consumers run on meanwhile until they
 * need the stage again. */
template <class Cfg>
FFPA_DEV void bwd_dq_reducer(const BwdMaps &maps, const ffpa_bwd_params &p, uint8_t *smem, BwdBarriers *bars,
                             const BwdWork &w)
{
    using L = BwdSmemLayout<Cfg>;
    const int items = w.items();
    for (int it = 0; it < items; ++it) {
        const int h = w.head(it), q0 = w.q0(it);
        bwd_wait(&bars->dq_full[0], (uint32_t)it & 1, false, 10, it);
        int mine = 0;
        int *turn = p.dq_turn ? w.dq_turn(p, h, q0 / 64, 0, Cfg::kBc, mine) : nullptr;
        tma_add_dq_boxes(smem + L::dqs, smem + L::dqs + 2 * 8192, &maps.dq, 0, (int)w.q_start + q0, h, w.tma_b, turn,
                         mine);
        mbar_arrive(&bars->dq_empty[0]);
    }
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
