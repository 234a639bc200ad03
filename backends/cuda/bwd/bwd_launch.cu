/*
 * Host side of the backward: checks what the kernels support, carves the
 * workspace, picks the key-tile size and pipeline depth that fit the
 * device's shared memory, and launches
 *   delta -> dK/dV -> dQ (+ dbias) -> [fp32 buffers -> dq, dk, dv, dbias]
 * on the context's stream.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bwd_dkdv.cuh"
#include "bwd_dq.cuh"
#include "bwd_kernels.h"
#include "bwd_launch.h"

namespace {

using namespace ffpa::bwd;

constexpr size_t kAlign = 256;

size_t align_up(size_t x)
{
    return (x + kAlign - 1) / kAlign * kAlign;
}

/* Elements of the fp32 dbias buffer per dimension: 1 where dbias broadcasts. */
void dbias_grid(const ffpa_problem *pb, int64_t (&g)[4])
{
    g[0] = pb->dbias.sb ? pb->batch : 1;
    g[1] = pb->dbias.sh ? pb->hq : 1;
    g[2] = pb->dbias.sn ? pb->nq : 1;
    g[3] = pb->dbias.sd ? pb->nkv : 1;
}

struct Layout {
    size_t cu_q, cu_k, delta, dq, dk, dv, dbias, total;
};

Layout layout_of(const ffpa_problem *pb)
{
    Layout l;
    memset(&l, 0, sizeof l);
    size_t off = 0;
    auto take = [&](size_t bytes) {
        size_t at = off;
        off += align_up(bytes);
        return at;
    };
    if (pb->cu_q) {
        l.cu_q = take((size_t)(pb->batch + 1) * sizeof(int32_t));
        l.cu_k = take((size_t)(pb->batch + 1) * sizeof(int32_t));
    }
    l.delta = take((size_t)(pb->hq * pb->total_q) * sizeof(float));
    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        l.dq = take((size_t)(pb->hq * pb->total_q * pb->dqk) * sizeof(float));
        l.dk = take((size_t)(pb->hkv * pb->total_k * pb->dqk) * sizeof(float));
        l.dv = take((size_t)(pb->hkv * pb->total_k * pb->dv) * sizeof(float));
    }
    if (pb->has_dbias) {
        int64_t g[4];
        dbias_grid(pb, g);
        l.dbias = take((size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float));
    }
    l.total = off;
    return l;
}

