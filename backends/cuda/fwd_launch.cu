/*
 * Forward launcher: checks what the generic kernels support, plans with the
 * shared Split-D planner (and the device's tuning table), picks the kernel
 * family and the instantiation of the plan's tile, uploads varlen
 * offsets into the workspace and launches (plus the split-KV combine).
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "gpu_support.h"
#include "fwd_kernels.cuh"
#include "fwd_launch.h"
#include "plan.h"
#include "sm90/sm90_fwd_launch.h"
#include "kv/kv_launch.h"

namespace {

using ffpa::cuda::FwdKernelDesc;

constexpr size_t kAlign = 256;

size_t align_up(size_t x)
{
    return (x + kAlign - 1) / kAlign * kAlign;
}

ffpa_status fail(ffpa_status s, char *err, size_t err_len, const char *msg)
{
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
    return s;
}

/* Workspace layout: [cu_q][cu_k][partial O][partial LSE], each 256-aligned. */
struct WsLayout {
    size_t cu_q, cu_k, part_o, part_lse, total;
};

WsLayout ws_layout(const ffpa_problem *pb, const ffpa_plan *plan)
{
    WsLayout w;
    size_t off = 0;
    size_t cu_bytes = pb->cu_q ? align_up((size_t)(pb->batch + 1) * sizeof(int32_t)) : 0;
    w.cu_q = off;
    off += cu_bytes;
    w.cu_k = off;
    off += cu_bytes;
    size_t rows = plan->kv_splits > 1 ? (size_t)plan->kv_splits * pb->batch * pb->hq * pb->nq : 0;
    w.part_o = off;
    off += align_up(rows * (size_t)pb->dv * sizeof(float));
    w.part_lse = off;
    off += align_up(rows * sizeof(float));
    w.total = off;
    return w;
}

/* Why the generic kernels cannot run pb, or NULL. */
const char *unsupported_reason(const ffpa_problem *pb, char *buf, size_t len)
{
    const ffpa_view *views[4] = {&pb->q, &pb->k, &pb->v, &pb->o};
    const char *names[4] = {"q", "k", "v", "o"};
    const char *why = ffpa_gpu_unsupported(pb, views, names, 4, "cuda", buf, len);
    if (why)
        return why;
    if (pb->nq > INT32_MAX || pb->nkv > INT32_MAX || pb->batch * pb->hq > INT32_MAX) {
        return "q: sequence or batch too large for the cuda backend; expected at most 2^31-1";
    }
    return NULL;
}

/* The instantiation that runs the plan's tile: the smallest covering Dv
 * that has it (the rule of ffpa_plan_use_fwd_tile); NULL if none. */
const FwdKernelDesc *pick_kernel(ffpa_dtype dtype, int64_t dv, const ffpa_plan &plan)
{
    const FwdKernelDesc *tables[2] = {dtype == FFPA_F16 ? ffpa::cuda::fwd_f16_small : ffpa::cuda::fwd_bf16_small,
                                      dtype == FFPA_F16 ? ffpa::cuda::fwd_f16_large : ffpa::cuda::fwd_bf16_large};
    for (const FwdKernelDesc *table : tables)
        for (int i = 0; i < 3; ++i) {
            const FwdKernelDesc &kd = table[i];
            if (dv <= kd.dv && plan.br == 16 * kd.wm && plan.bc == kd.bc && plan.dqk_chunk == kd.chunk &&
                plan.warps == kd.wm * kd.wn)
                return &kd;
        }
    return NULL;
}

template <typename T> __global__ void combine_kernel(const ffpa_gpu_fwd_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    ffpa::combine_body<T>(p);
#endif
}

ffpa_status make_plan(const ffpa_cuda_state *st, const ffpa_problem *pb, ffpa_plan *plan, char *err,
                      size_t err_len)
{
    ffpa_plan_input in = ffpa_plan_input_of(pb, 0);
    ffpa_status s = ffpa_plan_make(&in, &st->caps.limits, plan);
    if (s != FFPA_OK) {
        if (err && err_len)
            snprintf(err, err_len,
                     "q: no forward configuration for Dqk=%lld Dv=%lld fits this device's %zu bytes of "
                     "shared memory per block; expected a smaller head dimension on this GPU",
                     (long long)pb->dqk, (long long)pb->dv, st->caps.limits.smem_per_block);
        return s == FFPA_ERR_UNSUPPORTED ? s : FFPA_ERR_INTERNAL;
    }
    return FFPA_OK;
}

/* Decode (a few query rows, no bias, dropout or varlen) runs the KV-cache
 * kernels over the dense K/V, seen as a cache of one page per sequence:
 * the query heads that share a KV head are packed into one tile, so each KV
 * head is read once, and the split-KV schedule balances the batch. Fills
 * *kvp and *out (pb with kvp attached). FFPA_CUDA_KERNEL=sm90 keeps the
 * prefill kernels (A/B runs). */
