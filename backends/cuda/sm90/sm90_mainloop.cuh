/*
 * Main loop pieces of the Hopper forward: the producer's TMA loads into the
 * slab ring, and the consumers' two warpgroup GEMMs per key tile:
 *   S(64 x kBc)      = Q_slice K_slice^T   (wgmma SS, both K-major)
 *   O(64 x kSliceV) += P V_slice           (wgmma RS: P from registers, V MN-major)
 *
 * Ring of slabs in the order K0 K1 V0 K2 V1 ... K(n-1) V(n-2) V(n-1): K one
 * tile ahead of V, the order in which the GEMM phases use them (phase t:
 * QK^T of tile t+1, then PV of tile t; RingOrder says why). Slab i sits in slot
 * i % kSlots, use u = i / kSlots:
 *   full[slot]:  the producer's arrive.expect_tx + TMA bytes; consumers wait parity u & 1;
 *   empty[slot]: one arrival per consumer warp once its wgmma read the slab;
 *                the producer waits parity (u - 1) & 1 before refilling.
 * The GEMM functions only issue: the caller fences, commits and waits, so a
 * consumer can issue QK^T of tile t+1 and PV of tile t as one batch.
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
    uint64_t full[8], empty[8];            /* per ring slot (kMaxSlots) */
    uint64_t rs_full[kMaxConsumers], ag_full[kMaxConsumers]; /* [consumer]: cluster exchange (sm90_exchange.cuh) */
};

/* Where a CTA's work sits in the global tensors (TMA coordinates). */
struct TileCoords {
    int q_row0;    /* first query row of the cluster's block (packed row for varlen) */
    int k_row0;    /* first key row of the sequence */
    int h, kvh, b; /* head, kv head, batch coordinate (0 for varlen) */
    int col0;      /* first head-dim column of this CTA's slice of Q and K; */
    int col0_v;    /* ... of V and O; columns past Dqk / Dv (even whole boxes)
                      are zero-filled by TMA */
};

/* The ring's order, K one tile ahead of V. Why: on a 3-slot ring (d192/128,
 * d320, d256x3, d256x4, the MLA pair) the order K0 V0 K1 V1 ... can load
 * K(t+2) only into V(t)'s slot, freed when the last consumer's PV(t)
 * completes, right before the next phase needs it: a TMA round trip with the
 * tensor cores idle on every phase (H200, D = 320: 550 -> 690 TFLOP/s
 * without it). With K ahead the next phase's K is resident a phase early and
 * only its V loads under the last consumer's PV (Ring::kLateV). */
struct RingOrder {
    /* Ring positions of key tile j's K and V slices in a loop of n tiles. */
    static constexpr __host__ __device__ int k_slab(int j) { return j == 0 ? 0 : 2 * j - 1; }
    static constexpr __host__ __device__ int v_slab(int j, int n) { return j + 1 == n ? 2 * j + 1 : 2 * j + 2; }
    /* The consumers wait for the slabs in the order the producer fills them
     * (slab 0, 1, 2, ...: a skipped or repeated position would hang the
     * ring): K0, then per phase K(t+1) and V(t), then V(n-1). */
    static constexpr bool consumers_walk_in_order(int max_tiles)
    {
        for (int n = 1; n <= max_tiles; ++n) {
            int next = 0;
            if (k_slab(0) != next++)
                return false;
            for (int t = 0; t + 1 < n; ++t)
                if (k_slab(t + 1) != next++ || v_slab(t, n) != next++)
                    return false;
            if (v_slab(n - 1, n) != next++ || next != 2 * n)
                return false;
        }
        return true;
    }
};
static_assert(RingOrder::consumers_walk_in_order(16), "the consumers' slab order is the producer's");

template <class Cfg> struct Ring : RingOrder {
    /* On 3 slots a phase's V may still be landing when its turn comes: the
     * consumer waits for it after issuing QK^T, so that runs meanwhile.
     * Deeper rings hold both in time; the late wait cost them 1.5-2%
     * (D = 512). */
    static constexpr bool kLateV = Cfg::kSlots < 4;
    static FFPA_DEV uint32_t slot(int slab) { return (uint32_t)slab % Cfg::kSlots; }
    static FFPA_DEV uint32_t parity(int slab) { return ((uint32_t)slab / Cfg::kSlots) & 1; }
    /* A consumer waits until the producer's TMA filled the slab. */
    static FFPA_DEV void wait_full(RingBarriers *bars, int slab) { mbar_wait(&bars->full[slot(slab)], parity(slab)); }
    static FFPA_DEV uint32_t addr(uint8_t *smem, int slab)
    {
        return smem_u32(smem + FwdSmemLayout<Cfg>::ring + (size_t)slot(slab) * Cfg::kSlabBytes);
    }
};

