/*
 * Compile-time shape of one Hopper backward instantiation and its
 * shared-memory layout (host and device agree on it through this file).
 *
 * A CTA owns one key block (kBc = 64 keys; 128 in the small-D kernel,
 * kKeySplit) of one (kv head, batch) and runs
 * every query tile (kBr = 64 rows) of every query head of its GQA group past
 * it. K and V of the block stay resident; Q and dO stream through two rings
 * (one per consumer) of 128-column slabs. The dK/dV accumulators of a whole head dimension do not
 * fit the register file (64 x 512 x 2 fp32 = the whole of it), so the
 * columns are covered in passes of 256: each pass recomputes S^T and dP^T
 * over the full D and accumulates 128 columns of dK and dV per consumer
 * warpgroup in registers (the FFPA paper's SM>=90 scheme: recompute instead
 * of a global read-modify-write per query tile). dQ = dS K of the pass's
 * columns goes to the fp32 buffer with vector reductions.
 *
 * Threads: warpgroup 0 is the producer (one thread issues TMA loads);
 * consumer 0 computes S^T = K Q^T, P^T and dS^T; consumer 1 computes
 * dP^T = V dO^T; both then run dV += P^T dO, dK += dS^T Q and dQ = dS K for
 * their own 128 columns.
 *
 * D above 384 (sm90_bwd_kernels.cuh picks the widths): a cluster of
 * kCluster = 2 to 4 CTAs splits the head dimension, CTA r holding
 * columns [r * kCols, (r + 1) * kCols) of K, V, Q, dO and of the gradients.
 * S^T and dP^T are then partial sums; the CTAs exchange them through
 * distributed shared memory (sm90_bwd_exchange.cuh): a reduce-scatter over
 * the tile's query columns (CTA r finishes block r: about 64 / kCluster
 * rows, whole n8-blocks), then an all-gather of the 16-bit P^T and dS^T
 * blocks.
 */
#ifndef FFPA_CUDA_SM90_BWD_CONFIG_CUH
#define FFPA_CUDA_SM90_BWD_CONFIG_CUH

#include <stddef.h>
#include <stdint.h>

#include "sm90_fwd_config.cuh" /* kBoxCols, kBoxBytes, kSmemLimit */

namespace ffpa {
namespace sm90 {

/* kKeySplit (D <= 128, one CTA): the small-D kernel (sm90_bwd_keys.cuh):
 * 128 keys per CTA, each consumer owning 64 of them with its S^T and dP^T
 * both in registers, so no exchange between the GEMM phases. */
/* kGradSplit (256 < D <= 320, one CTA): sm90_bwd_grads.cuh: one pass,
 * consumer 0 accumulating dV and consumer 1 dK over all kGradBoxes boxes
 * (160 registers each), on the 6-box layout (the sixth box is zeros). */
template <typename T_, int kBoxes_, int kCluster_ = 1, bool kKeySplit_ = false, bool kGradSplit_ = false>
struct BwdConfig {
    using T = T_;
    static constexpr int kBoxes = kBoxes_;      /* 64-column boxes per CTA */
    static constexpr int kCluster = kCluster_;  /* CTAs splitting D (1 to 4) */
    static constexpr bool kKeySplit = kKeySplit_;
    static constexpr bool kGradSplit = kGradSplit_;
    static constexpr int kGradBoxes = kGradSplit ? 5 : kBoxes; /* boxes of dK / dV columns the CTA covers */
    static constexpr int kCols = kBoxes * kBoxCols; /* head-dim columns per CTA */
    /* n8-blocks (8 query rows) a CTA finishes: CTA r the blocks [r * kBlockNT,
     * min((r + 1) * kBlockNT, 8)) (3, 3, 2 in a cluster of three); each of
     * its consumers at most kPartNT of them (the first part the first ones). */
    static constexpr int kBlockNT = (8 + kCluster - 1) / kCluster;
    static constexpr int kPartNT = kKeySplit ? 8 : (kBlockNT + 1) / 2; /* key split: each consumer all 8 */
    static constexpr bool kEvenBlocks = 8 % kCluster == 0;
    __host__ __device__ static constexpr int blocks_of(int rank)
    {
        return kEvenBlocks || 8 - rank * kBlockNT >= kBlockNT ? kBlockNT : 8 - rank * kBlockNT;
    }
    static constexpr int kSlabs = kBoxes / 2;   /* 128-column slabs of a Q or dO tile */
    static constexpr int kPassCols = 256;       /* dK/dV columns per pass (128 per consumer) */
    static constexpr int kPasses = kGradSplit ? 1 : (kBoxes * kBoxCols + kPassCols - 1) / kPassCols;
    static constexpr int kBc = kKeySplit ? 128 : 64; /* keys per CTA */
    static constexpr int kBr = 64;              /* query rows per tile */
    static constexpr int kThreads = 384;

