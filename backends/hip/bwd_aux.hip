/*
 * HIP entry points of the small backward kernels (bodies in
 * backends/gpu/bwd/bwd_aux.cuh: Delta = rowsum(dO * O), the fp32 -> output
 * conversions) and the dtype dispatch of the big kernels.
 */
#include "hip_port.h"

#include "arch_hip.h"
#include "ffpa.h"

#include "bwd/bwd_aux.cuh"
#include "bwd_kernels_hip.h"

namespace ffpa {
namespace bwd {

template <typename T> __global__ void __launch_bounds__(bwd::kAuxThreads) bwd_delta_kernel(const ffpa_bwd_params p)
{
    bwd::delta_body<T>(p);
}

template <typename T> __global__ void __launch_bounds__(bwd::kAuxThreads) bwd_convert_kernel(const ConvertJob job)
{
    bwd::convert_body<T>(job);
}

__global__ void __launch_bounds__(bwd::kAuxThreads)
    bwd_dbias_convert_kernel(const float *acc, int64_t gb, int64_t gh, int64_t gn, int64_t gk, void *out, int dtype,
                             int64_t sb, int64_t sh, int64_t sn, int64_t sd)
{
    bwd::dbias_convert_body(acc, gb, gh, gn, gk, out, dtype, sb, sh, sn, sd);
}

hipError_t launch_delta(int dtype, const ffpa_bwd_params &p, hipStream_t stream)
{
    unsigned g[3];
    bwd::delta_grid(p, g);
    if (p.nq == 0)
        return hipSuccess;
    const dim3 grid(g[0], g[1], g[2]), block(bwd::kAuxThreads);
    if (dtype == FFPA_F16)
        bwd_delta_kernel<arch::f16><<<grid, block, 0, stream>>>(p);
    else
        bwd_delta_kernel<arch::bf16><<<grid, block, 0, stream>>>(p);
    return hipGetLastError();
}

hipError_t launch_convert(int dtype, const ConvertJob &job, hipStream_t stream)
{
    const int64_t work = job.heads * job.rows_total * (job.dim / 8);
    if (work == 0)
        return hipSuccess;
    const dim3 grid(bwd::aux_blocks(work, bwd::kAuxThreads)), block(bwd::kAuxThreads);
    if (dtype == FFPA_F16)
        bwd_convert_kernel<arch::f16><<<grid, block, 0, stream>>>(job);
    else
        bwd_convert_kernel<arch::bf16><<<grid, block, 0, stream>>>(job);
    return hipGetLastError();
}

hipError_t launch_dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                                    const int64_t (&stride)[4], hipStream_t stream)
{
    const int64_t work = grid[0] * grid[1] * grid[2] * grid[3];
    if (work == 0)
        return hipSuccess;
    bwd_dbias_convert_kernel<<<dim3(bwd::aux_blocks(work, bwd::kAuxThreads)), dim3(bwd::kAuxThreads), 0, stream>>>(
        acc, grid[0], grid[1], grid[2], grid[3], out, out_dtype, stride[0], stride[1], stride[2], stride[3]);
    return hipGetLastError();
}

hipError_t launch_dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, hipStream_t stream)
{
    return dtype == FFPA_F16 ? launch_dkdv_f16(kernel, p, smem, stream)
                             : launch_dkdv_bf16(kernel, p, smem, stream);
}

hipError_t launch_dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                         hipStream_t stream)
{
    return dtype == FFPA_F16 ? launch_dq_f16(kernel, p, blocks, smem, stream)
                             : launch_dq_bf16(kernel, p, blocks, smem, stream);
}

} /* namespace bwd */
} /* namespace ffpa */
