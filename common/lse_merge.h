/*
 * Merging attention results over disjoint key ranges by their log-sum-exp
 * (flash-decoding's split-KV merge, context parallelism): the conventions
 * every backend's merge shares, header-only for C, CUDA/HIP and OpenCL C.
 *
 *   lse = log(sum_i exp(lse_i)),  O = sum_i w_i O_i,  w_i = exp(lse_i - lse)
 *
 * computed as max m = max_i lse_i, sum = sum_i exp(lse_i - m), lse = m +
 * log(sum). A part with lse_i = -inf saw no key: weight 0 and its O is never
 * read (it may hold anything). All parts -inf: lse = -inf, O = 0.
 */
#ifndef FFPA_COMMON_LSE_MERGE_H
#define FFPA_COMMON_LSE_MERGE_H

#ifdef __OPENCL_VERSION__
#define FFPA_LSE_HD static inline
#define FFPA_LSE_EXP(x) exp(x)
#define FFPA_LSE_LOG(x) log(x)
#elif defined(__CUDACC__) || defined(__HIPCC__)
#define FFPA_LSE_HD __host__ __device__ __forceinline__
#define FFPA_LSE_EXP(x) expf(x)
#define FFPA_LSE_LOG(x) logf(x)
#else
#include <math.h>
#define FFPA_LSE_HD static inline
#define FFPA_LSE_EXP(x) expf(x)
#define FFPA_LSE_LOG(x) logf(x)
#endif

/* One part's term of the sum, given the running max m of the parts. */
FFPA_LSE_HD float ffpa_lse_term(float lse_i, float m)
{
    return lse_i == -INFINITY ? 0.0f : FFPA_LSE_EXP(lse_i - m);
}

/* The merged LSE from the max and the sum of the terms. */
FFPA_LSE_HD float ffpa_lse_total(float m, float sum)
{
    return sum > 0.0f ? m + FFPA_LSE_LOG(sum) : -INFINITY;
}

/* Part i's weight in the merged O (0: skip the part, do not read its O). */
FFPA_LSE_HD float ffpa_lse_weight(float lse_i, float lse)
{
    return lse_i == -INFINITY || lse == -INFINITY ? 0.0f : FFPA_LSE_EXP(lse_i - lse);
}

#endif
