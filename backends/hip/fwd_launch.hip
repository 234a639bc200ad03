/*
 * Forward launcher of the HIP backend: what the shared kernels support,
 * the Split-D plan (common/plan.c), the instantiation of the plan's tile, varlen
 * offsets into the workspace, the launch and the split-KV combine.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fwd_kernels_hip.h"
#include "gpu_support.h"
#include "hip_state.h"
#include "plan.h"

namespace {

using ffpa::hip::FwdKernelDesc;

size_t round256(size_t x) { return (x + 255) / 256 * 256; }

ffpa_status fail(ffpa_status s, char *err, size_t err_len, const char *msg)
{
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
    return s;
}

/* Workspace: [cu_q][cu_k][partial O][partial LSE], 256-byte aligned pieces. */
struct Workspace {
    size_t cu_q, cu_k, part_o, part_lse, total;
};

Workspace workspace_of(const ffpa_problem *pb, const ffpa_plan *plan)
{
    Workspace w;
    size_t cu = pb->cu_q ? round256((size_t)(pb->batch + 1) * sizeof(int32_t)) : 0;
    size_t rows = plan->kv_splits > 1 ? (size_t)plan->kv_splits * pb->batch * pb->hq * pb->nq : 0;
    w.cu_q = 0;
    w.cu_k = cu;
    w.part_o = 2 * cu;
    w.part_lse = w.part_o + round256(rows * (size_t)pb->dv * sizeof(float));
    w.total = w.part_lse + round256(rows * sizeof(float));
    return w;
}

/* Why the kernels cannot run pb (message in buf), or NULL. */
const char *unsupported(const ffpa_problem *pb, char *buf, size_t len)
{
    const ffpa_view *views[4] = {&pb->q, &pb->k, &pb->v, &pb->o};
    const char *names[4] = {"q", "k", "v", "o"};
    const char *why = ffpa_gpu_unsupported(pb, views, names, 4, "hip", buf, len);
    if (why)
        return why;
    if (pb->nq > INT32_MAX || pb->nkv > INT32_MAX || pb->batch * pb->hq > INT32_MAX)
        return "q: sequence or batch too large for the hip backend; expected at most 2^31-1";
    return NULL;
}

/* The instantiation that runs the plan's tile: the smallest covering Dv
 * that has it (the rule of ffpa_plan_use_fwd_tile); NULL if none. */
const FwdKernelDesc *kernel_for(ffpa_dtype dtype, int64_t dv, const ffpa_plan &plan)
{
    const FwdKernelDesc *tables[2] = {dtype == FFPA_F16 ? ffpa::hip::fwd_f16_small() : ffpa::hip::fwd_bf16_small(),
                                      dtype == FFPA_F16 ? ffpa::hip::fwd_f16_large() : ffpa::hip::fwd_bf16_large()};
    for (int t = 0; t < 2; ++t)
        for (int i = 0; i < 3; ++i) {
            const FwdKernelDesc &kd = tables[t][i];
            if (dv <= kd.dv && plan.br == 16 * kd.wm && plan.bc == kd.bc && plan.dqk_chunk == kd.chunk &&
                plan.warps == kd.wm * kd.wn)
                return &kd;
        }
    return NULL;
}

ffpa_status plan_forward(const ffpa_hip_state *st, const ffpa_problem *pb, ffpa_plan *plan, char *err,
                         size_t err_len)
{
    ffpa_plan_input in = ffpa_plan_input_of(pb, 0);
    ffpa_status s = ffpa_plan_make(&in, &st->caps.limits, plan);
    if (s == FFPA_OK)
        return FFPA_OK;
    if (err && err_len)
        snprintf(err, err_len,
                 "q: no forward configuration for Dqk=%lld Dv=%lld fits this device's %zu bytes of shared memory "
                 "per block; expected a smaller head dimension on this GPU",
                 (long long)pb->dqk, (long long)pb->dv, st->caps.limits.smem_per_block);
    return s == FFPA_ERR_UNSUPPORTED ? s : FFPA_ERR_INTERNAL;
}

} /* namespace */

