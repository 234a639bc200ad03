/*
 * Host side of the OpenCL merge of partial results (kernels/merge.cl): the
 * parts' buffers resolved from the API's pointers, their offsets and
 * strides in a small read-only buffer made per call (released at once: the
 * enqueued kernel keeps it alive), one work-group per row.
 */
#include "cl_launch.h"

#include <stdio.h>
#include <string.h>

#include "cl_program.h"
#include "dtype.h"

extern const char ffpa_cl_merge_source[];

enum { kWorkGroup = 64 };

ffpa_status ffpa_cl_merge(ffpa_gpu_state *st, const ffpa_merge_problem *mp, char *err, size_t err_len)
{
    const ffpa_cl_device *dev = ffpa_cl_device_get(err, err_len);
    if (!dev)
        return FFPA_ERR_DEVICE;
    ffpa_cl_merge_params p;
    ffpa_cl_merge_part parts[FFPA_MERGE_MAX_PARTS];
    cl_mem o_mem[FFPA_MERGE_MAX_PARTS], lse_mem[FFPA_MERGE_MAX_PARTS], out_mem = NULL, lse_out = NULL;
    memset(&p, 0, sizeof p);
    memset(parts, 0, sizeof parts);
    memset(o_mem, 0, sizeof o_mem);
    memset(lse_mem, 0, sizeof lse_mem);
    int ok = 1;
    for (int i = 0; ok && i < mp->parts; ++i) {
        const ffpa_view *o = &mp->o_part[i], *l = &mp->lse_part[i];
        ffpa_cl_merge_part *q = &parts[i];
        ok = ffpa_cl_resolve_arg(o->data, ffpa_dtype_size(mp->o_part_dtype[i]), &o_mem[i], &q->o_off) &&
             ffpa_cl_resolve_arg(l->data, sizeof(float), &lse_mem[i], &q->lse_off);
        q->o_sb = o->sb, q->o_sh = o->sh, q->o_sn = o->sn, q->o_sd = o->sd;
        q->lse_sb = l->sb, q->lse_sh = l->sh, q->lse_sn = l->sn;
        q->dt = (int)mp->o_part_dtype[i];
    }
    ok = ok && ffpa_cl_resolve_arg(mp->o.data, ffpa_dtype_size(mp->o_dtype), &out_mem, &p.o_off) &&
         ffpa_cl_resolve_arg(mp->lse.data, sizeof(float), &lse_out, &p.lse_off);
    if (!ok) {
        snprintf(err, err_len, "opencl: a tensor's memory is not from ffpa_malloc on this backend");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    p.o_sb = mp->o.sb, p.o_sh = mp->o.sh, p.o_sn = mp->o.sn, p.o_sd = mp->o.sd;
    p.lse_sb = mp->lse.sb, p.lse_sh = mp->lse.sh, p.lse_sn = mp->lse.sn;
    p.h = mp->h, p.n = mp->n, p.rows = mp->b * mp->h * mp->n;
    p.dv = (int)mp->dv, p.parts = mp->parts, p.dt = (int)mp->o_dtype, p.has_lse = mp->lse.data != NULL;

    cl_program program;
    ffpa_status s = ffpa_cl_program(dev, ffpa_cl_merge_source, "", &program, err, err_len);
    if (s != FFPA_OK)
        return s;
    cl_int e;
    cl_mem table = clCreateBuffer(dev->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                  sizeof(ffpa_cl_merge_part) * (size_t)mp->parts, parts, &e);
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: allocating the merge's part table: %s", ffpa_cl_error_string(e));
        return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY ? FFPA_ERR_OUT_OF_MEMORY
                                                                                      : FFPA_ERR_DEVICE;
    }
    ffpa_cl_arg args[2 + 2 * FFPA_MERGE_MAX_PARTS + 2];
    int n = 0;
    args[n++] = (ffpa_cl_arg){sizeof p, &p};
    args[n++] = (ffpa_cl_arg){sizeof(cl_mem), &table};
    for (int i = 0; i < FFPA_MERGE_MAX_PARTS; ++i)
        args[n++] = (ffpa_cl_arg){sizeof(cl_mem), &o_mem[i]};
    for (int i = 0; i < FFPA_MERGE_MAX_PARTS; ++i)
        args[n++] = (ffpa_cl_arg){sizeof(cl_mem), &lse_mem[i]};
    args[n++] = (ffpa_cl_arg){sizeof(cl_mem), &out_mem};
    args[n++] = (ffpa_cl_arg){sizeof(cl_mem), &lse_out};
    cl_command_queue queue = ffpa_cl_queue(st->stream);
    s = ffpa_cl_launch(queue, program, "ffpa_merge", args, n, (size_t)p.rows * kWorkGroup, kWorkGroup, err, err_len);
    ffpa_cl_release_mem_when_done(queue, table);
    return s;
}
