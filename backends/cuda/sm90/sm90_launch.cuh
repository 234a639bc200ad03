/*
 * Host side of the Hopper kernels' launch, shared by the forward and the
 * backward instantiation layers: the opt-in shared memory and a launch in
 * thread-block clusters (cudaLaunchKernelEx with a cluster dimension).
 */
#ifndef FFPA_CUDA_SM90_LAUNCH_CUH
#define FFPA_CUDA_SM90_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <utility>

namespace ffpa {
namespace sm90 {

/* kernel on clusters x cluster CTAs of `threads` threads with `smem` bytes of
 * dynamic shared memory each, in clusters of `cluster` along x. */
template <typename... Params, typename... Args>
cudaError_t launch_clusters(void (*kernel)(Params...), int64_t clusters, int cluster, int threads, size_t smem,
                            cudaStream_t stream, Args &&...args)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(clusters * cluster), 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
