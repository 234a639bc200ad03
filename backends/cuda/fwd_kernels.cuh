/*
 * CUDA instantiation layer of the forward: the __global__ entry points over
 * the vendor-neutral body (backends/gpu/fwd_kernel.cuh), the table of
 * instantiated shapes (mirrored by plan.c's gpu_fwd_shapes) and a descriptor
 * per instantiation for the launcher (backends/gpu/kernel_desc.cuh).
 */
#ifndef FFPA_CUDA_FWD_KERNELS_CUH
#define FFPA_CUDA_FWD_KERNELS_CUH

#include <cuda_runtime.h>

#include "arch_sm80.cuh"
#include "../gpu/fwd_kernel.cuh"
#include "../gpu/kernel_desc.cuh"

namespace ffpa {
namespace cuda {

/* One per instantiated tile:    T  Dv   WM WN  Bc  chunk minBlocks/SM  m-tiles/warp  key split
 * (plan.c's gpu_fwd_shapes). Two m-tiles per warp (32 rows, as
 * FlashAttention-2 runs D <= 128) load each K and V fragment once for both.
 * The Dv = 512 tiles' two warps of a row group share QK^T by keys and swap
 * P (key split, fwd_key_tile_ks) instead of adding partial S tiles; at
 * Dv = 1024 a warp's share would be 16 keys, two S tiles each chaining 64
 * dependent MMAs a key tile, measured 1-2% slower (docs/notes/forward.md). */
template <typename T> using Fwd64x2 = FwdConfig<T, 64, 4, 1, 128, 64, 2, 2>;
template <typename T> using Fwd64 = FwdConfig<T, 64, 4, 1, 64, 64, 2>;
template <typename T> using Fwd128x2 = FwdConfig<T, 128, 4, 1, 64, 128, 2, 2>;
template <typename T> using Fwd128 = FwdConfig<T, 128, 8, 1, 64, 128, 1>;
template <typename T> using Fwd256 = FwdConfig<T, 256, 4, 1, 64, 256, 2>;
template <typename T> using Fwd320 = FwdConfig<T, 320, 4, 1, 64, 64, 2>;
/* Dv 512 and 1024 in three widths of slab each: whole-D (512-column) slabs
 * take one ring wait and barrier per operand and key tile (227 KiB parts);
 * 256 columns fit sm_80's 163 KiB; 128 columns (512) and 32 keys (1024)
 * the 99 KiB of sm_86 / sm_89. */
template <typename T> using Fwd512c512 = FwdConfig<T, 512, 4, 2, 64, 512, 1, 1, true>;
template <typename T> using Fwd512c256 = FwdConfig<T, 512, 4, 2, 64, 256, 1, 1, true>;
template <typename T> using Fwd512 = FwdConfig<T, 512, 4, 2, 64, 128, 1, 1, true>;
template <typename T> using Fwd1024c512 = FwdConfig<T, 1024, 2, 4, 64, 512, 1>;
template <typename T> using Fwd1024 = FwdConfig<T, 1024, 2, 4, 64, 256, 1>;
/* 32-key tiles: 80 KiB of shared memory against Fwd1024's 160, so the
 * 99 KiB parts (sm_86 / sm_89) run D in (512, 1024]. */
template <typename T> using Fwd1024k32 = FwdConfig<T, 1024, 2, 4, 32, 256, 1>;

/* The most shared memory a block gets on any device that runs the SASS of
 * `arch` (sm_80 and sm_86 code also runs on sm_87's 163 KiB; sm_89, sm_120
 * and sm_121 give 99 KiB; the rest 227). */
constexpr size_t arch_smem_per_block(int arch)
{
    return arch == 800 || arch == 860 || arch == 870 ? 166912
           : arch == 890 || arch == 1200 || arch == 1210 ? 101376
                                                          : 232448;
}

template <class Cfg, bool kPlainOnly = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    ffpa_fwd_kernel(const ffpa_gpu_fwd_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    fwd_entry<Cfg, arch_smem_per_block(__CUDA_ARCH__), kPlainOnly>(p);
#endif
}

template <class Cfg> constexpr FwdKernelDesc fwd_desc()
{
    return fwd_kernel_desc<Cfg, ffpa_fwd_kernel<Cfg>>();
}

/* With a plain twin: only where it pays (H100/H200, bf16, same-build A/B,
 * docs/notes/forward.md): Fwd128x2 (D = 128 305 -> 346 TFLOP/s, spill 124
 * -> 28 bytes), Fwd320 (199 -> 218) and, since its softmax takes both
 * m-tiles' maxima first (FwdConfig::kMaxesFirst), Fwd64x2 (283 -> 300,
 * 16 -> 0 bytes). Not: Fwd256 (0), Fwd512c512 (0 to -2.5%), Fwd1024c512
 * (+1.5%, not worth its build time). */
template <class Cfg> constexpr FwdKernelDesc fwd_desc_with_plain()
{
    return fwd_kernel_desc_with_plain<Cfg, ffpa_fwd_kernel<Cfg>, ffpa_fwd_kernel<Cfg, true>>();
}

/* Defined in fwd_inst_<dtype>_<small|large>.cu (split for parallel builds). */
extern const FwdKernelDesc fwd_f16_small[kFwdSmallKernels], fwd_f16_large[kFwdLargeKernels];
extern const FwdKernelDesc fwd_bf16_small[kFwdSmallKernels], fwd_bf16_large[kFwdLargeKernels];

} /* namespace cuda */
} /* namespace ffpa */

#endif
