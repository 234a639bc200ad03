/*
 * Bodies of the small backward kernels, vendor-neutral: the preprocess
 * Delta = rowsum(dO * O) in fp32, and the one-time conversions of the fp32
 * gradient / dbias buffers into the output views. The backends wrap them in
 * __global__ entry points (backends/cuda/bwd/bwd_aux.cu, backends/hip/
 * bwd_aux.hip) launched with kAuxThreads threads on the grids below.
 * Requires the arch layer (ffpa::arch) to be included first.
 */
#ifndef FFPA_GPU_BWD_AUX_CUH
#define FFPA_GPU_BWD_AUX_CUH

#include "ffpa.h"

#include "bwd_common.cuh"

namespace ffpa {
namespace bwd {

constexpr int kAuxThreads = 256;
constexpr int kDeltaRowsPerBlock = kAuxThreads / 32; /* one logical warp per row */

/* Grid of the delta kernel: (row blocks, query heads, batch). */
inline void delta_grid(const ffpa_bwd_params &p, unsigned (&grid)[3])
{
    grid[0] = (unsigned)((p.nq + kDeltaRowsPerBlock - 1) / kDeltaRowsPerBlock);
    grid[1] = (unsigned)p.hq;
    grid[2] = (unsigned)p.batch;
}

/* Blocks of a grid-stride kernel over `work` items (1 .. 65536). */
inline unsigned aux_blocks(int64_t work, int threads)
{
    int64_t blocks = (work + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > 65536 ? 65536 : blocks);
}

/* One warp per query row; 16-byte loads; fixed shuffle order (deterministic). */
template <typename T> __device__ __forceinline__ void delta_body(const ffpa_bwd_params &p)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * kDeltaRowsPerBlock + warp, h = blockIdx.y, b = blockIdx.z;
    const SeqGeom g = seq_geom(p, b);
    if (row >= g.seqlen_q)
        return;
    const bool varlen = p.cu_q != nullptr;
    const T *o = static_cast<const T *>(p.o) + row0_offset(p.o_sb, p.o_sh, p.o_sn, g.q_start, varlen, b, h) +
                 (int64_t)row * p.o_sn;
    const T *d = static_cast<const T *>(p.dout) + row0_offset(p.do_sb, p.do_sh, p.do_sn, g.q_start, varlen, b, h) +
                 (int64_t)row * p.do_sn;
    float sum = 0.f;
    for (int c = lane * 8; c < p.dv; c += 256) {
        uint4 ov = *reinterpret_cast<const uint4 *>(o + c), dv = *reinterpret_cast<const uint4 *>(d + c);
        const T *oe = reinterpret_cast<const T *>(&ov), *de = reinterpret_cast<const T *>(&dv);
#pragma unroll
        for (int e = 0; e < 8; ++e)
            sum += arch::to_f32<T>(oe[e]) * arch::to_f32<T>(de[e]);
    }
    sum = arch::warp_sum(sum);
    if (lane == 0)
        p.delta[(int64_t)h * p.total_q + (varlen ? g.q_start : (int64_t)b * p.nq) + row] = sum;
}

/* fp32 gradient buffer -> output view of dtype T; grid-stride over 8-column
 * groups. acc NULL: zeros (an output the kernels then accumulate into). */
template <typename T> __device__ __forceinline__ void convert_body(const ConvertJob &job)
{
    const int groups = job.dim / 8;
    const int64_t total = job.heads * job.rows_total * groups;
    const bool vec = job.sd == 1 && ((job.sb | job.sh | job.sn) & 7) == 0 &&
                     (reinterpret_cast<uintptr_t>(job.out) & 15) == 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int g8 = (int)(i % groups);
        const int64_t rest = i / groups, pr = rest % job.rows_total, h = rest / job.rows_total;
        const int64_t b = job.nlen ? pr / job.nlen : 0, n = job.nlen ? pr % job.nlen : pr;
        float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
        if (job.acc) {
            const float *src = job.acc + (h * job.rows_total + pr) * job.dim + g8 * 8;
            lo = *reinterpret_cast<const float4 *>(src);
            hi = *reinterpret_cast<const float4 *>(src + 4);
        }
        T *dst = static_cast<T *>(job.out) + b * job.sb + h * job.sh + n * job.sn + (int64_t)g8 * 8 * job.sd;
        if (vec) {
            uint4 u;
            u.x = arch::pack_f32x2<T>(lo.x, lo.y);
            u.y = arch::pack_f32x2<T>(lo.z, lo.w);
            u.z = arch::pack_f32x2<T>(hi.x, hi.y);
            u.w = arch::pack_f32x2<T>(hi.z, hi.w);
            *reinterpret_cast<uint4 *>(dst) = u;
        } else {
            const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int e = 0; e < 8; ++e)
                dst[e * job.sd] = arch::from_f32<T>(v[e]);
        }
    }
}

/* fp32 dbias buffer [gb][gh][gn][gk] -> dbias view of `dtype` (f32/f16/bf16). */
__device__ __forceinline__ void dbias_convert_body(const float *acc, int64_t gb, int64_t gh, int64_t gn, int64_t gk,
                                                   void *out, int dtype, int64_t sb, int64_t sh, int64_t sn,
                                                   int64_t sd)
{
    const int64_t total = gb * gh * gn * gk;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i % gk, n = (i / gk) % gn, h = (i / (gk * gn)) % gh, b = i / (gk * gn * gh);
        const int64_t off = b * sb + h * sh + n * sn + k * sd;
        const float v = acc[i];
        if (dtype == FFPA_F32)
            static_cast<float *>(out)[off] = v;
        else if (dtype == FFPA_F16)
            static_cast<arch::f16 *>(out)[off] = arch::from_f32<arch::f16>(v);
        else
            static_cast<arch::bf16 *>(out)[off] = arch::from_f32<arch::bf16>(v);
    }
}

} /* namespace bwd */
} /* namespace ffpa */

#endif
