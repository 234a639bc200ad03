/*
 * CUDA instantiation layer of the forward: the __global__ entry points over
 * the vendor-neutral body (backends/gpu/fwd_kernel.cuh), the table of
 * instantiated shapes (mirrored by plan.c's gpu_fwd_shapes) and a host-side
 * descriptor per instantiation for the launcher.
 */
#ifndef FFPA_CUDA_FWD_KERNELS_CUH
#define FFPA_CUDA_FWD_KERNELS_CUH

#include <cuda_runtime.h>

#include "arch_sm80.cuh"
#include "../gpu/fwd_kernel.cuh"

namespace ffpa {
namespace cuda {

/* One per instantiated Dv:      T  Dv   WM WN  Bc  chunk minBlocks/SM */
template <typename T> using Fwd64 = FwdConfig<T, 64, 4, 1, 64, 64, 2>;
template <typename T> using Fwd128 = FwdConfig<T, 128, 8, 1, 64, 128, 1>;
template <typename T> using Fwd256 = FwdConfig<T, 256, 4, 1, 64, 256, 2>;
template <typename T> using Fwd320 = FwdConfig<T, 320, 4, 1, 64, 64, 2>;
template <typename T> using Fwd512 = FwdConfig<T, 512, 4, 2, 64, 128, 1>;
template <typename T> using Fwd1024 = FwdConfig<T, 1024, 2, 4, 64, 256, 1>;

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    ffpa_fwd_kernel(const ffpa_gpu_fwd_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    fwd_body<Cfg>(p);
#endif
}

/* What the launcher needs to know about one instantiation. */
struct FwdKernelDesc {
    int dv, wm, wn, bc, chunk, threads;
    size_t (*smem_bytes)(int q_resident, int qk_chunks, int stages);
    cudaError_t (*launch)(const ffpa_gpu_fwd_params &p, size_t smem, int64_t blocks, cudaStream_t stream);
};

template <class Cfg> size_t fwd_smem_bytes(int q_resident, int qk_chunks, int stages)
{
    return fwd_smem_layout<Cfg>(q_resident, qk_chunks, stages).total;
}

/* Launches kernel(p) on a 1-D grid with `smem` bytes of dynamic shared
 * memory (raising the kernel's limit first: above 48 KB it must opt in). */
template <class Params>
cudaError_t launch_with_smem(void (*kernel)(Params), const Params &p, int64_t blocks, int threads, size_t smem,
                             cudaStream_t stream)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    kernel<<<(unsigned)blocks, threads, smem, stream>>>(p);
    return cudaGetLastError();
}

template <class Cfg>
cudaError_t fwd_launch(const ffpa_gpu_fwd_params &p, size_t smem, int64_t blocks, cudaStream_t stream)
{
    return launch_with_smem(ffpa_fwd_kernel<Cfg>, p, blocks, Cfg::kThreads, smem, stream);
}

template <class Cfg> constexpr FwdKernelDesc fwd_desc()
{
    return FwdKernelDesc{Cfg::kDv,  Cfg::kWM, Cfg::kWN, Cfg::kBc, Cfg::kCols, Cfg::kThreads,
                         &fwd_smem_bytes<Cfg>, &fwd_launch<Cfg>};
}

/* Defined in fwd_inst_<dtype>_<small|large>.cu (split for parallel builds). */
extern const FwdKernelDesc fwd_f16_small[3], fwd_f16_large[3];
extern const FwdKernelDesc fwd_bf16_small[3], fwd_bf16_large[3];

} /* namespace cuda */
} /* namespace ffpa */

#endif
