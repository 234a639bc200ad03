/* Kernel arguments of a problem, shared by the forward and backward
 * launchers. See cl_launch.h. */
#include "cl_launch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_memory.h"
#include "dtype.h"

/* A kernel argument for the tensor at p: its buffer (NULL for no tensor)
 * and p's element offset in it. */
int ffpa_cl_resolve_arg(const void *p, size_t elem, cl_mem *mem, int64_t *off)
{
    *mem = NULL;
    *off = 0;
    if (!p)
        return 1;
    size_t bytes = 0;
    *mem = ffpa_cl_resolve(p, &bytes);
    *off = (int64_t)(bytes / elem);
    return *mem != NULL && bytes % elem == 0;
}

ffpa_cl_fwd_params ffpa_cl_params_of(const ffpa_problem *pb, int rows_per_block)
{
    ffpa_cl_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q_sb = pb->q.sb, p.q_sh = pb->q.sh, p.q_sn = pb->q.sn;
    p.k_sb = pb->k.sb, p.k_sh = pb->k.sh, p.k_sn = pb->k.sn;
    p.v_sb = pb->v.sb, p.v_sh = pb->v.sh, p.v_sn = pb->v.sn;
    p.o_sb = pb->o.sb, p.o_sh = pb->o.sh, p.o_sn = pb->o.sn;
    p.q_sd = pb->q.sd, p.k_sd = pb->k.sd, p.v_sd = pb->v.sd, p.o_sd = pb->o.sd;
    p.lse_sb = pb->lse.sb, p.lse_sh = pb->lse.sh, p.lse_sn = pb->lse.sn;
    p.batch = (int)pb->batch;
    p.hq = (int)pb->hq;
    p.group = (int)ffpa_query_group(pb);
    p.nq = (int)pb->nq;
    p.nkv = (int)pb->nkv;
    p.dqk = (int)pb->dqk;
    p.dv = (int)pb->dv;
    p.q_blocks = (int)((pb->nq + rows_per_block - 1) / rows_per_block);
    p.pack = 1;
    p.splits = 1;
    p.o_dt = (int)pb->dtype;
    p.causal = pb->causal;
    p.has_lse = pb->lse.data != NULL;
    p.varlen = pb->cu_q != NULL;
    if (pb->has_bias) {
        p.has_bias = 1;
        p.bias_dtype = (int)pb->bias_dtype;
        p.bias_sb = pb->bias.sb, p.bias_sh = pb->bias.sh, p.bias_sn = pb->bias.sn, p.bias_sd = pb->bias.sd;
    }
    p.window = pb->window;
    p.window_left = ffpa_window_bound32(pb, pb->window_left);
    p.window_right = ffpa_window_bound32(pb, pb->window_right);
    p.softcap = pb->softcap;
    p.has_alibi = pb->alibi != NULL;
    p.alibi_sb = pb->alibi_sb, p.alibi_sh = pb->alibi_sh;
    p.has_dropout = pb->dropout_p > 0.0f;
    p.dropout_threshold = pb->dropout_threshold;
    p.dropout_scale = pb->dropout_scale;
    p.dropout_seed = pb->dropout_seed;
    p.dropout_offset = pb->dropout_offset;
    p.scale = pb->scale;
    return p;
}


