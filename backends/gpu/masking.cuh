/*
 * Score masking of one warp's S tile (rows x kBc columns held as FragC
 * n-tiles): softmax scale, logit softcap, additive bias (any dtype,
 * broadcast strides), ALiBi, bottom-right causal mask and sliding window,
 * key bounds; the key tiles and query rows a window leaves visible (so the
 * kernels skip the rest rather than mask it); softcap's derivative for the
 * backward. And the dropout of P, using THE mask definition of
 * common/philox.h, so the CPU backend reproduces it exactly. The order and
 * meaning of each step are the cpu backend's (backends/cpu/cpu_tiles.c).
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
    float alibi_slope; /* the head's ALiBi slope times log2(e) (0 without ALiBi) */
    bool need_bounds;  /* tile crosses seqlen_k */
    bool need_diag;    /* tile crosses the causal diagonal or a window edge of some row */

    /* Sequence b, query head h; the slope is read here, once, not in each
     * tile's critical path. */
    __device__ __forceinline__ void set_head(const ffpa_gpu_fwd_params &p, int b_, int h_)
    {
        b = b_;
        h = h_;
        alibi_slope = p.alibi ? p.alibi[(int64_t)b_ * p.alibi_sb + (int64_t)h_ * p.alibi_sh] * 1.4426950408889634f
                              : 0.0f;
    }
};

/* Key columns [first, last] query row i may see under the causal mask and
 * the window (diag = seqlen_k - seqlen_q); an unbounded side is +-2^30. */
__device__ __forceinline__ int first_visible_col(const ffpa_gpu_fwd_params &p, int i, int diag)
{
    return p.window && p.window_left >= 0 ? i + diag - p.window_left : -(1 << 30);
}

__device__ __forceinline__ int last_visible_col(const ffpa_gpu_fwd_params &p, int i, int diag)
{
    int last = 1 << 30;
    if (p.causal)
        last = i + diag;
    if (p.window && p.window_right >= 0)
        last = min(last, i + diag + p.window_right);
    return last;
}

/* Does the tile of rows [row0, row_last] x keys [col0, col_last] hold an
 * element outside some row's visible range? (Both bounds grow with the row.) */
__device__ __forceinline__ bool crosses_diag(const ffpa_gpu_fwd_params &p, int row0, int row_last, int col0,
                                             int col_last, int diag)
{
    return col_last > last_visible_col(p, row0, diag) || col0 < first_visible_col(p, row_last, diag);
}

/* Key tiles (of bc keys) rows [row0, row_last] may see: [*begin, end),
 * within the sequence's seqlen_k keys; end <= *begin: none. */
__device__ __forceinline__ int visible_key_tiles(const ffpa_gpu_fwd_params &p, int row0, int row_last, int diag,
                                                 int seqlen_k, int bc, int *begin)
{
    const int first = max(0, first_visible_col(p, row0, diag));
    const int last = min(seqlen_k - 1, last_visible_col(p, row_last, diag));
    *begin = first / bc;
    return last < first ? *begin : last / bc + 1;
}

/* Query rows that may see any of key columns [col0, col_last]: [*begin, end)
 * within the sequence's seqlen_q rows (row i sees j iff first(i) <= j <= last(i)). */
__device__ __forceinline__ int visible_rows(const ffpa_gpu_fwd_params &p, int col0, int col_last, int diag,
                                            int seqlen_q, int *begin)
{
    const int lo = col0 - last_visible_col(p, 0, diag);      /* last(i) = i + const >= col0 */
    const int hi = col_last - first_visible_col(p, 0, diag); /* first(i) = i + const <= col_last */
    *begin = max(0, lo);
    return max(*begin, min(seqlen_q, hi + 1));
}

__device__ __forceinline__ float load_bias(const void *bias, int dtype, int64_t idx)
{
    if (dtype == FFPA_F16)
        return arch::to_f32<arch::f16>(static_cast<const arch::f16 *>(bias)[idx]);
    if (dtype == FFPA_BF16)
        return arch::to_f32<arch::bf16>(static_cast<const arch::bf16 *>(bias)[idx]);
    return static_cast<const float *>(bias)[idx];
}

__device__ __forceinline__ float bias_value(float x) { return x; }
template <typename T> __device__ __forceinline__ float bias_value(T x) { return arch::to_f32<T>(x); }
template <typename T> __device__ __forceinline__ T bias_zero() { return arch::from_f32<T>(0.0f); }
template <> __device__ __forceinline__ float bias_zero<float>() { return 0.0f; }

