/*
 * CUDA instantiation layer of the KV-cache attention: the __global__ entry
 * points over the vendor-neutral bodies (backends/gpu/kv/kv_kernel.cuh) and
 * the table of instantiated tiles the host layer (kv_host.h) chooses from.
 */
#ifndef FFPA_CUDA_KV_KERNELS_CUH
#define FFPA_CUDA_KV_KERNELS_CUH

#include <cuda_runtime.h>

#include "../fwd_kernels.cuh"
#include "../../gpu/kv/kv_host.h"
#include "../../gpu/kv/kv_kernel.cuh"
#include "../../gpu/kernel_desc.cuh"
#include "../sm90/sm90_mla_launch.h"

namespace ffpa {
namespace cuda {

/* Tiles: 16 packed rows (decode: Hq/Hkv x Nq <= 16) with 2-4 warps splitting
 * every D chunk (64 columns each: a warp's columns must be whole 128-byte
 * swizzle groups), so a KV head is streamed once by enough threads to keep
 * the loads in flight; 64 / 32 rows (MLA, speculative, chunked prefill)
 * as the prefill kernels. minBlocks/SM is also the occupancy the ring depth
 * is sized for: measured on the H100 (the decode sweep of docs/notes/decode.md: d128 at
 * 1/2/3/4 blocks: 45/67/84/91% of copy; d256 52/79/89/67%).
 *                                    T  Dv  WM WN  Bc cols minBlocks/SM */
template <typename T> using Kv16x128 = FwdConfig<T, 128, 1, 2, 64, 128, 4>;
template <typename T> using Kv16x256 = FwdConfig<T, 256, 1, 2, 64, 128, 3>;
template <typename T> using Kv16x512 = FwdConfig<T, 512, 1, 4, 64, 256, 2>;
template <typename T> using Kv16x1024 = FwdConfig<T, 1024, 1, 4, 64, 256, 2>;
template <typename T> using Kv64x512 = FwdConfig<T, 512, 4, 2, 64, 128, 1>;
template <typename T> using Kv32x1024 = FwdConfig<T, 1024, 2, 4, 64, 256, 1>;
constexpr int kKvKernels = 7; /* the 6 generic tiles and the Hopper MLA kernel */

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) ffpa_kv_attn_kernel(const ffpa_gpu_kv_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    kv_attn_body<Cfg>(p);
#endif
}

template <class Cfg> constexpr KvDesc kv_desc(ffpa_dtype dtype, const char *name)
{
    return kv_kernel_desc<Cfg, ffpa_kv_attn_kernel<Cfg>>(dtype, name);
}

/* The Hopper MLA decode kernel (sm90/sm90_mla_*): 64 packed rows, 64-key
 * tiles, 384 threads, one block per SM; chosen whenever it accepts pb. */
constexpr KvDesc kv_mla_desc(ffpa_dtype dtype, const char *name)
{
    return KvDesc{dtype, 512, 64, 64, 64, 384, 1, name, &sm90::mla_smem_bytes,
                  dtype == FFPA_F16 ? &sm90::mla_launch_f16 : &sm90::mla_launch_bf16, &sm90::mla_accepts};
}

/* Defined in kv_inst_<dtype>.cu. */
extern const KvDesc kv_f16[kKvKernels], kv_bf16[kKvKernels];

} /* namespace cuda */
} /* namespace ffpa */

#endif
