/*
 * Split-D across a thread-block cluster: the partial S tiles of the CTAs of
 * a cluster (each computed over its own head-dimension slice) are summed
 * through distributed shared memory, so that every CTA holds the full S.
 *
 * Butterfly: step k exchanges with CTA rank ^ (1 << k) and adds; with 2 CTAs
 * one step, with 4 CTAs two. a + b == b + a in IEEE arithmetic, so every CTA
 * ends with bit-identical S, hence identical softmax, P, and LSE.
 *
 * Per consumer warpgroup and step, one 64 x 64 fp32 slot in each CTA:
 *   the sender waits x_empty (its previous write was consumed), writes its
 *   32 values per thread with st.async into the peer's slot, completing on
 *   the peer's x_full (transaction bytes); the receiver arms its own x_full
 *   (arrive.expect_tx) and waits, reads, adds, and arrives remotely on the
 *   sender's x_empty. Thread t's values go to [q][t] float4 positions
 *   (q = 0..7), so the 128 threads read and write contiguous 16-byte words.
 */
#ifndef FFPA_CUDA_SM90_EXCHANGE_CUH
#define FFPA_CUDA_SM90_EXCHANGE_CUH

#include "sm90_arch.cuh"
#include "sm90_mainloop.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg> struct SplitDExchange {
    static FFPA_DEV float4 *slot_of(uint8_t *slots, int consumer, int step)
    {
        return reinterpret_cast<float4 *>(slots + (size_t)(consumer * Cfg::kXSteps + step) * Cfg::kXSlotBytes);
    }

    /* Butterfly step `step`, sending half: wait until the peer freed its slot
     * (it consumed our previous tile), store our values into it. */
    static FFPA_DEV void send(const float (&s)[32], uint8_t *slots, RingBarriers *bars, int consumer, int tid,
                              uint32_t rank, int tile, int step)
    {
        const uint32_t peer = rank ^ (1u << step);
        float4 *slot = slot_of(slots, consumer, step);
        uint64_t *full = &bars->x_full[consumer][step];
        if (tile > 0)
            mbar_wait_cluster(&bars->x_empty[consumer][step], (tile - 1) & 1);
#pragma unroll
        for (int q = 0; q < 8; ++q)
            st_async_remote_v4(slot + q * 128 + tid, full, peer, s[4 * q], s[4 * q + 1], s[4 * q + 2], s[4 * q + 3]);
        if (tid == 0)
            mbar_arrive_expect_tx(full, Cfg::kXSlotBytes);
    }

    /* Receiving half: wait for the peer's values, add them, free the slot. */
    static FFPA_DEV void receive(float (&s)[32], uint8_t *slots, RingBarriers *bars, int consumer, int tid,
                                 uint32_t rank, int tile, int step)
    {
        const uint32_t peer = rank ^ (1u << step);
        const float4 *slot = slot_of(slots, consumer, step);
        mbar_wait_cluster(&bars->x_full[consumer][step], tile & 1);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const float4 x = slot[q * 128 + tid];
            s[4 * q] += x.x;
            s[4 * q + 1] += x.y;
            s[4 * q + 2] += x.z;
            s[4 * q + 3] += x.w;
        }
        __syncwarp();
        if ((tid & 31) == 0)
            mbar_arrive_remote(&bars->x_empty[consumer][step], peer);
    }

    /* First send as soon as the partial S exists (the caller may still have
     * PV in flight); finish() completes the sum. */
    static FFPA_DEV void start(const float (&s)[32], uint8_t *slots, RingBarriers *bars, int consumer, int tid,
                               uint32_t rank, int tile)
    {
#ifndef FFPA_SM90_DIAG_SKIP_EXCHANGE
        send(s, slots, bars, consumer, tid, rank, tile, 0);
#endif
    }

    static FFPA_DEV void finish(float (&s)[32], uint8_t *slots, RingBarriers *bars, int consumer, int tid,
                                uint32_t rank, int tile)
    {
#ifdef FFPA_SM90_DIAG_SKIP_EXCHANGE
        /* Diagnostic builds only (bench/sm90-check.sh DIAG=1): wrong results,
         * measures what the exchange costs. Never defined by meson. */
        return;
#endif
        receive(s, slots, bars, consumer, tid, rank, tile, 0);
#pragma unroll
        for (int step = 1; step < Cfg::kXSteps; ++step) {
            send(s, slots, bars, consumer, tid, rank, tile, step);
            receive(s, slots, bars, consumer, tid, rank, tile, step);
        }
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
