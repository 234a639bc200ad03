/*
 * HIP instantiation layer of the KV-cache attention: __global__ entry points
 * over the vendor-neutral bodies (backends/gpu/kv/kv_kernel.cuh) compiled
 * with the HIP architecture layer, and the tiles the shared host layer
 * (kv_host.h) chooses from. All fit 64 KiB of LDS per block (gfx90a, gfx942,
 * gfx1100) with Q resident: 16 packed rows, Dv up to 512 (rows beyond 16,
 * e.g. MLA's 128 heads, run as several 16-row tiles).
 */
#ifndef FFPA_HIP_KV_KERNELS_H
#define FFPA_HIP_KV_KERNELS_H

#include "arch_hip.h"
#include "kv/kv_host.h"
#include "kv/kv_kernel.cuh"

namespace ffpa {
namespace hip {

using KvDesc = kv::KvKernel<hipStream_t, hipError_t>;

/*                                            T  Dv  WM WN  Bc cols */
template <typename T> using Kv16x128 = FwdConfig<T, 128, 1, 2, 64, 128, 1>;
template <typename T> using Kv16x256 = FwdConfig<T, 256, 1, 2, 64, 128, 1>;
template <typename T> using Kv16x512 = FwdConfig<T, 512, 1, 2, 64, 128, 1>;
constexpr int kKvKernels = 3;

template <class Cfg> __global__ void __launch_bounds__(Cfg::kThreads) ffpa_hip_kv_attn_kernel(const ffpa_gpu_kv_params p)
{
    kv_attn_body<Cfg>(p);
}

template <class Cfg> size_t kv_smem_bytes(int qk_chunks, int stages)
{
    return fwd_smem_layout<Cfg>(1, qk_chunks, stages).total;
}

template <class Cfg>
hipError_t kv_launch(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, hipStream_t stream)
{
#if defined(__HIP_PLATFORM_NVIDIA__)
    /* Above 48 KiB of dynamic shared memory CUDA wants an opt-in. */
    hipError_t e = hipFuncSetAttribute(ffpa_hip_kv_attn_kernel<Cfg>, hipFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem);
    if (e != hipSuccess)
        return e;
#endif
    ffpa_hip_kv_attn_kernel<Cfg><<<dim3((unsigned)blocks), dim3(Cfg::kThreads), smem, stream>>>(p);
    return hipGetLastError();
}

template <class Cfg> constexpr KvDesc kv_desc(ffpa_dtype dtype, const char *name)
{
    return KvDesc{dtype, Cfg::kDv, Cfg::kBr, Cfg::kBc, Cfg::kCols, Cfg::kThreads, Cfg::kMinBlocks, name,
                  &kv_smem_bytes<Cfg>, &kv_launch<Cfg>, nullptr};
}

/* Defined in kv_inst_<dtype>.hip (functions: see fwd_kernels_hip.h). */
const KvDesc *kv_f16();
const KvDesc *kv_bf16();

} /* namespace hip */
} /* namespace ffpa */

#endif
