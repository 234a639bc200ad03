/*
 * What every GPU backend's instantiation layer shares: the descriptors the
 * host layers choose kernels from (forward: FwdKernelDesc; KV cache: KvDesc).
 * A vendor file keeps only its tile table (numbers tuned per architecture)
 * and its __global__ entry points, whose launch bounds mean different things
 * to nvcc and hip-clang. Compiled by nvcc or hip-clang (kernel launch syntax).
 */
#ifndef FFPA_GPU_KERNEL_DESC_CUH
#define FFPA_GPU_KERNEL_DESC_CUH

#include <stddef.h>
#include <stdint.h>

#include "fwd_kernel.cuh"
#include "gpu_api.h"
#include "gpu_launch.cuh"
#include "kv/kv_host.h"

namespace ffpa {

/* One instantiation of the forward, as the launcher sees it. */
struct FwdKernelDesc {
    int dv, br, bc, chunk, warps, threads;
    size_t (*smem_bytes)(int q_resident, int qk_chunks, int stages);
    gpuError_t (*launch)(const ffpa_gpu_fwd_params &p, size_t smem, int64_t blocks, gpuStream_t stream);
    /* Optional (nullptr where not built): the same tile without the variant
     * code, for plain calls without dropout (fwd_body's kPlainOnly). */
    gpuError_t (*launch_plain)(const ffpa_gpu_fwd_params &p, size_t smem, int64_t blocks, gpuStream_t stream);
};

template <class Cfg> size_t fwd_smem_bytes(int q_resident, int qk_chunks, int stages)
{
    return fwd_smem_layout<Cfg>(q_resident, qk_chunks, stages).total;
}

/* Entry: the vendor's __global__ entry point of Cfg. */
template <class Cfg, void (*Entry)(ffpa_gpu_fwd_params)>
gpuError_t fwd_launch(const ffpa_gpu_fwd_params &p, size_t smem, int64_t blocks, gpuStream_t stream)
{
    return launch_with_smem(Entry, dim3((unsigned)blocks), Cfg::kThreads, smem, stream, p);
}

template <class Cfg, void (*Entry)(ffpa_gpu_fwd_params)> constexpr FwdKernelDesc fwd_kernel_desc()
{
    return FwdKernelDesc{Cfg::kDv,   Cfg::kBr,      Cfg::kBc, Cfg::kCols, Cfg::kWM * Cfg::kWN, Cfg::kThreads,
                         &fwd_smem_bytes<Cfg>, &fwd_launch<Cfg, Entry>, nullptr};
}

/* PlainEntry: the plain twin's entry point (FwdKernelDesc::launch_plain). */
template <class Cfg, void (*Entry)(ffpa_gpu_fwd_params), void (*PlainEntry)(ffpa_gpu_fwd_params)>
constexpr FwdKernelDesc fwd_kernel_desc_with_plain()
{
    FwdKernelDesc d = fwd_kernel_desc<Cfg, Entry>();
    d.launch_plain = &fwd_launch<Cfg, PlainEntry>;
    return d;
}

/* Instantiations per table (the launchers' fwd_<dtype>_small / _large):
 * Dv <= 256 (64 and 128 in two tiles each, 256), and Dv > 256. */
constexpr int kFwdSmallKernels = 5, kFwdLargeKernels = 7;

/* One instantiation of the KV-cache attention (Q resident). */
using KvDesc = kv::KvKernel<gpuStream_t, gpuError_t>;

template <class Cfg> size_t kv_smem_bytes(int qk_chunks, int stages)
{
    return fwd_smem_layout<Cfg>(1, qk_chunks, stages).total;
}

template <class Cfg, void (*Entry)(ffpa_gpu_kv_params)>
gpuError_t kv_launch(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, gpuStream_t stream)
{
    return launch_with_smem(Entry, dim3((unsigned)blocks), Cfg::kThreads, smem, stream, p);
}

template <class Cfg, void (*Entry)(ffpa_gpu_kv_params)>
constexpr KvDesc kv_kernel_desc(ffpa_dtype dtype, const char *name)
{
    return KvDesc{dtype, Cfg::kDv, Cfg::kBr, Cfg::kBc, Cfg::kCols, Cfg::kThreads, Cfg::kMinBlocks, name,
                  &kv_smem_bytes<Cfg>, &kv_launch<Cfg, Entry>, nullptr};
}

} /* namespace ffpa */

#endif
