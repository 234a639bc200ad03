/*
 * Online softmax over key tiles, in registers (base 2: scores arrive
 * multiplied by log2(e)). Each lane owns two rows of the warp's 16 (the FragC
 * rows) and keeps their running max and its own partial row sum; the four
 * lanes of a row combine the sums once, at the end.
 */
#ifndef FFPA_GPU_SOFTMAX_CUH
#define FFPA_GPU_SOFTMAX_CUH

#include <math.h>

namespace ffpa {

struct OnlineSoftmax {
    float m[2]; /* running max (log2 domain), -inf before any visible key */
    float l[2]; /* this lane's share of the running sum */

    __device__ __forceinline__ void init()
    {
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.0f;
    }

    /* The largest of `from` and the scores of row half `half` in this lane's
     * columns, as a tree: log2(kNT) + 2 dependent FMNMX instead of a kNT + 1
     * deep chain, which the exp2s of the tile wait on (ncu: the fixed-latency
     * stalls of the small-D forward, docs/notes/forward.md). The maximum
     * does not depend on the order. */
    template <int kNT>
    static __device__ __forceinline__ float lane_max(const arch::FragC (&s)[kNT], int half, float from)
    {
        float v[kNT];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
            v[nt] = fmaxf(s[nt].r[2 * half], s[nt].r[2 * half + 1]);
#pragma unroll
        for (int stride = 1; stride < kNT; stride *= 2)
#pragma unroll
            for (int i = 0; i + stride < kNT; i += 2 * stride)
                v[i] = fmaxf(v[i], v[i + stride]);
        return fmaxf(from, v[0]);
    }

    /* s (masked, scaled scores) -> unnormalised probabilities; returns the
     * factor each row's accumulator must be rescaled by. */
    template <int kNT> __device__ __forceinline__ void update(arch::FragC (&s)[kNT], float (&alpha)[2])
    {
#pragma unroll
        for (int half = 0; half < 2; ++half)
            advance<kNT>(s, alpha, half, arch::quad_max(lane_max<kNT>(s, half, m[half])), 1.0f);
    }

    /* The same on raw scores with the scale (> 0) in the exp2's FFMA,
     * exp2(s * scale - m): the row max is taken before scaling. */
    template <int kNT>
    __device__ __forceinline__ void update_scaled(arch::FragC (&s)[kNT], float (&alpha)[2], float scale)
    {
#pragma unroll
        for (int half = 0; half < 2; ++half)
            advance<kNT>(s, alpha, half, new_max_scaled<kNT>(s, half, scale), scale);
    }

    /* Row half `half`'s new max, max(m, max(s) * scale), the max taken
     * before scaling. */
    template <int kNT>
    __device__ __forceinline__ float new_max_scaled(const arch::FragC (&s)[kNT], int half, float scale) const
    {
        return fmaxf(m[half], arch::quad_max(lane_max<kNT>(s, half, -INFINITY)) * scale);
    }

    /* update_scaled's new row maxima alone, for the caller's advance():
     * a warp of several m-tiles can take every tile's maxima (shuffles)
     * before any exp2, so the tiles' dependent chains overlap
     * (FwdConfig::kMaxesFirst). */
    template <int kNT>
    __device__ __forceinline__ void row_max_scaled(const arch::FragC (&s)[kNT], float (&mx)[2], float scale) const
    {
#pragma unroll
        for (int half = 0; half < 2; ++half)
            mx[half] = new_max_scaled<kNT>(s, half, scale);
    }

