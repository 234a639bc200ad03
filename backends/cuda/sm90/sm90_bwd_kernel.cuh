/*
 * The Hopper backward (sm_90a): dK, dV and dQ in one kernel, composed from
 *   sm90_bwd_mainloop.cuh  work of a CTA, producer TMA ring, wgmma GEMMs
 *   sm90_bwd_softmax.cuh   P^T and dS^T of a tile (masking, LSE, Delta)
 *   sm90_bwd_dbias.cuh     dbias from the same dS
 *   sm90_bwd_epilogue.cuh  dK/dV stores, dQ reductions
 *   sm90_bwd_keys.cuh      the consumers of the small-D (key-split) kernel
 *   sm90_bwd_grads.cuh     the consumers of the D <= 320 (gradient-split) kernel
 * (shape and shared memory: sm90_bwd_config.cuh).
 *
 * Per pass and query tile:
 *   consumer 0: S^T = K Q^T (wgmma SS over all of Dqk)   consumer 1: dP^T = V dO^T
 *   both: swap halves, each writes half of P^T and dS^T (of the CTA's
 *   block with a cluster)
 *   both:       dV_c += P^T dO_c, dK_c += dS^T Q_c, dQ_c = dS K_c (own 128 columns c)
 * dK and dV are register accumulators across all query tiles of the pass
 * and are stored once; dQ is reduced per tile into the fp32 buffer (or the
 * output itself with FFPA_GRAD_ACCUM_OUTPUT), in a fixed key-block order in
 * deterministic mode. In a
 * cluster (D > 384) the CTAs complete S^T and dP^T through
 * sm90_bwd_exchange.cuh between the two phases.
 */
#ifndef FFPA_CUDA_SM90_BWD_KERNEL_CUH
#define FFPA_CUDA_SM90_BWD_KERNEL_CUH

#include "sm90_arch.cuh"
#include "sm90_bwd_config.cuh"
#include "sm90_bwd_epilogue.cuh"
#include "sm90_bwd_exchange.cuh"
#include "sm90_bwd_grads.cuh"
#include "sm90_bwd_keys.cuh"
#include "sm90_bwd_mainloop.cuh"
#include "sm90_bwd_softmax.cuh"

