/*
 * Host side of the Hopper forward: coverage, the instantiation for Dqk/Dv,
 * the TMA tensor maps (built through the driver entry point the runtime
 * hands out, so the plugin links no driver library) and the cluster launch.
 */
#include <stdio.h>
#include <string.h>

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
    /* Two shapes have a specialised kernel beside the table's: d64 with
     * dropout (64-key tiles: the keep bits spill at 128), and d128 without
     * a bias, dropout, softcap or ALiBi (the plain kernel's 192-key tiles). */
    const bool variants = base->bias || base->has_dropout || base->softcap_out > 0.0f || base->alibi;
    if (kd->slice == 64 && kd->cluster == 1 && base->has_dropout)
        kd = pb->dtype == FFPA_F16 ? &ffpa::sm90::fwd_f16_d64_dropout : &ffpa::sm90::fwd_bf16_d64_dropout;
    else if (kd->slice == 128 && kd->slice_v == 128 && kd->cluster == 1 && !variants)
        kd = pb->dtype == FFPA_F16 ? &ffpa::sm90::fwd_f16_d128_plain : &ffpa::sm90::fwd_bf16_d128_plain;
    if ((size_t)kd->smem_bytes > st->prop.sharedMemPerBlockOptin)
        return unsupported(err, err_len, "the sm90 kernel needs more shared memory than this device has");

    const bool varlen = pb->cu_q != NULL;
    FwdMaps maps;
    memset(&maps, 0, sizeof maps);
    const int64_t qb = varlen ? 1 : pb->batch;
    if (!encode(&maps.q, pb->q, pb->dtype, pb->dqk, varlen ? pb->total_q : pb->nq, pb->hq, qb) ||
        !encode(&maps.k, pb->k, pb->dtype, pb->dqk, varlen ? pb->total_k : pb->nkv, pb->hkv, qb) ||
        !encode(&maps.v, pb->v, pb->dtype, pb->dv, varlen ? pb->total_k : pb->nkv, pb->hkv, qb))
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
