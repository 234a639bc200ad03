/*
 * Counter-based RNG (Philox4x32-10, Salmon et al. 2011) and the dropout mask
 * definition every backend shares. Header-only so CUDA/HIP/OpenCL kernels and
 * C code compile the very same function: a GPU dropout run is reproduced bit for bit
 * by the CPU backend and the test oracle.
 *
 * Mask of element (batch b, query head h, row i, column j), positions inside
 * the sequence:
 *   key     = { lo32(seed), hi32(seed) }
 *   stream  = offset + b * Hq + h                         (uint64, wraps)
 *   counter = { j >> 2, i, lo32(stream), hi32(stream) }
 *   word    = philox4x32_10(counter, key)[j & 3]
 *   keep    = word >= threshold,  threshold = min(floor(p * 2^32), 2^32 - 1)
 */
#ifndef FFPA_COMMON_PHILOX_H
#define FFPA_COMMON_PHILOX_H

#ifdef __OPENCL_VERSION__
/* OpenCL C (backends/opencl/kernels) has no <stdint.h>: its own names. */
#define uint32_t uint
#define uint64_t ulong
#define int64_t long
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FFPA_HD __host__ __device__ __forceinline__
#else
#define FFPA_HD static inline
#endif

typedef struct ffpa_u32x4 {
    uint32_t x, y, z, w;
} ffpa_u32x4;

FFPA_HD uint32_t ffpa_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t product = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(product >> 32);
    return (uint32_t)product;
}

FFPA_HD ffpa_u32x4 ffpa_philox4x32_10(ffpa_u32x4 ctr, uint32_t key0, uint32_t key1)
{
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    const uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        uint32_t hi0, hi1;
        uint32_t lo0 = ffpa_mulhilo32(M0, ctr.x, &hi0);
        uint32_t lo1 = ffpa_mulhilo32(M1, ctr.z, &hi1);
        ffpa_u32x4 next;
        next.x = hi1 ^ ctr.y ^ key0;
        next.y = lo1;
        next.z = hi0 ^ ctr.w ^ key1;
        next.w = lo0;
        ctr = next;
        key0 += W0;
        key1 += W1;
    }
    return ctr;
}

/* The four consecutive-column words of (b, h, i, j & ~3). */
FFPA_HD ffpa_u32x4 ffpa_dropout_words(uint64_t seed, uint64_t offset, int64_t hq, int64_t b,
                                      int64_t h, int64_t i, int64_t j)
{
    uint64_t stream = offset + (uint64_t)b * (uint64_t)hq + (uint64_t)h;
    ffpa_u32x4 ctr;
    ctr.x = (uint32_t)((uint64_t)j >> 2);
    ctr.y = (uint32_t)i;
    ctr.z = (uint32_t)stream;
    ctr.w = (uint32_t)(stream >> 32);
    return ffpa_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

FFPA_HD uint32_t ffpa_u32x4_at(ffpa_u32x4 v, int idx)
{
    return idx == 0 ? v.x : idx == 1 ? v.y : idx == 2 ? v.z : v.w;
}

/* 1 if element (b, h, i, j) is kept. */
FFPA_HD int ffpa_dropout_keep(uint64_t seed, uint64_t offset, uint32_t threshold, int64_t hq,
                              int64_t b, int64_t h, int64_t i, int64_t j)
{
    ffpa_u32x4 words = ffpa_dropout_words(seed, offset, hq, b, h, i, j);
    return ffpa_u32x4_at(words, (int)(j & 3)) >= threshold;
}

#ifndef __OPENCL_VERSION__ /* host side only (double is optional in OpenCL C) */
/* Threshold for drop probability p in [0, 1). */
FFPA_HD uint32_t ffpa_dropout_threshold(double p)
{
    double t = p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}
#endif

#endif
