/*
 * Host-side fp16 / bf16 <-> fp32 conversion, round to nearest even, with
 * NaN and infinity preserved and fp16 subnormals handled. Portable C: no
 * reliance on _Float16 or F16C, so the CPU backend behaves identically on
 * every compiler.
 */
#ifndef FFPA_COMMON_DTYPE_H
#define FFPA_COMMON_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "ffpa.h"

static inline uint32_t ffpa_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float ffpa_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float ffpa_bf16_to_f32(uint16_t h)
{
    return ffpa_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t ffpa_f32_to_bf16(float f)
{
    uint32_t u = ffpa_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep it quiet, keep the sign */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float ffpa_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1Fu) /* inf / NaN */
        return ffpa_f32_from_bits(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return ffpa_f32_from_bits(sign);
        /* subnormal: value = man * 2^-24, exact in fp32 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return ffpa_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t ffpa_f32_to_f16(float f)
{
    uint32_t u = ffpa_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) /* NaN */
        return (uint16_t)(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
    if (abs >= 0x477FF000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7C00u);
    if (abs < 0x38800000u) { /* below 2^-14: subnormal or zero */
        if (abs < 0x33000000u) /* below 2^-25: rounds to zero */
            return sign;
        uint32_t exp = abs >> 23;
        uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t half_ulp = 1u << (shift - 1);
        uint32_t rest = man & ((1u << shift) - 1u);
        uint32_t out = man >> shift;
        if (rest > half_ulp || (rest == half_ulp && (out & 1u)))
            ++out;
        return (uint16_t)(sign | out);
    }
    uint32_t out = ((abs >> 13) - (112u << 10));
    uint32_t rest = abs & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (out & 1u)))
        ++out;
    return (uint16_t)(sign | out);
}

/* Load element idx of an array of the given dtype as float. */
static inline float ffpa_load_f32(const void *base, ffpa_dtype dtype, int64_t idx)
{
    switch (dtype) {
    case FFPA_F16:
        return ffpa_f16_to_f32(((const uint16_t *)base)[idx]);
    case FFPA_BF16:
        return ffpa_bf16_to_f32(((const uint16_t *)base)[idx]);
    default:
        return ((const float *)base)[idx];
    }
}

/* Store a float into element idx, rounding to nearest even. */
static inline void ffpa_store_f32(void *base, ffpa_dtype dtype, int64_t idx, float value)
{
    switch (dtype) {
    case FFPA_F16:
        ((uint16_t *)base)[idx] = ffpa_f32_to_f16(value);
        break;
    case FFPA_BF16:
        ((uint16_t *)base)[idx] = ffpa_f32_to_bf16(value);
        break;
    default:
        ((float *)base)[idx] = value;
        break;
    }
}

#endif
