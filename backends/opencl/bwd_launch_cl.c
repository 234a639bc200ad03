/*
 * Host side of the OpenCL backward (kernels/bwd.cl): the workspace
 *   [cu_q | cu_k] [Delta] [dQ, dK, dV fp32 (FFPA_GRAD_ACCUM_F32)] [dbias fp32]
 * (256-byte aligned pieces), the accumulators' views, the launches
 *   Delta -> dK/dV -> dQ (+ dbias) -> conversions into the outputs.
 */
#include <stdio.h>
#include <string.h>

#include "cl_launch.h"
#include "cl_program.h"
#include "dtype.h"

extern const char ffpa_cl_bwd_source[];


typedef struct bwd_layout {
    size_t cu, delta, dq, dk, dv, dbias, total;
} bwd_layout;

static size_t take(size_t *off, size_t bytes)
{
    const size_t at = *off;
    *off += (bytes + 255) / 256 * 256;
    return at;
}

static bwd_layout layout_of(const ffpa_problem *pb)
{
    bwd_layout l;
    memset(&l, 0, sizeof l);
    size_t off = 0;
    l.cu = take(&off, pb->cu_q ? 2 * (size_t)(pb->batch + 1) * sizeof(int32_t) : 0);
    l.delta = take(&off, (size_t)(pb->hq * pb->total_q) * sizeof(float));
    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        l.dq = take(&off, (size_t)(pb->hq * pb->total_q * pb->dqk) * sizeof(float));
        l.dk = take(&off, (size_t)(pb->hkv * pb->total_k * pb->dqk) * sizeof(float));
        l.dv = take(&off, (size_t)(pb->hkv * pb->total_k * pb->dv) * sizeof(float));
    }
    if (pb->has_dbias) {
        int64_t g[4];
        ffpa_dbias_grid(pb, g);
        l.dbias = take(&off, (size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float));
    }
    l.total = off;
    return l;
}

size_t ffpa_cl_backward_workspace(const ffpa_problem *pb)
{
    return layout_of(pb).total;
}

/* An accumulator: the fp32 buffer at ws + at, rows of `rows_total` x dim
 * (dense: sequences of `nlen` rows), or the output view itself. */
typedef struct acc_view {
    cl_mem mem;
    int64_t off, sb, sh, sn, sd;
} acc_view;

static int acc_of(const ffpa_problem *pb, const ffpa_view *out, unsigned char *ws, size_t at, int64_t rows_total,
                  int64_t nlen, int64_t dim, acc_view *a)
{
    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        if (!ffpa_cl_resolve_arg(ws + at, sizeof(float), &a->mem, &a->off))
            return 0;
        a->sn = dim;
        a->sh = rows_total * dim;
        a->sb = pb->cu_q ? 0 : nlen * dim;
        a->sd = 1;
        return 1;
    }
    if (!ffpa_cl_resolve_arg(out->data, ffpa_dtype_size(pb->dtype), &a->mem, &a->off))
        return 0;
    a->sb = out->sb, a->sh = out->sh, a->sn = out->sn, a->sd = out->sd;
    return 1;
}

