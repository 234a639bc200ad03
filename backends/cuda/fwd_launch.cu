/*
 * Forward launcher of the CUDA backend: dense decode goes to the KV-cache
 * kernels, the Hopper kernels run where they cover the problem (or
 * FFPA_CUDA_KERNEL says so), else the generic kernels through the shared
 * host logic (backends/gpu/fwd_host.h): plan, instantiation, workspace, launch.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "fwd_kernels.cuh" /* before fwd_host.h: the arch layer and the kernel bodies */
#include "fwd_host.h"
#include "fwd_launch.h"
#include "plan.h"
#include "sm90/sm90_fwd_launch.h"
#include "kv/kv_launch.h"

namespace {

using ffpa::FwdKernelDesc;
namespace host = ffpa::fwd::host;

/* Decode (a few query rows, no bias, dropout or varlen) runs the KV-cache
 * kernels over the dense K/V, seen as a cache of one page per sequence:
 * the query heads that share a KV head are packed into one tile, so each KV
 * head is read once, and the split-KV schedule balances the batch. Fills
 * *kvp and *out (pb with kvp attached). FFPA_CUDA_KERNEL=sm90 keeps the
 * prefill kernels (A/B runs). */
bool decode_as_kv_cache(const ffpa_gpu_state *gpu, const ffpa_problem *pb, ffpa_kv_problem *kvp, ffpa_problem *out)
{
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    if (choice && strcmp(choice, "generic") != 0 && strcmp(choice, "auto") != 0)
        return false; /* sm90, or a bad value the launcher reports */
    if (pb->nq > 16 || pb->has_bias || pb->dropout_p > 0.0f || pb->cu_q || pb->window || pb->softcap > 0.0f ||
        pb->alibi)
        return false; /* the KV-cache kernels take none of these */
    memset(kvp, 0, sizeof *kvp);
    kvp->block_table = NULL;
    kvp->max_pages = 1;
    kvp->num_pages = pb->batch;
    kvp->page_size = pb->nkv;
    kvp->cache_seqlens = NULL;
    kvp->uniform_len = pb->nkv;
    *out = *pb;
    out->kv = kvp;
    /* Head dims no KV-cache tile fits (D > 512 on the 99 KiB parts) stay
     * on the Split-D forward, whose split-KV path runs them. */
    return ffpa_cuda_kv_runs(gpu, out) != 0;
}

} /* namespace */

extern "C" size_t ffpa_cuda_forward_workspace(const ffpa_gpu_state *gpu, const ffpa_problem *pb)
{
    ffpa_plan plan;
    char err[256];
    ffpa_kv_problem kvp;
    ffpa_problem as_kv;
    if (decode_as_kv_cache(gpu, pb, &kvp, &as_kv))
        return ffpa_cuda_kv_workspace(gpu, &as_kv);
    if (host::make_plan(gpu->caps.limits, pb, &plan, err, sizeof err) != FFPA_OK)
        return 0;
    return host::workspace_of(pb, plan).total;
}

extern "C" ffpa_status ffpa_cuda_forward(ffpa_gpu_state *gpu, const ffpa_problem *pb, void *ws,
                                         size_t ws_bytes, char *err, size_t err_len)
{
    char reason[256];
    const char *why = host::unsupported(pb, "cuda", reason, sizeof reason);
    if (why)
        return host::fail(FFPA_ERR_UNSUPPORTED, err, err_len, why);
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0)
        return FFPA_OK;
    ffpa_kv_problem kvp;
    ffpa_problem as_kv;
    if (decode_as_kv_cache(gpu, pb, &kvp, &as_kv))
        return ffpa_cuda_forward_kvcache(gpu, &as_kv, ws, ws_bytes, err, err_len);

    ffpa_plan plan;
    ffpa_status s = host::make_plan(gpu->caps.limits, pb, &plan, err, err_len);
    if (s != FFPA_OK)
        return s;
    const int dt16 = pb->dtype == FFPA_F16;
    const FwdKernelDesc *kd =
        host::pick_kernel(dt16 ? ffpa::cuda::fwd_f16_small : ffpa::cuda::fwd_bf16_small, ffpa::kFwdSmallKernels,
                          dt16 ? ffpa::cuda::fwd_f16_large : ffpa::cuda::fwd_bf16_large, ffpa::kFwdLargeKernels, pb->dv, plan);
    const int q_resident = ffpa_plan_q_resident(&plan);
    size_t smem = kd ? kd->smem_bytes(q_resident, plan.n_qk_chunks, plan.stages) : 0;
    size_t plan_smem = plan.smem_bytes;
    /* Tuning knob (not API): FFPA_CUDA_FWD_STAGES overrides the ring depth. */
    const char *stages_env = getenv("FFPA_CUDA_FWD_STAGES");
    if (kd && stages_env && atoi(stages_env) >= 2 && atoi(stages_env) <= 4) {
        plan.stages = atoi(stages_env);
        smem = plan_smem = kd->smem_bytes(q_resident, plan.n_qk_chunks, plan.stages);
    }
    if ((s = host::check_kernel(kd, smem, plan_smem, pb, plan, "cuda", err, err_len)) != FFPA_OK)
        return s;
    ffpa_gpu_fwd_params p = host::params_of(pb, plan, q_resident);
    s = host::attach_workspace(&p, pb, plan, ws, ws_bytes, ffpa_cuda_stream(gpu), err, err_len);
    if (s != FFPA_OK)
        return s;

    /* Kernel choice: FFPA_CUDA_KERNEL=generic|sm90 forces one (A/B runs, over
     * the tuning table); auto or unset: the plan's family (a table's choice,
     * else the Hopper kernels where they cover the problem, else generic). */
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    const bool force_sm90 = choice && strcmp(choice, "sm90") == 0;
    const bool force_generic = choice && strcmp(choice, "generic") == 0;
    if (choice && !force_sm90 && !force_generic && strcmp(choice, "auto") != 0)
        return host::fail(FFPA_ERR_INVALID_ARGUMENT, err, err_len,
                          "FFPA_CUDA_KERNEL: unknown kernel family; expected generic, sm90 or auto");
    const bool generic_only = force_generic || (!force_sm90 && plan.family == FFPA_FAMILY_GENERIC);
    if (force_sm90 || (!generic_only && plan.kv_splits == 1 && plan.path != FFPA_PATH_DECODE)) {
        const char *kernel = NULL;
        char why[256] = "";
        s = ffpa_cuda_sm90_forward(ffpa_cuda_of(gpu), pb, &p, plan.cluster, &kernel, why, sizeof why);
        if (s == FFPA_OK) {
            gpu->last_kernel = kernel;
            return FFPA_OK;
        }
        if (s != FFPA_ERR_UNSUPPORTED || force_sm90) {
            if (err && err_len)
                snprintf(err, err_len, "%s%s", force_sm90 ? "FFPA_CUDA_KERNEL=sm90: " : "", why);
            return s;
        }
    }

    s = host::launch(kd, p, smem, pb, plan, ffpa_cuda_stream(gpu), err, err_len);
    if (s == FFPA_OK)
        gpu->last_kernel = host::generic_name(plan, host::uses_plain_twin(kd, p));
    return s;
}
