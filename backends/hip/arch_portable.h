/*
 * The portable architecture layer of the HIP backend: the ffpa::arch API
 * that backends/gpu/ is written against (fragment types, mma_m16n8k16,
 * ldmatrix, cp.async, exp2, quad reductions), built from plain HIP: lane
 * shuffles, LDS loads and FMA. No vendor matrix instruction.
 *
 * The shared kernel structure works on logical warps of 32 lanes holding
 * fragments in the m16n8k16 layout (documented in backends/cuda/arch_sm80.cuh).
 * This layer keeps that contract on every target:
 *   - wave32 (RDNA gfx1100; NVIDIA when built for __HIP_PLATFORM_NVIDIA__):
 *     a logical warp is the hardware wave;
 *   - wave64 (CDNA gfx90a/gfx942): a wave holds two logical warps; every
 *     cross-lane operation here uses width 32, so the halves never mix.
 * mma_m16n8k16 gathers the A rows / B columns a lane needs from its quad
 * neighbours (32 shuffles) and does the 64 FMAs in fp32: exact products,
 * fp32 accumulation like the tensor-core instruction, just slow. arch_cdna.h
 * replaces it by MFMA where the whole wave takes part.
 *
 * cp.async has no HIP equivalent here: the copies are synchronous (16-byte
 * global load, 16-byte LDS store). The kernel's ring of slots still holds
 * (its barriers order the reuse of a slot), only the prefetch overlap is lost.
 */
#ifndef FFPA_HIP_ARCH_PORTABLE_H
#define FFPA_HIP_ARCH_PORTABLE_H

#include <stdint.h>

#include "hip_port.h"

#include "arch_fragments.cuh"

namespace ffpa {
namespace arch {

/* ---------------------------------------------------------------- types */

/* 16-bit storage types; the arithmetic is fp32 (conversions below). */
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };

/* Lane inside the logical warp. */
FFPA_DEV int lane32() { return (int)(threadIdx.x & 31u); }

FFPA_DEV uint32_t shfl32(uint32_t v, int src) { return (uint32_t)__shfl((int)v, src, 32); }

/* Stops the kernel with an error the launch reports (code that must not run). */
FFPA_DEV void trap()
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    __trap();
#else
    __builtin_trap();
#endif
}

/* ------------------------------------------------------------ conversions */

FFPA_DEV float f16_bits_to_f32(uint16_t b)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __half2float(__ushort_as_half(b));
#else
    return (float)__builtin_bit_cast(_Float16, b);
#endif
}

FFPA_DEV uint16_t f32_to_f16_bits(float x) /* round to nearest even */
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __half_as_ushort(__float2half_rn(x));
#else
    return __builtin_bit_cast(uint16_t, (_Float16)x);
#endif
}

FFPA_DEV float bf16_bits_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

FFPA_DEV uint16_t f32_to_bf16_bits(float x) /* round to nearest even, NaN kept quiet */
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

template <typename T> FFPA_DEV float to_f32(T x);
template <> FFPA_DEV float to_f32<f16>(f16 x) { return f16_bits_to_f32(x.bits); }
template <> FFPA_DEV float to_f32<bf16>(bf16 x) { return bf16_bits_to_f32(x.bits); }

template <typename T> FFPA_DEV T from_f32(float x);
template <> FFPA_DEV f16 from_f32<f16>(float x) { return f16{f32_to_f16_bits(x)}; }
template <> FFPA_DEV bf16 from_f32<bf16>(float x) { return bf16{f32_to_bf16_bits(x)}; }

/* Two floats -> one 32-bit register of two T (lo = a, hi = b). */
template <typename T> FFPA_DEV uint32_t pack_f32x2(float a, float b);
template <> FFPA_DEV uint32_t pack_f32x2<f16>(float a, float b)
{
    return (uint32_t)f32_to_f16_bits(a) | ((uint32_t)f32_to_f16_bits(b) << 16);
}
template <> FFPA_DEV uint32_t pack_f32x2<bf16>(float a, float b)
{
    return (uint32_t)f32_to_bf16_bits(a) | ((uint32_t)f32_to_bf16_bits(b) << 16);
}

/* The two elements of a packed register as floats. */
template <typename T> FFPA_DEV float lo_f32(uint32_t w);
template <typename T> FFPA_DEV float hi_f32(uint32_t w);
template <> FFPA_DEV float lo_f32<f16>(uint32_t w) { return f16_bits_to_f32((uint16_t)w); }
template <> FFPA_DEV float hi_f32<f16>(uint32_t w) { return f16_bits_to_f32((uint16_t)(w >> 16)); }
template <> FFPA_DEV float lo_f32<bf16>(uint32_t w) { return __uint_as_float(w << 16); }
template <> FFPA_DEV float hi_f32<bf16>(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
template <typename T> FFPA_DEV float2 unpack_f32x2(uint32_t w) { return make_float2(lo_f32<T>(w), hi_f32<T>(w)); }

/* ----------------------------------------------------- shared addresses */

/* A 32-bit shared-memory (LDS) address and back. */
FFPA_DEV uint32_t smem_u32(const void *ptr)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return (uint32_t)__cvta_generic_to_shared(ptr);
#else
    return (uint32_t)(uintptr_t)(const __attribute__((address_space(3))) void *)ptr;
#endif
}