namespace ffpa {
namespace sm90 {

constexpr int kBwdProducerRegs = 24;
constexpr int kBwdConsumerRegs = 240;

template <class Cfg, bool kExtras>
FFPA_DEV void bwd_consumer(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, uint8_t *smem,
                           BwdBarriers *bars,
                           const BwdWork &w, uint32_t rank, int consumer, int ctid)
{
    using T = typename Cfg::T;
    using L = BwdSmemLayout<Cfg>;
    using R = BwdRing<Cfg>;
    using G = BwdGemms<Cfg>;
    const GradBlocks<Cfg> blocks;
    const BwdConsumerBase<Cfg> base(smem, bars, ctid);
    const uint32_t k_addr = base.k_addr, v_addr = base.v_addr, pt_addr = base.pt_addr, dst_addr = base.dst_addr;
    float *dp = reinterpret_cast<float *>(smem + L::dp);
    float *rows = base.rows;
    const BwdExchange<Cfg> xch{smem, bars, rank, ctid};
    auto release = [&](int ring, int n) { base.release(ring, n); };

    const int items = w.items();
    const int total = items * Cfg::kPasses;
    base.wait_kv(items);

    int n = 0, done = 0; /* slabs per ring so far (the same in both rings); tiles done */
    /* Consumer 0: this thread's LSE / Delta value of the next tile (fetch_row). */
    float next_row = consumer == 0 && total > 0 ? fetch_row(p, w, w.head(0), w.q0(0), ctid) : 0.0f;
#pragma unroll 1
    for (int pass = 0; pass < Cfg::kPasses; ++pass) {
        /* One slab in the pass (D <= 128; the last pass of 6 boxes): both
         * consumers share its phase-2 GEMMs (below). */
        const bool split = Cfg::kSlabs % 2 == 1 && pass == Cfg::kPasses - 1; /* R::n_own(pass) == 1 */
        const int slab = split ? 2 * pass : 2 * pass + consumer; /* the 128 columns of its dK / dV */
        const bool owns = split || R::owns(pass, consumer);
        float dv[64], dk[64];
#pragma unroll
        for (int i = 0; i < 64; ++i)
            dv[i] = dk[i] = 0.0f;

#pragma unroll 1
        for (int it = 0; it < items; ++it, ++done) {
            const int h = w.head(it), q0 = w.q0(it);
            /* Phase 1: S^T (consumer 0) or dP^T (consumer 1) over all of D,
             * releasing each slab once the next one's wgmma is issued, except
             * the pass's own column slabs (held for phase 2). */
            float acc[32];
            if (consumer == 0)
                rows[ctid] = row_value(next_row, ctid); /* the previous tile's readers are past kBarPdsFull */
            BwdBiasTile<Cfg> bias;
            if constexpr (kExtras)
                if (p.mask.bias)
                    bias.load(p, w, h, q0, ctid, blocks.first(rank, consumer), blocks.count(rank, consumer));
            const uint32_t kv = consumer == 0 ? k_addr : v_addr;
#pragma unroll
            for (int s = 0; s < Cfg::kSlabs; ++s) {
                const int i = n + s;
                bwd_wait(R::full(bars, consumer, i), R::parity(i), false, 2, i);
                fence_operands(acc);
                wgmma_fence();
                G::scores_slab(acc, kv, smem_u32(R::ptr(smem, consumer, i)), R::col_of(pass, s), s == 0);
                wgmma_commit();
                if (s > 0) {
                    wgmma_wait<1>();
                    if (!R::held(pass, s - 1))
                        release(consumer, i - 1);
                }
            }
            wgmma_wait<0>();
            fence_operands(acc);
            if (!R::held(pass, Cfg::kSlabs - 1))
                release(consumer, n + Cfg::kSlabs - 1);

            if constexpr (Cfg::kCluster > 1) {
                /* The pair completes the CTA's block of S^T (consumer 0) and
                 * dP^T (consumer 1); each consumer then finishes half of
                 * that block: consumer 0 its first n8-blocks with the dP^T
                 * sums consumer 1 left in the dP^T buffer, consumer 1 the
                 * others with the S^T sums consumer 0 left in the (read)
                 * receive buffer. One barrier orders it: each consumer
                 * reaches it after its phase-2 wgmma of the last tile (P^T
                 * and dS^T free), after its sums and (consumer 0) the rows. */
                float *other;
                if (consumer == 0) {
                    xch.reduce_scores(acc, done);
                    other = dp;
                } else {
                    xch.reduce_dp(acc, done);
                    other = reinterpret_cast<float *>(smem + L::rs);
                }
                named_barrier_sync(kBarDpFull, 256);
                softmax_grad<Cfg, kExtras>(SharedScores<Cfg>{acc, other, consumer, ctid}, rows, smem + L::pt,
                                           smem + L::dst, p, w, h, q0, ctid, rank, blocks.first(rank, consumer),
                                           blocks.count(rank, consumer), &bars->ag_full, pass == 0, bias);
                if (consumer == 0)
                    xch.gather_wait(done);
                fence_proxy_async_shared();
            } else {
                /* Both consumers finish half the tile (consumer 0 blocks 0-3
                 * with its S^T, consumer 1 blocks 4-7 with its dP^T), each
                 * reading the other's half from the buffer: the softmax
                 * gradient between the GEMM phases takes half as long. One
                 * barrier orders it all: each consumer reaches it after its
                 * phase-2 wgmma of the last tile completed (P^T and dS^T are
                 * free) and after writing its half and (consumer 0) the rows;
                 * the halves' slots were last read before kBarPdsFull. */
                store_half(acc, dp, consumer, ctid);
                named_barrier_sync(kBarDpFull, 256);
                softmax_grad<Cfg, kExtras>(SharedScores<Cfg>{acc, dp, consumer, ctid}, rows, smem + L::pt,
                                           smem + L::dst, p, w, h, q0, ctid, rank, blocks.first(rank, consumer),
                                           blocks.count(rank, consumer), &bars->ag_full, pass == 0, bias);
                fence_proxy_async_shared();
            }
            named_barrier_sync(kBarPdsFull, 256);
            if constexpr (Cfg::kCluster > 1)
                fence_proxy_async_shared(); /* the peer's blocks came through st.async */
            if (consumer == 0 && done + 1 < total) {
                const int next = it + 1 < items ? it + 1 : 0; /* the next pass starts over */
                next_row = fetch_row(p, w, w.head(next), w.q0(next), ctid);
            }

            /* Phase 2: this consumer's columns of dV, dK and dQ, from its own
             * slabs still in the rings (dO in ring 1, Q in ring 0). With one
             * slab in the pass (split) the consumers share its GEMMs
             * instead: consumer 0 dV (P^T, the dO slab), consumer 1 dK
             * (dS^T, the Q slab), both into `dv`, and each half of dQ. */
            if (owns) {
                const int own = n + R::own_pos(pass, split ? 0 : consumer);
                const int rows_valid = min(Cfg::kBr, w.seqlen_q - q0);
                /* Deterministic mode: this key block's turn at the tile's dQ columns. */
                auto turn_of = [&](int dq_col, int *&turn, int &mine) {
                    mine = 0;
                    turn = p.dq_turn ? w.dq_turn(p, h, q0 / 64, dq_col, Cfg::kBc, mine) : nullptr;
                };
                auto reduce = [&](const auto &dq, int dq_col) {
                    int *turn, mine;
                    turn_of(dq_col, turn, mine);
                    if (turn)
                        dq_turn_wait(turn, mine, kBarDq + consumer, ctid);
                    if constexpr (!kDiagSkipDq)
                        reduce_dq<T>(dq, p.dq, w.dq_row(p, h, q0), rows_valid, dq_col, p.dqk, ctid);
                    if (turn)
                        dq_turn_pass(turn, mine, kBarDq + consumer, ctid);
                };
                if (split) {
                    static_assert(!Cfg::kDqBulk || Cfg::kSlabs % 2 == 0, "no split pass where dQ goes by TMA");
                    const int ring = consumer == 0 ? 1 : 0;
                    float dq[32];
                    /* Its phase is complete (the other consumer waited for it in phase 1). */
                    bwd_wait(R::full(bars, ring, own), R::parity(own), false, 3, own);
                    fence_operands(dv);
                    wgmma_fence();
                    G::grad_slab(dv, consumer == 0 ? pt_addr : dst_addr, smem_u32(R::ptr(smem, ring, own)));
                    wgmma_commit();
                    G::template dq_gemm<64>(dq, dst_addr, k_addr + (uint32_t)(2 * slab + consumer) * kBoxBytes);
                    wgmma_commit();
                    wgmma_wait<1>();
                    release(ring, own);
                    wgmma_wait<0>();
                    fence_operands(dv);
                    fence_operands(dq);
                    reduce(dq, w.col0 + slab * 128 + 64 * consumer);
                } else {
                    float dq[64];
                    /* One of the two was waited for by the other consumer: its phase is
                     * complete and the slot stays until we release it. */
                    bwd_wait(R::full(bars, 1, own), R::parity(own), false, 3, own);
                    bwd_wait(R::full(bars, 0, own), R::parity(own), false, 4, own);
                    fence_operands(dv);
                    fence_operands(dk);
                    wgmma_fence();
                    G::grad_slab(dv, pt_addr, smem_u32(R::ptr(smem, 1, own)));
                    wgmma_commit();
                    G::grad_slab(dk, dst_addr, smem_u32(R::ptr(smem, 0, own)));
                    wgmma_commit();
                    G::template dq_gemm<128>(dq, dst_addr, k_addr + (uint32_t)(2 * slab) * kBoxBytes);
                    wgmma_commit();
                    /* kDqBulk: the fp32 buffer takes dQ through TMA reductions
                     * staged in this consumer's two own slots, issued by a
                     * producer thread that frees the slots once the TMA has
                     * read them while the consumer goes on (kDqByProducer),
                     * or by its thread 0, which waits for the read. Otherwise (and with
                     * FFPA_GRAD_ACCUM_OUTPUT) dQ is reduced from registers and
                     * the slots are freed as soon as their GEMMs are done. */
                    const bool bulk = Cfg::kDqBulk && p.dq.is_f32;
                    if (!bulk) {
                        wgmma_wait<2>();
                        release(1, own);
                        wgmma_wait<1>();
                        release(0, own);
                    }
                    wgmma_wait<0>();
                    fence_operands(dv);
                    fence_operands(dk);
                    fence_operands(dq);
                    const int dq_col = w.col0 + slab * 128;
                    if (bulk && Cfg::kDqByProducer) { /* bwd_dq_bulk_reducer adds it and frees the slots */
                        stage_dq(dq, R::ptr(smem, 0, own), R::ptr(smem, 1, own), rows_valid, ctid);
                        fence_proxy_async_shared();
                        __syncwarp();
                        if (base.lane == 0)
                            mbar_arrive(&bars->dq_full[consumer]);
                    } else if (bulk) {
                        int *turn, mine;
                        turn_of(dq_col, turn, mine);
                        add_dq_bulk(dq, R::ptr(smem, 0, own), R::ptr(smem, 1, own), R::empty(bars, 0, own),
                                    R::empty(bars, 1, own), &maps.dq, dq_col, (int)w.q_start + q0, h, w.tma_b,
                                    rows_valid, turn, mine, kBarDq + consumer, ctid);
                    } else {
                        reduce(dq, dq_col);
                    }
                }
            }
            n += Cfg::kSlabs;
        }

        if (owns) {
            const int rows_valid = min(Cfg::kBc, w.seqlen_k - w.kb0);
            const bool varlen = p.cu_q != nullptr;
            const int col0 = w.col0 + slab * 128;
            const bool dk_here = !split || consumer == 1, dv_here = !split || consumer == 0;
            T *dk_out = w.key_block<T>(out.dk, out.dk_sb, out.dk_sh, out.dk_sn, varlen);
            if (split && dk_here) /* (two calls: a register array is not picked at run time) */
                store_grad<T>(dv, dk_out, out.dk_sn, out.dk_sd, rows_valid, col0, p.dqk, ctid);
            else if (dk_here)
                store_grad<T>(dk, dk_out, out.dk_sn, out.dk_sd, rows_valid, col0, p.dqk, ctid);
            if (dv_here)
                store_grad<T>(dv, w.key_block<T>(out.dv, out.dv_sb, out.dv_sh, out.dv_sn, varlen), out.dv_sn, out.dv_sd,
                              rows_valid, col0, p.dv, ctid);
        }
    }
}

/* kDqByProducer: one producer thread per consumer adds each tile's dQ (128
 * columns, staged by the consumer in its two own slots; its 4 warps
 * arrive on dq_full[c]) into the fp32 buffer by TMA reductions, then frees
 * the two slots for the ring's producer (4 arrivals each, the consumer's
 * release). Deterministic mode: at this key block's turn
 * (tma_add_dq_boxes). Before, consumer thread 0 issued them and waited for
 * the TMA's read, and the whole consumer with it (its next wgmma needs
 * all 4 warps). */
template <class Cfg>
FFPA_DEV void bwd_dq_bulk_reducer(const BwdMaps &maps, const ffpa_bwd_params &p, uint8_t *smem, BwdBarriers *bars,
                                  const BwdWork &w, int consumer)
{
    using R = BwdRing<Cfg>;
    static_assert(Cfg::kDqByProducer && Cfg::kPasses == 1 && Cfg::kSlabs == 2, "one pass, both consumers own a slab");
    const int items = w.items();
    for (int it = 0, n = 0; it < items; ++it, n += Cfg::kSlabs) {
        const int h = w.head(it), q0 = w.q0(it);
        const int own = n + R::own_pos(0, consumer), dq_col = w.col0 + consumer * 128;
        bwd_wait(&bars->dq_full[consumer], (uint32_t)it & 1, false, 10, it);
        int mine = 0;
        int *turn = p.dq_turn ? w.dq_turn(p, h, q0 / 64, dq_col, Cfg::kBc, mine) : nullptr;
        tma_add_dq_boxes(R::ptr(smem, 0, own), R::ptr(smem, 1, own), &maps.dq, dq_col, (int)w.q_start + q0, h,
                         w.tma_b, turn, mine);
        mbar_arrive_n(R::empty(bars, 0, own), 4);
        mbar_arrive_n(R::empty(bars, 1, own), 4);
    }
}

/* kExtras: the instantiation with bias and dropout (sm90_bwd_softmax.cuh). */
template <class Cfg, bool kExtras>
FFPA_DEV void bwd_body(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out)
{
    uint8_t *smem = aligned_dynamic_smem<1024>();
    using L = BwdSmemLayout<Cfg>;
    BwdBarriers *bars = reinterpret_cast<BwdBarriers *>(smem + L::bars);
    const int tid = threadIdx.x;
    const uint32_t rank = Cfg::kCluster > 1 ? cluster_rank() : 0;

    BwdWork w;
    if (!bwd_work<Cfg>(p, rank, w))
        return; /* the same answer in both CTAs of a cluster */

    if (tid == 0) {
        mbar_init(&bars->kv_full, 1);
        for (int r = 0; r < 2; ++r)
            for (int s = 0; s < Cfg::kRingSlots; ++s) {
                mbar_init(&bars->full[r][s], 1);
                /* the 4 warps of the consumer that reads the slab last (key split: both read it) */
                mbar_init(&bars->empty[r][s], Cfg::kKeySplit ? 8 : 4);
            }
        mbar_init(&bars->rs_full[0], 1);
        mbar_init(&bars->rs_full[1], 1);
        mbar_init(&bars->ag_full, 1);
        /* the consumers' 8 warps (key split), or one consumer's 4 */
        mbar_init(&bars->dq_full[0], Cfg::kKeySplit ? 8 : 4);
        mbar_init(&bars->dq_full[1], 4);
        mbar_init(&bars->dq_empty[0], 1);
        mbar_init(&bars->dq_empty[1], 1);
        fence_barrier_init();
    }
    if (Cfg::kCluster > 1)
        cluster_sync(); /* the peer arrives on our barriers: they must exist first */
    else
        __syncthreads();

    const int wg = tid / 128;
    if (wg == 0) {
        setmaxnreg_dec<kBwdProducerRegs>();
        /* Thread 0 feeds consumer 0's ring (and loads K, V), thread 32
         * consumer 1's: neither ring waits on the other's consumer. */
        if ((tid & 31) == 0 && tid < 64 && w.items() > 0) {
            const int ring = tid / 32;
            if (ring == 0) {
                prefetch_tensormap(&maps.q);
                prefetch_tensormap(&maps.k);
                prefetch_tensormap(&maps.v);
                BwdProducer<Cfg>::load_kv(maps, smem, bars, w);
            } else {
                prefetch_tensormap(&maps.dout);
            }
            BwdProducer<Cfg>::run(maps, smem, bars, w, ring);
        } else if (Cfg::kKeySplit && tid == 64 && w.items() > 0 && p.dq.is_f32) {
            prefetch_tensormap(&maps.dq);
            bwd_dq_reducer<Cfg>(maps, p, smem, bars, w);
        } else if (Cfg::kGradSplit && (tid == 64 || tid == 96) && w.items() > 0 && p.dq.is_f32) {
            prefetch_tensormap(&maps.dq);
            bwd_grads_dq_reducer<Cfg>(maps, p, smem, bars, w, (tid - 64) / 32);
        } else if constexpr (Cfg::kDqByProducer) {
            if ((tid == 64 || tid == 96) && w.items() > 0 && p.dq.is_f32) {
                prefetch_tensormap(&maps.dq);
                bwd_dq_bulk_reducer<Cfg>(maps, p, smem, bars, w, (tid - 64) / 32);
            }
        }
        __syncwarp();
    } else {
        setmaxnreg_inc<kBwdConsumerRegs>();
        if constexpr (Cfg::kKeySplit)
            bwd_consumer_keys<Cfg, kExtras>(p, out, smem, bars, w, wg - 1, tid - 128 * wg);
        else if constexpr (Cfg::kGradSplit)
            bwd_consumer_grads<Cfg, kExtras>(maps, p, out, smem, bars, w, wg - 1, tid - 128 * wg);
        else
            bwd_consumer<Cfg, kExtras>(maps, p, out, smem, bars, w, rank, wg - 1, tid - 128 * wg);
    }
    if (Cfg::kCluster > 1)
        cluster_sync(); /* no CTA leaves while its peer may still write into it */
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