extern "C" size_t ffpa_hip_forward_workspace(const struct ffpa_hip_state *st, const ffpa_problem *pb)
{
    ffpa_plan plan;
    char err[8];
    if (plan_forward(st, pb, &plan, err, sizeof err) != FFPA_OK)
        return 0;
    return workspace_of(pb, &plan).total;
}

extern "C" ffpa_status ffpa_hip_forward(struct ffpa_hip_state *st, const ffpa_problem *pb, void *ws,
                                        size_t ws_bytes, char *err, size_t err_len)
{
    char reason[256];
    const char *why = unsupported(pb, reason, sizeof reason);
    if (why)
        return fail(FFPA_ERR_UNSUPPORTED, err, err_len, why);
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0)
        return FFPA_OK;

    ffpa_plan plan;
    ffpa_status s = plan_forward(st, pb, &plan, err, err_len);
    if (s != FFPA_OK)
        return s;
    const FwdKernelDesc *kd = kernel_for(pb->dtype, pb->dv, plan);
    const int q_resident = ffpa_plan_q_resident(&plan);
    size_t smem = kd ? kd->smem_bytes(q_resident, plan.n_qk_chunks, plan.stages) : 0;
    if (!kd || smem != plan.smem_bytes) {
        if (err && err_len)
            snprintf(err, err_len,
                     "internal: planner and hip kernels disagree (plan br=%d bc=%d chunk=%d warps=%d smem=%zu for "
                     "Dv=%lld; kernel %s smem=%zu)",
                     plan.br, plan.bc, plan.dqk_chunk, plan.warps, plan.smem_bytes, (long long)pb->dv,
                     kd ? "with that tile" : "none with that tile", smem);
        return FFPA_ERR_INTERNAL;
    }

    Workspace wl = workspace_of(pb, &plan);
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

    hipError_t e;
    if (pb->cu_q) {
        size_t bytes = (size_t)(pb->batch + 1) * sizeof(int32_t);
        e = hipMemcpyAsync(wsb + wl.cu_q, pb->cu_q, bytes, hipMemcpyHostToDevice, st->stream);
        if (e == hipSuccess)
            e = hipMemcpyAsync(wsb + wl.cu_k, pb->cu_k, bytes, hipMemcpyHostToDevice, st->stream);
        if (e != hipSuccess)
            return ffpa_hip_error(e, "uploading cu_seqlens", err, err_len);
        p.cu_q = reinterpret_cast<const int32_t *>(wsb + wl.cu_q);
        p.cu_k = reinterpret_cast<const int32_t *>(wsb + wl.cu_k);
    }
    if (plan.kv_splits > 1) {
        p.part_o = reinterpret_cast<float *>(wsb + wl.part_o);
        p.part_lse = reinterpret_cast<float *>(wsb + wl.part_lse);
    }

    int64_t blocks = plan.q_blocks * pb->hq * pb->batch * plan.kv_splits;
    e = kd->launch(p, smem, blocks, st->stream);
    if (e != hipSuccess)
        return ffpa_hip_error(e, "launching the forward kernel", err, err_len);
    if (plan.kv_splits > 1) {
        dim3 grid((unsigned)pb->nq, (unsigned)pb->hq, (unsigned)pb->batch);
        if (pb->dtype == FFPA_F16)
            ffpa::hip::ffpa_hip_combine_kernel<ffpa::arch::f16><<<grid, dim3(128), 0, st->stream>>>(p);
        else
            ffpa::hip::ffpa_hip_combine_kernel<ffpa::arch::bf16><<<grid, dim3(128), 0, st->stream>>>(p);
        e = hipGetLastError();
        if (e != hipSuccess)
            return ffpa_hip_error(e, "launching the split-KV combine kernel", err, err_len);
    }
    return FFPA_OK;
}