bool decode_as_kv_cache(const ffpa_problem *pb, ffpa_kv_problem *kvp, ffpa_problem *out)
{
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    if (choice && strcmp(choice, "generic") != 0 && strcmp(choice, "auto") != 0)
        return false; /* sm90, or a bad value the launcher reports */
    if (pb->nq > 16 || pb->has_bias || pb->dropout_p > 0.0f || pb->cu_q)
        return false;
    memset(kvp, 0, sizeof *kvp);
    kvp->block_table = NULL;
    kvp->max_pages = 1;
    kvp->num_pages = pb->batch;
    kvp->page_size = pb->nkv;
    kvp->cache_seqlens = NULL;
    kvp->uniform_len = pb->nkv;
    *out = *pb;
    out->kv = kvp;
    return true;
}

} /* namespace */

extern "C" size_t ffpa_cuda_forward_workspace(const struct ffpa_cuda_state *st, const ffpa_problem *pb)
{
    ffpa_plan plan;
    char err[256];
    ffpa_kv_problem kvp;
    ffpa_problem as_kv;
    if (decode_as_kv_cache(pb, &kvp, &as_kv))
        return ffpa_cuda_kv_workspace(st, &as_kv);
    if (make_plan(st, pb, &plan, err, sizeof err) != FFPA_OK)
        return 0;
    return ws_layout(pb, &plan).total;
}

