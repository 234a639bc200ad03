/*
 * Instantiation layer of the Hopper forward: the __global__ entry point, the
 * instantiated (slice, cluster) shapes and a host descriptor per shape.
 * Device code is emitted only in the sm_90a pass (other -gencode passes
 * compile an empty body; the launcher never picks it on those devices).
 */
#ifndef FFPA_CUDA_SM90_FWD_KERNELS_CUH
#define FFPA_CUDA_SM90_FWD_KERNELS_CUH

#include <cuda_runtime.h>

#include "plan.h" /* FFPA_SM90_FWD_SHAPES */
#include "sm90_fwd_kernel.cuh"
#include "sm90_launch.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fwd_kernel(const __grid_constant__ FwdMaps maps, const ffpa_gpu_fwd_params p)
{
#if FFPA_SM90_DEVICE
    fwd_body<Cfg>(maps, p);
#endif
}

struct KernelDesc {
    int slice, slice_v, cluster; /* columns per CTA of Q/K and of V/O */
    int rows;                    /* query rows per cluster */
    int kv_box_rows;             /* rows of the K and V maps' TMA boxes */
    size_t smem_bytes;
    const char *name;
    cudaError_t (*launch)(const FwdMaps &maps, const ffpa_gpu_fwd_params &p, int64_t clusters,
                          cudaStream_t stream);
};

template <class Cfg>
cudaError_t launch(const FwdMaps &maps, const ffpa_gpu_fwd_params &p, int64_t clusters, cudaStream_t stream)
{
    return launch_clusters(sm90_fwd_kernel<Cfg>, clusters, Cfg::kCluster, Cfg::kThreads, Cfg::kSmemBytes, stream,
                           maps, p);
}

template <class Cfg> constexpr KernelDesc desc(const char *name)
{
    return KernelDesc{Cfg::kSlice, Cfg::kSliceV, Cfg::kCluster, Cfg::kBr, Cfg::kKvBoxRows, Cfg::kSmemBytes, name,
                      &launch<Cfg>};
}

/* Slice x cluster shapes, smallest cover first (FFPA_SM90_FWD_SHAPES in
 * common/plan.h; see sm90_fwd_launch.cu). */
#define FFPA_SM90_FWD_COUNT(slice, slice_v, cluster, label) +1
constexpr int kNumShapes = 0 FFPA_SM90_FWD_SHAPES(FFPA_SM90_FWD_COUNT);
#undef FFPA_SM90_FWD_COUNT
extern const KernelDesc fwd_f16[kNumShapes], fwd_bf16[kNumShapes];

/* D <= 64 with dropout: three consumers on 64-key tiles. The default d64
 * kernel's 128-key tiles hold S, P and O in 160 registers, and the keep
 * bits spill there (H100, D = 64, dropout 0.1: 73 TFLOP/s against 110 on
 * 64-key tiles and 97 for two consumers; docs/notes/forward.md). */
template <typename T> using FwdConfigD64Dropout = FwdConfig<T, 64, 1, 64, 64, 3>;
extern const KernelDesc fwd_f16_d64_dropout, fwd_bf16_d64_dropout;

/* D in (64, 128] without a bias, dropout, softcap or ALiBi: 192-key tiles
 * (S 96, P 48 and O 64 registers a thread), which the variants' code paths
 * spilled (docs/notes/forward.md). */
/* The plain kernels: one per table kernel, without the bias, dropout,
 * softcap and ALiBi code (the launch takes them for calls without those),
 * so their registers do not bound the key tile: d128 on 192-key tiles,
 * d256 on FlashAttention-3's 80-key tiles (S 40 registers, P 20 and O 128
 * fit beside each other where 128 keys do not, and 4 ring slots of 40 KiB
 * fit beside Q), the others on the table kernel's tiles. d64 has a second
 * one, two consumers on 192-key tiles (128-row blocks: more CTAs where a
 * grid of 192-row blocks leaves a wave mostly empty); the launch chooses by
 * the grid's waves. */
constexpr int plain_key_tile(int slice, int slice_v, int cluster)
{
    return cluster == 1 && slice == 128 && slice_v == 128   ? 192
           : cluster == 1 && slice == 256 && slice_v == 256 ? 80
                                                            : default_key_tile(slice, cluster);
}
template <typename T, int kSlice, int kCluster, int kSliceV>
using FwdConfigPlain = FwdConfig<T, kSlice, kCluster, kSliceV, plain_key_tile(kSlice, kSliceV, kCluster),
                                 default_consumers(kSlice, kCluster), true>;
extern const KernelDesc fwd_f16_plain[kNumShapes], fwd_bf16_plain[kNumShapes];
template <typename T> using FwdConfigD64PlainWide = FwdConfig<T, 64, 1, 64, 192, 2, true>;
extern const KernelDesc fwd_f16_d64_plain_wide, fwd_bf16_d64_plain_wide;

} /* namespace sm90 */
} /* namespace ffpa */

#endif
