/*
 * HIP instantiation layer of the forward: __global__ entry points over the
 * vendor-neutral body (backends/gpu/fwd_kernel.cuh) compiled with the HIP
 * architecture layer (arch_hip.h), and a descriptor per instantiation
 * (backends/gpu/kernel_desc.cuh).
 *
 * The shapes must be those of the planner's table (common/plan.c,
 * gpu_fwd_shapes): {Dv, warps along rows, warps along D, Bc, chunk}.
 * The launcher checks plan and kernel agree before every launch.
 */
#ifndef FFPA_HIP_FWD_KERNELS_H
#define FFPA_HIP_FWD_KERNELS_H

#include "arch_hip.h"
#include "fwd_kernel.cuh"
#include "kernel_desc.cuh"

namespace ffpa {
namespace hip {

/*                                        T  Dv   WM WN Bc  chunk minBlocks m-tiles key-split (cuda/fwd_kernels.cuh) */
template <typename T> using Fwd64x2 = FwdConfig<T, 64, 4, 1, 128, 64, 1, 2>; /* 2 m-tiles per warp */
template <typename T> using Fwd64 = FwdConfig<T, 64, 4, 1, 64, 64, 1>;
template <typename T> using Fwd128x2 = FwdConfig<T, 128, 4, 1, 64, 128, 1, 2>;
template <typename T> using Fwd128 = FwdConfig<T, 128, 8, 1, 64, 128, 1>;
template <typename T> using Fwd256 = FwdConfig<T, 256, 4, 1, 64, 256, 1>;
template <typename T> using Fwd320 = FwdConfig<T, 320, 4, 1, 64, 64, 1>;
template <typename T> using Fwd512c512 = FwdConfig<T, 512, 4, 2, 64, 512, 1, 1, true>;
template <typename T> using Fwd512c256 = FwdConfig<T, 512, 4, 2, 64, 256, 1, 1, true>;
template <typename T> using Fwd512 = FwdConfig<T, 512, 4, 2, 64, 128, 1, 1, true>;
template <typename T> using Fwd1024c512 = FwdConfig<T, 1024, 2, 4, 64, 512, 1>;
template <typename T> using Fwd1024 = FwdConfig<T, 1024, 2, 4, 64, 256, 1>;
template <typename T> using Fwd1024k32 = FwdConfig<T, 1024, 2, 4, 32, 256, 1>; /* 80 KiB: NVIDIA's 99 KiB parts */

/* LDS per block on the AMD targets (64 KiB; gfx950 160). The tiles that
 * need more are never planned there (the 512- and 1024-column tiles exist
 * for NVIDIA parts, where this layer's sources are checked): fwd_entry
 * compiles no body for them on AMD. */
#if defined(__HIP_DEVICE_COMPILE__) && !defined(__HIP_PLATFORM_NVIDIA__)
#if defined(__gfx950__)
constexpr size_t kLdsPerBlock = 163840;
#else
constexpr size_t kLdsPerBlock = 65536;
#endif
#else
constexpr size_t kLdsPerBlock = ~(size_t)0;
#endif

template <class Cfg> __global__ void __launch_bounds__(Cfg::kThreads) ffpa_hip_fwd_kernel(const ffpa_gpu_fwd_params p)
{
    fwd_entry<Cfg, kLdsPerBlock>(p);
}

template <class Cfg> constexpr FwdKernelDesc fwd_desc()
{
    return fwd_kernel_desc<Cfg, ffpa_hip_fwd_kernel<Cfg>>();
}

/* Tables of kFwdSmallKernels / kFwdLargeKernels instantiations, defined in fwd_inst_<dtype>_<small|large>.hip
 * (split for parallel builds). Functions, not const arrays: HIP would copy a
 * constant-initialised const global to the device, with host pointers in it. */
const FwdKernelDesc *fwd_f16_small();
const FwdKernelDesc *fwd_f16_large();
const FwdKernelDesc *fwd_bf16_small();
const FwdKernelDesc *fwd_bf16_large();

} /* namespace hip */
} /* namespace ffpa */

#endif
