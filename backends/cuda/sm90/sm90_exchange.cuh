/*
 * Split-D across a thread-block cluster: CTA `rank` holds a partial S over
 * its head-dimension slice for each consumer's 64 x kBc tile; two exchanges
 * through distributed shared memory give every CTA the same P:
 *   1. reduce-scatter (fp32): the tile's columns are cut into kCluster
 *      blocks and CTA r owns block r. Each CTA sends block b of its partial
 *      to CTA b and adds what it receives to its own block (scatter, reduce).
 *   2. all-gather (T): each CTA masks its block, picks the rows' reference
 *      r (the running max while no score outgrows it by much, else the
 *      block's row max) and sends exp2(S - r), rounded to T (P's GEMM type:
 *      the words are P's A fragments as they stand), with r and the rows'
 *      sums of exp2(S - r) before the rounding to every peer (gather_send,
 *      gather). Every CTA then holds the same blocks, references and sums
 *      and rescales them (only where the references differ) by the same
 *      arithmetic (sm90_softmax.cuh), so all hold bit-identical P and row
 *      maxima (and row sums, unless the blocks sit own block first:
 *      own_first; then the sums' order differs by the last bit). The sums
 *      are FlashAttention's, of the fp32 probabilities: summing the rounded
 *      P instead put the LSE up to 2^-9 off on rows a few keys dominate
 *      (the MLA pair sums the rounded P where no LSE is asked for:
 *      TileSoftmax::exact_sums).
 * Why not sum the whole S in every CTA (the butterfly all-reduce of v1-v8):
 * DSMEM moves about 8-11 bytes per cycle per SM on the H100
 * (backends/cuda/sm90/dsmem_probe.cu), and the exchange is on the consumer's critical
 * path. The all-reduce sends 16 KiB per consumer and tile per butterfly step
 * (C=2: 16 KiB, C=4: 32 KiB); this sends (C-1)/C x (16 KiB + 8 KiB) plus the
 * maxima and sums (12.5 / 19.5 KiB), and each CTA computes the exponentials of 1/C
 * of the tile instead of all of it.
 *
 * Slots, per consumer and peer distance d (1..C-1; rank ^ peer in clusters
 * of 2 and 4, (sender - receiver) mod 3 in clusters of 3): one RS slot (64
 * x the largest block, fp32) and one AG slot (the same in T + 64 row
 * references and sums). A cluster of three cuts the tile's 8 n8-blocks 3, 3, 2, so the
 * messages' sizes follow the block (FwdConfig::blocks_of); the
 * receiver's rs_full / ag_full mbarrier counts the bytes of all its peers
 * (one local arrive.expect_tx per tile). No "empty" barriers are needed: a
 * CTA writes a peer's RS slot for tile t+1 only after it received that
 * peer's AG message of tile t, which the peer sent after using the values
 * it had read from that RS slot (and likewise, AG of t+1 follows the peer's
 * RS of t+1, sent after it used its AG slot of tile t). Thread t's values go
 * to [q][t] 16-byte positions, so the 128 threads write and read contiguous
 * words.
 */
#ifndef FFPA_CUDA_SM90_EXCHANGE_CUH
#define FFPA_CUDA_SM90_EXCHANGE_CUH