FFPA_DEV uint32_t lds_load_u32(uint32_t addr)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return *static_cast<const uint32_t *>(__cvta_shared_to_generic(addr));
#else
    return *(const __attribute__((address_space(3))) uint32_t *)(uintptr_t)addr;
#endif
}

FFPA_DEV uint32_t lds_load_u16(uint32_t addr)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return *static_cast<const uint16_t *>(__cvta_shared_to_generic(addr));
#else
    return *(const __attribute__((address_space(3))) uint16_t *)(uintptr_t)addr;
#endif
}

FFPA_DEV void lds_store_u32(uint32_t addr, uint32_t v)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    *static_cast<uint32_t *>(__cvta_shared_to_generic(addr)) = v;
#else
    *(__attribute__((address_space(3))) uint32_t *)(uintptr_t)addr = v;
#endif
}

FFPA_DEV void lds_store_16(uint32_t addr, uint4 v)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    *static_cast<uint4 *>(__cvta_shared_to_generic(addr)) = v;
#else
    typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));
    u32x4 w = {v.x, v.y, v.z, v.w};
    *(__attribute__((address_space(3))) u32x4 *)(uintptr_t)addr = w;
#endif
}

/* --------------------------------------------------------------- ldmatrix */
/*
 * Same contract as the PTX instruction: lane l supplies the address of row
 * l % 8 of matrix l / 8; lane l receives, of matrix m, row l / 4, elements
 * 2 (l % 4) and +1 (trans: column l / 4 of rows 2 (l % 4) and +1).
 * Here each lane fetches the row address it needs from the supplying lane
 * and reads its own elements from LDS.
 */
FFPA_DEV void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    const int l = lane32();
#pragma unroll
    for (int m = 0; m < 4; ++m)
        r[m] = lds_load_u32(shfl32(addr, m * 8 + (l >> 2)) + 4 * (l & 3));
}

FFPA_DEV void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr)
{
    const int l = lane32();
#pragma unroll
    for (int m = 0; m < 2; ++m)
        r[m] = lds_load_u32(shfl32(addr, m * 8 + (l >> 2)) + 4 * (l & 3));
}

FFPA_DEV void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    const int l = lane32();
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        uint32_t row0 = shfl32(addr, m * 8 + 2 * (l & 3));
        uint32_t row1 = shfl32(addr, m * 8 + 2 * (l & 3) + 1);
        r[m] = lds_load_u16(row0 + 2 * (l >> 2)) | (lds_load_u16(row1 + 2 * (l >> 2)) << 16);
    }
}

FFPA_DEV void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr)
{
    const int l = lane32();
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        uint32_t row0 = shfl32(addr, m * 8 + 2 * (l & 3));
        uint32_t row1 = shfl32(addr, m * 8 + 2 * (l & 3) + 1);
        r[m] = lds_load_u16(row0 + 2 * (l >> 2)) | (lds_load_u16(row1 + 2 * (l >> 2)) << 16);
    }
}

/* ------------------------------------------------------------------- MMA */

/*
 * D += A B for one logical warp, fp32 FMAs. Lane (g = l/4, q = l%4) owns
 * D rows g, g+8 x columns 2q, 2q+1: it needs A rows g and g+8 (held by lanes
 * 4g..4g+3) and B columns 2q, 2q+1 (lanes 8q..8q+3 and 8q+4..8q+7).
 */
