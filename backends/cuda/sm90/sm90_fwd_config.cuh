/*
 * Compile-time shape of one Hopper forward instantiation and its
 * shared-memory layout (host and device agree on it through this file).
 *
 * A cluster of kCluster CTAs owns kBr query rows (128; 192 at D <= 64) of
 * one (batch, head). CTA
 * `rank` owns the head-dimension slice [rank*kSlice, (rank+1)*kSlice) of Q
 * and K and [rank*kSliceV, (rank+1)*kSliceV) of V (Split-D across the
 * cluster): it computes a partial S over its slice, the cluster turns the
 * partials into one P through distributed shared memory (sm90_exchange.cuh:
 * every CTA ends with the same P), and each CTA writes its own kSliceV
 * columns of O. The fp32 O accumulator is then 64 x kSliceV per consumer
 * warpgroup, which fits the register file for Dv up to kCluster * 256.
 * kSliceV < kSlice serves Dqk > Dv without padding V to Dqk: absorbed MLA's
 * prefill, Dqk 576 / Dv 512, 320 / 256 columns per CTA in a pair, where the
 * square shapes ran it on four CTAs of 192 (a third of the work on zeros);
 * the non-absorbed one, 192 / 128, on one CTA instead of 256 / 256.
 *
 * Threads: warpgroup 0 is the producer (one thread issues TMA loads);
 * warpgroups 1 .. kConsumers are consumers, 64 query rows each.
 */
#ifndef FFPA_CUDA_SM90_FWD_CONFIG_CUH
#define FFPA_CUDA_SM90_FWD_CONFIG_CUH

#include <stddef.h>
#include <stdint.h>

namespace ffpa {
namespace sm90 {

/* One TMA box / wgmma atom column: 64 16-bit elements = 128 bytes (the
 * 128-byte swizzle span), 64 rows. */
constexpr int kBoxCols = 64;
constexpr int kBoxRows = 64;
constexpr uint32_t kBoxBytes = kBoxCols * kBoxRows * 2;
constexpr size_t kSmemLimit = 232448; /* H100/H200 opt-in shared memory per block */

/* Keys per tile. A 64-key tile's fixed costs (barriers, waits, row max
 * reductions, the ping-pong turn) weigh on the GEMMs of a narrow slice, so
 * the single-CTA kernels up to 192 columns take 128 (their K and V slabs
 * still leave a ring of 3+ slots beside Q). 64 elsewhere: the exchange is
 * written for it, and at 256 columns 96-key tiles lost 25% (3 ring slots,
 * 120 bytes of spills; docs/notes/forward.md). */
constexpr int default_key_tile(int slice, int cluster)
{
    return cluster == 1 && slice <= 192 ? 128 : 64;
}

/* Consumer warpgroups (64 query rows each). At D = 64 a tile's GEMMs are
 * short beside its softmax (64 exp2 per thread either way), so a third
 * consumer keeps the tensor cores fed while two are in their softmax
 * (FlashAttention-3's 192-row tile at D = 64); its 160 registers per thread
 * (setmaxnreg) hold S, P and O of 128 keys x 64 columns. */
constexpr int default_consumers(int slice, int cluster)
{
    return cluster == 1 && slice == 64 ? 3 : 2;
}
constexpr int kMaxConsumers = 3;

/* kPlain_: no bias, dropout, softcap or ALiBi code (the launch picks such a
 * kernel only without them): their registers no longer bound the key tile. */
template <typename T_, int kSlice_, int kCluster_, int kSliceV_ = kSlice_,
          int kBc_ = default_key_tile(kSlice_, kCluster_), int kConsumers_ = default_consumers(kSlice_, kCluster_),
          bool kPlain_ = false>
struct FwdConfig {
    using T = T_;
    static constexpr int kSlice = kSlice_;     /* head-dim columns per CTA of Q and K */
    static constexpr int kSliceV = kSliceV_;   /* ... of V and O */
    static constexpr int kCluster = kCluster_; /* CTAs splitting D (1 to 4) */
    static constexpr int kBoxes = kSlice / kBoxCols;
    static constexpr int kVBoxes = kSliceV / kBoxCols;
    static constexpr int kConsumers = kConsumers_; /* consumer warpgroups, 64 rows each */
    static constexpr bool kPlain = kPlain_;
    static constexpr int kBr = 64 * kConsumers;    /* query rows per cluster */
    static constexpr int kBc = kBc_;               /* keys per tile */
    static constexpr int kThreads = 128 * (1 + kConsumers);
    /* setmaxnreg: the producer warpgroup keeps 24 registers a thread, the
     * consumers share the rest (128 x 24 + 128 x kConsumers x regs <= 64K).
     * The consumers' increase comes only from what the producer's decrease
     * returns, not from the register file's unallocated rest: a producer at
     * 32 left two consumers at 240 waiting forever (static_assert below). */
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
    static constexpr int kNT = kBc / 8;        /* S n8-blocks per warp */
    static constexpr int kSAcc = kBc / 2;      /* fp32 S accumulators per thread */
    static constexpr int kPSteps = kBc / 16;   /* k16 steps of the PV GEMM */
    /* A slab stores each 64-column box of a tile's kBc rows contiguously
     * (kBc / 64 TMA boxes of 64 rows stacked), so a box column is
     * kColBytes long and the GEMMs walk the keys linearly. */
    static constexpr uint32_t kColBytes = (uint32_t)kBc * kBoxCols * 2;
    /* Rows of a K / V TMA box: 64, stacked kBc / 64 times; a tile that is
     * not a multiple of 64 keys (80: the plain d256 kernel) is one box of
     * kBc rows (the launch encodes the K and V maps with it). */
    static constexpr int kKvBoxRows = kBc % kBoxRows == 0 ? kBoxRows : kBc;
    static constexpr int kOAcc = kSliceV / 2;  /* fp32 O accumulators per thread */

