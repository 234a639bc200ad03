/*
 * Host-side entry points of the backward kernels (C++, CUDA runtime types
 * only): bwd_launch.cu calls these; bwd_inst_*.cu and bwd_aux.cu define them.
 */
#ifndef FFPA_CUDA_BWD_KERNELS_H
#define FFPA_CUDA_BWD_KERNELS_H

#include <cuda_runtime_api.h>

#include "bwd/bwd_params.h"

namespace ffpa {
namespace bwd {

/* dtype: FFPA_F16 or FFPA_BF16. kernel: a bwd::Kernel (bwd_params.h): kDkdv64,
 * kDkdv32 or kDkdvSmall; kDq or kDqSmall. */
cudaError_t launch_dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, cudaStream_t stream);
cudaError_t launch_dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                      cudaStream_t stream);

/* Delta = rowsum(dO * O) in fp32. */
cudaError_t launch_delta(int dtype, const ffpa_bwd_params &p, cudaStream_t stream);

/* fp32 gradient buffer -> strided output view (ConvertJob: bwd_params.h). */
cudaError_t launch_convert(int dtype, const ConvertJob &job, cudaStream_t stream);

/* fp32 dbias buffer [gb][gh][gn][gk] -> dbias view of dtype out_dtype. */
cudaError_t launch_dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                                 const int64_t (&stride)[4], cudaStream_t stream);

/* Registers / spills of kernel `which` (a bwd::Kernel). */
cudaError_t kernel_attributes(int dtype, int which, cudaFuncAttributes *attr);

/* Per-dtype definitions (bwd_inst_f16.cu, bwd_inst_bf16.cu). */
cudaError_t launch_dkdv_f16(int kernel, const ffpa_bwd_params &p, size_t smem, cudaStream_t stream);
cudaError_t launch_dkdv_bf16(int kernel, const ffpa_bwd_params &p, size_t smem, cudaStream_t stream);
cudaError_t launch_dq_f16(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, cudaStream_t stream);
cudaError_t launch_dq_bf16(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, cudaStream_t stream);
cudaError_t attr_f16(int which, cudaFuncAttributes *attr);
cudaError_t attr_bf16(int which, cudaFuncAttributes *attr);

} /* namespace bwd */
} /* namespace ffpa */

#endif
