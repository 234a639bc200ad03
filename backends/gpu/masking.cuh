/*
 * Score masking of one warp's S tile (rows x kBc columns held as FragC
 * n-tiles): softmax scale, additive bias (any dtype, broadcast strides),
 * bottom-right causal mask, key bounds. And the dropout of P, using THE mask
 * definition of common/philox.h, so the CPU backend reproduces it exactly.
 * Coordinates come from the arch layer (frag_c_row / frag_c_col).
 */
#ifndef FFPA_GPU_MASKING_CUH
#define FFPA_GPU_MASKING_CUH

#include <math.h>

#include "ffpa.h"
#include "fwd_params.h"
#include "philox.h"

namespace ffpa {

constexpr float kLog2e = 1.4426950408889634f;

/* What a warp needs to mask its 16 rows of a key tile. */
struct MaskCtx {
    int row0;          /* sequence position of the warp's first row */
    int col0;          /* sequence position of the tile's first key */
    int seqlen_q, seqlen_k;
    int b, h;          /* sequence and query head */
    bool need_bounds;  /* tile crosses seqlen_k */
    bool need_causal;  /* tile crosses the causal diagonal of some row */
};

__device__ __forceinline__ float load_bias(const void *bias, int dtype, int64_t idx)
{
    if (dtype == FFPA_F16)
        return arch::to_f32<arch::f16>(static_cast<const arch::f16 *>(bias)[idx]);
    if (dtype == FFPA_BF16)
        return arch::to_f32<arch::bf16>(static_cast<const arch::bf16 *>(bias)[idx]);
    return static_cast<const float *>(bias)[idx];
}

/* s <- scale*log2(e)*s + log2(e)*bias, with -inf where masked. The
 * bias-free, unmasked tile (the common one) is a single multiply per score:
 * the tests are made once per tile (warp-uniform), not per element, so the
 * score loop stays one basic block. */
template <int kNT>
__device__ __forceinline__ void mask_scores(arch::FragC (&s)[kNT], const ffpa_gpu_fwd_params &p,
                                            const MaskCtx &mc, int lane)
{
    const float scale = p.scale_log2;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[nt].r[e] *= scale;
    if (p.bias) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int i = mc.row0 + arch::frag_c_row(lane, e);
                int j = mc.col0 + nt * 8 + arch::frag_c_col(lane, e);
                if (i < mc.seqlen_q && j < mc.seqlen_k) {
                    int64_t idx = (int64_t)mc.b * p.bias_sb + (int64_t)mc.h * p.bias_sh +
                                  (int64_t)i * p.bias_sn + (int64_t)j * p.bias_sd;
                    s[nt].r[e] += load_bias(p.bias, p.bias_dtype, idx) * kLog2e;
                }
            }
        }
    }
    if (mc.need_bounds || mc.need_causal) {
        const int diag = mc.seqlen_k - mc.seqlen_q;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int i = mc.row0 + arch::frag_c_row(lane, e);
                int j = mc.col0 + nt * 8 + arch::frag_c_col(lane, e);
                if ((mc.need_bounds && j >= mc.seqlen_k) || (mc.need_causal && j > i + diag))
                    s[nt].r[e] = -INFINITY;
            }
        }
    }
}

/* Zero dropped probabilities, scale kept ones (after the row sums). The
 * keep bits are gathered first in a rolled loop (one Philox block per column
 * pair, 2 bits each), so the 10-round generators never run interleaved and
 * never hold more than one block's registers. */
template <int kNT>
__device__ __forceinline__ void apply_dropout(arch::FragC (&s)[kNT], const ffpa_gpu_fwd_params &p,
                                              const MaskCtx &mc, int lane)
{
    static_assert(kNT * 4 <= 64, "keep bits fit one 64-bit word");
    uint64_t keep = 0;
#pragma unroll 1
    for (int k = 0; k < kNT * 2; ++k) {
        const int nt = k >> 1, half = k & 1;
        /* The two columns of a pair share one Philox block (j & ~3). */
        int i = mc.row0 + arch::frag_c_row(lane, 2 * half);
        int j = mc.col0 + nt * 8 + arch::frag_c_col(lane, 2 * half);
        ffpa_u32x4 words = ffpa_dropout_words(p.dropout_seed, p.dropout_offset, p.hq, mc.b, mc.h, i, j);
        uint64_t k0 = ffpa_u32x4_at(words, j & 3) >= p.dropout_threshold;
        uint64_t k1 = ffpa_u32x4_at(words, (j + 1) & 3) >= p.dropout_threshold;
        keep |= (k0 | (k1 << 1)) << (2 * k);
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float &v = s[nt].r[e];
            v = (keep >> (4 * nt + e)) & 1 ? v * p.dropout_scale : 0.0f;
        }
}

} /* namespace ffpa */

#endif
