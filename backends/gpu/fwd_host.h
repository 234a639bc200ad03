/*
 * Host side of the generic forward, written once for the CUDA and HIP
 * launchers (backends/cuda/fwd_launch.cu, backends/hip/fwd_launch.hip): what
 * the kernels support, the Split-D plan, the instantiation that runs the
 * plan's tile, the workspace layout, the kernel parameters, and the launch
 * (kernel, then the split-KV combine).
 *
 * The runtime is FwdRt (gpu_rt.h's calls and the split-KV combine launch);
 * Desc is the vendor's kernel descriptor: dv, wm, wn, bc, chunk;
 * smem_bytes(q_resident, qk_chunks, stages); launch(p, smem, blocks, stream).
 * Requires the arch layer and fwd_kernel.cuh (the launcher's kernel
 * header) to be included first: the combine kernel is compiled here.
 */
#ifndef FFPA_GPU_FWD_HOST_H
#define FFPA_GPU_FWD_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "fwd_params.h"
#include "gpu_rt.h"
#include "gpu_support.h"
#include "plan.h"
#include "problem.h"

namespace ffpa {
namespace fwd {

template <typename T> __global__ void combine_kernel(const ffpa_gpu_fwd_params p)
{
    combine_body<T>(p);
}

/* The runtime shim of attach_workspace and launch. */
struct FwdRt : GpuRt {
    static Error combine(ffpa_dtype dtype, const ffpa_gpu_fwd_params &p, Stream s)
    {
        dim3 grid((unsigned)p.nq, (unsigned)p.hq, (unsigned)p.batch);
        if (dtype == FFPA_F16)
            combine_kernel<arch::f16><<<grid, dim3(128), 0, s>>>(p);
        else
            combine_kernel<arch::bf16><<<grid, dim3(128), 0, s>>>(p);
        return last_error();
    }
};

namespace host {

inline size_t align_up(size_t x)
{
    return (x + 255) / 256 * 256;
}

inline ffpa_status fail(ffpa_status s, char *err, size_t err_len, const char *msg)
{
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
    return s;
}

/* Workspace: [cu_q][cu_k][partial O][partial LSE], each 256-byte aligned. */
struct Workspace {
    size_t cu_q, cu_k, part_o, part_lse, total;
};

inline Workspace workspace_of(const ffpa_problem *pb, const ffpa_plan &plan)
{
    Workspace w;
    size_t cu = pb->cu_q ? align_up((size_t)(pb->batch + 1) * sizeof(int32_t)) : 0;
    size_t rows = plan.kv_splits > 1 ? (size_t)plan.kv_splits * pb->batch * pb->hq * pb->nq : 0;
    w.cu_q = 0;
    w.cu_k = cu;
    w.part_o = 2 * cu;
    w.part_lse = w.part_o + align_up(rows * (size_t)pb->dv * sizeof(float));
    w.total = w.part_lse + align_up(rows * sizeof(float));
    return w;
}

/* Why the generic kernels cannot run pb on `backend` (message in buf), or NULL. */
inline const char *unsupported(const ffpa_problem *pb, const char *backend, char *buf, size_t len)
{
    const ffpa_view *views[4] = {&pb->q, &pb->k, &pb->v, &pb->o};
    const char *names[4] = {"q", "k", "v", "o"};
    const char *why = ffpa_gpu_unsupported(pb, views, names, 4, backend, buf, len);
    if (why)
        return why;
    if (pb->nq > INT32_MAX || pb->nkv > INT32_MAX || pb->batch * pb->hq > INT32_MAX) {
        snprintf(buf, len, "q: sequence or batch too large for the %s backend; expected at most 2^31-1", backend);
        return buf;
    }
    return NULL;
}

/* The Split-D plan for pb on this device (its tuning table's choice where one applies). */
inline ffpa_status make_plan(const ffpa_device_limits &lim, const ffpa_problem *pb, ffpa_plan *plan, char *err,
                             size_t err_len)
{
    ffpa_plan_input in = ffpa_plan_input_of(pb, 0);
    ffpa_status s = ffpa_plan_make(&in, &lim, plan);
    if (s == FFPA_OK)
        return FFPA_OK;
    if (err && err_len)
        snprintf(err, err_len,
                 "q: no forward configuration for Dqk=%lld Dv=%lld fits this device's %zu bytes of shared memory "
                 "per block; expected a smaller head dimension on this GPU",
                 (long long)pb->dqk, (long long)pb->dv, lim.smem_per_block);
    return s == FFPA_ERR_UNSUPPORTED ? s : FFPA_ERR_INTERNAL;
}

/* The instantiation that runs the plan's tile: the smallest covering Dv
 * that has it (the rule of ffpa_plan_use_fwd_tile), from the dtype's small
 * and large tables (kFwdSmallKernels and kFwdLargeKernels entries, in
 * increasing Dv); NULL if none. */
template <class Desc>
const Desc *pick_kernel(const Desc *small, int n_small, const Desc *large, int n_large, int64_t dv,
                        const ffpa_plan &plan)
{
    const Desc *tables[2] = {small, large};
    const int sizes[2] = {n_small, n_large};
    for (int t = 0; t < 2; ++t)
        for (int i = 0; i < sizes[t]; ++i) {
            const Desc &kd = tables[t][i];
            if (dv <= kd.dv && plan.br == kd.br && plan.bc == kd.bc && plan.dqk_chunk == kd.chunk &&
                plan.warps == kd.warps)
                return &kd;
        }
    return NULL;
}

/* Refuses (FFPA_ERR_INTERNAL, saying what differs) a kernel that is missing
 * or whose shared memory is not the plan's. */
template <class Desc>
ffpa_status check_kernel(const Desc *kd, size_t smem, size_t plan_smem, const ffpa_problem *pb, const ffpa_plan &plan,
                         const char *backend, char *err, size_t err_len)
{
    if (kd && smem == plan_smem)
        return FFPA_OK;
    if (err && err_len)
        snprintf(err, err_len,
                 "internal: planner and %s kernels disagree (plan br=%d bc=%d chunk=%d warps=%d smem=%zu for "
                 "Dv=%lld; kernel %s smem=%zu)",
                 backend, plan.br, plan.bc, plan.dqk_chunk, plan.warps, plan_smem, (long long)pb->dv,
                 kd ? "with that tile" : "none with that tile", smem);
    return FFPA_ERR_INTERNAL;
}

/* The kernel parameters of pb under plan (workspace pointers unset). */
inline ffpa_gpu_fwd_params params_of(const ffpa_problem *pb, const ffpa_plan &plan, int q_resident)
{
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
    p.group = (int)ffpa_query_group(pb);
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
    ffpa_gpu_fill_variants(&p, pb);
    p.has_dropout = pb->dropout_p > 0.0f;
    p.dropout_threshold = pb->dropout_threshold;
    p.dropout_scale = pb->dropout_scale;
    p.dropout_seed = pb->dropout_seed;
    p.dropout_offset = pb->dropout_offset;
    /* Tuning knob (not API): FFPA_GENERIC_PLAIN=0 keeps every call on the variant path (A/B runs). */
    p.plain = p.scale_log2 > 0.0f && ffpa_gpu_fwd_no_variants(&p) && ffpa_env_bool("FFPA_GENERIC_PLAIN", 1, NULL);
    p.q_blocks = (int)plan.q_blocks;
    p.kv_splits = plan.kv_splits;
    p.longest_first = plan.order == FFPA_ORDER_LONGEST_FIRST;
    p.q_resident = q_resident;
    p.stages = plan.stages;
    p.qk_chunks = plan.n_qk_chunks;
    p.v_chunks = plan.n_v_chunks;
    int64_t kv_tiles = (pb->nkv + plan.bc - 1) / plan.bc;
    p.kv_tiles_per_split = (int)((kv_tiles + plan.kv_splits - 1) / plan.kv_splits);
    return p;
}

/* Points p at its workspace pieces and uploads the varlen offsets there
 * (offsets already in device memory go to the kernels as they are). */
template <class Rt = FwdRt>
ffpa_status attach_workspace(ffpa_gpu_fwd_params *p, const ffpa_problem *pb, const ffpa_plan &plan, void *ws,
                             size_t ws_bytes, typename Rt::Stream stream, char *err, size_t err_len)
{
    const Workspace wl = workspace_of(pb, plan);
    if (wl.total > 0 && (ws == NULL || ws_bytes < wl.total))
        return fail(FFPA_ERR_INTERNAL, err, err_len, "internal: forward workspace too small");
    char *wsb = static_cast<char *>(ws);
    if (pb->cu_q && pb->cu_on_device) {
        p->cu_q = pb->cu_q;
        p->cu_k = pb->cu_k;
    } else if (pb->cu_q) {
        size_t bytes = (size_t)(pb->batch + 1) * sizeof(int32_t);
        typename Rt::Error e = Rt::copy_to_device(wsb + wl.cu_q, pb->cu_q, bytes, stream);
        if (Rt::ok(e))
            e = Rt::copy_to_device(wsb + wl.cu_k, pb->cu_k, bytes, stream);
        if (!Rt::ok(e))
            return Rt::error(e, "uploading cu_seqlens", err, err_len);
        p->cu_q = reinterpret_cast<const int32_t *>(wsb + wl.cu_q);
        p->cu_k = reinterpret_cast<const int32_t *>(wsb + wl.cu_k);
    }
    if (plan.kv_splits > 1) {
        p->part_o = reinterpret_cast<float *>(wsb + wl.part_o);
        p->part_lse = reinterpret_cast<float *>(wsb + wl.part_lse);
    }
    return FFPA_OK;
}

/* Whether kd's plain twin (no variant code) runs p: a plain call
 * (ffpa_gpu_fwd_params::plain) without dropout, where the twin is built.
 * Tuning knob (not API): FFPA_GENERIC_PLAIN_TWIN=0 never (A/B in one build). */
template <class Desc> bool uses_plain_twin(const Desc *kd, const ffpa_gpu_fwd_params &p)
{
    return kd->launch_plain && p.plain && !p.has_dropout && ffpa_env_bool("FFPA_GENERIC_PLAIN_TWIN", 1, NULL);
}

/* The generic kernel over the plan's grid, then the split-KV combine. */
template <class Desc, class Rt = FwdRt>
ffpa_status launch(const Desc *kd, const ffpa_gpu_fwd_params &p, size_t smem, const ffpa_problem *pb,
                   const ffpa_plan &plan, typename Rt::Stream stream, char *err, size_t err_len)
{
    int64_t blocks = plan.q_blocks * pb->hq * pb->batch * plan.kv_splits;
    typename Rt::Error e = (uses_plain_twin(kd, p) ? kd->launch_plain : kd->launch)(p, smem, blocks, stream);
    if (!Rt::ok(e))
        return Rt::error(e, "launching the forward kernel", err, err_len);
    if (plan.kv_splits > 1 && !Rt::ok(e = Rt::combine(pb->dtype, p, stream)))
        return Rt::error(e, "launching the split-KV combine kernel", err, err_len);
    return FFPA_OK;
}

/* The kernel name ffpa_last_kernel reports for a generic launch of plan
 * (plain: the plain twin ran). */
inline const char *generic_name(const ffpa_plan &plan, bool plain = false)
{
    return plan.kv_splits > 1                  ? (plain ? "generic decode (split-KV) plain" : "generic decode (split-KV)")
           : plan.path == FFPA_PATH_SPLIT_D ? (plain ? "generic split-d plain" : "generic split-d")
                                               : (plain ? "generic small-d plain" : "generic small-d");
}

} /* namespace host */
} /* namespace fwd */
} /* namespace ffpa */

#endif