ffpa_status device_error(cudaError_t e, const char *what, char *err, size_t err_len)
{
    snprintf(err, err_len, "cuda backward: %s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
}

/* q/k/v/o/dout feed 16-byte cp.async / vector loads. */
bool view_vectorizable(const ffpa_view &v, int64_t sd)
{
    return sd == 1 && ((v.sb | v.sh | v.sn) & 7) == 0 && ((uintptr_t)v.data & 15) == 0;
}

ffpa_status check(const ffpa_problem *pb, char *err, size_t err_len)
{
    if (pb->dtype != FFPA_F16 && pb->dtype != FFPA_BF16) {
        snprintf(err, err_len, "q: dtype %s is not supported by the cuda backward; expected f16 or bf16",
                 ffpa_dtype_name(pb->dtype));
        return FFPA_ERR_UNSUPPORTED;
    }
    if (pb->dqk % 8 || pb->dv % 8 || pb->dqk > FFPA_MAX_HEAD_DIM || pb->dv > FFPA_MAX_HEAD_DIM) {
        snprintf(err, err_len,
                 "q: head dims Dqk=%lld, Dv=%lld are not supported by the cuda backward; expected multiples of 8 "
                 "up to %d",
                 (long long)pb->dqk, (long long)pb->dv, FFPA_MAX_HEAD_DIM);
        return FFPA_ERR_UNSUPPORTED;
    }
    const struct {
        const char *name;
        const ffpa_view *v;
    } inputs[] = {{"q", &pb->q}, {"k", &pb->k}, {"v", &pb->v}, {"out", &pb->o}, {"dout", &pb->dout}};
    for (const auto &in : inputs)
        if (!view_vectorizable(*in.v, in.v->sd)) {
            snprintf(err, err_len,
                     "%s: layout not supported by the cuda backward; expected last-dimension stride 1, other strides "
                     "multiples of 8 elements and a 16-byte aligned pointer",
                     in.name);
            return FFPA_ERR_UNSUPPORTED;
        }
    if (pb->grad_accum == FFPA_GRAD_ACCUM_OUTPUT) {
        const struct {
            const char *name;
            const ffpa_view *v;
        } outs[] = {{"dq", &pb->grad_q}, {"dk", &pb->grad_k}, {"dv", &pb->grad_v}};
        for (const auto &o : outs)
            if (o.v->sd != 1 || ((o.v->sb | o.v->sh | o.v->sn) & 1) || ((uintptr_t)o.v->data & 3)) {
                snprintf(err, err_len,
                         "%s: layout not supported with opt.grad_accum = FFPA_GRAD_ACCUM_OUTPUT; expected "
                         "last-dimension stride 1 and even strides (or use FFPA_GRAD_ACCUM_F32)",
                         o.name);
                return FFPA_ERR_UNSUPPORTED;
            }
    }
    return FFPA_OK;
}

ffpa_bwd_acc acc_of_buffer(void *data, int64_t heads, int64_t rows_total, int64_t rows_per_seq, int64_t dim,
                           bool varlen)
{
    ffpa_bwd_acc a;
    a.data = data;
    a.sn = dim;
    a.sh = rows_total * dim;
    a.sb = varlen ? 0 : rows_per_seq * dim;
    a.is_f32 = 1;
    (void)heads;
    return a;
}

ffpa_bwd_acc acc_of_view(const ffpa_view &v)
{
    ffpa_bwd_acc a;
    a.data = v.data;
    a.sb = v.sb;
    a.sh = v.sh;
    a.sn = v.sn;
    a.is_f32 = 0;
    return a;
}

} /* namespace */

/* From shapes and options alone: a size query has no output views to check
 * (ffpa_backward_workspace_size), and a call this backend later refuses
 * costs nothing but the reserved bytes. */
extern "C" size_t ffpa_cuda_backward_workspace(const ffpa_problem *pb)
{
    return layout_of(pb).total;
}