    /* Bytes of the pieces of shared memory. */
    static constexpr size_t kQBytes = (size_t)kConsumers * kBoxes * kBoxBytes;
    /* The ring holds slabs: the K slice of a key tile or its V slice, in the
     * order K0 V0 K1 V1 ...; a consumer's GEMM phase holds two (K(t+1), V(t)). */
    static constexpr size_t kSlabBytes = (size_t)(kBoxes > kVBoxes ? kBoxes : kVBoxes) * kColBytes;
    /* Cluster exchange (sm90_exchange.cuh): the key tile's columns are cut
     * into kCluster blocks, one owned by each CTA; per consumer and peer one
     * reduce-scatter slot (64 x block fp32) and one all-gather slot (64 x
     * block T probabilities + 64 row references and sums). */
    static constexpr int kPeers = kCluster - 1;
    /* n8-blocks of S per column block: CTA b owns [b * kBlockNT, b *
     * kBlockNT + blocks_of(b)); a cluster of three cuts the 8 of a 64-key
     * tile 3, 3, 2. The slots are sized for the largest block. */
    static constexpr int kBlockNT = (kNT + kCluster - 1) / kCluster;
    __host__ __device__ static constexpr int blocks_of(int b)
    {
        return kNT - b * kBlockNT < kBlockNT ? kNT - b * kBlockNT : kBlockNT;
    }
    static constexpr uint32_t kRsNtBytes = 64 * 8 * 4;  /* one n8-block of a consumer's partial S, fp32 */
    static constexpr uint32_t kAgNtBytes = 64 * 8 * 2;  /* ... of its probabilities, T */
    static constexpr uint32_t kAgMaxBytes = 64 * 8;     /* the 64 row references and sums of an all-gather message */
    static constexpr uint32_t kRsSlotBytes = kBlockNT * kRsNtBytes;
    static constexpr uint32_t kAgSlotBytes = kBlockNT * kAgNtBytes + kAgMaxBytes;
    static constexpr size_t kXBytes = (size_t)kConsumers * kPeers * (kRsSlotBytes + kAgSlotBytes);
    static constexpr size_t kBarBytes = 256;
    static constexpr size_t kAlignSlack = 1024; /* the dynamic base is rounded up to 1024 */
    static constexpr int kMaxSlots = 8;

    static constexpr int slots_that_fit()
    {
        int s = kMaxSlots;
        while (s > 2 && kQBytes + s * kSlabBytes + kXBytes + kBarBytes + kAlignSlack > kSmemLimit)
            --s;
        return s;
    }
    static constexpr int kSlots = slots_that_fit();
    static constexpr size_t kSmemBytes = kQBytes + kSlots * kSlabBytes + kXBytes + kBarBytes + kAlignSlack;

    static_assert(kSlice % kBoxCols == 0 && kSlice <= 320, "a slice is 1-5 boxes");
    static_assert(kSliceV % kBoxCols == 0 && kSliceV <= kSlice, "a V slice is whole boxes, at most the QK slice");
    static_assert(kCluster >= 1 && kCluster <= 4, "cluster of 1 to 4");
    static_assert(kConsumers == 2 || (kConsumers == 3 && kCluster == 1), "three consumers only without the exchange");
    static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "the register file");
    static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8; /* __launch_bounds__(kThreads, 1) */
    static_assert(128 * (kLaunchRegs - kProducerRegs) >= 128 * kConsumers * (kConsumerRegs - kLaunchRegs),
                  "setmaxnreg: the consumers' increase fits what the producer returns");
    static_assert(kCluster == 1 || blocks_of(kCluster - 1) > 0, "every CTA owns a column block");
    static_assert(kBc == 64 || (kCluster == 1 && kBc % 16 == 0 && kBc <= 192),
                  "64-key tiles, or up to 192 in steps of 16 without the exchange");
    static_assert(kSmemBytes <= kSmemLimit, "fits the opt-in shared memory");
    static_assert(kSlots >= 3, "a GEMM phase holds two slabs; one more is in flight");
};

/* Byte offsets inside the (1024-aligned) dynamic shared memory. */
template <class Cfg> struct FwdSmemLayout {
    static constexpr size_t q = 0;                                    /* [consumer][box] */
    static constexpr size_t ring = q + Cfg::kQBytes;                  /* [slot][box] */
    static constexpr size_t x = ring + Cfg::kSlots * Cfg::kSlabBytes; /* [consumer][peer] {RS, AG} */
    static constexpr size_t bars = x + Cfg::kXBytes;
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