/* s += log2(e) * bias on the tile's elements inside the sequences (0
 * elsewhere: those are masked to -inf after), bias of element type B. Each
 * pair of n8-blocks issues its 8 loads before it uses any: a load followed
 * at once by its use (the conversion, the add) made a tile's loads run one
 * after another, each paying the whole latency (the Hopper forward ran 2-4x
 * slower with a bias). Pairs, not the whole tile: more values in flight
 * spilled the Hopper kernels' registers and slowed their bias-free path. */
template <int kNT, typename B>
__device__ __forceinline__ void add_bias(arch::FragC (&s)[kNT], const B *bias, const ffpa_gpu_fwd_params &p,
                                         const MaskCtx &mc, int lane)
{
    constexpr int kGroup = kNT < 2 ? kNT : 2; /* an odd kNT (3: clusters of three) ends on a single block */
    const B *plane = bias + (int64_t)mc.b * p.bias_sb + (int64_t)mc.h * p.bias_sh;
#pragma unroll
    for (int g0 = 0; g0 < kNT; g0 += kGroup) {
        B raw[kGroup][4];
#pragma unroll
        for (int g = 0; g < kGroup; ++g)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (g0 + g >= kNT)
                    continue;
                const int i = mc.row0 + arch::frag_c_row(lane, e);
                const int j = mc.col0 + (g0 + g) * 8 + arch::frag_c_col(lane, e);
                raw[g][e] = i < mc.seqlen_q && j < mc.seqlen_k
                                ? plane[(int64_t)i * p.bias_sn + (int64_t)j * p.bias_sd]
                                : bias_zero<B>();
            }
#pragma unroll
        for (int g = 0; g < kGroup; ++g)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (g0 + g < kNT)
                    s[g0 + g].r[e] += bias_value(raw[g][e]) * kLog2e;
    }
}

/* s <- scale * s (scale: the softmax scale times log2(e)). */
template <int kNT> __device__ __forceinline__ void scale_scores(arch::FragC (&s)[kNT], float scale)
{
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[nt].r[e] *= scale;
}

/* s <- scale*log2(e)*s (softcapped) + log2(e)*bias + ALiBi, with -inf where
 * masked. The variant-free, bias-free, unmasked tile (the common one) is a
 * single multiply per score: the tests are made once per tile
 * (warp-uniform), not per element, so the score loop stays one basic block.
 * !kVariants: no softcap, bias or ALiBi code (kernels the launch picks only
 * without them); the causal, window and length masks stay. !kScale: the
 * caller scaled s, or the softmax folds the scale into its exp2. */
template <int kNT, bool kVariants = true, bool kScale = true>
__device__ __forceinline__ void mask_scores(arch::FragC (&s)[kNT], const ffpa_gpu_fwd_params &p,
                                            const MaskCtx &mc, int lane)
{
    if (kScale)
        scale_scores<kNT>(s, p.scale_log2);
    if (kVariants && p.softcap_out > 0.0f) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[nt].r[e] = p.softcap_out * arch::tanh_fast(s[nt].r[e] * p.softcap_in);
    }
    if (kVariants && p.bias) {
        if (p.bias_dtype == FFPA_F16)
            add_bias<kNT>(s, static_cast<const arch::f16 *>(p.bias), p, mc, lane);
        else if (p.bias_dtype == FFPA_BF16)
            add_bias<kNT>(s, static_cast<const arch::bf16 *>(p.bias), p, mc, lane);
        else
            add_bias<kNT>(s, static_cast<const float *>(p.bias), p, mc, lane);
    }
    const int diag = mc.seqlen_k - mc.seqlen_q;
    if (kVariants && p.alibi) {
        const float slope = mc.alibi_slope;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int i = mc.row0 + arch::frag_c_row(lane, e);
                int j = mc.col0 + nt * 8 + arch::frag_c_col(lane, e);
                s[nt].r[e] -= slope * (float)abs(i + diag - j);
            }
    }
    if (mc.need_bounds || mc.need_diag) {
        /* Per row, the visible key columns [lo, hi] (diagonal, window and
         * seqlen_k bounds): an element then costs one compare pair. */
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = mc.row0 + arch::frag_c_row(lane, 2 * half);
            int lo = -(1 << 30), hi = mc.need_bounds ? mc.seqlen_k - 1 : (1 << 30);
            if (mc.need_diag) {
                lo = first_visible_col(p, i, diag);
                hi = min(hi, last_visible_col(p, i, diag));
            }
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; ++e) {
                    const int j = mc.col0 + nt * 8 + arch::frag_c_col(lane, e);
                    if (j > hi || j < lo)
                        s[nt].r[e] = -INFINITY;
                }
        }
    }
}

