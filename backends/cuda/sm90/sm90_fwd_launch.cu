/*
 * Host side of the Hopper forward: coverage, the instantiation for Dqk/Dv,
 * the TMA tensor maps (built through the driver entry point the runtime
 * hands out, so the plugin links no driver library) and the cluster launch.
 */
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "sm90_fwd_kernels.cuh"
#include "sm90_fwd_launch.h"
#include "sm90_host.h"

namespace {

using ffpa::sm90::encode;
using ffpa::sm90::FwdMaps;
using ffpa::sm90::KernelDesc;
using ffpa::sm90::unsupported;

int64_t round_up64(int64_t x)
{
    return (x + 63) / 64 * 64;
}

/* Smallest instantiation whose cluster covers Dqk and Dv (a CTA whose slice
 * lies past Dqk contributes a zero partial S). A tuned cluster size (> 0)
 * takes the smallest covering slice at that size; none: the default. */
const KernelDesc *pick(ffpa_dtype dtype, int64_t dqk, int64_t dv, int cluster)
{
    const KernelDesc *table = dtype == FFPA_F16 ? ffpa::sm90::fwd_f16 : ffpa::sm90::fwd_bf16;
    const KernelDesc *first = NULL;
    for (int i = 0; i < ffpa::sm90::kNumShapes; ++i) {
        const KernelDesc &d = table[i];
        if (round_up64(dqk) > (int64_t)d.slice * d.cluster || round_up64(dv) > (int64_t)d.slice_v * d.cluster)
            continue;
        if (cluster <= 0 || d.cluster == cluster)
            return &d;
        if (!first)
            first = &d;
    }
    return first;
}

/* Time of a grid of `ctas` blocks of `rows` query rows, in units of one
 * row at the kernel's long-sequence rate `rate` (TFLOP/s measured on the
 * H100): whole waves of one block per multiprocessor, or fractional ones
 * for causal grids (longest first: the short blocks fill the last wave). */
double grid_time(int64_t ctas, int sms, int rows, double rate, bool causal)
{
    const double waves = causal ? (double)ctas / sms : (double)((ctas + sms - 1) / sms);
    return waves * rows / rate;
}

/* The plain twin (no bias, dropout, softcap or ALiBi code) of a table
 * kernel. d64 has two: three consumers on 128-key tiles run 13% faster per
 * row at N = 8192 (H100: 451 against 399 TFLOP/s), two on 192-key tiles
 * make 1.5x the blocks (N = 2048, Hq = 16: 256 blocks fill 2 waves where 176
 * leave the second a third full; 313 against 271). */
const KernelDesc *plain_kernel(const KernelDesc *kd, const ffpa_problem *pb, int sms)
{
    const bool f16 = pb->dtype == FFPA_F16;
    const KernelDesc *table = f16 ? ffpa::sm90::fwd_f16 : ffpa::sm90::fwd_bf16;
    const KernelDesc *plain = &(f16 ? ffpa::sm90::fwd_f16_plain : ffpa::sm90::fwd_bf16_plain)[kd - table];
    if (plain->slice == 64 && plain->cluster == 1) {
        const KernelDesc *wide = f16 ? &ffpa::sm90::fwd_f16_d64_plain_wide : &ffpa::sm90::fwd_bf16_d64_plain_wide;
        /* The launch's grid (varlen: nq is the longest sequence). */
        const int64_t heads = (int64_t)pb->hq * pb->batch;
        const int64_t ctas3 = (pb->nq + plain->rows - 1) / plain->rows * heads;
        const int64_t ctas2 = (pb->nq + wide->rows - 1) / wide->rows * heads;
        const bool causal = pb->causal != 0;
        if (grid_time(ctas2, sms, wide->rows, 399.0, causal) < grid_time(ctas3, sms, plain->rows, 451.0, causal))
            return wide;
    }
    return plain;
}

} /* namespace */

extern "C" ffpa_status ffpa_cuda_sm90_forward(struct ffpa_cuda_state *st, const ffpa_problem *pb,
                                              const ffpa_gpu_fwd_params *base, int cluster, const char **kernel,
                                              char *err, size_t err_len)
{
#ifndef FFPA_CUDA_HAVE_SM90A
    (void)st, (void)pb, (void)base, (void)cluster, (void)kernel;
    return unsupported(err, err_len, "the sm90 kernels were not built (-Dcuda-archs has no 90a)");
#else
    if (st->prop.major != 9 || st->prop.minor != 0)
        return unsupported(err, err_len, "the sm90 kernels need an sm_90 device (H100/H200)");
    const KernelDesc *kd = pick(pb->dtype, pb->dqk, pb->dv, cluster);
    if (!kd)
        return unsupported(err, err_len, "q: no sm90 instantiation covers this Dqk/Dv (up to 1024)");
    /* Beside the table's kernels: d64 with dropout (64-key tiles: the keep
     * bits spill at 128), and the plain kernels for calls without a bias,
     * dropout, softcap or ALiBi. Tuning knob (not API): FFPA_SM90_PLAIN=0
     * keeps the table's kernels (A/B runs in one build). */
    const bool variants = !ffpa_gpu_fwd_no_variants(base);
    if (kd->slice == 64 && kd->cluster == 1 && base->has_dropout)
        kd = pb->dtype == FFPA_F16 ? &ffpa::sm90::fwd_f16_d64_dropout : &ffpa::sm90::fwd_bf16_d64_dropout;
    else if (!variants && (kd->cluster > 1 || base->scale_log2 > 0.0f) && ffpa_env_bool("FFPA_SM90_PLAIN", 1, NULL))
        kd = plain_kernel(kd, pb, st->prop.multiProcessorCount); /* single-CTA twins fold a positive scale */
    if ((size_t)kd->smem_bytes > st->prop.sharedMemPerBlockOptin)
        return unsupported(err, err_len, "the sm90 kernel needs more shared memory than this device has");

    const bool varlen = pb->cu_q != NULL;
    FwdMaps maps;
    memset(&maps, 0, sizeof maps);
    const int64_t qb = varlen ? 1 : pb->batch;
    if (!encode(&maps.q, pb->q, pb->dtype, pb->dqk, varlen ? pb->total_q : pb->nq, pb->hq, qb) ||
        !encode(&maps.k, pb->k, pb->dtype, pb->dqk, varlen ? pb->total_k : pb->nkv, pb->hkv, qb, kd->kv_box_rows) ||
        !encode(&maps.v, pb->v, pb->dtype, pb->dv, varlen ? pb->total_k : pb->nkv, pb->hkv, qb, kd->kv_box_rows))
        return unsupported(err, err_len,
                           "q/k/v: strides not expressible as a TMA tensor map (e.g. broadcast stride 0)");

    ffpa_gpu_fwd_params p = *base;
    p.q_blocks = (int)((pb->nq + kd->rows - 1) / kd->rows);
    p.kv_splits = 1;
    p.kv_tiles_per_split = 0;
    p.longest_first = pb->causal != 0;
    p.part_o = NULL;
    p.part_lse = NULL;
    const int64_t clusters = (int64_t)p.q_blocks * pb->hq * pb->batch;
    cudaError_t e = kd->launch(maps, p, clusters, ffpa_cuda_stream(&st->gpu));
    if (e != cudaSuccess)
        return ffpa_gpu_launch_error(e, "launching the sm90 forward kernel", err, err_len);
    if (kernel)
        *kernel = kd->name;
    return FFPA_OK;
#endif
}
