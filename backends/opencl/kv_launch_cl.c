/*
 * Host side of the OpenCL paged KV cache (ffpa_forward_kvcache): the new
 * tokens appended by ffpa_kv_append (K, then V unless V lives in K's pages),
 * then the forward kernel with its key rows found through the pages
 * (kernels/cl_kv.h). The tables were checked on the host by the core unless
 * the caller vouched for them; the kernels still never touch a page outside
 * the pool. One query tile per 16 rows of each (sequence, query head): the
 * portable kernel has no split-KV schedule, so a long cache is walked by one
 * work-group per tile.
 */
#include "cl_launch.h"

#include <stdio.h>
#include <string.h>

#include "dtype.h"

enum { kAppendGroup = 64 }; /* work-items per append work-group */

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
    (void)ws, (void)ws_bytes;
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
    kv.num_pages = (int)kvp->num_pages;
    kv.capacity = (int)pb->nkv;

    cl_program program;
    if ((s = ffpa_cl_forward_kernel(st, dev, pb, &in, err, err_len)) != FFPA_OK ||
        (s = ffpa_cl_forward_program(dev, pb, &in, &program, err, err_len)) != FFPA_OK)
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
    s = ffpa_cl_forward_launch(queue, program, pb, &in, &kv, btm, lensm, err, err_len);
    if (s == FFPA_OK)
        st->last_kernel = ffpa_cl_forward_name(&in, 1);
    return s;
}