extern "C" ffpa_status ffpa_cuda_backward(struct ffpa_cuda_state *st, const ffpa_problem *pb, void *ws,
                                          size_t ws_bytes, char *err, size_t err_len)
{
    ffpa_status status = check(pb, err, err_len);
    if (status != FFPA_OK)
        return status;
    const Layout lay = layout_of(pb);
    if (lay.total > 0 && (ws == nullptr || ws_bytes < lay.total)) {
        snprintf(err, err_len, "workspace: %zu bytes given to the cuda backward; expected >= %zu", ws_bytes,
                 lay.total);
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    cudaStream_t stream = st->stream;
    unsigned char *base = static_cast<unsigned char *>(ws);
    const size_t elt = 2;
    const size_t smem_limit = st->prop.sharedMemPerBlockOptin;
    const bool varlen = pb->cu_q != nullptr;

    /* Key tile and ring depth of the dK/dV kernel: K_j/V_j must fit whole. */
    int bc = 0, dkdv_stages = 0;
    for (int cand : {64, 32}) {
        for (int s = 3; s >= 2 && !bc; --s)
            if (dkdv_smem_bytes(cand, (int)pb->dqk, (int)pb->dv, s, elt) <= smem_limit) {
                bc = cand;
                dkdv_stages = s;
            }
        if (bc)
            break;
    }
    int dq_stages = 0;
    for (int s = 3; s >= 2 && !dq_stages; --s)
        if (dq_smem_bytes(s, pb->has_dbias, elt) <= smem_limit)
            dq_stages = s;
    if (!bc || !dq_stages) {
        snprintf(err, err_len,
                 "q: Dqk=%lld, Dv=%lld need more shared memory per block than this device has (%zu bytes) in the "
                 "cuda backward; expected Dqk + Dv small enough for K and V tiles of 32 rows",
                 (long long)pb->dqk, (long long)pb->dv, smem_limit);
        return FFPA_ERR_UNSUPPORTED;
    }

    ffpa_bwd_params p;
    memset(&p, 0, sizeof p);
    p.mask.scale_log2 = pb->scale * 1.4426950408889634f;
    p.mask.hq = (int)pb->hq;
    if (pb->has_bias) {
        p.mask.bias = pb->bias.data;
        p.mask.bias_dtype = (int)pb->bias_dtype;
        p.mask.bias_sb = pb->bias.sb;
        p.mask.bias_sh = pb->bias.sh;
        p.mask.bias_sn = pb->bias.sn;
        p.mask.bias_sd = pb->bias.sd;
    }
    p.has_dropout = pb->dropout_p > 0.0f;
    p.mask.has_dropout = p.has_dropout;
    p.mask.dropout_threshold = pb->dropout_threshold;
    p.mask.dropout_scale = pb->dropout_scale;
    p.mask.dropout_seed = pb->dropout_seed;
    p.mask.dropout_offset = pb->dropout_offset;

    p.q = pb->q.data;
    p.k = pb->k.data;
    p.v = pb->v.data;
    p.o = pb->o.data;
    p.dout = pb->dout.data;
    p.q_sb = pb->q.sb, p.q_sh = pb->q.sh, p.q_sn = pb->q.sn;
    p.k_sb = pb->k.sb, p.k_sh = pb->k.sh, p.k_sn = pb->k.sn;
    p.v_sb = pb->v.sb, p.v_sh = pb->v.sh, p.v_sn = pb->v.sn;
    p.o_sb = pb->o.sb, p.o_sh = pb->o.sh, p.o_sn = pb->o.sn;
    p.do_sb = pb->dout.sb, p.do_sh = pb->dout.sh, p.do_sn = pb->dout.sn;
    p.lse = static_cast<const float *>(pb->lse.data);
    p.lse_sb = pb->lse.sb, p.lse_sh = pb->lse.sh, p.lse_sn = pb->lse.sn;
    p.delta = reinterpret_cast<float *>(base + lay.delta);
    p.total_q = pb->total_q;
    p.batch = (int)pb->batch;
    p.hq = (int)pb->hq;
    p.hkv = (int)pb->hkv;
    p.group = (int)(pb->hq / pb->hkv);
    p.nq = (int)pb->nq;
    p.nkv = (int)pb->nkv;
    p.dqk = (int)pb->dqk;
    p.dv = (int)pb->dv;
    p.scale = pb->scale;
    p.causal = pb->causal;

    cudaError_t e;
    if (varlen) {
        p.cu_q = reinterpret_cast<const int32_t *>(base + lay.cu_q);
        p.cu_k = reinterpret_cast<const int32_t *>(base + lay.cu_k);
        const size_t bytes = (size_t)(pb->batch + 1) * sizeof(int32_t);
        if ((e = cudaMemcpyAsync(base + lay.cu_q, pb->cu_q, bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
            (e = cudaMemcpyAsync(base + lay.cu_k, pb->cu_k, bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
            return device_error(e, "uploading cu_seqlens", err, err_len);
    }

    const bool f32 = pb->grad_accum == FFPA_GRAD_ACCUM_F32;
    if (f32) {
        p.dq = acc_of_buffer(base + lay.dq, pb->hq, pb->total_q, pb->nq, pb->dqk, varlen);
        p.dk = acc_of_buffer(base + lay.dk, pb->hkv, pb->total_k, pb->nkv, pb->dqk, varlen);
        p.dv_acc = acc_of_buffer(base + lay.dv, pb->hkv, pb->total_k, pb->nkv, pb->dv, varlen);
    } else {
        p.dq = acc_of_view(pb->grad_q);
        p.dk = acc_of_view(pb->grad_k);
        p.dv_acc = acc_of_view(pb->grad_v);
    }

    p.q_blocks = (int)((pb->nq + kBr - 1) / kBr);
    p.kv_blocks = (int)((pb->nkv + bc - 1) / bc);
    p.stages = dkdv_stages;

    /* dQ work items sharing dbias elements: one block, fixed order, in
     * deterministic mode; atomics on the fp32 buffer otherwise. */
    int64_t g[4] = {1, 1, 1, 1};
    bool shared_dbias = false;
    if (pb->has_dbias) {
        dbias_grid(pb, g);
        p.dbias = reinterpret_cast<float *>(base + lay.dbias);
        p.dbias_gb = g[0];
        p.dbias_gh = g[1];
        p.dbias_gn = g[2];
        p.dbias_gk = g[3];
        shared_dbias = pb->dbias.sh == 0 || pb->dbias.sb == 0 || pb->dbias.sn == 0;
        if (pb->deterministic) {
            p.member_h = pb->dbias.sh == 0;
            p.member_b = pb->dbias.sb == 0;
            p.member_qb = pb->dbias.sn == 0;
        } else {
            p.dbias_atomic = shared_dbias;
        }
        if ((e = cudaMemsetAsync(p.dbias, 0, (size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float), stream)) !=
            cudaSuccess)
            return device_error(e, "clearing the dbias buffer", err, err_len);
    }
    int64_t dq_blocks = 1;
    {
        const int64_t dims[3] = {pb->hq, pb->batch, p.q_blocks};
        const int member[3] = {p.member_h, p.member_b, p.member_qb};
        for (int x = 0; x < 3; ++x)
            dq_blocks *= member[x] ? 1 : dims[x];
    }

    if (pb->nq > 0 && (e = launch_delta((int)pb->dtype, p, stream)) != cudaSuccess)
        return device_error(e, "delta kernel", err, err_len);
    if (pb->nkv > 0 &&
        (e = launch_dkdv((int)pb->dtype, bc, p, dkdv_smem_bytes(bc, p.dqk, p.dv, dkdv_stages, elt), stream)) !=
            cudaSuccess)
        return device_error(e, "dK/dV kernel", err, err_len);
    ffpa_bwd_params pq = p;
    pq.stages = dq_stages;
    if (pb->nq > 0 && dq_blocks > 0 &&
        (e = launch_dq((int)pb->dtype, pq, dq_blocks, dq_smem_bytes(dq_stages, pb->has_dbias, elt), stream)) !=
            cudaSuccess)
        return device_error(e, "dQ kernel", err, err_len);

    if (f32) {
        const struct {
            const float *acc;
            const ffpa_view *out;
            int64_t heads, rows, nlen, dim;
        } jobs[] = {{static_cast<const float *>(p.dq.data), &pb->grad_q, pb->hq, pb->total_q, pb->nq, pb->dqk},
                    {static_cast<const float *>(p.dk.data), &pb->grad_k, pb->hkv, pb->total_k, pb->nkv, pb->dqk},
                    {static_cast<const float *>(p.dv_acc.data), &pb->grad_v, pb->hkv, pb->total_k, pb->nkv, pb->dv}};
        for (const auto &j : jobs) {
            ConvertJob cj;
            cj.acc = j.acc;
            cj.out = j.out->data;
            cj.sb = j.out->sb;
            cj.sh = j.out->sh;
            cj.sn = j.out->sn;
            cj.sd = j.out->sd;
            cj.heads = j.heads;
            cj.rows_total = j.rows;
            cj.nlen = varlen ? 0 : j.nlen;
            cj.dim = (int)j.dim;
            if ((e = launch_convert((int)pb->dtype, cj, stream)) != cudaSuccess)
                return device_error(e, "gradient conversion kernel", err, err_len);
        }
    }
    if (pb->has_dbias) {
        const int64_t stride[4] = {pb->dbias.sb, pb->dbias.sh, pb->dbias.sn, pb->dbias.sd};
        if ((e = launch_dbias_convert(p.dbias, g, pb->dbias.data, (int)pb->dbias_dtype, stride, stream)) !=
            cudaSuccess)
            return device_error(e, "dbias conversion kernel", err, err_len);
    }
    return FFPA_OK;
}