#include "sm90_arch.cuh"
#include "sm90_fwd_config.cuh"
#include "sm90_mainloop.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg> struct ClusterExchange {
    using T = typename Cfg::T;
    static constexpr int kC = Cfg::kCluster;
    static constexpr int kBlockNT = Cfg::kBlockNT;
    static constexpr size_t kPeerBytes = (size_t)Cfg::kRsSlotBytes + Cfg::kAgSlotBytes;
    /* Clusters of 2 and 4 pair slots by rank ^ peer (the same distance both
     * ways); a cluster of 3 by (sender - receiver) mod 3. */
    static constexpr bool kXor = (kC & (kC - 1)) == 0;

    uint8_t *slots; /* this consumer's [peer distance - 1] {RS, AG} slots */
    uint64_t *rs_full, *ag_full;
    uint32_t rank;
    int tid, lane, warp;

    FFPA_DEV ClusterExchange(uint8_t *x, RingBarriers *bars, int consumer, uint32_t rank_, int ctid)
        : slots(x + (size_t)consumer * Cfg::kPeers * kPeerBytes), rs_full(&bars->rs_full[consumer]),
          ag_full(&bars->ag_full[consumer]), rank(rank_), tid(ctid), lane(ctid & 31), warp(ctid / 32)
    {
    }

    /* Distance (1..C-1) of the slot our messages take in peer b, and of the
     * slot peer b's messages take here. */
    FFPA_DEV int dist_there(int b) const { return kXor ? (int)rank ^ b : ((int)rank - b + kC) % kC; }
    FFPA_DEV int dist_here(int b) const { return kXor ? (int)rank ^ b : (b - (int)rank + kC) % kC; }

    FFPA_DEV float4 *rs_slot(int d) const { return reinterpret_cast<float4 *>(slots + (size_t)(d - 1) * kPeerBytes); }
    FFPA_DEV uint4 *ag_slot(int d) const
    {
        return reinterpret_cast<uint4 *>(slots + (size_t)(d - 1) * kPeerBytes + Cfg::kRsSlotBytes);
    }
    /* A block of nb n8-blocks: nb / 2 uint4 per thread, then (nb odd) one uint2. */
    FFPA_DEV static uint2 *ag_tail(uint4 *slot, int nb) { return reinterpret_cast<uint2 *>(slot + (nb / 2) * 128); }
    /* Row references and sums after the probabilities: [warp][row in the
     * warp's quad rows] {m of row r, of r + 8, sum of row r, of r + 8}. */
    FFPA_DEV float4 *ag_max(int d) const
    {
        return reinterpret_cast<float4 *>(reinterpret_cast<uint8_t *>(ag_slot(d)) + Cfg::kAgSlotBytes - Cfg::kAgMaxBytes);
    }

    /* 1a. Block b of the partial S to CTA b, for every b but our own (b is
     * a compile-time index: the score registers are never indexed at run time). */
    FFPA_DEV void scatter(const float (&s)[32]) const
    {
#ifndef FFPA_SM90_DIAG_SKIP_EXCHANGE
#pragma unroll
        for (int b = 0; b < kC; ++b) {
            if (b == (int)rank)
                continue;
            float4 *slot = rs_slot(dist_there(b));
#pragma unroll
            for (int q = 0; q < kBlockNT; ++q) {
                if (q >= Cfg::blocks_of(b))
                    continue;
                const int i = 4 * (b * kBlockNT + q);
                st_async_remote_v4(slot + q * 128 + tid, rs_full, (uint32_t)b, s[i], s[i + 1], s[i + 2], s[i + 3]);
            }
        }
#endif
    }

    /* 1b. Adds the peers' partials of our block (peer distance order): block
     * `rank` of s becomes the full S (kOwnFirst: block 0, see own_first). */
    template <bool kOwnFirst = false> FFPA_DEV void reduce(float (&s)[32], int tile) const
    {
#ifndef FFPA_SM90_DIAG_SKIP_EXCHANGE
        if (tid == 0)
            mbar_arrive_expect_tx(rs_full, Cfg::kPeers * Cfg::blocks_of((int)rank) * Cfg::kRsNtBytes);
        mbar_wait_cluster(rs_full, tile & 1);
#pragma unroll
        for (int b = 0; b < kC; ++b) {
            if (b != (kOwnFirst ? 0 : (int)rank))
                continue;
#pragma unroll
            for (int d = 1; d < kC; ++d) {
                const float4 *slot = rs_slot(d);
#pragma unroll
                for (int q = 0; q < kBlockNT; ++q) {
                    if (q >= Cfg::blocks_of(b))
                        continue;
                    const float4 x = slot[q * 128 + tid];
                    const int i = 4 * (b * kBlockNT + q);
                    s[i] += x.x;
                    s[i + 1] += x.y;
                    s[i + 2] += x.z;
                    s[i + 3] += x.w;
                }
            }
        }
#endif
    }

    /* Own block first (clusters of 2 and 4; the plain pairs' and fours'
     * QK^T-two-ahead loop): the blocks of the tile sit in s in the order
     * rank ^ 0, rank ^ 1, ..., so our block is block 0 and peer rank ^ d's is
     * block d, all at compile-time positions, and the registers of the peers'
     * blocks are dead from the scatter to the gather (with s in key order the
     * run-time rank kept all of them live). P stays in that order; the PV
     * GEMM takes V's k16 steps in the same order (pv_issue's step_xor).
     * Copies our block of the partial S sn (key order) into block 0 of s. */
    FFPA_DEV void own_first(const float (&sn)[32], float (&s)[32]) const
    {
        static_assert(kXor, "own block first: clusters of 2 and 4");
        constexpr int kW = 4 * kBlockNT;
#pragma unroll
        for (int i = 0; i < kW; ++i) {
            float v = sn[i];
#pragma unroll
            for (int b = 1; b < kC; ++b)
                v = (int)rank == b ? sn[b * kW + i] : v;
            s[i] = v;
        }
    }

    /* 2a. Our block's probabilities (T pairs, n8-block major; kNb
     * n8-blocks), row references m and row sums l (of the probabilities
     * before their rounding to T, whole rows: quad-summed) to every peer. */
    template <int kNb>
    FFPA_DEV void gather_send(const uint32_t (&ph)[2 * kBlockNT], const float (&m)[2], const float (&l)[2]) const
    {
#ifndef FFPA_SM90_DIAG_SKIP_EXCHANGE
#pragma unroll
        for (int b = 0; b < kC; ++b) {
            if (b == (int)rank)
                continue;
            const int d = dist_there(b);
            uint4 *slot = ag_slot(d);
#pragma unroll
            for (int q = 0; q < kNb / 2; ++q)
                st_async_remote_v4(slot + q * 128 + tid, ag_full, (uint32_t)b, __uint_as_float(ph[4 * q]),
                                   __uint_as_float(ph[4 * q + 1]), __uint_as_float(ph[4 * q + 2]),
                                   __uint_as_float(ph[4 * q + 3]));
            if constexpr (kNb % 2 == 1)
                st_async_remote_v2(ag_tail(slot, kNb) + tid, ag_full, (uint32_t)b,
                                   __uint_as_float(ph[2 * kNb - 2]), __uint_as_float(ph[2 * kNb - 1]));
            if ((lane & 3) == 0)
                st_async_remote_v4(ag_max(d) + warp * 8 + lane / 4, ag_full, (uint32_t)b, m[0], m[1], l[0], l[1]);
        }
#endif
    }

    /* 2b. The peers' blocks into s (fp32, exact, each still relative to
     * its own reference) and their references into mb[b]; mb[rank] is left
     * to the caller. kOwnFirst: peer rank ^ d's block goes to block d (see
     * own_first), its reference to mb[d]. Their row sums stay in the slots
     * (peer_sums): the peers write them again only after this consumer's
     * next scatter, and registers held through the softmax spilled the
     * variants' kernels (d256x4: 28 -> 320 bytes of loads). */
    template <bool kOwnFirst = false> FFPA_DEV void gather(float (&s)[32], float (&mb)[kC][2], int tile) const
    {
        static_assert(!kOwnFirst || kXor, "own block first: clusters of 2 and 4");
#ifndef FFPA_SM90_DIAG_SKIP_EXCHANGE
        if (tid == 0)
            mbar_arrive_expect_tx(ag_full,
                                  (Cfg::kNT - Cfg::blocks_of((int)rank)) * Cfg::kAgNtBytes + Cfg::kPeers * Cfg::kAgMaxBytes);
        mbar_wait_cluster(ag_full, tile & 1);
#endif
#pragma unroll
        for (int b = 0; b < kC; ++b) {
            if (kOwnFirst ? b == 0 : b == (int)rank)
                continue;
#ifdef FFPA_SM90_DIAG_SKIP_EXCHANGE
            /* Diagnostic builds only (wrong results): the peers' blocks count as empty. */
            mb[b][0] = mb[b][1] = -INFINITY;
#else
            const int d = kOwnFirst ? b : dist_here(b);
            uint4 *slot = ag_slot(d);
            const int nb = Cfg::blocks_of(b); /* kOwnFirst: every block is kBlockNT */
#pragma unroll
            for (int q = 0; q < kBlockNT / 2; ++q) {
                if (q >= nb / 2)
                    continue;
                const uint4 u = slot[q * 128 + tid];
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float2 f = arch::unpack_f32x2<T>(w[k]);
                    s[4 * (b * kBlockNT) + 8 * q + 2 * k] = f.x;
                    s[4 * (b * kBlockNT) + 8 * q + 2 * k + 1] = f.y;
                }
            }
            if (nb % 2 == 1) {
                const uint2 u = ag_tail(slot, nb)[tid];
                const float2 f0 = arch::unpack_f32x2<T>(u.x), f1 = arch::unpack_f32x2<T>(u.y);
                const int i = 4 * (b * kBlockNT + nb - 1);
                s[i] = f0.x;
                s[i + 1] = f0.y;
                s[i + 2] = f1.x;
                s[i + 3] = f1.y;
            }
            const float4 mm = ag_max(d)[warp * 8 + lane / 4];
            mb[b][0] = mm.x;
            mb[b][1] = mm.y;
#endif
        }
    }

    /* Row half `half`'s sum in block b's message (gather's block order;
     * not our own block). */
    template <bool kOwnFirst = false> FFPA_DEV float peer_sum(int b, int half) const
    {
#ifdef FFPA_SM90_DIAG_SKIP_EXCHANGE
        (void)b, (void)half;
        return 0.0f;
#else
        const float4 mm = ag_max(kOwnFirst ? b : dist_here(b))[warp * 8 + lane / 4];
        return half ? mm.w : mm.z;
#endif
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