/* Softcap in the backward: ds (dS of the capped score, in place) times
 * d(capped)/d(s) = 1 - tanh^2, recovered from the tile's probabilities
 * P = exp2(s_log2 - lse2) (s_log2: mask_scores' output) instead of keeping
 * the raw scores alive: tanh = (log2 P + lse2 - bias and ALiBi terms) /
 * softcap_out. Where P = 0, dS is 0 already. */
template <int kNT>
__device__ __forceinline__ void softcap_grad(arch::FragC (&ds)[kNT], const arch::FragC (&pr)[kNT],
                                             const float (&lse2)[2], const ffpa_gpu_fwd_params &p,
                                             const MaskCtx &mc, int lane)
{
    const int diag = mc.seqlen_k - mc.seqlen_q;
    const float slope = mc.alibi_slope;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float pv = pr[nt].r[e];
            if (!(pv > 0.0f))
                continue;
            const int i = mc.row0 + arch::frag_c_row(lane, e);
            const int j = mc.col0 + nt * 8 + arch::frag_c_col(lane, e);
            float capped = log2f(pv) + lse2[e >> 1]; /* s_log2 */
            if (p.bias)
                capped -= load_bias(p.bias, p.bias_dtype,
                                    (int64_t)mc.b * p.bias_sb + (int64_t)mc.h * p.bias_sh + (int64_t)i * p.bias_sn +
                                        (int64_t)j * p.bias_sd) *
                          kLog2e;
            if (p.alibi)
                capped += slope * (float)abs(i + diag - j);
            const float t = capped / p.softcap_out;
            ds[nt].r[e] *= 1.0f - t * t;
        }
}

/* Zero dropped probabilities, scale kept ones (after the row sums). The
 * keep bits are gathered first in a rolled loop (one Philox block per lane
 * and n8-block, shared by a lane pair), so the 10-round generators never
 * run interleaved and never hold more than one block's registers. */
template <int kNT>
__device__ __forceinline__ void apply_dropout(arch::FragC (&s)[kNT], const ffpa_gpu_fwd_params &p,
                                              const MaskCtx &mc, int lane)
{
    static_assert(kNT * 4 <= 64, "keep bits fit one 64-bit word");
    /* A Philox block covers 4 consecutive columns of one row, and the lanes
     * lane and lane ^ 1 hold those 4 columns (2 each) in both rows of the
     * fragment (arch_fragments.cuh). So each draws one row's block (the
     * even lane row r, the odd one row r + 8), uses all 4 words, and the
     * pair swaps the other row's bits: kNT blocks per lane instead of
     * 2 kNT, each of which used 2 of its 4 words. */
    const int drawn_half = lane & 1;
    const int i = mc.row0 + arch::frag_c_row(lane, 2 * drawn_half);
    const uint32_t t = p.dropout_threshold;
    uint64_t drawn = 0; /* bit 4 nt + c: column c of nt's block in row i */
#pragma unroll 1
    for (int nt = 0; nt < kNT; ++nt) {
        const int j = (mc.col0 + nt * 8 + arch::frag_c_col(lane, 0)) & ~3;
        const ffpa_u32x4 w = ffpa_dropout_words(p.dropout_seed, p.dropout_offset, p.hq, mc.b, mc.h, i, j);
        const uint64_t bits = (uint64_t)(w.x >= t) | (uint64_t)(w.y >= t) << 1 | (uint64_t)(w.z >= t) << 2 |
                              (uint64_t)(w.w >= t) << 3;
        drawn |= bits << (4 * nt);
    }
    const uint64_t other = (uint64_t)arch::lane_xor_u32((uint32_t)drawn, 1) |
                           (uint64_t)arch::lane_xor_u32((uint32_t)(drawn >> 32), 1) << 32;
    /* This lane's 2 columns sit at 2 (lane & 1) of each block (col0 is a multiple of 8). */
    const int c = 2 * (arch::frag_c_col(lane, 0) >> 1 & 1);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const uint64_t row_bits = (e >> 1) == drawn_half ? drawn : other;
            float &v = s[nt].r[e];
            v = (row_bits >> (4 * nt + c + (e & 1))) & 1 ? v * p.dropout_scale : 0.0f;
        }
}

} /* namespace ffpa */

#endif