template <typename T> FFPA_DEV void mma_m16n8k16_fma(FragC &d, const FragA &a, const FragB &b)
{
    const int l = lane32(), g = l >> 2, q = l & 3;
    float acc[4] = {d.r[0], d.r[1], d.r[2], d.r[3]};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        /* A row g / g+8, k = 2j..2j+1 (regs 0/1) and 8+2j..8+2j+1 (regs 2/3). */
        const int sa = 4 * g + j;
        uint32_t a_r0 = shfl32(a.r[0], sa), a_r1 = shfl32(a.r[1], sa);
        uint32_t a_r2 = shfl32(a.r[2], sa), a_r3 = shfl32(a.r[3], sa);
        /* B column 2q / 2q+1, same k. */
        const int sb0 = 8 * q + j, sb1 = 8 * q + 4 + j;
        uint32_t b0_lo = shfl32(b.r[0], sb0), b0_hi = shfl32(b.r[1], sb0);
        uint32_t b1_lo = shfl32(b.r[0], sb1), b1_hi = shfl32(b.r[1], sb1);

        float ag[4] = {lo_f32<T>(a_r0), hi_f32<T>(a_r0), lo_f32<T>(a_r2), hi_f32<T>(a_r2)};
        float ag8[4] = {lo_f32<T>(a_r1), hi_f32<T>(a_r1), lo_f32<T>(a_r3), hi_f32<T>(a_r3)};
        float bc0[4] = {lo_f32<T>(b0_lo), hi_f32<T>(b0_lo), lo_f32<T>(b0_hi), hi_f32<T>(b0_hi)};
        float bc1[4] = {lo_f32<T>(b1_lo), hi_f32<T>(b1_lo), lo_f32<T>(b1_hi), hi_f32<T>(b1_hi)};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            acc[0] = fmaf(ag[k], bc0[k], acc[0]);
            acc[1] = fmaf(ag[k], bc1[k], acc[1]);
            acc[2] = fmaf(ag8[k], bc0[k], acc[2]);
            acc[3] = fmaf(ag8[k], bc1[k], acc[3]);
        }
    }
    d.r[0] = acc[0];
    d.r[1] = acc[1];
    d.r[2] = acc[2];
    d.r[3] = acc[3];
}

/* ---------------------------------------------------------------- copies */

/* 16 bytes global -> LDS; src_bytes < 16 zero-fills the rest (0: reads nothing). */
FFPA_DEV void cp_async_16(uint32_t smem_addr, const void *gmem, int src_bytes)
{
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (src_bytes >= 16) {
        v = *static_cast<const uint4 *>(gmem);
    } else if (src_bytes > 0) {
        uint32_t w[4] = {0u, 0u, 0u, 0u};
        const unsigned char *s = static_cast<const unsigned char *>(gmem);
        for (int i = 0; i < src_bytes; ++i)
            w[i >> 2] |= (uint32_t)s[i] << (8 * (i & 3));
        v = make_uint4(w[0], w[1], w[2], w[3]);
    }
    lds_store_16(smem_addr, v);
}

/* 4 bytes global -> LDS; src_bytes 0 writes zero. */
FFPA_DEV void cp_async_4(uint32_t smem_addr, const void *gmem, int src_bytes)
{
    lds_store_u32(smem_addr, src_bytes >= 4 ? *static_cast<const uint32_t *>(gmem) : 0u);
}

/* The copies above complete before they return: nothing to wait for. */
FFPA_DEV void cp_async_commit() {}
template <int n> FFPA_DEV void cp_async_wait() {}
FFPA_DEV void cp_async_wait_dyn(int) {}

/* ------------------------------------------------------------------ math */

/* tanh of logit softcap (the CUDA layer's is one MUFU op). On AMD from one
 * v_exp_f32 and a division: tanhf would call the device library (ocml),
 * which the -nogpulib builds do not link. 1 - 2 / (e^2x + 1) saturates to
 * +-1 at the ends; near 0 its absolute error stays ~1e-7 (relative ~1e-3,
 * harmless once multiplied by the cap). */
FFPA_DEV float tanh_fast(float x)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return tanhf(x);
#else
    return 1.0f - 2.0f / (__builtin_exp2f(2.8853900817779268f * x) + 1.0f);
#endif
}

/* 2^x; exp2(-inf) = 0. A single hardware instruction on AMD (v_exp_f32). */
FFPA_DEV float exp2_fast(float x)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    return exp2f(x);
#else
    return __builtin_exp2f(x);
#endif
}

/* *p += (x, y) in global memory, the result unused (as the CUDA layer's). */
FFPA_DEV void red_add_f32x2(float *p, float x, float y)
{
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
}

/* Reductions across the 4 lanes of a quad (the lanes sharing a C row). */
FFPA_DEV float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor(x, 1, 32));
    x = fmaxf(x, __shfl_xor(x, 2, 32));
    return x;
}

FFPA_DEV float quad_sum(float x)
{
    x += __shfl_xor(x, 1, 32);
    x += __shfl_xor(x, 2, 32);
    return x;
}

/* v of lane ^ mask of the logical warp (every lane takes part). */
FFPA_DEV uint32_t lane_xor_u32(uint32_t v, int mask) { return (uint32_t)__shfl_xor((int)v, mask, 32); }

/* True in every lane when p holds in some lane of the logical warp. */
FFPA_DEV bool warp_any(bool p)
{
    int v = p ? 1 : 0;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v |= __shfl_xor(v, off, 32);
    return v != 0;
}

/* Sum over the 32 lanes of a logical warp, butterfly 16, 8, 4, 2, 1 (width
 * 32: the two logical warps of a wave64 stay apart). */
FFPA_DEV float warp_sum(float x)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        x += __shfl_xor(x, off, 32);
    return x;
}

} /* namespace arch */
} /* namespace ffpa */

#endif