    /* Boxes of K and V held: the gradient split's sixth box would be zeros
     * (its phase 1 skips it; the dQ box past D reads box 4 and is dropped). */
    static constexpr int kKVBoxes = kGradSplit ? kGradBoxes : kBoxes;
    static constexpr size_t kKVBytes = (size_t)kKVBoxes * kBoxBytes * (kBc / 64); /* K (or V) of the key block */
    static constexpr size_t kSlabBytes = 2 * (size_t)kBoxBytes;
    /* One CTA's query block of S^T or dP^T (at most), fp32, fragment order. */
    static constexpr size_t kNTBytes = 128 * 16; /* one n8-block: a float4 per thread */
    static constexpr size_t kBlockBytes = kBlockNT * kNTBytes;
    /* Alone: the two consumers' halves of the tile (store_half). In a
     * cluster: the peers' partial dP^T blocks land here (one slot each),
     * then slot 0 takes the sums consumer 0 reads. */
    static constexpr size_t kDpBytes =
        kKeySplit || kGradSplit ? 0 : kCluster == 1 ? kBlockBytes : (kCluster - 1) * kBlockBytes;
    static constexpr size_t kRsBytes = (kCluster - 1) * kBlockBytes; /* the peers' partial S^T blocks */
    static constexpr size_t kPdsBytes = 64 * 64 * 2; /* P^T or dS^T of 64 keys, 16-bit, swizzled */
    /* P^T and dS^T of the CTA's keys. kKeySplit keeps P^T in registers
     * (the dV GEMM reads it from there) and dS^T of two tiles (each
     * consumer's dQ reads the other's, sm90_bwd_keys.cuh). */
    static constexpr size_t kDsTileBytes = kPdsBytes * (kBc / 64);
    static constexpr size_t kPtBytes = kKeySplit ? 0 : kDsTileBytes;
    static constexpr size_t kDstBytes = kDsTileBytes * (kKeySplit ? 2 : 1);
    /* LSE (base 2) and Delta of the tile's rows (kKeySplit: of two tiles) */
    static constexpr size_t kRowBytes = 2 * 64 * 4 * (kKeySplit ? 2 : 1);
    /* kKeySplit: the tile's dQ (64 x 128 fp32, four 64 x 32 boxes) staged
     * for the producer warp's TMA reductions (sm90_bwd_keys.cuh). */
    /* kGradSplit: each consumer's 64 x 64 fp32 dQ box staged for its TMA
     * reductions (sm90_bwd_grads.cuh), 16 KiB each. The halves buffer of
     * the softmax gradient (kBlockBytes, free in phase 2) lies inside, at
     * 8 KiB: each consumer's stage holds the half that consumer writes
     * (store_half), so a consumer only ever waits on its own TMA reads. */
    static constexpr size_t kDqStageBytes = kKeySplit ? 64 * 128 * 4 : kGradSplit ? 2 * 64 * 64 * 4 : 0;
    static constexpr size_t kDpInStage = 8192;
    static_assert(!kGradSplit || (kCluster == 1 && kDpInStage + kBlockBytes <= kDqStageBytes), "the halves fit");
    static constexpr size_t kBarBytes = 256;
    static constexpr size_t kAlignSlack = 1024;
    static constexpr int kMaxSlots = 8;

