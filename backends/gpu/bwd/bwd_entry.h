/*
 * The backward kernels' host entry points, one set of names for every
 * vendor (gpu_api.h's types): each plugin defines them over its own
 * instantiations (CUDA: bwd_aux.cu, bwd_inst_*.cu; HIP: bwd_aux.hip,
 * bwd_inst_*.hip), and BwdRt hands them to bwd_host.h's launch sequence.
 * Host C++.
 */
#ifndef FFPA_GPU_BWD_ENTRY_H
#define FFPA_GPU_BWD_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "../gpu_rt.h"
#include "bwd_params.h"

namespace ffpa {
namespace bwd {

/* dtype: FFPA_F16 or FFPA_BF16. kernel: a bwd::Kernel (bwd_params.h): kDkdv64,
 * kDkdv32 or kDkdvSmall; kDq or kDqSmall. */
gpuError_t launch_dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, gpuStream_t stream);
gpuError_t launch_dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                     gpuStream_t stream);
/* Delta = rowsum(dO * O) in fp32. */
gpuError_t launch_delta(int dtype, const ffpa_bwd_params &p, gpuStream_t stream);
/* fp32 gradient buffer -> strided output view (ConvertJob: bwd_params.h). */
gpuError_t launch_convert(int dtype, const ConvertJob &job, gpuStream_t stream);
/* fp32 dbias buffer [gb][gh][gn][gk] -> dbias view of dtype out_dtype. */
gpuError_t launch_dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                                const int64_t (&stride)[4], gpuStream_t stream);

/* Per-dtype definitions (bwd_inst_f16, bwd_inst_bf16). */
gpuError_t launch_dkdv_f16(int kernel, const ffpa_bwd_params &p, size_t smem, gpuStream_t stream);
gpuError_t launch_dkdv_bf16(int kernel, const ffpa_bwd_params &p, size_t smem, gpuStream_t stream);
gpuError_t launch_dq_f16(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, gpuStream_t stream);
gpuError_t launch_dq_bf16(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, gpuStream_t stream);

/* The runtime shim of host::run (bwd_host.h). */
struct BwdRt : GpuRt {
    static Error delta(int dtype, const ffpa_bwd_params &p, Stream s) { return launch_delta(dtype, p, s); }
    static Error dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, Stream s)
    {
        return launch_dkdv(dtype, kernel, p, smem, s);
    }
    static Error dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, Stream s)
    {
        return launch_dq(dtype, kernel, p, blocks, smem, s);
    }
    static Error convert(int dtype, const ConvertJob &job, Stream s) { return launch_convert(dtype, job, s); }
    static Error dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                               const int64_t (&stride)[4], Stream s)
    {
        return launch_dbias_convert(acc, grid, out, out_dtype, stride, s);
    }
};

} /* namespace bwd */
} /* namespace ffpa */

#endif
