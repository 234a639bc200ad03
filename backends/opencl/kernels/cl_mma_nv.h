/*
 * The matrix layer of the OpenCL backend on NVIDIA (sm_80 and later): the
 * PTX instructions kernels/fwd_mma.cl is written against, through NVIDIA
 * OpenCL's inline `asm`. Only this file names a vendor instruction; another
 * vendor's matrix path (e.g. cl_intel_subgroup_matrix_multiply_accumulate)
 * would provide the same functions. Compiled only for devices that pass the
 * host's capability check (cl_device.c: NVIDIA platform, compute capability
 * >= 8.0), never on pocl.
 *
 * Fragments are those of mma.sync.m16n8k16 (row.col) with 16-bit inputs of
 * dtype DT (0 f16, 1 bf16) and fp32 accumulators: a lane (g = lane / 4,
 * t = lane % 4) holds C rows g and g + 8, columns 2 t and 2 t + 1.
 *
 * Local memory is addressed as the shared state space's 32-bit offsets
 * (lds_addr): NVIDIA's compiler keeps a __local pointer as that offset.
 */
#ifndef FFPA_OPENCL_CL_MMA_NV_H
#define FFPA_OPENCL_CL_MMA_NV_H

#if DT == 1
#define FFPA_MMA_IN "bf16"
#elif DT == 0
#define FFPA_MMA_IN "f16"
#else
#error "cl_mma_nv.h: 16-bit inputs only (DT 0 or 1)"
#endif

static uint lds_addr(__local const void *p)
{
    return (uint)(size_t)p;
}

/* Four 8 x 8 matrices of 16-bit elements; lane l gives the address of row
 * l % 8 of matrix l / 8. ldsm_x4_trans: each matrix transposed (V's
 * row-major keys as the B operand). */
#define FFPA_LDSM_X4(name, variant)                                                                              \
    static uint4 name(uint addr)                                                                                 \
    {                                                                                                            \
        uint a, b, c, d;                                                                                         \
        asm volatile("ldmatrix.sync.aligned.m8n8.x4" variant ".shared.b16 {%0, %1, %2, %3}, [%4];"              \
                     : "=r"(a), "=r"(b), "=r"(c), "=r"(d)                                                        \
                     : "r"(addr));                                                                               \
        return (uint4)(a, b, c, d);                                                                              \
    }
FFPA_LDSM_X4(ldsm_x4, "")
FFPA_LDSM_X4(ldsm_x4_trans, ".trans")

/* C += A B for one m16n8k16 tile. */
static float4 mma_16816(float4 c, uint4 a, uint b0, uint b1)
{
    float x = c.x, y = c.y, z = c.z, w = c.w;
    asm("mma.sync.aligned.m16n8k16.row.col.f32." FFPA_MMA_IN "." FFPA_MMA_IN
        ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(x), "+f"(y), "+f"(z), "+f"(w)
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
    return (float4)(x, y, z, w);
}

/* Two floats as a 16-bit pair of dtype DT, lo in the low half (round to
 * nearest even). */
static uint pack_pair(float lo, float hi)
{
    uint r;
#if DT == 1
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

/* 16 bytes from global memory into local memory without passing through
 * registers; bytes = 0 writes zeros (rows or columns past the tensor). */
static void copy16_async(uint dst, __global const uchar *src, uint bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

static void copy_async_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until this work-item's copies have all landed. */
static void copy_async_wait_all(void)
{
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* The value of lane (lane ^ mask) of the warp. */
static float shfl_xor(float v, int mask)
{
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
    return r;
}

#endif