    static constexpr size_t fixed_bytes()
    {
        return 2 * kKVBytes + kDqStageBytes + kDpBytes + kRsBytes + kPtBytes + kDstBytes + kRowBytes + kBarBytes +
               kAlignSlack;
    }
    static constexpr int slots_that_fit()
    {
        int s = kMaxSlots;
        while (s > 3 && fixed_bytes() + s * kSlabBytes > kSmemLimit)
            --s;
        return s;
    }
    static constexpr int kSlots = slots_that_fit() / 2 * 2;
    static constexpr int kRingSlots = kSlots / 2; /* per consumer's ring (sm90_bwd_mainloop.cuh) */
    static constexpr size_t kSmemBytes = fixed_bytes() + kSlots * kSlabBytes;
    /* dQ into the fp32 buffer by TMA reductions: a consumer stages its
     * 64 x 128 fp32 tile in its two own ring slots and keeps them until the
     * TMA has read them (sm90_bwd_kernel.cuh); otherwise red.global.add.v2
     * from registers. H100, B=1 H=32 N=8192, bf16, TFLOP/s (TMA / red):
     * D=128 201 / 203, D=256 304 / 266, D=512 193 / 198 (two ring slots:
     * the held slots stall the next tile's loads), D=1024 153 / 175.
     * D=320 and 768 (3 slots) gained 5% but compute-sanitizer racecheck
     * reported hazards on the exchange buffer with a GQA causal shape there
     * (docs/notes/backward.md, v2.8), so only the 4-box kernels take it:
     * D <= 256, and D <= 512, 768, 1024 as clusters of two, three, four. */
    static constexpr bool kDqBulk = kBoxes == 4 && !kKeySplit;
    static constexpr bool kDqTma = kDqBulk || kKeySplit || kGradSplit; /* reads BwdMaps::dq (with the fp32 buffer) */
    /* kDqBulk with 4 ring slots (one CTA, pairs): a producer thread per
     * consumer issues the reductions and frees the staged slots
     * (bwd_dq_bulk_reducer), so the consumer does not wait for the TMA's
     * read: H100 D=256 302 -> 378, D=512 274 -> 309 TFLOP/s. With 3
     * (clusters of three and four) the next tile's loads wait for those
     * slots and the hand-off to the producer thread lengthens that wait:
     * D=768 204 -> 188, D=1024 203 -> 189, so consumer thread 0 keeps
     * issuing them there (add_dq_bulk). */
    static constexpr bool kDqByProducer = kDqBulk && kRingSlots >= 4;

    static_assert(kBoxes % 2 == 0 && kBoxes >= 2 && kBoxes <= 8, "2 to 8 boxes (512 columns) per CTA, whole slabs");
    static_assert(kCluster >= 1 && kCluster <= 4, "a cluster of 1 to 4");
    static_assert(!kKeySplit || (kBoxes == 2 && kCluster == 1), "the key-split kernel: D <= 128, one CTA");
    static_assert(!kGradSplit || (kBoxes == 6 && kCluster == 1 && !kKeySplit), "the gradient split: D <= 320, one CTA");
    static_assert(kSmemBytes <= kSmemLimit, "fits the opt-in shared memory");
    static_assert(kRingSlots >= 2, "a consumer holds one slab while the next one lands");
};

/* Byte offsets inside the (1024-aligned) dynamic shared memory. */
template <class Cfg> struct BwdSmemLayout {
    static constexpr size_t k = 0;
    static constexpr size_t v = k + Cfg::kKVBytes;
    static constexpr size_t ring = v + Cfg::kKVBytes;
    static constexpr size_t dqs = ring + Cfg::kSlots * Cfg::kSlabBytes;
    static constexpr size_t dp = Cfg::kGradSplit ? dqs + Cfg::kDpInStage : dqs + Cfg::kDqStageBytes;
    static constexpr size_t rs = Cfg::kGradSplit ? dqs + Cfg::kDqStageBytes : dp + Cfg::kDpBytes;
    static constexpr size_t pt = rs + Cfg::kRsBytes;
    static constexpr size_t dst = pt + Cfg::kPtBytes;
    static constexpr size_t rows = dst + Cfg::kDstBytes;
    static constexpr size_t bars = rows + Cfg::kRowBytes;
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