extern "C" ffpa_status ffpa_cuda_forward(struct ffpa_cuda_state *st, const ffpa_problem *pb, void *ws,
                                         size_t ws_bytes, char *err, size_t err_len)
{
    char reason[256];
    const char *why = unsupported_reason(pb, reason, sizeof reason);
    if (why)
        return fail(FFPA_ERR_UNSUPPORTED, err, err_len, why);
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0)
        return FFPA_OK;
    ffpa_kv_problem kvp;
    ffpa_problem as_kv;
    if (decode_as_kv_cache(pb, &kvp, &as_kv))
        return ffpa_cuda_forward_kvcache(st, &as_kv, ws, ws_bytes, err, err_len);

    ffpa_plan plan;
    ffpa_status s = make_plan(st, pb, &plan, err, err_len);
    if (s != FFPA_OK)
        return s;
    const FwdKernelDesc *kd = pick_kernel(pb->dtype, pb->dv, plan);
    const int q_resident = ffpa_plan_q_resident(&plan);
    size_t smem = kd ? kd->smem_bytes(q_resident, plan.n_qk_chunks, plan.stages) : 0;
    size_t plan_smem = plan.smem_bytes;
    /* Tuning knob (not API): FFPA_CUDA_FWD_STAGES overrides the ring depth. */
    const char *stages_env = getenv("FFPA_CUDA_FWD_STAGES");
    if (kd && stages_env && atoi(stages_env) >= 2 && atoi(stages_env) <= 4) {
        plan.stages = atoi(stages_env);
        smem = plan_smem = kd->smem_bytes(q_resident, plan.n_qk_chunks, plan.stages);
    }
    if (!kd || smem != plan_smem) {
        if (err && err_len)
            snprintf(err, err_len,
                     "internal: planner and cuda kernels disagree (plan br=%d bc=%d chunk=%d warps=%d "
                     "smem=%zu for Dv=%lld; kernel %s smem=%zu)",
                     plan.br, plan.bc, plan.dqk_chunk, plan.warps, plan.smem_bytes, (long long)pb->dv,
                     kd ? "with that tile" : "none with that tile", smem);
        return FFPA_ERR_INTERNAL;
    }

    WsLayout wl = ws_layout(pb, &plan);
    if (wl.total > 0 && (ws == NULL || ws_bytes < wl.total))
        return fail(FFPA_ERR_INTERNAL, err, err_len, "internal: forward workspace too small");
    char *wsb = static_cast<char *>(ws);

    ffpa_gpu_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q = pb->q.data;
    p.k = pb->k.data;
    p.v = pb->v.data;
    p.o = pb->o.data;
    p.lse = static_cast<float *>(pb->lse.data);
    p.q_sb = pb->q.sb, p.q_sh = pb->q.sh, p.q_sn = pb->q.sn;
    p.k_sb = pb->k.sb, p.k_sh = pb->k.sh, p.k_sn = pb->k.sn;
    p.v_sb = pb->v.sb, p.v_sh = pb->v.sh, p.v_sn = pb->v.sn;
    p.o_sb = pb->o.sb, p.o_sh = pb->o.sh, p.o_sn = pb->o.sn;
    p.lse_sb = pb->lse.sb, p.lse_sh = pb->lse.sh, p.lse_sn = pb->lse.sn;
    p.batch = (int)pb->batch;
    p.hq = (int)pb->hq;
    p.hkv = (int)pb->hkv;
    p.group = (int)(pb->hq / pb->hkv);
    p.nq = (int)pb->nq;
    p.nkv = (int)pb->nkv;
    p.dqk = (int)pb->dqk;
    p.dv = (int)pb->dv;
    p.scale_log2 = pb->scale * 1.4426950408889634f;
    p.causal = pb->causal;
    if (pb->has_bias) {
        p.bias = pb->bias.data;
        p.bias_dtype = (int)pb->bias_dtype;
        p.bias_sb = pb->bias.sb, p.bias_sh = pb->bias.sh, p.bias_sn = pb->bias.sn, p.bias_sd = pb->bias.sd;
    }
    p.has_dropout = pb->dropout_p > 0.0f;
    p.dropout_threshold = pb->dropout_threshold;
    p.dropout_scale = pb->dropout_scale;
    p.dropout_seed = pb->dropout_seed;
    p.dropout_offset = pb->dropout_offset;
    p.q_blocks = (int)plan.q_blocks;
    p.kv_splits = plan.kv_splits;
    p.longest_first = plan.order == FFPA_ORDER_LONGEST_FIRST;
    p.q_resident = q_resident;
    p.stages = plan.stages;
    p.qk_chunks = plan.n_qk_chunks;
    p.v_chunks = plan.n_v_chunks;
    int64_t kv_tiles = (pb->nkv + plan.bc - 1) / plan.bc;
    p.kv_tiles_per_split = (int)((kv_tiles + plan.kv_splits - 1) / plan.kv_splits);

    cudaError_t e;
    if (pb->cu_q) {
        size_t bytes = (size_t)(pb->batch + 1) * sizeof(int32_t);
        e = cudaMemcpyAsync(wsb + wl.cu_q, pb->cu_q, bytes, cudaMemcpyHostToDevice, st->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(wsb + wl.cu_k, pb->cu_k, bytes, cudaMemcpyHostToDevice, st->stream);
        if (e != cudaSuccess)
            return ffpa_cuda_error(e, "uploading cu_seqlens", err, err_len);
        p.cu_q = reinterpret_cast<const int32_t *>(wsb + wl.cu_q);
        p.cu_k = reinterpret_cast<const int32_t *>(wsb + wl.cu_k);
    }
    if (plan.kv_splits > 1) {
        p.part_o = reinterpret_cast<float *>(wsb + wl.part_o);
        p.part_lse = reinterpret_cast<float *>(wsb + wl.part_lse);
    }

    /* Kernel choice: FFPA_CUDA_KERNEL=generic|sm90 forces one (A/B runs, over
     * the tuning table); auto or unset: the plan's family (a table's choice,
     * else the Hopper kernels where they cover the problem, else generic). */
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    const bool force_sm90 = choice && strcmp(choice, "sm90") == 0;
    const bool force_generic = choice && strcmp(choice, "generic") == 0;
    if (choice && !force_sm90 && !force_generic && strcmp(choice, "auto") != 0)
        return fail(FFPA_ERR_INVALID_ARGUMENT, err, err_len,
                    "FFPA_CUDA_KERNEL: unknown kernel family; expected generic, sm90 or auto");
    const bool generic_only = force_generic || (!force_sm90 && plan.family == FFPA_FAMILY_GENERIC);
    if (force_sm90 || (!generic_only && plan.kv_splits == 1 && plan.path != FFPA_PATH_DECODE)) {
        const char *kernel = NULL;
        char why[256] = "";
        s = ffpa_cuda_sm90_forward(st, pb, &p, plan.cluster, &kernel, why, sizeof why);
        if (s == FFPA_OK) {
            st->last_kernel = kernel;
            return FFPA_OK;
        }
        if (s != FFPA_ERR_UNSUPPORTED || force_sm90) {
            if (err && err_len)
                snprintf(err, err_len, "%s%s", force_sm90 ? "FFPA_CUDA_KERNEL=sm90: " : "", why);
            return s;
        }
    }

    int64_t blocks = plan.q_blocks * pb->hq * pb->batch * plan.kv_splits;
    e = kd->launch(p, smem, blocks, st->stream);
    if (e != cudaSuccess)
        return ffpa_cuda_error(e, "launching the forward kernel", err, err_len);
    st->last_kernel = plan.kv_splits > 1 ? "generic decode (split-KV)"
                      : plan.path == FFPA_PATH_SPLIT_D ? "generic split-d" : "generic small-d";
    if (plan.kv_splits > 1) {
        dim3 grid((unsigned)pb->nq, (unsigned)pb->hq, (unsigned)pb->batch);
        if (pb->dtype == FFPA_F16)
            combine_kernel<ffpa::arch::f16><<<grid, 128, 0, st->stream>>>(p);
        else
            combine_kernel<ffpa::arch::bf16><<<grid, 128, 0, st->stream>>>(p);
        e = cudaGetLastError();
        if (e != cudaSuccess)
            return ffpa_cuda_error(e, "launching the split-KV combine kernel", err, err_len);
    }
    return FFPA_OK;
}
