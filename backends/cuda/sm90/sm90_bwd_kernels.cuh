/*
 * Instantiation layer of the Hopper backward: the __global__ entry point,
 * the instantiated widths and a host descriptor per width. Device code is
 * emitted only in the sm_90a pass (see sm90_fwd_kernels.cuh).
 */
#ifndef FFPA_CUDA_SM90_BWD_KERNELS_CUH
#define FFPA_CUDA_SM90_BWD_KERNELS_CUH

#include <cuda_runtime.h>

#include "sm90_bwd_kernel.cuh"
#include "sm90_launch.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg, bool kExtras>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_bwd_kernel(const __grid_constant__ BwdMaps maps, const ffpa_bwd_params p, const BwdOutViews out)
{
#if FFPA_SM90_DEVICE
    bwd_body<Cfg, kExtras>(maps, p, out);
#endif
}

struct BwdKernelDesc {
    int boxes, cluster; /* max(Dqk, Dv) <= 64 * boxes * cluster */
    size_t smem_bytes;
    const char *name;
    /* launch[0]: plain; launch[1]: with bias and/or dropout. */
    cudaError_t (*launch[2])(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, int64_t ctas,
                             cudaStream_t stream);
};

template <class Cfg, bool kExtras>
cudaError_t bwd_launch(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, int64_t ctas,
                       cudaStream_t stream) /* ctas: work items, one cluster each */
{
    return launch_clusters(sm90_bwd_kernel<Cfg, kExtras>, ctas, Cfg::kCluster, Cfg::kThreads, Cfg::kSmemBytes, stream,
                           maps, p, out);
}

template <class Cfg> constexpr BwdKernelDesc bwd_desc(const char *name)
{
    return BwdKernelDesc{Cfg::kBoxes, Cfg::kCluster, Cfg::kSmemBytes, name,
                         {&bwd_launch<Cfg, false>, &bwd_launch<Cfg, true>}};
}

/* Widths, smallest first (sm90_bwd_launch.cu takes the first that covers D). */
constexpr int kNumBwdShapes = 6;
extern const BwdKernelDesc bwd_f16[kNumBwdShapes], bwd_bf16[kNumBwdShapes];

} /* namespace sm90 */
} /* namespace ffpa */

#endif
