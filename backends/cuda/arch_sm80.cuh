/*
 * The thin architecture layer of the generic CUDA path (sm_80 and later:
 * Ampere, Ada, Hopper, Blackwell all execute these instructions).
 *
 * Everything vendor-specific the kernels need lives here and nowhere else:
 * the m16n8k16 tensor-core MMA, ldmatrix, cp.async with zero-fill, the
 * fragment types, fast exp2 and half2 packing. The vendor-neutral tiling in
 * backends/gpu/ only calls these names, so a HIP port supplies its own
 * arch_*.h with the same API (MFMA, ds_read, global_load) and reuses the rest.
 *
 * Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16", lane =
 * threadIdx.x % 32, group = lane / 4, quad = lane % 4):
 *   FragA (16x16, row-major A): a[0] = (row group,     k 2*quad..+1)
 *                               a[1] = (row group + 8, k 2*quad..+1)
 *                               a[2] = (row group,     k 2*quad+8..+9)
 *                               a[3] = (row group + 8, k 2*quad+8..+9)
 *   FragB (16x8, "col-major" B, i.e. B^T rows): b[0] = (k 2*quad..+1, n group)
 *                                               b[1] = (k 2*quad+8..+9, n group)
 *   FragC (16x8 fp32):  c[0], c[1] = (row group,     n 2*quad, 2*quad+1)
 *                       c[2], c[3] = (row group + 8, n 2*quad, 2*quad+1)
 * A FragC pair of two adjacent n-blocks converted with pack_f32x2 is exactly
 * a FragA of the next MMA (the P-in-registers trick of FlashAttention-2).
 */
#ifndef FFPA_CUDA_ARCH_SM80_CUH
#define FFPA_CUDA_ARCH_SM80_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "../gpu/arch_fragments.cuh"

namespace ffpa {
namespace arch {

/* ---------------------------------------------------------------- types */

/* Element type tags: the kernels template on these. */
using f16 = __half;
using bf16 = __nv_bfloat16;

/* Stops the kernel with an error the launch reports (code that must not run). */
FFPA_DEV void trap() { __trap(); }

/* ------------------------------------------------------------- addresses */

/* 32-bit shared-memory address for ldmatrix / cp.async operands. */
FFPA_DEV uint32_t smem_u32(const void *ptr)
{
    return (uint32_t)__cvta_generic_to_shared(ptr);
}

/* ------------------------------------------------------------------- MMA */

/* D = A * B + D, fp32 accumulate. */
template <typename T> FFPA_DEV void mma_m16n8k16(FragC &d, const FragA &a, const FragB &b);

template <> FFPA_DEV void mma_m16n8k16<f16>(FragC &d, const FragA &a, const FragB &b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

template <> FFPA_DEV void mma_m16n8k16<bf16>(FragC &d, const FragA &a, const FragB &b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

/* --------------------------------------------------------------- ldmatrix */
/*
 * Each lane passes the shared address of one 16-byte row (8 elements):
 * lanes 0-7 address matrix 0, 8-15 matrix 1, 16-23 matrix 2, 24-31 matrix 3
 * (x2: lanes 0-15 used, the others' addresses ignored but must be valid).
 * Non-trans gives the A/B fragment of a row-major tile; trans gives the B
 * fragment of a tile stored k-major (V in PV: V rows are k).
 */
FFPA_DEV void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

FFPA_DEV void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

FFPA_DEV void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

FFPA_DEV void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

/* ---------------------------------------------------------------- cp.async */

/*
 * Copies 16 bytes global -> shared, bypassing L1 (.cg). src_bytes < 16
 * zero-fills the rest; src_bytes == 0 reads nothing and writes 16 zero bytes
 * (out-of-bounds rows: pass any valid pointer, e.g. the tensor base).
 */
FFPA_DEV void cp_async_16(uint32_t smem_addr, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
                 "r"(src_bytes));
}

/* 4 bytes global -> shared through L1 (.ca: .cg copies only 16); src_bytes
 * 0 reads nothing and writes zero (rows past the sequence: any valid pointer). */
FFPA_DEV void cp_async_4(uint32_t smem_addr, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes));
}

/* Closes the group of cp.async issued since the last commit. */
FFPA_DEV void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits until at most n committed groups are still in flight. */
template <int n> FFPA_DEV void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}

/* Same with a run-time depth (pipeline depth chosen by the planner). */
FFPA_DEV void cp_async_wait_dyn(int n)
{
    if (n <= 0)
        cp_async_wait<0>();
    else if (n == 1)
        cp_async_wait<1>();
    else
        cp_async_wait<2>();
}

/* ----------------------------------------------------------- conversions */

/* Two floats -> one 32-bit register of two T (lo = a, hi = b), RNE. */
template <typename T> FFPA_DEV uint32_t pack_f32x2(float a, float b);

template <> FFPA_DEV uint32_t pack_f32x2<f16>(float a, float b)
{
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

template <> FFPA_DEV uint32_t pack_f32x2<bf16>(float a, float b)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* One 32-bit register of two T -> two floats (lo, hi), exact. */
template <typename T> FFPA_DEV float2 unpack_f32x2(uint32_t w);

template <> FFPA_DEV float2 unpack_f32x2<f16>(uint32_t w)
{
    __half2 h = *reinterpret_cast<__half2 *>(&w);
    return __half22float2(h);
}

/* A bf16 is a float's high half: a shift and a mask, no conversion. */
template <> FFPA_DEV float2 unpack_f32x2<bf16>(uint32_t w)
{
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

template <typename T> FFPA_DEV float to_f32(T x);
template <> FFPA_DEV float to_f32<f16>(f16 x) { return __half2float(x); }
template <> FFPA_DEV float to_f32<bf16>(bf16 x) { return __bfloat162float(x); }

template <typename T> FFPA_DEV T from_f32(float x);
template <> FFPA_DEV f16 from_f32<f16>(float x) { return __float2half_rn(x); }
template <> FFPA_DEV bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }

/* --------------------------------------------------------------- math */

/* 2^x with one MUFU op; exp2(-inf) = 0. */
FFPA_DEV float exp2_fast(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* tanh with one MUFU op (sm_75+; max relative error 2^-10.99): logit
 * softcap's cost per score must stay near the softmax's one exp2. */
FFPA_DEV float tanh_fast(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Reductions across the 4 lanes of a quad (the lanes sharing a C row). */
FFPA_DEV float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}

FFPA_DEV float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

/* v of lane ^ mask (every lane of the warp takes part). */
FFPA_DEV uint32_t lane_xor_u32(uint32_t v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

/* True in every lane when p holds in some lane of the warp. */
FFPA_DEV bool warp_any(bool p) { return __any_sync(0xffffffffu, p); }

/* *p += (x, y) in global memory, the result unused (a RED, not an atomic
 * round trip); p 8-byte aligned. sm_90 adds the pair in one vector
 * reduction; sm_80-89 in two. */
FFPA_DEV void red_add_f32x2(float *p, float x, float y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(p), make_float2(x, y));
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}

/* Sum over the 32 lanes of a warp, butterfly 16, 8, 4, 2, 1 (fixed order). */
FFPA_DEV float warp_sum(float x)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

} /* namespace arch */
} /* namespace ffpa */

#endif
