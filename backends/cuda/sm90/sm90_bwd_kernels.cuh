/*
 * Instantiation layer of the Hopper backward: the __global__ entry point,
 * the instantiated widths and a host descriptor per width. Device code is
 * emitted only in the sm_90a pass (see sm90_fwd_kernels.cuh).
 */
#ifndef FFPA_CUDA_SM90_BWD_KERNELS_CUH
#define FFPA_CUDA_SM90_BWD_KERNELS_CUH

#include <cuda_runtime.h>

#include "plan.h" /* FFPA_SM90_BWD_WIDTHS */
#include "sm90_bwd_kernel.cuh"
#include "sm90_launch.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg, bool kExtras>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_bwd_kernel(const __grid_constant__ BwdMaps maps, const ffpa_bwd_params p, const BwdOutViews out)
{
#if FFPA_SM90_DEVICE
    bwd_body<Cfg, kExtras>(maps, p, out);
#endif
}

struct BwdKernelDesc {
    int boxes, cluster; /* max(Dqk, Dv) <= 64 * boxes * cluster */
    int f32_dq_only;    /* skipped with FFPA_GRAD_ACCUM_OUTPUT (sm90_bwd_launch.cu) */
    int dq_bulk;        /* adds dQ with TMA reductions: reads BwdMaps::dq */
    int keys;           /* keys per CTA (the launch grid's key blocks) */
    size_t smem_bytes;
    const char *name;
    /* launch[0]: plain; launch[1]: with bias and/or dropout. */
    cudaError_t (*launch[2])(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, int64_t ctas,
                             cudaStream_t stream);
};

template <class Cfg, bool kExtras>
cudaError_t bwd_launch(const BwdMaps &maps, const ffpa_bwd_params &p, const BwdOutViews &out, int64_t ctas,
                       cudaStream_t stream) /* ctas: work items, one cluster each */
{
    return launch_clusters(sm90_bwd_kernel<Cfg, kExtras>, ctas, Cfg::kCluster, Cfg::kThreads, Cfg::kSmemBytes, stream,
                           maps, p, out);
}

/* kPlainOnly: no bias/dropout/variant instantiation (launch[1] null; the
 * launcher's pick never hands such a call to the width). */
template <class Cfg, bool kPlainOnly>
constexpr cudaError_t (*extras_launch())(const BwdMaps &, const ffpa_bwd_params &, const BwdOutViews &, int64_t,
                                         cudaStream_t)
{
    if constexpr (kPlainOnly)
        return nullptr; /* (not instantiated at all) */
    else
        return &bwd_launch<Cfg, true>;
}
template <class Cfg, bool kPlainOnly = false> constexpr BwdKernelDesc bwd_desc(const char *name, int f32_dq_only = 0)
{
    return BwdKernelDesc{Cfg::kBoxes, Cfg::kCluster, f32_dq_only, Cfg::kDqTma, Cfg::kBc, Cfg::kSmemBytes, name,
                         {&bwd_launch<Cfg, false>, extras_launch<Cfg, kPlainOnly>()}};
}

/* Widths in order of preference (FFPA_SM90_BWD_WIDTHS in common/plan.h;
 * sm90_bwd_launch.cu takes the first that
 * covers max(Dqk, Dv)). D in (384, 512] runs on a cluster of two 4-box CTAs,
 * not one 8-box CTA: one pass instead of two (no recomputed S^T / dP^T)
 * and the TMA dQ path; H100 D=512 275 against 200 TFLOP/s. Without the fp32
 * dQ buffer (FFPA_GRAD_ACCUM_OUTPUT) the pair reduces dQ from registers and
 * loses (172 against 213), so that mode keeps the 8-box CTA. D <= 384
 * stays on one CTA (D=320: 183 against 170 for the pair, whose second CTA
 * would hold 64 columns). D in (512, 768] runs on a cluster of three and
 * D in (768, 1024] on one of four 4-box CTAs for the same reasons (one
 * pass, TMA dQ), with the same exception. */
#define FFPA_SM90_BWD_COUNT(b, c, label, f32_dq_only) +1
constexpr int kNumBwdShapes = 0 FFPA_SM90_BWD_WIDTHS(FFPA_SM90_BWD_COUNT);
#undef FFPA_SM90_BWD_COUNT
extern const BwdKernelDesc bwd_f16[kNumBwdShapes], bwd_bf16[kNumBwdShapes];

/* The small-D kernel (sm90_bwd_keys.cuh): D <= 128 without a bias
 * (deterministic mode only with the fp32 dQ buffer); preferred there
 * unless a tuning entry names a width. */
extern const BwdKernelDesc bwd_keys_f16, bwd_keys_bf16;

/* The gradient-split kernel (sm90_bwd_grads.cuh): 256 < D <= 320 without
 * a bias, dropout or variant (its extras build spilled 380 bytes and lost
 * to the 6-box CTA: plain only), one pass where the 6-box CTA takes two;
 * preferred there unless a tuning entry names a width. */
extern const BwdKernelDesc bwd_grads_f16, bwd_grads_bf16;

} /* namespace sm90 */
} /* namespace ffpa */

#endif
