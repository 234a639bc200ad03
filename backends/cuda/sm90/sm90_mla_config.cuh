/*
 * Compile-time shape of the Hopper MLA decode kernel (absorbed MLA: Dqk 576 =
 * 512 latent + 64 rope, Dv 512 = the latent part, V read from K's pages) and
 * its shared-memory layout; host and device agree on it through this file.
 *
 * A CTA owns 64 packed query rows (the Hq/Hkv x Nq rows that share a KV head)
 * of one split of one sequence. Each key tile (64 keys x 576 columns, one
 * TMA-filled ring slot) serves both GEMMs: S = Q K^T over all 576 columns
 * and O += P V over its first 512.
 *
 * Threads (three warpgroups):
 *   0  producer: one warp reads the block table and issues the TMA loads;
 *   1  softmax:  S = Q K^T, masking, online softmax, P (registers and shared
 *                memory), O[:, 0:192] += P V[:, 0:192];
 *   2  the rest of O: O[:, 192:512] += P V[:, 192:512] with P from shared
 *                memory, rescaled by warpgroup 1's per-row factors.
 * The uneven split leaves warpgroup 1 the registers for two S tiles (QK^T of
 * the next tile runs during this tile's softmax) and evens out the tensor
 * work: 36 + 12 k16-steps of n64 width against 20.
 */
#ifndef FFPA_CUDA_SM90_MLA_CONFIG_CUH
#define FFPA_CUDA_SM90_MLA_CONFIG_CUH

#include <stddef.h>
#include <stdint.h>

#include "sm90_fwd_config.cuh"

namespace ffpa {
namespace sm90 {

/* Rows of one TMA box of the page pool: a 64-key tile in one box when pages
 * hold multiples of 64 keys (or the cache is dense: rows never wrap), else
 * 2 or 4 boxes, each inside one page (pages hold multiples of 16 keys). */
__host__ __device__ inline int mla_box_rows(int page_size, bool paged)
{
    return !paged || page_size % 64 == 0 ? 64 : page_size % 32 == 0 ? 32 : 16;
}

template <typename T_> struct MlaConfig {
    using T = T_;
    static constexpr int kDqk = 576, kDv = 512;
    static constexpr int kQkBoxes = kDqk / kBoxCols; /* 9 column boxes of K (and Q) */
    static constexpr int kVBoxes = kDv / kBoxCols;   /* the first 8 are V */
    static constexpr int kO1Boxes = 3;               /* O columns of warpgroup 1: 192 */
    static constexpr int kO2Boxes = kVBoxes - kO1Boxes; /* of warpgroup 2: 320 */
    static constexpr int kBr = 64, kBc = 64;
    static constexpr int kThreads = 384;
    static constexpr int kStages = 2;
    static constexpr int kNT = kBc / 8;              /* S n8-blocks per warp */
    static constexpr int kO1Acc = kO1Boxes * kBoxCols / 2; /* fp32 O accumulators per thread: 96 */
    static constexpr int kO2Acc = kO2Boxes * kBoxCols / 2; /* 160 */

    static constexpr size_t kTileBytes = (size_t)kQkBoxes * kBoxBytes;     /* 73728: Q, or one key tile */
    static constexpr size_t kPBytes = (size_t)kBr * kBc * 2;               /* P, 64 x 64 16-bit */
    static constexpr size_t kStatBytes = 3 * kBr * sizeof(float);          /* alpha, 1/l, lse per row */
    static constexpr size_t kBarBytes = 128;

    /* A key tile's slot is filled and freed in three parts, in the order
     * the GEMMs are done with them: 0 = the rope columns (box 8, QK^T
     * only), 1 = V columns 0-191 (warpgroup 1's PV), 2 = V columns 192-511
     * (warpgroup 2's PV, which runs after QK^T). QK^T streams through the
     * parts in this order, so it starts as soon as the first part lands. */
    static constexpr int kParts = 3;
    static __host__ __device__ constexpr int part_first_box(int part)
    {
        return part == 0 ? kQkBoxes - 1 : part == 1 ? 0 : kO1Boxes;
    }
    static __host__ __device__ constexpr int part_boxes(int part)
    {
        return part == 0 ? 1 : part == 1 ? kO1Boxes : kO2Boxes;
    }

    /* Byte offsets inside the 1024-aligned dynamic shared memory. */
    static constexpr size_t kQ = 0;
    static constexpr size_t kRing = kQ + kTileBytes;
    static constexpr size_t kP = kRing + kStages * kTileBytes;
    static constexpr size_t kStats = kP + kPBytes;
    static constexpr size_t kBars = kStats + kStatBytes;
    static constexpr size_t kSmemBytes = kBars + kBarBytes + 1024 /* alignment slack */;
    static_assert(kSmemBytes <= kSmemLimit, "Q, two key tiles and P fit the opt-in shared memory");
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