template <class Cfg> struct Producer {
    /* Q of every consumer once, then the K and V slabs of every tile. Every
     * box is loaded, also those past D: TMA zero-fills them and counts their
     * bytes, which keeps the consumers' wgmma sequence branch-free. */
    static FFPA_DEV void run(const FwdMaps &maps, uint8_t *smem, RingBarriers *bars, const TileCoords &tc,
                             int n_tiles)
    {
        using L = FwdSmemLayout<Cfg>;
        mbar_arrive_expect_tx(&bars->q_full, (uint32_t)(Cfg::kConsumers * Cfg::kBoxes) * kBoxBytes);
        for (int c = 0; c < Cfg::kConsumers; ++c)
            for (int box = 0; box < Cfg::kBoxes; ++box)
                tma_load_4d(smem + L::q + (size_t)(c * Cfg::kBoxes + box) * kBoxBytes, &maps.q, &bars->q_full,
                            tc.col0 + box * kBoxCols, tc.q_row0 + c * 64, tc.h, tc.b);
        /* Slab i: the K (is_v false) or V slice of key tile j (Ring's order). */
        auto load = [&](int i, bool is_v, int j) {
            const int key = tc.k_row0 + j * Cfg::kBc;
            const uint32_t slot = Ring<Cfg>::slot(i);
            if (i >= Cfg::kSlots)
                mbar_wait(&bars->empty[slot], Ring<Cfg>::parity(i) ^ 1);
            const int boxes = is_v ? Cfg::kVBoxes : Cfg::kBoxes;
            mbar_arrive_expect_tx(&bars->full[slot], (uint32_t)boxes * Cfg::kColBytes);
            uint8_t *dst = smem + L::ring + (size_t)slot * Cfg::kSlabBytes;
            for (int box = 0; box < boxes; ++box)
                for (int r = 0; r < Cfg::kBc; r += Cfg::kKvBoxRows)
                    tma_load_4d(dst + (size_t)box * Cfg::kColBytes + (size_t)r * 128, is_v ? &maps.v : &maps.k,
                                &bars->full[slot], (is_v ? tc.col0_v : tc.col0) + box * kBoxCols, key + r, tc.kvh,
                                tc.b);
        };
        /* RingOrder's order (consumers_walk_in_order holds k_slab / v_slab to it). */
        int i = 0;
        if (n_tiles > 0)
            load(i++, false, 0);
        for (int j = 0; j < n_tiles; ++j) {
            if (j + 1 < n_tiles)
                load(i++, false, j + 1);
            load(i++, true, j);
        }
    }
};

template <class Cfg> struct ConsumerGemms {
    using T = typename Cfg::T;

    /* s = Q_c K^T over the slice: 4 k16 steps per box. Straight-line on
     * purpose: a branch around wgmma makes ptxas serialise them (C7520).
     * Boxes past Dqk were zero-filled by TMA, so they add nothing. */
    static FFPA_DEV void qk_issue(float (&s)[Cfg::kSAcc], uint32_t q_addr, uint32_t k_addr)
    {
        const uint64_t q0 = make_desc_sw128(q_addr, 16, 1024);
#pragma unroll
        for (int box = 0; box < Cfg::kBoxes; ++box) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const uint32_t off = (uint32_t)box * kBoxBytes + kk * 32;
                /* 5 boxes (d320): the 20 loop-invariant Q descriptors, hoisted
                 * by the compiler, spill ~200 B; desc_advance stops that. At
                 * 4 boxes the plain form allocates better (d256x4: 16 B of
                 * spills instead of 48). */
                const uint64_t qd =
                    Cfg::kBoxes > 4 ? desc_advance(q0, off) : make_desc_sw128(q_addr + off, 16, 1024);
                const uint32_t k_off = (uint32_t)box * Cfg::kColBytes + kk * 32;
                wgmma_ss<T, Cfg::kBc>(s, qd, make_desc_sw128(k_addr + k_off, 16, 1024), box > 0 || kk > 0);
            }
        }
    }

    /* o += P V: per k16 step of the kBc keys, one m64 n(kSliceV) wgmma (two,
     * 256 + the rest, when the slice is wider than wgmma's N of 256); V rows
     * are 128 bytes apart, so 16 keys = 2048 bytes; the slice's boxes are
     * kColBytes apart (the descriptor's leading byte offset). */
    static FFPA_DEV void pv_issue(float (&o)[Cfg::kOAcc], const uint32_t (&pf)[Cfg::kPSteps][4], uint32_t v_addr,
                                  int step_xor = 0)
    {
        constexpr int kN0 = Cfg::kSliceV < 256 ? Cfg::kSliceV : 256;
        constexpr int kN1 = Cfg::kSliceV - kN0;
#pragma unroll
        for (int kk = 0; kk < Cfg::kPSteps; ++kk) {
            /* P's step kk holds keys 16 (kk ^ step_xor) .. + 15 (ClusterExchange::own_first's order). */
            const uint32_t v_step = v_addr + (uint32_t)(kk ^ step_xor) * 2048;
            wgmma_rs<T, kN0>(reinterpret_cast<float(&)[kN0 / 2]>(o[0]), pf[kk],
                             make_desc_sw128(v_step, Cfg::kColBytes, 1024), 1);
            if constexpr (kN1 > 0)
                wgmma_rs<T, kN1>(reinterpret_cast<float(&)[kN1 / 2]>(o[kN0 / 2]), pf[kk],
                                 make_desc_sw128(v_step + (kN0 / kBoxCols) * Cfg::kColBytes, Cfg::kColBytes, 1024),
                                 1);
        }
    }

};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
