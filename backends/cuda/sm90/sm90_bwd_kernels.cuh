/*
 * Instantiation layer of the Hopper backward: the __global__ entry point,
 * the instantiated widths and a host descriptor per width. Device code is
 * emitted only in the sm_90a pass (see sm90_fwd_kernels.cuh).
 */
#ifndef FFPA_CUDA_SM90_BWD_KERNELS_CUH
#define FFPA_CUDA_SM90_BWD_KERNELS_CUH

#include <cuda_runtime.h>

#include "sm90_bwd_kernel.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_bwd_kernel(const __grid_constant__ BwdMaps maps, const ffpa_bwd_params p, const BwdOutViews out)
{
#if FFPA_SM90_DEVICE
    bwd_body<Cfg>(maps, p, out);
#endif
}

struct BwdKernelDesc {
    int boxes; /* 64-column boxes covered: max(Dqk, Dv) <= 64 * boxes */
    size_t smem_bytes;
    const char *name;
    cudaError_t (*launch)(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, int64_t ctas,
                          cudaStream_t stream);
};

template <class Cfg>
cudaError_t bwd_launch(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, int64_t ctas,
                       cudaStream_t stream)
{
    auto kernel = sm90_bwd_kernel<Cfg>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Cfg::kSmemBytes);
    if (e != cudaSuccess)
        return e;
    kernel<<<(unsigned)ctas, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(maps, p, out);
    return cudaGetLastError();
}

template <class Cfg> constexpr BwdKernelDesc bwd_desc(const char *name)
{
    return BwdKernelDesc{Cfg::kBoxes, Cfg::kSmemBytes, name, &bwd_launch<Cfg>};
}

/* Widths, smallest first (sm90_bwd_launch.cu takes the first that covers D). */
constexpr int kNumBwdShapes = 4;
extern const BwdKernelDesc bwd_f16[kNumBwdShapes], bwd_bf16[kNumBwdShapes];

} /* namespace sm90 */
} /* namespace ffpa */

#endif