ffpa_status ffpa_cl_inputs(const ffpa_problem *pb, ffpa_cl_inputs_t *in, char *err, size_t err_len)
{
    const size_t elem = ffpa_dtype_size(pb->dtype);
    ffpa_cl_fwd_params *p = &in->p;
    int ok = ffpa_cl_resolve_arg(pb->q.data, elem, &in->q, &p->q_off) &&
             ffpa_cl_resolve_arg(pb->k.data, elem, &in->k, &p->k_off) &&
             ffpa_cl_resolve_arg(pb->v.data, elem, &in->v, &p->v_off) &&
             ffpa_cl_resolve_arg(pb->o.data, elem, &in->o, &p->o_off) &&
             ffpa_cl_resolve_arg(pb->lse.data, sizeof(float), &in->lse, &p->lse_off) &&
             ffpa_cl_resolve_arg(pb->has_bias ? pb->bias.data : NULL, ffpa_dtype_size(pb->bias_dtype), &in->bias,
                                 &p->bias_off) &&
             ffpa_cl_resolve_arg(pb->alibi, sizeof(float), &in->alibi, &p->alibi_off);
    if (!ok) {
        snprintf(err, err_len, "opencl: a tensor's memory is not from ffpa_malloc on this backend (or misaligned)");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    in->cu = NULL;
    return FFPA_OK;
}

ffpa_status ffpa_cl_upload_offsets(cl_command_queue queue, const ffpa_problem *pb, void *at, ffpa_cl_inputs_t *in,
                                   char *err, size_t err_len)
{
    if (!pb->cu_q)
        return FFPA_OK;
    const size_t n = (size_t)(pb->batch + 1) * sizeof(int32_t);
    if (!at || !ffpa_cl_resolve_arg(at, sizeof(int32_t), &in->cu, &in->p.cu_off)) {
        snprintf(err, err_len, "opencl: the workspace is not this backend's memory");
        return FFPA_ERR_INTERNAL;
    }
    const size_t off = (size_t)in->p.cu_off * sizeof(int32_t);
    cl_int e;
    if (pb->cu_on_device) {
        /* Offsets in this backend's memory: a device-side copy, no host read. */
        size_t q_off = 0, k_off = 0;
        cl_mem q_buf = ffpa_cl_resolve(pb->cu_q, &q_off), k_buf = ffpa_cl_resolve(pb->cu_k, &k_off);
        if (!q_buf || !k_buf) {
            snprintf(err, err_len, "%s: is not this backend's memory (opt.cu_seqlens_on_device is 1)",
                     q_buf ? "opt.cu_seqlens_k" : "opt.cu_seqlens_q");
            return FFPA_ERR_INVALID_ARGUMENT;
        }
        if ((e = clEnqueueCopyBuffer(queue, q_buf, in->cu, q_off, off, n, 0, NULL, NULL)) != CL_SUCCESS ||
            (e = clEnqueueCopyBuffer(queue, k_buf, in->cu, k_off, off + n, n, 0, NULL, NULL)) != CL_SUCCESS) {
            snprintf(err, err_len, "opencl: copying cu_seqlens: %s", ffpa_cl_error_string(e));
            return FFPA_ERR_DEVICE;
        }
        return FFPA_OK;
    }
    if ((e = clEnqueueWriteBuffer(queue, in->cu, CL_TRUE, off, n, pb->cu_q, 0, NULL, NULL)) != CL_SUCCESS ||
        (e = clEnqueueWriteBuffer(queue, in->cu, CL_TRUE, off + n, n, pb->cu_k, 0, NULL, NULL)) != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: uploading cu_seqlens: %s", ffpa_cl_error_string(e));
        return FFPA_ERR_DEVICE;
    }
    return FFPA_OK;
}

/* Objects that queued commands use (each launch's kernel, the merge's part
 * table) are retired, not released at once, and a host thread releases
 * them once their command has completed: at a later launch or a
 * synchronisation. OpenCL says a queued command keeps its objects alive,
 * but NVIDIA's driver reads a kernel object from one of its own threads
 * after the enqueue has returned. Released at once, that thread crashed
 * when several host threads launched together and freed memory was
 * poisoned (test_threads on the H200 with MALLOC_PERTURB_, every run);
 * retired, that crash is gone (a rarer one under load remains, in the same
 * driver code: docs/notes/opencl.md). */
typedef struct retired {
    void *object;
    int is_kernel;
    cl_event done;
    struct retired *next;
} retired;

static retired *retired_list;
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;

static void release_object(int is_kernel, void *object)
{
    if (is_kernel)
        clReleaseKernel((cl_kernel)object);
    else
        clReleaseMemObject((cl_mem)object);
}

void ffpa_cl_release_retired(void)
{
    retired *done_list = NULL;
    pthread_mutex_lock(&retired_lock);
    for (retired **at = &retired_list; *at;) {
        cl_int status = CL_QUEUED;
        if (clGetEventInfo((*at)->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) ==
                CL_SUCCESS &&
            status <= CL_COMPLETE) { /* complete, or ended with an error */
            retired *r = *at;
            *at = r->next;
            r->next = done_list;
            done_list = r;
        } else {
            at = &(*at)->next;
        }
    }
    pthread_mutex_unlock(&retired_lock);
    while (done_list) {
        retired *r = done_list;
        done_list = r->next;
        release_object(r->is_kernel, r->object);
        clReleaseEvent(r->done);
        free(r);
    }
}

/* `done`: the command's event (taken over), or NULL for everything queued so
 * far (a marker's). Where neither an event nor memory for the entry is to be
 * had, waits for the queue, then releases. */
static void retire(cl_command_queue queue, cl_event done, int is_kernel, void *object)
{
    if (!done && clEnqueueMarkerWithWaitList(queue, 0, NULL, &done) != CL_SUCCESS)
        done = NULL;
    retired *r = done ? malloc(sizeof *r) : NULL;
    if (!r) {
        if (done)
            clReleaseEvent(done);
        clFinish(queue);
        release_object(is_kernel, object);
        return;
    }
    *r = (retired){object, is_kernel, done, NULL};
    pthread_mutex_lock(&retired_lock);
    r->next = retired_list;
    retired_list = r;
    pthread_mutex_unlock(&retired_lock);
}

void ffpa_cl_release_mem_when_done(cl_command_queue queue, cl_mem mem)
{
    retire(queue, NULL, 0, mem);
}

ffpa_status ffpa_cl_launch(cl_command_queue queue, cl_program program, const char *name, const ffpa_cl_arg *args,
                           int n_args, size_t global, size_t local, char *err, size_t err_len)
{
    cl_int e;
    cl_kernel kernel = clCreateKernel(program, name, &e);
    for (int i = 0; e == CL_SUCCESS && i < n_args; ++i)
        e = clSetKernelArg(kernel, (cl_uint)i, args[i].size, args[i].value);
    cl_event done = NULL;
    if (e == CL_SUCCESS && global > 0) {
        global = (global + local - 1) / local * local;
        e = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, &done);
    }
    ffpa_cl_release_retired(); /* the earlier launches' kernels whose commands are done */
    if (kernel && e == CL_SUCCESS && done)
        retire(queue, done, 1, kernel);
    else if (kernel)
        clReleaseKernel(kernel); /* nothing was enqueued */
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: launching %s: %s", name, ffpa_cl_error_string(e));
        return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ? FFPA_ERR_OUT_OF_MEMORY
                                                                                 : FFPA_ERR_DEVICE;
    }
    return FFPA_OK;
}

ffpa_status ffpa_cl_tiles(const ffpa_gpu_state *st, ffpa_portable_tiles *tiles, char *err, size_t err_len)
{
    if (ffpa_plan_portable(&st->caps.limits, tiles) == FFPA_OK)
        return FFPA_OK;
    snprintf(err, err_len,
             "opencl: the device offers %zu bytes of local memory and %d work-items per work-group; the smallest "
             "tiles need %zu bytes and %d",
             st->caps.limits.smem_per_block, st->caps.limits.max_threads_per_block, tiles->local_bytes, tiles->wg);
    return FFPA_ERR_UNSUPPORTED;
}

void ffpa_cl_tile_options(const ffpa_portable_tiles *t, char *buf, size_t len)
{
    snprintf(buf, len, "-DWG=%d -DBR=%d -DBC=%d -DDC=%d", t->wg, t->br, t->bc, t->dc);
}