    /* Row half `half` with its new max mx: alpha, the probabilities
     * exp2(s * scale - mx) in place, the running sum and max. */
    template <int kNT>
    __device__ __forceinline__ void advance(arch::FragC (&s)[kNT], float (&alpha)[2], int half, float mx, float scale)
    {
        /* A row that has seen only masked keys keeps m = -inf; use 0 as
         * the reference so exp2(-inf - 0) = 0 and never NaN. */
        float ref = mx == -INFINITY ? 0.0f : mx;
        alpha[half] = arch::exp2_fast(m[half] - ref);
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float pe = arch::exp2_fast(fmaf(s[nt].r[2 * half + e], scale, -ref));
                s[nt].r[2 * half + e] = pe;
                sum += pe;
            }
        }
        l[half] = l[half] * alpha[half] + sum;
        m[half] = mx;
    }

    /* Key split (fwd_key_tile_ks), before the warps of a row group swap P:
     * this warp's keys against a reference of its own, ref = max(running
     * max, their max) (-inf: no visible key yet; scale as in update_scaled,
     * 1 for scaled scores): s -> exp2(s * scale - ref) and this lane's sum. */
    template <int kNT>
    __device__ __forceinline__ void own_keys(arch::FragC (&s)[kNT], float (&ref)[2], float (&sum)[2], float scale)
    {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            ref[half] = new_max_scaled<kNT>(s, half, scale);
            const float r = ref[half] == -INFINITY ? 0.0f : ref[half];
            float acc = 0.0f;
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float pe = arch::exp2_fast(fmaf(s[nt].r[2 * half + e], scale, -r));
                    s[nt].r[2 * half + e] = pe;
                    acc += pe;
                }
            sum[half] = acc;
        }
    }

    /* The factor that moves probabilities taken against reference ref onto
     * the row max mx >= ref: 1 when they are equal (the settled rows), 0 for
     * a part with no visible key (its probabilities are 0 already). */
    static __device__ __forceinline__ float part_factor(float ref, float mx)
    {
        return ref == -INFINITY ? 0.0f : arch::exp2_fast(ref - mx);
    }

    /* After the swap: the row max mx (the largest reference of the row
     * group), alpha for O, this warp's share of the sum moved onto it. */
    __device__ __forceinline__ void merge(const float (&mx)[2], const float (&own_ref)[2], const float (&own_sum)[2],
                                          float (&alpha)[2])
    {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            alpha[half] = arch::exp2_fast(m[half] - (mx[half] == -INFINITY ? 0.0f : mx[half]));
            l[half] = l[half] * alpha[half] + part_factor(own_ref[half], mx[half]) * own_sum[half];
            m[half] = mx[half];
        }
    }

    /* o *= alpha per row (the rescale update() asks for), skipped when alpha
     * is 1 in every lane of the warp: once the row maxima settle the
     * multiplies change nothing (x * 1 == x), so the result is the same. */
    template <int kN>
    static __device__ __forceinline__ void rescale(arch::FragC (&o)[kN], const float (&alpha)[2])
    {
        if (!arch::warp_any(alpha[0] != 1.0f || alpha[1] != 1.0f))
            return;
#pragma unroll
        for (int nt = 0; nt < kN; ++nt) {
            o[nt].r[0] *= alpha[0];
            o[nt].r[1] *= alpha[0];
            o[nt].r[2] *= alpha[1];
            o[nt].r[3] *= alpha[1];
        }
    }

    /* Final row sums (whole row) and the natural-log LSE per row half. */
    __device__ __forceinline__ void finish(float (&inv_l)[2], float (&lse)[2])
    {
        const float sum[2] = {arch::quad_sum(l[0]), arch::quad_sum(l[1])};
        finish_sums(sum, inv_l, lse);
    }

    /* The same from whole-row sums the caller gathered (key split: every
     * warp's share). */
    __device__ __forceinline__ void finish_sums(const float (&sum)[2], float (&inv_l)[2], float (&lse)[2])
    {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            inv_l[half] = sum[half] > 0.0f ? 1.0f / sum[half] : 0.0f;
            lse[half] = sum[half] > 0.0f ? (m[half] + log2f(sum[half])) * 0.6931471805599453f : -INFINITY;
        }
    }
};

} /* namespace ffpa */

#endif
