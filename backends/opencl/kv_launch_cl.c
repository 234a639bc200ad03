/*
 * Host side of the OpenCL paged KV cache (ffpa_forward_kvcache): the new
 * tokens appended by ffpa_kv_append (K, then V unless V lives in K's pages),
 * then the forward kernel with its key rows found through the pages
 * (kernels/cl_kv.h). The tables were checked on the host by the core unless
 * the caller vouched for them; the kernels still never touch a page outside
 * the pool. The work-groups (a query block of a query head, or of a KV
 * head's packed query heads) split their key tiles statically where too few
 * of them would fill the device (ffpa_plan_static_kv_splits): each split
 * writes a partial O (fp32) and LSE into the workspace, and ffpa_merge
 * (kernels/merge.cl) joins them into O and the LSE.
 */
#include "cl_launch.h"

#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "env.h"

enum { kAppendGroup = 64 }; /* work-items per append work-group */

/* Tuning / testing knob (not API): FFPA_OPENCL_KV_SPLITS=N runs N splits
 * (1: none; at most FFPA_MERGE_MAX_PARTS) whatever the device; 0 when unset. */
static int splits_knob(void)
{
    int bad = 0;
    return (int)ffpa_env_long("FFPA_OPENCL_KV_SPLITS", 0, 1, FFPA_MERGE_MAX_PARTS, &bad);
}

/* Query rows the partials hold: every (sequence, query head, new token). */
static int64_t partial_rows(const ffpa_problem *pb)
{
    return pb->batch * pb->hq * pb->nq;
}

/* Rows of the largest work-group block any forward kernel forms: the matrix
 * kernel's 8 warps of 16 rows (FFPA_OPENCL_MMA_TILES=8xN; 4 warps by default),
 * above the tiled kernel's 32. */
enum { kLargestBlockRows = 128 };

/* The most splits any kernel choice takes for pb: the fewest work-groups
 * (packed heads on the largest blocks) and one-key tiles. The workspace is
 * sized for it, so that the planner's count is never clamped. */
static int splits_bound(const ffpa_gpu_state *st, const ffpa_problem *pb)
{
    const int64_t group = ffpa_query_group(pb);
    const int64_t fewest =
        pb->batch * pb->hkv * ((pb->nq * group + kLargestBlockRows - 1) / kLargestBlockRows);
    return ffpa_plan_static_kv_splits(&st->caps.limits, fewest, pb->nkv, splits_knob());
}

size_t ffpa_cl_kv_workspace(const ffpa_gpu_state *st, const ffpa_problem *pb)
{
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0 || pb->dv == 0)
        return 0;
    const int splits = splits_bound(st, pb);
    return splits > 1 ? sizeof(float) * (size_t)splits * (size_t)partial_rows(pb) * (size_t)(pb->dv + 1) : 0;
}

/* Split s's partial O (fp32, [B, Hq, Nq, Dv]) and LSE ([B, Hq, Nq]) in the workspace. */
static ffpa_view partial_o(const ffpa_problem *pb, void *ws, int s)
{
    const int64_t rows = partial_rows(pb);
    ffpa_view v = {(float *)ws + (size_t)s * (size_t)(rows * pb->dv), pb->hq * pb->nq * pb->dv, pb->nq * pb->dv,
                   pb->dv, 1};
    return v;
}

static ffpa_view partial_lse(const ffpa_problem *pb, void *ws, int splits, int s)
{
    const int64_t rows = partial_rows(pb);
    ffpa_view v = {(float *)ws + (size_t)splits * (size_t)(rows * pb->dv) + (size_t)s * (size_t)rows,
                   pb->hq * pb->nq, pb->nq, 1, 0};
    return v;
}

