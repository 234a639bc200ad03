/*
 * MFMA for CDNA (gfx90a, gfx942; wave64): mma_m16n8k16 of the two logical
 * warps of a wave done by two v_mfma_f32_16x16x16{f16,bf16_1k}.
 *
 * Pairing. Logical warp h (lanes 32h..32h+31) wants D_h += A_h B_h with A_h
 * 16x16 and B_h 16x8. One 16x16x16 MFMA computes, per k-half kh (0, 1):
 *   A'[i][k'] = A_{k'/8}[i][8kh + k'%8]                  (16 x 16)
 *   B'[k'][j] = B_{j/8}[8kh + k'%8][j%8] if k'/8 == j/8, else 0
 *   (A'B')[i][j] = D_{j/8}[i][j%8] summed over the k-half.
 * Half of B' is zero, so the MFMA unit does twice the useful work; in
 * exchange no logical warp waits for the other and the kernel structure
 * stays that of backends/gpu/. The product is issued transposed (B' in
 * the MFMA A slot, A' in the B slot), which makes the D_h elements a lane
 * needs sit in 2 source lanes instead of 4.
 *
 * MFMA 16x16x16 operand layout (wave64, per the CDNA3 ISA):
 *   A slot: lane L holds X[L % 16][4 (L / 16) + t], t = 0..3
 *   B slot: lane L holds Y[4 (L / 16) + t][L % 16]
 *   D:      lane L holds D[4 (L / 16) + t][L % 16]
 * The lane maps below are plain functions so that
 * backends/hip/test_mfma_pairing.cpp checks them on the host against a
 * model of this layout.
 *
 * Every lane of the wave must execute the MFMA: the caller falls back to
 * the FMA path when the wave is not fully active (the shared kernel lets
 * logical warps skip padded D columns independently).
 */
#ifndef FFPA_HIP_ARCH_CDNA_H
#define FFPA_HIP_ARCH_CDNA_H

#include <stdint.h>

#ifndef FFPA_HD_MAP
#if defined(__HIPCC__) || defined(__CUDACC__)
#define FFPA_HD_MAP __host__ __device__ __forceinline__
#else
#define FFPA_HD_MAP inline
#endif
#endif

namespace ffpa {
namespace arch {
namespace mfma_pair {

/* Operand words of wave lane L (0..63): word w (0, 1) holds items 2w, 2w+1. */

/* Lane of this half's FragA holding the A' word w of lane L. */
FFPA_HD_MAP int a_src_lane(int L, int w)
{
    int h = L >> 5, i = L & 15, c = (L >> 4) & 1;
    return (h << 5) + ((i & 7) << 2) + (c << 1) + w;
}
/* Which FragA register (for k-half kh): rows 8..15 live in the odd ones. */
FFPA_HD_MAP int a_src_reg(int L, int kh) { return ((L & 15) >> 3) + 2 * kh; }

/* Lane of this half's FragB holding B' word w of lane L (register kh). */
FFPA_HD_MAP int b_src_lane(int L, int w)
{
    int h = L >> 5, j = L & 15, c = (L >> 4) & 1;
    return (h << 5) + ((j & 7) << 2) + (c << 1) + w;
}
/* B' is block diagonal: lane L carries data only where its column's half matches its own. */
FFPA_HD_MAP bool b_live(int L) { return ((L & 15) >> 3) == (L >> 5); }

/* MFMA result lane holding FragC element e of lane L, and the item there. */
FFPA_HD_MAP int d_src_lane(int L, int e)
{
    int h = L >> 5, l = L & 31, g = l >> 2, q = l & 3;
    return g + ((e >> 1) << 3) + 16 * (2 * h + (q >> 1));
}
FFPA_HD_MAP int d_src_item(int L, int e) { return 2 * (L & 1) + (e & 1); }

} /* namespace mfma_pair */

#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx942__))
#define FFPA_HIP_HAVE_MFMA 1

typedef _Float16 mfma_half4 __attribute__((ext_vector_type(4)));
typedef short mfma_short4 __attribute__((ext_vector_type(4)));
typedef float mfma_float4 __attribute__((ext_vector_type(4)));
typedef uint32_t mfma_u32x2 __attribute__((ext_vector_type(2)));

FFPA_DEV int wave_lane() { return (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
FFPA_DEV bool wave_full() { return __builtin_amdgcn_read_exec() == ~0ull; }
FFPA_DEV uint32_t bperm(int src_lane, uint32_t v)
{
    return (uint32_t)__builtin_amdgcn_ds_bpermute(src_lane << 2, (int)v);
}
FFPA_DEV float bperm_f(int src_lane, float v) { return __uint_as_float(bperm(src_lane, __float_as_uint(v))); }

template <typename T> FFPA_DEV mfma_float4 mfma16(mfma_u32x2 x, mfma_u32x2 y, mfma_float4 c);
template <> FFPA_DEV mfma_float4 mfma16<f16>(mfma_u32x2 x, mfma_u32x2 y, mfma_float4 c)
{
    return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(mfma_half4, x),
                                                 __builtin_bit_cast(mfma_half4, y), c, 0, 0, 0);
}
template <> FFPA_DEV mfma_float4 mfma16<bf16>(mfma_u32x2 x, mfma_u32x2 y, mfma_float4 c)
{
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(mfma_short4, x),
                                                     __builtin_bit_cast(mfma_short4, y), c, 0, 0, 0);
}

/* d += a b for both logical warps of the (fully active) wave. */
template <typename T> FFPA_DEV void mma_m16n8k16_mfma_pair(FragC &d, const FragA &a, const FragB &b)
{
    using namespace mfma_pair;
    const int L = wave_lane();
    const bool odd_rows = (L & 15) >= 8;
    const bool live = b_live(L);
    mfma_float4 acc = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
        /* A' words: both candidate registers travel, the row half picks one. */
        uint32_t a0e = bperm(a_src_lane(L, 0), a.r[2 * kh]), a0o = bperm(a_src_lane(L, 0), a.r[2 * kh + 1]);
        uint32_t a1e = bperm(a_src_lane(L, 1), a.r[2 * kh]), a1o = bperm(a_src_lane(L, 1), a.r[2 * kh + 1]);
        mfma_u32x2 y = {odd_rows ? a0o : a0e, odd_rows ? a1o : a1e};
        uint32_t b0 = bperm(b_src_lane(L, 0), b.r[kh]), b1 = bperm(b_src_lane(L, 1), b.r[kh]);
        mfma_u32x2 x = {live ? b0 : 0u, live ? b1 : 0u};
        acc = mfma16<T>(x, y, acc); /* transposed: D''[j][i] */
    }
    /* Back to the FragC layout: elements 0,1 from one lane, 2,3 from another. */
    const bool upper = (L & 1) != 0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        int src = d_src_lane(L, 2 * half);
        float v0 = bperm_f(src, acc[0]), v1 = bperm_f(src, acc[1]);
        float v2 = bperm_f(src, acc[2]), v3 = bperm_f(src, acc[3]);
        d.r[2 * half] += upper ? v2 : v0;
        d.r[2 * half + 1] += upper ? v3 : v1;
    }
}
#endif

} /* namespace arch */
} /* namespace ffpa */

#endif
