/*
 * The one kernel launch every GPU backend's instantiation layer uses: a
 * 1-3-D grid with dynamic shared memory, opted in above the default limit.
 * Compiled by nvcc or hip-clang (kernel launch syntax).
 */
#ifndef FFPA_GPU_LAUNCH_CUH
#define FFPA_GPU_LAUNCH_CUH

#include <stddef.h>

#include "gpu_api.h"

#if defined(FFPA_CUDA_PLUGIN)
/* FFPA_CUDA_AS_ARCH (runtime_cuda.c): the emulated part's shared memory per
 * SM as a percentage of this device's, or -1. */
extern "C" int ffpa_cuda_carveout_percent;
#endif

namespace ffpa {

/* kernel(p) on `grid` with `smem` bytes of dynamic shared memory. */
template <class Params, class Kernel>
gpuError_t launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t smem, gpuStream_t stream, const Params &p)
{
#if !defined(__HIP_PLATFORM_AMD__)
    /* Above 48 KiB of dynamic shared memory NVIDIA parts want an opt-in. */
    gpuError_t e = gpuFuncSetAttribute(kernel, gpuFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != gpuSuccess)
        return e;
#endif
#if defined(FFPA_CUDA_PLUGIN)
    /* Playing a smaller part (FFPA_CUDA_AS_ARCH): its shared memory per SM
     * as the carveout, so an SM holds the blocks it would hold there. */
    const int carveout = __atomic_load_n(&ffpa_cuda_carveout_percent, __ATOMIC_RELAXED);
    if (carveout >= 0) {
        const cudaError_t c = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout);
        if (c != cudaSuccess)
            return c;
    }
#endif
    kernel<<<grid, dim3(threads), smem, stream>>>(p);
    return gpuGetLastError();
}

} /* namespace ffpa */

#endif
