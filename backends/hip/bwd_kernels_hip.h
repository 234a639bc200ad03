/*
 * Host-side entry points of the HIP backward kernels (HIP runtime types):
 * bwd_launch.hip calls these; bwd_inst_*.hip and bwd_aux.hip define them.
 * The kernel bodies are backends/gpu/bwd/, compiled with arch_hip.h.
 */
#ifndef FFPA_HIP_BWD_KERNELS_H
#define FFPA_HIP_BWD_KERNELS_H

#include "hip_port.h"

#include "bwd/bwd_params.h"

namespace ffpa {
namespace hip {

using bwd::ConvertJob;

/* dtype: FFPA_F16 or FFPA_BF16. kernel: a bwd::Kernel (bwd_params.h): kDkdv64,
 * kDkdv32 or kDkdvSmall; kDq or kDqSmall. */
hipError_t bwd_launch_dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, hipStream_t stream);
hipError_t bwd_launch_dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                         hipStream_t stream);
hipError_t bwd_launch_delta(int dtype, const ffpa_bwd_params &p, hipStream_t stream);
hipError_t bwd_launch_convert(int dtype, const ConvertJob &job, hipStream_t stream);
hipError_t bwd_launch_dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                                    const int64_t (&stride)[4], hipStream_t stream);

/* Per-dtype definitions (bwd_inst_f16.hip, bwd_inst_bf16.hip). */
hipError_t bwd_launch_dkdv_f16(int kernel, const ffpa_bwd_params &p, size_t smem, hipStream_t stream);
hipError_t bwd_launch_dkdv_bf16(int kernel, const ffpa_bwd_params &p, size_t smem, hipStream_t stream);
hipError_t bwd_launch_dq_f16(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, hipStream_t stream);
hipError_t bwd_launch_dq_bf16(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                              hipStream_t stream);

} /* namespace hip */
} /* namespace ffpa */

#endif
