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
#include "kernel_desc.cuh"

namespace ffpa {
namespace hip {

/*                                            T  Dv  WM WN  Bc cols */
template <typename T> using Kv16x128 = FwdConfig<T, 128, 1, 2, 64, 128, 1>;
template <typename T> using Kv16x256 = FwdConfig<T, 256, 1, 2, 64, 128, 1>;
template <typename T> using Kv16x512 = FwdConfig<T, 512, 1, 2, 64, 128, 1>;
constexpr int kKvKernels = 3;

template <class Cfg> __global__ void __launch_bounds__(Cfg::kThreads) ffpa_hip_kv_attn_kernel(const ffpa_gpu_kv_params p)
{
    kv_attn_body<Cfg>(p);
}

template <class Cfg> constexpr KvDesc kv_desc(ffpa_dtype dtype, const char *name)
{
    return kv_kernel_desc<Cfg, ffpa_hip_kv_attn_kernel<Cfg>>(dtype, name);
}

/* Defined in kv_inst_<dtype>.hip (functions: see fwd_kernels_hip.h). */
const KvDesc *kv_f16();
const KvDesc *kv_bf16();

} /* namespace hip */
} /* namespace ffpa */

#endif
