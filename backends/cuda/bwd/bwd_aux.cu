/*
 * The small backward kernels: the preprocess (Delta = rowsum(dO * O) in
 * fp32), the one-time conversions of the fp32 gradient / dbias buffers into
 * the output views, and the dtype dispatch of the big kernels.
 */
#include <cuda_runtime.h>

#include "arch_sm80.cuh"
#include "ffpa.h"

#include "bwd_common.cuh"
#include "bwd_kernels.h"

namespace ffpa {
namespace bwd {

/* One warp per query row; 16-byte loads; fixed shuffle order (deterministic). */
template <typename T> __global__ void __launch_bounds__(256) delta_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + warp, h = blockIdx.y, b = blockIdx.z;
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
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0)
        p.delta[(int64_t)h * p.total_q + (varlen ? g.q_start : (int64_t)b * p.nq) + row] = sum;
}

template <typename T> __global__ void convert_kernel(const ConvertJob job)
{
    const int groups = job.dim / 8;
    const int64_t total = job.heads * job.rows_total * groups;
    const bool vec = job.sd == 1 && ((job.sb | job.sh | job.sn) & 7) == 0 &&
                     (reinterpret_cast<uintptr_t>(job.out) & 15) == 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int g8 = (int)(i % groups);
        const int64_t rest = i / groups, pr = rest % job.rows_total, h = rest / job.rows_total;
        const int64_t b = job.nlen ? pr / job.nlen : 0, n = job.nlen ? pr % job.nlen : pr;
        const float *src = job.acc + (h * job.rows_total + pr) * job.dim + g8 * 8;
        const float4 lo = *reinterpret_cast<const float4 *>(src), hi = *reinterpret_cast<const float4 *>(src + 4);
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

__global__ void dbias_convert_kernel(const float *acc, int64_t gb, int64_t gh, int64_t gn, int64_t gk, void *out,
                                     int dtype, int64_t sb, int64_t sh, int64_t sn, int64_t sd)
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

static unsigned grid_for(int64_t work, int threads)
{
    int64_t blocks = (work + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > 65536 ? 65536 : blocks);
}

cudaError_t launch_delta(int dtype, const ffpa_bwd_params &p, cudaStream_t stream)
{
    dim3 grid((unsigned)((p.nq + 7) / 8), (unsigned)p.hq, (unsigned)p.batch);
    if (p.nq == 0)
        return cudaSuccess;
    if (dtype == FFPA_F16)
        delta_kernel<arch::f16><<<grid, 256, 0, stream>>>(p);
    else
        delta_kernel<arch::bf16><<<grid, 256, 0, stream>>>(p);
    return cudaGetLastError();
}

cudaError_t launch_convert(int dtype, const ConvertJob &job, cudaStream_t stream)
{
    const int64_t work = job.heads * job.rows_total * (job.dim / 8);
    if (work == 0)
        return cudaSuccess;
    if (dtype == FFPA_F16)
        convert_kernel<arch::f16><<<grid_for(work, 256), 256, 0, stream>>>(job);
    else
        convert_kernel<arch::bf16><<<grid_for(work, 256), 256, 0, stream>>>(job);
    return cudaGetLastError();
}

cudaError_t launch_dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                                 const int64_t (&stride)[4], cudaStream_t stream)
{
    const int64_t work = grid[0] * grid[1] * grid[2] * grid[3];
    if (work == 0)
        return cudaSuccess;
    dbias_convert_kernel<<<grid_for(work, 256), 256, 0, stream>>>(acc, grid[0], grid[1], grid[2], grid[3], out,
                                                                 out_dtype, stride[0], stride[1], stride[2],
                                                                 stride[3]);
    return cudaGetLastError();
}

cudaError_t launch_dkdv(int dtype, int bc, const ffpa_bwd_params &p, size_t smem, cudaStream_t stream)
{
    return dtype == FFPA_F16 ? launch_dkdv_f16(bc, p, smem, stream) : launch_dkdv_bf16(bc, p, smem, stream);
}

cudaError_t launch_dq(int dtype, const ffpa_bwd_params &p, int64_t blocks, size_t smem, cudaStream_t stream)
{
    return dtype == FFPA_F16 ? launch_dq_f16(p, blocks, smem, stream) : launch_dq_bf16(p, blocks, smem, stream);
}

cudaError_t kernel_attributes(int dtype, int which, cudaFuncAttributes *attr)
{
    return dtype == FFPA_F16 ? attr_f16(which, attr) : attr_bf16(which, attr);
}

} /* namespace bwd */
} /* namespace ffpa */
