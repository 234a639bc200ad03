/*
 * Main loop pieces of the Hopper forward: the producer's TMA loads into the
 * K/V ring, and the consumers' two warpgroup GEMMs per key tile:
 *   S(64 x 64)       = Q_slice K_slice^T   (wgmma SS, both K-major)
 *   O(64 x kSlice)  += P V_slice           (wgmma RS: P from registers, V MN-major)
 *
 * Ring protocol (per stage s, use u = tile / stages):
 *   full[s]:  the producer's arrive.expect_tx + TMA bytes; consumers wait parity u & 1;
 *   empty[s]: one arrival per consumer warp once its wgmma read the stage;
 *             the producer waits parity (u - 1) & 1 before refilling.
 * K and V have separate barriers, so QK^T of a tile starts before its V lands.
 */
#ifndef FFPA_CUDA_SM90_MAINLOOP_CUH
#define FFPA_CUDA_SM90_MAINLOOP_CUH

#include "sm90_arch.cuh"
#include "sm90_fwd_config.cuh"
#include "wgmma_ops.cuh"

namespace ffpa {
namespace sm90 {

/* The three tensor maps: [D, rows, heads, batch] views of Q, K and V. */
struct FwdMaps {
    CUtensorMap q, k, v;
};

struct RingBarriers {
    uint64_t q_full;
    uint64_t k_full[4], k_empty[4], v_full[4], v_empty[4];
    uint64_t x_full[2][2], x_empty[2][2]; /* [consumer][butterfly step] */
};

/* Where a CTA's work sits in the global tensors (TMA coordinates). */
struct TileCoords {
    int q_row0;    /* first query row of the cluster's block (packed row for varlen) */
    int k_row0;    /* first key row of the sequence */
    int h, kvh, b; /* head, kv head, batch coordinate (0 for varlen) */
    int col0;      /* first head-dim column of this CTA's slice */
    int q_boxes;   /* boxes of the slice inside Dqk (the rest is not loaded) */
    int v_boxes;   /* boxes of the slice inside Dv */
};

template <class Cfg> struct Producer {
    /* Q of both consumers once, then K and V of every tile through the ring. */
    static FFPA_DEV void run(const FwdMaps &maps, uint8_t *smem, RingBarriers *bars, const TileCoords &tc,
                             int n_tiles)
    {
        using L = FwdSmemLayout<Cfg>;
        mbar_arrive_expect_tx(&bars->q_full, (uint32_t)(Cfg::kConsumers * tc.q_boxes) * kBoxBytes);
        for (int c = 0; c < Cfg::kConsumers; ++c)
            for (int box = 0; box < tc.q_boxes; ++box)
                tma_load_4d(smem + L::q + (size_t)(c * Cfg::kBoxes + box) * kBoxBytes, &maps.q, &bars->q_full,
                            tc.col0 + box * kBoxCols, tc.q_row0 + c * 64, tc.h, tc.b);
        int stage = 0;
        uint32_t use = 0;
        for (int t = 0; t < n_tiles; ++t) {
            const int key = tc.k_row0 + t * Cfg::kBc;
            if (use > 0)
                mbar_wait(&bars->k_empty[stage], (use - 1) & 1);
            mbar_arrive_expect_tx(&bars->k_full[stage], (uint32_t)tc.q_boxes * kBoxBytes);
            for (int box = 0; box < tc.q_boxes; ++box)
                tma_load_4d(smem + L::k + (size_t)(stage * Cfg::kBoxes + box) * kBoxBytes, &maps.k,
                            &bars->k_full[stage], tc.col0 + box * kBoxCols, key, tc.kvh, tc.b);
            if (use > 0)
                mbar_wait(&bars->v_empty[stage], (use - 1) & 1);
            mbar_arrive_expect_tx(&bars->v_full[stage], (uint32_t)tc.v_boxes * kBoxBytes);
            for (int box = 0; box < tc.v_boxes; ++box)
                tma_load_4d(smem + L::v + (size_t)(stage * Cfg::kBoxes + box) * kBoxBytes, &maps.v,
                            &bars->v_full[stage], tc.col0 + box * kBoxCols, key, tc.kvh, tc.b);
            if (++stage == Cfg::kStages) {
                stage = 0;
                ++use;
            }
        }
    }
};

template <class Cfg> struct ConsumerGemms {
    using T = typename Cfg::T;

    /* s = Q_c K_stage^T over the slice's valid boxes (4 k16 steps each). */
    static FFPA_DEV void qk(float (&s)[32], uint32_t q_addr, uint32_t k_addr, int q_boxes)
    {
        fence_operands(s);
        wgmma_fence();
#pragma unroll 1
        for (int box = 0; box < q_boxes; ++box) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const uint32_t off = (uint32_t)box * kBoxBytes + kk * 32;
                wgmma_ss<T, 64>(s, make_desc_sw128(q_addr + off, 16, 1024), make_desc_sw128(k_addr + off, 16, 1024),
                                box > 0 || kk > 0);
            }
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(s);
    }

    /* o += P V_stage: per k16 step of the 64 keys, one m64 n(kSlice) wgmma;
     * V rows are 128 bytes apart, so 16 keys = 2048 bytes; the slice's boxes
     * are kBoxBytes apart (the descriptor's leading byte offset). */
    static FFPA_DEV void pv(float (&o)[Cfg::kOAcc], const uint32_t (&pf)[4][4], uint32_t v_addr)
    {
        fence_operands(o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_rs<T, Cfg::kSlice>(o, pf[kk], make_desc_sw128(v_addr + kk * 2048, kBoxBytes, 1024), 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(o);
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
