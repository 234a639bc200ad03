/*
 * Pieces both backward kernels share: block shape, sequence geometry, the
 * per-row LSE/Delta fetch, P = exp2(S - LSE) recompute and dS.
 * Vendor-neutral: the arch layer (ffpa::arch: arch_sm80.cuh for CUDA,
 * arch_hip.h for HIP) must be included first, as for ../fwd_kernel.cuh.
 */
#ifndef FFPA_GPU_BWD_COMMON_CUH
#define FFPA_GPU_BWD_COMMON_CUH

#include "masking.cuh"
#include "smem_tile.cuh"

#include "bwd_mma.cuh"

namespace ffpa {
namespace bwd {

/*
 * Block shape of a backward configuration: kWarps warps of 16 query rows
 * each (kBr rows per query tile), D streamed through the ring in kChunk
 * columns per item (kSlabs slabs of 64), and, for dK/dV, K_j/V_j either
 * resident in shared memory for the whole block or streamed beside the
 * Q/dO chunk of every item (recomputed per chunk, as Split-D does).
 */
template <int kWarps_, int kChunk_, bool kStreamKV_, int kBr_ = 16 * kWarps_> struct BwdCfg {
    static constexpr int kWarps = kWarps_;
    static constexpr int kThreads = kWarps * arch::kWarpSize;
    static constexpr int kBr = kBr_;         /* query rows of a tile: 16 per warp row */
    /* Warps that split a row group's keys in S / dP (the 2-D warp tiling:
     * kBr / 16 row groups x kKeyWarps key groups). */
    static constexpr int kKeyWarps = 16 * kWarps / kBr;
    static_assert(kBr % 16 == 0 && (16 * kWarps) % kBr == 0, "whole row groups, every warp in one");
    static constexpr int kChunk = kChunk_;   /* columns streamed per pipeline item */
    static constexpr int kSlabs = kChunk / kSlab;
    static constexpr bool kStreamKV = kStreamKV_;
    /* The tiles' LSE and Delta through shared memory (kStatBufs): not in
     * the streamed configurations, whose rings fill the 64 KiB parts to
     * the byte; they read them into registers after the S GEMM. */
    static constexpr bool kStatsInSmem = !kStreamKV;
    static_assert(kChunk % kSlab == 0, "whole slabs per item");
};

/* The configuration of devices with ~130 KiB or more per block (H100: 227 KB):
 * 8 warps, 128-row query tiles, 128-column chunks, K/V resident. */
using BigCfg = BwdCfg<8, 2 * kSlab, false>;
/* BigCfg's 128-row query tiles at D <= 64 in 64-column chunks, for the
 * 128-key dK/dV kernel (FlashAttention-2's hdim-64 tile): the ring's slots
 * hold one slab, and the dV/dK warp grid (4 x 2 warps of 32 keys x 32
 * columns) covers the 64 columns with every warp. */
using Big64Cfg = BwdCfg<8, kSlab, false>;
/* D in (64, 128] on 128-key blocks (FlashAttention-2's hdim-128 tile): 64
 * query rows a tile, 8 warps as 4 row groups x 2 key groups of 64 in S / dP
 * (32 + 32 registers), dK / dV 32 keys x 64 columns a warp in registers. */
using Wide128Cfg = BwdCfg<8, 2 * kSlab, false, 64>;
/* D in (128, 256] on 64-key blocks (FlashAttention-2's hdim-256 tile): 64
 * query rows a tile in one 256-column chunk, 8 warps as 4 row groups x 2 key
 * groups of 32 in S / dP (16 + 16 registers), dK / dV 32 keys x 64 columns a
 * warp in registers (64 + 64) instead of read and written per query tile. */
using Wide256Cfg = BwdCfg<8, 4 * kSlab, false, 64>;
/* BigCfg's tile with K/V streamed: for D whose 64-key K/V tiles do not fit
 * resident (D = 1024 on the H100; from D ~ 640 on a 163 KiB A100), where the
 * alternative was the 32-key kernel (half the key rows per block, 4-wide
 * warp tiles in dV/dK) or SmallCfg. 192 x 128 x 2 bytes a ring slot. */
using StreamCfg = BwdCfg<8, 2 * kSlab, true>;
/* Chosen only where BigCfg does not fit (64 KiB LDS of gfx90a/gfx942/gfx1100,
 * ~99 KiB of sm_86/89 for large D, FFPA_BWD_SMEM_LIMIT): 4 warps, 64-row
 * query tiles, 64-column chunks, K/V streamed; at most 64 KiB for every D. */
using SmallCfg = BwdCfg<4, kSlab, true>;

/* The dK/dV kernel's tiles' LSE and Delta rows travel into shared memory
 * with the tile's first ring item (cp.async), in kStatBufs buffers by tile
 * (read after the S GEMM and in dS, not held in registers across the
 * GEMMs). Tile T + 2's load refills tile T's buffer `ahead` items before
 * tile T + 2 begins; tile T's last read comes before tile T + 1's first
 * ring barrier (held Q; else before its dK items'). Safe while ahead <=
 * items a tile: ahead = stages - 2 <= 2 with Q held (stages <= 4,
 * choose_tiles), at least two items; else ahead <= 3 (cp_async_wait_dyn)
 * and 3 nq2 + nv2 >= 4 items between. */
constexpr int kStatBufs = 2;
/* The deepest ring the dK/dV kernel is planned with, a held Q slot included
 * (the bound above; choose_tiles, test_bwd_plan). */
constexpr int kMaxStages = 4;

/* Where the next item of a block's sequence (items_per_tile items per
 * tile, the tiles by query block, then head of the group) lies, advanced
 * one item at a time: no division by run-time counts on the per-item path. */
struct ItemCursor {
    int it, qb, head, slot; /* item within its tile, query block, head, ring slot */
    int stats;              /* the tile's row-statistics buffer (kStatBufs of them) */
    __device__ __forceinline__ void next(int items_per_tile, int n_qb, int stages)
    {
        slot = slot + 1 == stages ? 0 : slot + 1;
        if (++it == items_per_tile) {
            it = 0;
            stats = stats + 1 == kStatBufs ? 0 : stats + 1;
            if (++qb == n_qb) {
                qb = 0;
                ++head;
            }
        }
    }
};

/* Rows of sequence b and where they start in the packed tensors. */
struct SeqGeom {
    int64_t q_start, k_start; /* packed row of position 0 (varlen), else 0 */
    int seqlen_q, seqlen_k;
};

__device__ __forceinline__ SeqGeom seq_geom(const ffpa_bwd_params &p, int b)
{
    SeqGeom g;
    g.q_start = g.k_start = 0;
    g.seqlen_q = p.nq;
    g.seqlen_k = p.nkv;
    if (p.cu_q) {
        g.q_start = p.cu_q[b];
        g.seqlen_q = p.cu_q[b + 1] - p.cu_q[b];
        g.k_start = p.cu_k[b];
        g.seqlen_k = p.cu_k[b + 1] - p.cu_k[b];
    }
    return g;
}

/* Element offset of row 0 of (b, h) in a q/k/v/o/dO-side tensor. */
__device__ __forceinline__ int64_t row0_offset(int64_t sb, int64_t sh, int64_t sn, int64_t start, bool varlen,
                                               int b, int h)
{
    return (int64_t)h * sh + (varlen ? start * sn : (int64_t)b * sb);
}

/* A saved LSE as the log2 that recompute_p subtracts: +inf for a row that
 * saw no key (LSE -inf), so that its P = exp2(s - lse2) = 0. */
__device__ __forceinline__ float lse2_of(float lse)
{
    return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

/* LSE (as log2, +inf for rows that saw no key or lie past the sequence, so
 * that P = exp2(s - lse2) = 0) and Delta of this lane's two rows. */
__device__ __forceinline__ void row_stats(const ffpa_bwd_params &p, const SeqGeom &g, int b, int h, int row0,
                                          int lane, float (&lse2)[2], float (&delta)[2])
{
    const float *lse = p.lse + row0_offset(p.lse_sb, p.lse_sh, p.lse_sn, g.q_start, p.cu_q != nullptr, b, h);
    const float *dl = p.delta + (int64_t)h * p.total_q + (p.cu_q ? g.q_start : (int64_t)b * p.nq);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        int r = row0 + arch::frag_c_row(lane, 2 * half);
        lse2[half] = r < g.seqlen_q ? lse2_of(lse[(int64_t)r * p.lse_sn]) : INFINITY;
        delta[half] = r < g.seqlen_q ? dl[r] : 0.0f;
    }
}

/* Masked scores -> probabilities P from the saved LSE: exp2(mul s - lse2),
 * mul the softmax scale times log2(e) where the caller left s unscaled
 * (one FFMA a score instead of a multiply and an add), else 1. */
template <int kNT>
__device__ __forceinline__ void recompute_p(arch::FragC (&s)[kNT], const float (&lse2)[2], float mul = 1.0f)
{
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[nt].r[e] = arch::exp2_fast(fmaf(s[nt].r[e], mul, -lse2[e >> 1]));
}

/* mul * dS (a warp's 16 x kBc FragC tiles) as the A fragments of a GEMM over
 * the keys: FragC pairs of adjacent n-tiles are FragA (arch_sm80.cuh). */
template <typename T, int kBc>
__device__ __forceinline__ void ds_afrags(const arch::FragC (&ds)[kBc / 8], float mul, uint32_t (&af)[kBc / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
        af[kk][0] = arch::pack_f32x2<T>(ds[2 * kk].r[0] * mul, ds[2 * kk].r[1] * mul);
        af[kk][1] = arch::pack_f32x2<T>(ds[2 * kk].r[2] * mul, ds[2 * kk].r[3] * mul);
        af[kk][2] = arch::pack_f32x2<T>(ds[2 * kk + 1].r[0] * mul, ds[2 * kk + 1].r[1] * mul);
        af[kk][3] = arch::pack_f32x2<T>(ds[2 * kk + 1].r[2] * mul, ds[2 * kk + 1].r[3] * mul);
    }
}


} /* namespace bwd */
} /* namespace ffpa */

#endif