/* The forward's O and LSE redirected to the partials (splits > 1). */
static ffpa_status to_partials(const ffpa_problem *pb, void *ws, int splits, ffpa_cl_inputs_t *in, char *err,
                               size_t err_len)
{
    ffpa_cl_fwd_params *p = &in->p;
    const ffpa_view o = partial_o(pb, ws, 0), l = partial_lse(pb, ws, splits, 0);
    if (!ffpa_cl_resolve_arg(o.data, sizeof(float), &in->o, &p->o_off) ||
        !ffpa_cl_resolve_arg(l.data, sizeof(float), &in->lse, &p->lse_off)) {
        snprintf(err, err_len, "opencl: the KV cache's workspace is not memory from ffpa_malloc on this backend");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    p->o_sb = o.sb, p->o_sh = o.sh, p->o_sn = o.sn, p->o_sd = o.sd;
    p->lse_sb = l.sb, p->lse_sh = l.sh, p->lse_sn = l.sn;
    p->o_split = partial_rows(pb) * pb->dv, p->lse_split = partial_rows(pb);
    p->o_dt = (int)FFPA_F32;
    p->has_lse = 1;
    p->splits = splits;
    return FFPA_OK;
}

/* The splits' partials joined into pb's O and LSE. */
static ffpa_status merge_partials(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, int splits, char *err,
                                  size_t err_len)
{
    ffpa_merge_problem mp;
    memset(&mp, 0, sizeof mp);
    mp.parts = splits;
    mp.b = pb->batch, mp.h = pb->hq, mp.n = pb->nq, mp.dv = pb->dv;
    for (int s = 0; s < splits; ++s) {
        mp.o_part[s] = partial_o(pb, ws, s);
        mp.o_part_dtype[s] = FFPA_F32;
        mp.lse_part[s] = partial_lse(pb, ws, splits, s);
    }
    mp.o = pb->o;
    mp.o_dtype = pb->dtype;
    mp.lse = pb->lse;
    return ffpa_cl_merge(st, &mp, err, err_len);
}

static ffpa_status append(cl_command_queue queue, cl_program program, const ffpa_problem *pb, ffpa_cl_kv_params kv,
                          const ffpa_view *src, const ffpa_view *dst, int64_t dim, cl_mem btm, cl_mem lensm,
                          char *err, size_t err_len)
{
    const size_t elem = ffpa_dtype_size(pb->dtype);
    cl_mem srcm, dstm;
    if (!ffpa_cl_resolve_arg(src->data, elem, &srcm, &kv.src_off) ||
        !ffpa_cl_resolve_arg(dst->data, elem, &dstm, &kv.dst_off)) {
        snprintf(err, err_len, "opencl: a tensor's memory is not from ffpa_malloc on this backend");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    kv.src_sb = src->sb, kv.src_sh = src->sh, kv.src_sn = src->sn, kv.src_sd = src->sd;
    kv.dst_sp = dst->sb, kv.dst_sh = dst->sh, kv.dst_sn = dst->sn, kv.dst_sd = dst->sd;
    kv.dim = (int)dim;
    const int batch = (int)pb->batch, hkv = (int)pb->hkv, nq = (int)pb->nq;
    const ffpa_cl_arg args[] = {{sizeof kv, &kv},         {sizeof batch, &batch},  {sizeof hkv, &hkv},
                                {sizeof nq, &nq},         {sizeof(cl_mem), &btm},  {sizeof(cl_mem), &lensm},
                                {sizeof(cl_mem), &srcm},  {sizeof(cl_mem), &dstm}};
    return ffpa_cl_launch(queue, program, "ffpa_kv_append", args, 8, (size_t)(pb->batch * pb->hkv * pb->nq * dim),
                          kAppendGroup, err, err_len);
}

ffpa_status ffpa_cl_forward_kvcache(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                    size_t err_len)
{
    const ffpa_kv_problem *kvp = pb->kv;
    const ffpa_cl_device *dev;
    cl_command_queue queue;
    ffpa_cl_inputs_t in;
    ffpa_status s = ffpa_cl_forward_begin(st, pb, &dev, &queue, &in, err, err_len);
    if (s != FFPA_OK)
        return s;

    ffpa_cl_kv_params kv;
    memset(&kv, 0, sizeof kv);
    cl_mem btm = NULL, lensm = NULL;
    if (!ffpa_cl_resolve_arg(kvp->block_table, sizeof(int32_t), &btm, &kv.bt_off) ||
        !ffpa_cl_resolve_arg(kvp->cache_seqlens, sizeof(int32_t), &lensm, &kv.lens_off)) {
        snprintf(err, err_len, "cache: block_table or cache_seqlens is not memory from ffpa_malloc on this backend");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    kv.paged = 1;
    kv.has_table = kvp->block_table != NULL;
    kv.bt_stride = kvp->bt_stride;
    kv.uniform_len = kvp->cache_seqlens ? -1 : kvp->uniform_len;
    kv.page_size = (int)kvp->page_size;
    kv.page_shift = -1;
    for (int shift = 0; shift < 31; ++shift)
        if ((1L << shift) == kvp->page_size)
            kv.page_shift = shift;
    kv.num_pages = (int)kvp->num_pages;
    kv.capacity = (int)pb->nkv;
    cl_program program;
    if ((s = ffpa_cl_forward_kernel(st, dev, pb, &in, err, err_len)) != FFPA_OK)
        return s;
    /* Pages of a multiple of the matrix forward's key tiles: each tile's rows
     * in one page, one block-table read a tile (kernels/fwd_mma.cl). */
    in.tiles_in_pages = in.matrix && kvp->page_size % in.mt.bc == 0;
    if ((s = ffpa_cl_forward_program(dev, pb, &in, &program, err, err_len)) != FFPA_OK)
        return s;
    if (kvp->append && pb->batch > 0 && pb->hkv > 0 && pb->nq > 0) {
        s = append(queue, program, pb, kv, &kvp->k_new, &pb->k, pb->dqk, btm, lensm, err, err_len);
        if (s == FFPA_OK && !kvp->v_in_k)
            s = append(queue, program, pb, kv, &kvp->v_new, &pb->v, pb->dv, btm, lensm, err, err_len);
        if (s != FFPA_OK)
            return s;
    }
    kv.added = kvp->append ? (int)pb->nq : 0;
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0 || pb->dv == 0)
        return FFPA_OK;
    /* Too few work-groups to fill the device: split their key tiles. */
    const int64_t work_groups = (int64_t)in.p.q_blocks * (pb->hq / in.p.pack) * pb->batch;
    const int bc = in.matrix ? in.mt.bc : in.tiles.bc;
    int splits = ffpa_plan_static_kv_splits(&st->caps.limits, work_groups, (pb->nkv + bc - 1) / bc, splits_knob());
    const int bound = splits_bound(st, pb);
    splits = splits < bound ? splits : bound;
    if (splits > 1 && ws_bytes < ffpa_cl_kv_workspace(st, pb)) {
        snprintf(err, err_len, "opencl: KV cache workspace missing or too small");
        return FFPA_ERR_INTERNAL;
    }
    if (splits > 1 && (s = to_partials(pb, ws, splits, &in, err, err_len)) != FFPA_OK)
        return s;
    s = ffpa_cl_forward_launch(queue, program, pb, &in, &kv, btm, lensm, err, err_len);
    if (s == FFPA_OK && splits > 1)
        s = merge_partials(st, pb, ws, splits, err, err_len);
    if (s == FFPA_OK)
        st->last_kernel = ffpa_cl_forward_name(&in, 1);
    return s;
}
