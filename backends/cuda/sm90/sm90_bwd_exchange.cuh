/*
 * Split-D across a cluster of kCluster = 2 to 4 CTAs in the Hopper
 * backward: each CTA holds partial S^T (consumer 0) and dP^T (consumer 1)
 * over its kCols columns of the head dimension. Through distributed shared
 * memory:
 *   1. reduce-scatter (fp32): the tile's 64 query rows are cut into
 *      kCluster blocks of whole n8-blocks of the accumulators (kBlockNT,
 *      the last one fewer in a cluster of three); CTA r finishes block r. Each consumer sends every
 *      peer that peer's block of its partial (into the peer's receive slot
 *      for this sender) and adds the peers' partials of its own block, in
 *      rank order of the slots, so the sums round the same way every run
 *      (reduce_scores, reduce_dp).
 *   2. all-gather (16-bit): each consumer finishes half of the block's
 *      n8-blocks (the sums the other consumer needs go back to slot 0 of
 *      the receive buffers) and writes their P^T and dS^T pairs into its
 *      own tiles and, at the same offsets, into every peer's
 *      (sm90_bwd_softmax.cuh); consumer 0 then waits for the peers'
 *      (gather_wait).
 * Bytes per CTA and query tile: 2 x (kCluster - 1) blocks of fp32 out
 * (2 x 8 KiB in a pair, 2 x 12 KiB in four), (kCluster - 1) times its
 * block's rows of 16-bit pairs (8 KiB, 12 KiB); the forward's probe:
 * DSMEM moves about 8-11 bytes per cycle per SM.
 *
 * No "empty" barriers: a CTA writes a peer's receive buffers for tile t+1
 * only after computing its partials of t+1, which follows its phase 2 of
 * tile t, which needed every peer's all-gather of t, each sent after that
 * peer had read its buffers for t (the argument of sm90_exchange.cuh).
 * rs_full[c] and ag_full count bytes; one local arrive.expect_tx a tile.
 */
#ifndef FFPA_CUDA_SM90_BWD_EXCHANGE_CUH
#define FFPA_CUDA_SM90_BWD_EXCHANGE_CUH

#include "sm90_arch.cuh"
#include "sm90_bwd_config.cuh"
#include "sm90_bwd_mainloop.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg> struct BwdExchange {
    static constexpr int kNT = Cfg::kBlockNT;
    static constexpr int kPeers = Cfg::kCluster - 1;
    /* Block b's n8-block q exists (the last block of three is short). */
    static FFPA_DEV constexpr bool real(int b, int q) { return b * kNT + q < 8; }

    uint8_t *smem;
    BwdBarriers *bars;
    uint32_t rank;
    int ctid;

    /* The receive slot of sender `from` in CTA `to`: the senders in rank order. */
    static FFPA_DEV uint32_t slot_of(uint32_t from, uint32_t to) { return from < to ? from : from - 1; }

    /* Sends block b of acc to CTA b, for every peer b, into its slot for
     * this rank of buf (at the same offsets there), completing on b's bar.
     * (Sending in a rank-dependent order, so that no CTA takes all the first
     * sends at once, cost 10% at D = 512 and 1024: the runtime order spills.) */
    FFPA_DEV void send_blocks(const float (&acc)[32], float4 *buf, uint64_t *bar) const
    {
#pragma unroll
        for (int b = 0; b < Cfg::kCluster; ++b) {
            if (b == (int)rank)
                continue; /* b stays a compile-time register index */
            float4 *slot = buf + slot_of(rank, (uint32_t)b) * (kNT * 128);
#pragma unroll
            for (int q = 0; q < kNT; ++q) {
                if (!real(b, q))
                    continue;
                const int i = 4 * (b * kNT + q);
                st_async_remote_v4(slot + q * 128 + ctid, bar, (uint32_t)b, acc[i], acc[i + 1], acc[i + 2],
                                   acc[i + 3]);
            }
        }
    }

    /* Each peer's partial of this CTA's block; the peers' P^T and dS^T
     * pairs (2 x 2 x 4 bytes per thread and n8-block). */
    FFPA_DEV uint32_t recv_bytes() const { return (uint32_t)(kPeers * Cfg::blocks_of((int)rank) * Cfg::kNTBytes); }
    FFPA_DEV uint32_t gather_bytes() const { return (uint32_t)((8 - Cfg::blocks_of((int)rank)) * 128 * 16); }

    FFPA_DEV void wait_bytes(uint64_t *bar, uint32_t bytes, int tile) const
    {
        if (ctid == 0)
            mbar_arrive_expect_tx(bar, bytes);
        bwd_wait(bar, (uint32_t)tile & 1, true, 6 + (int)(bar - bars->rs_full), tile);
    }

    /* acc's block `rank` += the peers' partials in buf (slot order); the
     * sums of n8-blocks [store_from, store_to) of it go to slot 0, for the
     * other consumer, which finishes those (sm90_bwd_softmax.cuh). Each
     * thread reads and writes only its own float4s. */
    FFPA_DEV void add_peers(float (&acc)[32], float4 *buf, int store_from, int store_to) const
    {
#pragma unroll
        for (int b = 0; b < Cfg::kCluster; ++b) {
            if (b != (int)rank)
                continue;
#pragma unroll
            for (int q = 0; q < kNT; ++q) {
                if (!real(b, q))
                    continue;
                const int i = 4 * (b * kNT + q);
#pragma unroll
                for (int s = 0; s < kPeers; ++s) {
                    const float4 x = buf[s * (kNT * 128) + q * 128 + ctid];
                    acc[i] += x.x;
                    acc[i + 1] += x.y;
                    acc[i + 2] += x.z;
                    acc[i + 3] += x.w;
                }
                if (q >= store_from && q < store_to)
                    buf[q * 128 + ctid] = make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
            }
        }
    }

    /* Consumer 0: block `rank` of s becomes the full S^T; the second half
     * of its n8-blocks also goes to the receive buffer (read by then) for
     * consumer 1. */
    FFPA_DEV void reduce_scores(float (&s)[32], int tile) const
    {
        float4 *rs = reinterpret_cast<float4 *>(smem + BwdSmemLayout<Cfg>::rs);
        send_blocks(s, rs, &bars->rs_full[0]);
        wait_bytes(&bars->rs_full[0], recv_bytes(), tile);
        add_peers(s, rs, Cfg::kPartNT, kNT);
    }

    /* Consumer 1: the full dP^T of block `rank`; its first half into the
     * dP^T buffer for consumer 0. */
    FFPA_DEV void reduce_dp(float (&dpt)[32], int tile) const
    {
        float4 *dp = reinterpret_cast<float4 *>(smem + BwdSmemLayout<Cfg>::dp);
        send_blocks(dpt, dp, &bars->rs_full[1]);
        wait_bytes(&bars->rs_full[1], recv_bytes(), tile);
        add_peers(dpt, dp, 0, Cfg::kPartNT);
    }

    /* Consumer 0, after sending its blocks: the peers' P^T and dS^T blocks. */
    FFPA_DEV void gather_wait(int tile) const { wait_bytes(&bars->ag_full, gather_bytes(), tile); }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
