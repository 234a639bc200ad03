/*
 * CUDA entry points of the small backward kernels (bodies in
 * backends/gpu/bwd/bwd_aux.cuh: Delta = rowsum(dO * O), the fp32 -> output
 * conversions) and the dtype dispatch of the big kernels.
 */
#include <cuda_runtime.h>

#include "arch_sm80.cuh"
#include "ffpa.h"

#include "bwd/bwd_aux.cuh"
#include "bwd_kernels.h"

namespace ffpa {
namespace bwd {

template <typename T>
__global__ void __launch_bounds__(kAuxThreads) delta_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    delta_body<T>(p);
}

template <typename T> __global__ void convert_kernel(const ConvertJob job)
{
    convert_body<T>(job);
}

__global__ void dbias_convert_kernel(const float *acc, int64_t gb, int64_t gh, int64_t gn, int64_t gk, void *out,
                                     int dtype, int64_t sb, int64_t sh, int64_t sn, int64_t sd)
{
    dbias_convert_body(acc, gb, gh, gn, gk, out, dtype, sb, sh, sn, sd);
}

cudaError_t launch_delta(int dtype, const ffpa_bwd_params &p, cudaStream_t stream)
{
    unsigned g[3];
    delta_grid(p, g);
    if (p.nq == 0)
        return cudaSuccess;
    if (dtype == FFPA_F16)
        delta_kernel<arch::f16><<<dim3(g[0], g[1], g[2]), kAuxThreads, 0, stream>>>(p);
    else
        delta_kernel<arch::bf16><<<dim3(g[0], g[1], g[2]), kAuxThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

cudaError_t launch_convert(int dtype, const ConvertJob &job, cudaStream_t stream)
{
    const int64_t work = job.heads * job.rows_total * (job.dim / 8);
    if (work == 0)
        return cudaSuccess;
    if (dtype == FFPA_F16)
        convert_kernel<arch::f16><<<aux_blocks(work, kAuxThreads), kAuxThreads, 0, stream>>>(job);
    else
        convert_kernel<arch::bf16><<<aux_blocks(work, kAuxThreads), kAuxThreads, 0, stream>>>(job);
    return cudaGetLastError();
}

cudaError_t launch_dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                                 const int64_t (&stride)[4], cudaStream_t stream)
{
    const int64_t work = grid[0] * grid[1] * grid[2] * grid[3];
    if (work == 0)
        return cudaSuccess;
    dbias_convert_kernel<<<aux_blocks(work, kAuxThreads), kAuxThreads, 0, stream>>>(
        acc, grid[0], grid[1], grid[2], grid[3], out, out_dtype, stride[0], stride[1], stride[2], stride[3]);
    return cudaGetLastError();
}

cudaError_t launch_dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, cudaStream_t stream)
{
    return dtype == FFPA_F16 ? launch_dkdv_f16(kernel, p, smem, stream) : launch_dkdv_bf16(kernel, p, smem, stream);
}

cudaError_t launch_dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                      cudaStream_t stream)
{
    return dtype == FFPA_F16 ? launch_dq_f16(kernel, p, blocks, smem, stream)
                             : launch_dq_bf16(kernel, p, blocks, smem, stream);
}

cudaError_t kernel_attributes(int dtype, int which, cudaFuncAttributes *attr)
{
    return dtype == FFPA_F16 ? attr_f16(which, attr) : attr_bf16(which, attr);
}

} /* namespace bwd */
} /* namespace ffpa */