/* fp32 [n0][n1][n2][n3] at the workspace's element offset src -> a view. */
static ffpa_status convert(cl_command_queue queue, cl_program program, cl_mem ws, int64_t src, const void *dst_ptr,
                           int dtype, const int64_t n[4], const int64_t s[4], char *err, size_t err_len)
{
    ffpa_cl_convert cv;
    memset(&cv, 0, sizeof cv);
    cl_mem dst;
    if (!ffpa_cl_resolve_arg(dst_ptr, ffpa_dtype_size((ffpa_dtype)dtype), &dst, &cv.dst_off)) {
        snprintf(err, err_len, "opencl: a gradient's memory is not from ffpa_malloc on this backend");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    cv.src_off = src;
    cv.n0 = n[0], cv.n1 = n[1], cv.n2 = n[2], cv.n3 = n[3];
    cv.s0 = s[0], cv.s1 = s[1], cv.s2 = s[2], cv.s3 = s[3];
    cv.dt = dtype;
    const ffpa_cl_arg args[] = {{sizeof cv, &cv}, {sizeof(cl_mem), &ws}, {sizeof(cl_mem), &dst}};
    return ffpa_cl_launch(queue, program, "ffpa_bwd_convert", args, 3, (size_t)(n[0] * n[1] * n[2] * n[3]), 64, err,
                          err_len);
}

ffpa_status ffpa_cl_backward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                             size_t err_len)
{
    const bwd_layout lay = layout_of(pb);
    if (ws_bytes < lay.total || (lay.total && !ws)) {
        snprintf(err, err_len, "opencl: backward workspace missing or too small");
        return FFPA_ERR_INTERNAL;
    }
    unsigned char *base = ws;
    const ffpa_cl_device *dev;
    cl_command_queue queue;
    ffpa_cl_inputs_t in;
    ffpa_status s = ffpa_cl_forward_begin(st, pb, &dev, &queue, &in, err, err_len);
    if (s == FFPA_OK)
        s = ffpa_cl_upload_offsets(queue, pb, base ? base + lay.cu : NULL, &in, err, err_len);
    if (s != FFPA_OK)
        return s;

    ffpa_cl_bwd_params bp;
    memset(&bp, 0, sizeof bp);
    cl_mem dob = NULL, wsm = NULL, dq_mem, dk_mem, dv_mem;
    int64_t ws_off = 0;
    acc_view dq, dk, dv;
    const int64_t nlen_q = pb->cu_q ? 0 : pb->nq, nlen_k = pb->cu_q ? 0 : pb->nkv;
    int ok = ffpa_cl_resolve_arg(pb->dout.data, ffpa_dtype_size(pb->dtype), &dob, &bp.do_off) &&
             (!base || ffpa_cl_resolve_arg(base, sizeof(float), &wsm, &ws_off)) &&
             acc_of(pb, &pb->grad_q, base, lay.dq, pb->total_q, nlen_q, pb->dqk, &dq) &&
             acc_of(pb, &pb->grad_k, base, lay.dk, pb->total_k, nlen_k, pb->dqk, &dk) &&
             acc_of(pb, &pb->grad_v, base, lay.dv, pb->total_k, nlen_k, pb->dv, &dv);
    if (!ok) {
        snprintf(err, err_len, "opencl: a gradient's memory is not from ffpa_malloc on this backend (or misaligned)");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    dq_mem = dq.mem, dk_mem = dk.mem, dv_mem = dv.mem;
    bp.do_sb = pb->dout.sb, bp.do_sh = pb->dout.sh, bp.do_sn = pb->dout.sn, bp.do_sd = pb->dout.sd;
    bp.delta_off = ws_off + (int64_t)(lay.delta / sizeof(float));
    bp.dq_off = dq.off, bp.dq_sb = dq.sb, bp.dq_sh = dq.sh, bp.dq_sn = dq.sn, bp.dq_sd = dq.sd;
    bp.dk_off = dk.off, bp.dk_sb = dk.sb, bp.dk_sh = dk.sh, bp.dk_sn = dk.sn, bp.dk_sd = dk.sd;
    bp.dv_off = dv.off, bp.dv_sb = dv.sb, bp.dv_sh = dv.sh, bp.dv_sn = dv.sn, bp.dv_sd = dv.sd;
    bp.total_q = pb->total_q;
    bp.acc_dt = pb->grad_accum == FFPA_GRAD_ACCUM_F32 ? FFPA_F32 : (int)pb->dtype;
    bp.hkv = (int)pb->hkv;
    bp.kv_blocks = (int)((pb->nkv + in.tiles.bc - 1) / in.tiles.bc);
    int64_t g[4] = {1, 1, 1, 1};
    if (pb->has_dbias) {
        ffpa_dbias_grid(pb, g);
        bp.has_dbias = 1;
        bp.dbias_off = ws_off + (int64_t)(lay.dbias / sizeof(float));
        bp.dbias_gb = g[0], bp.dbias_gh = g[1], bp.dbias_gn = g[2], bp.dbias_gk = g[3];
        /* Work items that share dbias elements run in one work-group, in order. */
        bp.member_h = pb->dbias.sh == 0;
        bp.member_b = pb->dbias.sb == 0;
        bp.member_qb = pb->dbias.sn == 0;
        const float zero = 0.0f;
        cl_int e = clEnqueueFillBuffer(queue, wsm, &zero, sizeof zero, lay.dbias + (size_t)ws_off * sizeof(float),
                                       (size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float), 0, NULL, NULL);
        if (e != CL_SUCCESS) {
            snprintf(err, err_len, "opencl: clearing the dbias buffer: %s", ffpa_cl_error_string(e));
            return FFPA_ERR_DEVICE;
        }
    }

    char tiles[64], options[96];
    ffpa_cl_tile_options(&in.tiles, tiles, sizeof tiles);
    snprintf(options, sizeof options, "%s -DDT=%d", tiles, (int)pb->dtype);
    cl_program program;
    if ((s = ffpa_cl_program(dev, ffpa_cl_bwd_source, options, &program, err, err_len)) != FFPA_OK)
        return s;
    const ffpa_cl_arg delta_args[] = {{sizeof in.p, &in.p}, {sizeof bp, &bp},          {sizeof(cl_mem), &in.o},
                                      {sizeof(cl_mem), &dob}, {sizeof(cl_mem), &wsm}};
    if ((s = ffpa_cl_launch(queue, program, "ffpa_bwd_delta", delta_args, 5, (size_t)(pb->hq * pb->total_q), 64, err,
                            err_len)) != FFPA_OK)
        return s;
    /* q, k, v, dout, lse, bias, alibi, cu, Delta: the inputs of both gradient kernels. */
    const ffpa_cl_arg dkdv_args[] = {{sizeof in.p, &in.p},          {sizeof bp, &bp},
                                     {sizeof(cl_mem), &in.q},       {sizeof(cl_mem), &in.k},
                                     {sizeof(cl_mem), &in.v},       {sizeof(cl_mem), &dob},
                                     {sizeof(cl_mem), &in.lse},     {sizeof(cl_mem), &in.bias},
                                     {sizeof(cl_mem), &in.alibi},   {sizeof(cl_mem), &in.cu},
                                     {sizeof(cl_mem), &wsm},        {sizeof(cl_mem), &dk_mem},
                                     {sizeof(cl_mem), &dv_mem}};
    const size_t dkdv_groups = (size_t)bp.kv_blocks * (size_t)pb->hkv * (size_t)pb->batch;
    const size_t wg = (size_t)in.tiles.wg;
    if ((s = ffpa_cl_launch(queue, program, "ffpa_bwd_dkdv", dkdv_args, 13, dkdv_groups * wg, wg, err, err_len)) !=
        FFPA_OK)
        return s;
    ffpa_cl_arg dq_args[13];
    memcpy(dq_args, dkdv_args, sizeof dq_args);
    dq_args[11] = (ffpa_cl_arg){sizeof(cl_mem), &dq_mem};
    dq_args[12] = (ffpa_cl_arg){sizeof(cl_mem), &wsm}; /* dbias (in the workspace) */
    const size_t dq_groups = (size_t)(bp.member_qb ? 1 : in.p.q_blocks) * (size_t)(bp.member_b ? 1 : pb->batch) *
                             (size_t)(bp.member_h ? 1 : pb->hq);
    if ((s = ffpa_cl_launch(queue, program, "ffpa_bwd_dq", dq_args, 13, dq_groups * wg, wg, err, err_len)) != FFPA_OK)
        return s;

    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        /* Buffer rows: dense (h, b, n) = ((h B + b) N + n), varlen (h, packed row). */
        const int64_t bq = pb->cu_q ? 1 : pb->batch, nq = pb->cu_q ? pb->total_q : pb->nq;
        const int64_t nk = pb->cu_q ? pb->total_k : pb->nkv;
        const struct {
            size_t at;
            const ffpa_view *out;
            int64_t heads, rows, dim;
        } jobs[] = {{lay.dq, &pb->grad_q, pb->hq, nq, pb->dqk},
                    {lay.dk, &pb->grad_k, pb->hkv, nk, pb->dqk},
                    {lay.dv, &pb->grad_v, pb->hkv, nk, pb->dv}};
        for (int j = 0; j < 3 && s == FFPA_OK; ++j) {
            const int64_t n[4] = {jobs[j].heads, bq, jobs[j].rows, jobs[j].dim};
            const int64_t st4[4] = {jobs[j].out->sh, jobs[j].out->sb, jobs[j].out->sn, jobs[j].out->sd};
            s = convert(queue, program, wsm, ws_off + (int64_t)(jobs[j].at / sizeof(float)), jobs[j].out->data,
                        (int)pb->dtype, n, st4, err, err_len);
        }
    }
    if (s == FFPA_OK && pb->has_dbias) {
        const int64_t st4[4] = {pb->dbias.sb, pb->dbias.sh, pb->dbias.sn, pb->dbias.sd};
        s = convert(queue, program, wsm, bp.dbias_off, pb->dbias.data, (int)pb->dbias_dtype, g, st4, err, err_len);
    }
    if (s == FFPA_OK)
        st->last_kernel = "opencl portable";
    return s;
}
