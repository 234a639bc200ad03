/*
 * The matrix layer of cl_mma_nv.h in portable OpenCL C, for testing only:
 * the same functions with the same fragment layouts (mma.sync m16n8k16
 * row.col, ldmatrix .x4 and .trans, a warp's shuffle), so that
 * kernels/fwd_mma.cl's own logic (tiles, masks, the paged KV cache, packed
 * heads, splits) runs and is checked on any OpenCL device, pocl in CI
 * included. A "warp" is 32 consecutive work-items; lanes exchange their
 * fragments through local memory (ffpa_mma_scratch, declared at kernel
 * scope by FFPA_MMA_SCRATCH) between two barriers, so every one of these
 * calls must be reached by the whole work-group, as fwd_mma.cl's are.
 * Copies are synchronous. Slow by design; never chosen unless asked for
 * (FFPA_OPENCL_MMA_EMULATE=1, backends/opencl/fwd_launch_cl.c).
 */
#ifndef FFPA_OPENCL_CL_MMA_EMU_H
#define FFPA_OPENCL_CL_MMA_EMU_H

#if DT != 0 && DT != 1
#error "cl_mma_emu.h: 16-bit inputs only (DT 0 or 1)"
#endif

/* Per warp: 32 lanes x 6 words (an MMA's A and B fragments; ldmatrix's
 * 16-byte rows take four). */
#define FFPA_MMA_WORDS 6
#define FFPA_MMA_SCRATCH __local uint ffpa_mma_scratch[(WG / 32) * 32 * FFPA_MMA_WORDS]

/* A local-memory address, as cl_mma_nv.h's shared-space offset. */
static __local uchar *lds_addr(__local const void *p)
{
    return (__local uchar *)p;
}

static __local uint *mma_lane_words(__local uint *scratch)
{
    const int tid = (int)get_local_id(0);
    return scratch + ((tid >> 5) * 32 + (tid & 31)) * FFPA_MMA_WORDS;
}

static __local uint *mma_warp_words(__local uint *scratch)
{
    return scratch + ((int)get_local_id(0) >> 5) * 32 * FFPA_MMA_WORDS;
}

/* 16-bit element (bits) -> float; float -> 16-bit bits (round to nearest even). */
static float mma_in(uint bits)
{
#if DT == 1
    return as_float(bits << 16);
#else
    return vload_half(0, (const __private half *)&bits);
#endif
}

static uint mma_out(float x)
{
#if DT == 1
    const uint u = as_uint(x);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
#else
    ushort h[2];
    vstore_half_rte(x, 0, (__private half *)h);
    return h[0];
#endif
}

static uint pack_pair(float lo, float hi)
{
    return mma_out(lo) | (mma_out(hi) << 16);
}

/* 16-bit element c (0-7) of the 16-byte row lane l gave. */
static uint mma_row_elem(__local uint *warp, int l, int c)
{
    const uint word = warp[l * FFPA_MMA_WORDS + (c >> 1)];
    return c & 1 ? word >> 16 : word & 0xffffu;
}

/* Each lane gives the 16-byte row at its address (row l % 8 of matrix
 * l / 8) and takes its fragment of the four matrices, transposed or not. */
static uint4 ldsm_emulated(__local uint *scratch, __local const uchar *addr, int trans)
{
    __local uint *mine = mma_lane_words(scratch), *warp = mma_warp_words(scratch);
    const uint4 row = vload4(0, (__local const uint *)addr);
    mine[0] = row.x;
    mine[1] = row.y;
    mine[2] = row.z;
    mine[3] = row.w;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int lane = (int)get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
#define FFPA_LDSM_PART(m)                                                                                       \
    (trans ? mma_row_elem(warp, 8 * (m) + 2 * t, g) | (mma_row_elem(warp, 8 * (m) + 2 * t + 1, g) << 16)          \
           : mma_row_elem(warp, 8 * (m) + g, 2 * t) | (mma_row_elem(warp, 8 * (m) + g, 2 * t + 1) << 16))
    const uint4 r = (uint4)(FFPA_LDSM_PART(0), FFPA_LDSM_PART(1), FFPA_LDSM_PART(2), FFPA_LDSM_PART(3));
#undef FFPA_LDSM_PART
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

#define ldsm_x4(addr) ldsm_emulated(ffpa_mma_scratch, (addr), 0)
#define ldsm_x4_trans(addr) ldsm_emulated(ffpa_mma_scratch, (addr), 1)

/* The 16-bit half `hi` of word w of lane l's fragment. */
static float mma_frag(__local uint *warp, int l, int w, int hi)
{
    const uint word = warp[l * FFPA_MMA_WORDS + w];
    return mma_in(hi ? word >> 16 : word & 0xffffu);
}

/* C += A B: A 16 x 16 (a.x rows g cols 2t.., a.y rows g + 8, a.z / a.w the
 * same at k + 8), B 16 x 8 (b0 k 2t.. col g, b1 k + 8), C rows g, g + 8,
 * cols 2t, 2t + 1. */
static float4 mma_emulated(__local uint *scratch, float4 c, uint4 a, uint b0, uint b1)
{
    __local uint *mine = mma_lane_words(scratch), *warp = mma_warp_words(scratch);
    mine[0] = a.x;
    mine[1] = a.y;
    mine[2] = a.z;
    mine[3] = a.w;
    mine[4] = b0;
    mine[5] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int lane = (int)get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    float4 acc = c;
    for (int k = 0; k < 16; ++k) {
        const int kl = (k & 7) >> 1, hi = k & 1, upper = k >= 8;
        const float a_lo = mma_frag(warp, g * 4 + kl, upper ? 2 : 0, hi);     /* A[g][k] */
        const float a_hi = mma_frag(warp, g * 4 + kl, upper ? 3 : 1, hi);     /* A[g + 8][k] */
        const float b_0 = mma_frag(warp, (2 * t) * 4 + kl, upper ? 5 : 4, hi); /* B[k][2t] */
        const float b_1 = mma_frag(warp, (2 * t + 1) * 4 + kl, upper ? 5 : 4, hi);
        acc.x = fma(a_lo, b_0, acc.x);
        acc.y = fma(a_lo, b_1, acc.y);
        acc.z = fma(a_hi, b_0, acc.z);
        acc.w = fma(a_hi, b_1, acc.w);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return acc;
}

#define mma_16816(c, a, b0, b1) mma_emulated(ffpa_mma_scratch, (c), (a), (b0), (b1))

static float shfl_emulated(__local uint *scratch, float v, int mask)
{
    __local uint *mine = mma_lane_words(scratch), *warp = mma_warp_words(scratch);
    mine[0] = as_uint(v);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float r = as_float(warp[(((int)get_local_id(0) & 31) ^ mask) * FFPA_MMA_WORDS]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

#define shfl_xor(v, mask) shfl_emulated(ffpa_mma_scratch, (v), (mask))

/* 16 bytes, or zeros where bytes is 0 (the zero-fill of cp.async). */
static void copy16_async(__local uchar *dst, __global const uchar *src, uint bytes)
{
    vstore4(bytes ? vload4(0, (__global const uint *)src) : (uint4)(0), 0, (__local uint *)dst);
}

static void copy_async_commit(void)
{
}

static void copy_async_wait_all(void)
{
}

#endif
