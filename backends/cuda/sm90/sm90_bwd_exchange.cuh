/*
 * Split-D across a pair of CTAs in the Hopper backward (kCluster = 2):
 * each CTA holds partial S^T (consumer 0) and dP^T (consumer 1) over its
 * half of the head dimension. Through distributed shared memory:
 *   1. reduce-scatter (fp32): the tile's 64 query rows are cut into two
 *      blocks of 32 (4 n8-blocks of the accumulators); CTA r finishes block
 *      r. Each consumer sends the peer's block of its partial and adds the
 *      peer's partial of its own block (reduce_scores, reduce_dp; dP^T's
 *      sum goes to the dP^T buffer consumer 0 reads).
 *   2. all-gather (16-bit): each consumer finishes half of the block's
 *      n8-blocks (the sums the other consumer needs go back to the receive
 *      buffers) and writes their P^T and dS^T pairs into its own tiles and,
 *      at the same offsets, into the peer's (sm90_bwd_softmax.cuh);
 *      consumer 0 then waits for the peer's (gather_wait).
 * Bytes per CTA and query tile: 2 x 8 KiB fp32 out, 8 KiB of 16-bit pairs
 * out (the forward's probe: DSMEM moves about 8-11 bytes per cycle per SM).
 *
 * No "empty" barriers: a CTA writes the peer's receive buffers for tile t+1
 * only after computing its partials of t+1, which follows its phase 2 of
 * tile t, which needed the peer's all-gather of t, sent after the peer had
 * read those buffers for t (the same argument as sm90_exchange.cuh).
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
    static constexpr uint32_t kAgBytes = 2 * 64 * (64 / Cfg::kCluster) * 2; /* the peer's P^T + dS^T block */

    uint8_t *smem;
    BwdBarriers *bars;
    uint32_t rank, peer;
    int ctid;

    /* Sends block `peer` of acc into buf (at the same offset in the peer),
     * completing on the peer's bar. */
    FFPA_DEV void send_block(const float (&acc)[32], float4 *buf, uint64_t *bar) const
    {
#pragma unroll
        for (int b = 0; b < Cfg::kCluster; ++b) {
            if (b != (int)peer)
                continue;
#pragma unroll
            for (int q = 0; q < kNT; ++q) {
                const int i = 4 * (b * kNT + q);
                st_async_remote_v4(buf + q * 128 + ctid, bar, peer, acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
            }
        }
    }

    FFPA_DEV void wait_bytes(uint64_t *bar, uint32_t bytes, int tile) const
    {
        if (ctid == 0)
            mbar_arrive_expect_tx(bar, bytes);
        bwd_wait(bar, (uint32_t)tile & 1, true, 6 + (int)(bar - bars->rs_full), tile);
    }

    /* acc's block `rank` += buf (the peer's partial, fragment order); the
     * sums of n8-blocks [store_from, store_to) of it go back to buf, for the
     * other consumer, which finishes those (sm90_bwd_softmax.cuh). */
    FFPA_DEV void add_peer(float (&acc)[32], float4 *buf, int store_from, int store_to) const
    {
#pragma unroll
        for (int b = 0; b < Cfg::kCluster; ++b) {
            if (b != (int)rank)
                continue;
#pragma unroll
            for (int q = 0; q < kNT; ++q) {
                const float4 x = buf[q * 128 + ctid];
                const int i = 4 * (b * kNT + q);
                acc[i] += x.x;
                acc[i + 1] += x.y;
                acc[i + 2] += x.z;
                acc[i + 3] += x.w;
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
        send_block(s, rs, &bars->rs_full[0]);
        wait_bytes(&bars->rs_full[0], (uint32_t)Cfg::kDpBytes, tile);
        add_peer(s, rs, kNT / 2, kNT);
    }

    /* Consumer 1: the full dP^T of block `rank`; its first half into the
     * dP^T buffer for consumer 0. */
    FFPA_DEV void reduce_dp(float (&dpt)[32], int tile) const
    {
        float4 *dp = reinterpret_cast<float4 *>(smem + BwdSmemLayout<Cfg>::dp);
        send_block(dpt, dp, &bars->rs_full[1]);
        wait_bytes(&bars->rs_full[1], (uint32_t)Cfg::kDpBytes, tile);
        add_peer(dpt, dp, 0, kNT / 2);
    }

    /* Consumer 0, after sending its block: the peer's P^T and dS^T block. */
    FFPA_DEV void gather_wait(int tile) const { wait_bytes(&bars->ag_full, kAgBytes, tile); }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
