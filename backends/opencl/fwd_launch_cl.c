/*
 * Host side of the OpenCL forward: the kernel parameters of a problem
 * (kernels/cl_params.h), its buffers resolved from the API's pointers
 * (cl_memory.h), the varlen offsets uploaded to the workspace, the program
 * for the dtype and Dv (cl_program.h), the launch.
 */
#include "cl_launch.h"

#include <stdio.h>
#include <string.h>

#include "cl_params.h"
#include "cl_program.h"
#include "dtype.h"

extern const char ffpa_cl_fwd_source[];

enum { kWorkGroup = 128, kRows = 16, kChunk = 32 }; /* WG, BR, DC of kernels/fwd.cl */

size_t ffpa_cl_forward_workspace(const ffpa_gpu_state *state, const ffpa_problem *pb)
{
    (void)state;
    return pb->cu_q ? 2 * (size_t)(pb->batch + 1) * sizeof(int32_t) : 0;
}

/* A kernel argument for the tensor at p: its buffer (NULL for no tensor)
 * and p's element offset in it. */
static int resolve(const void *p, size_t elem, cl_mem *mem, int64_t *off)
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

static ffpa_cl_fwd_params params_of(const ffpa_problem *pb)
{
    ffpa_cl_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q_sb = pb->q.sb, p.q_sh = pb->q.sh, p.q_sn = pb->q.sn;
    p.k_sb = pb->k.sb, p.k_sh = pb->k.sh, p.k_sn = pb->k.sn;
    p.v_sb = pb->v.sb, p.v_sh = pb->v.sh, p.v_sn = pb->v.sn;
    p.o_sb = pb->o.sb, p.o_sh = pb->o.sh, p.o_sn = pb->o.sn;
    p.lse_sb = pb->lse.sb, p.lse_sh = pb->lse.sh, p.lse_sn = pb->lse.sn;
    p.batch = (int)pb->batch;
    p.hq = (int)pb->hq;
    p.group = (int)(pb->hq / pb->hkv);
    p.nq = (int)pb->nq;
    p.nkv = (int)pb->nkv;
    p.dqk = (int)pb->dqk;
    p.dv = (int)pb->dv;
    p.q_blocks = (int)((pb->nq + kRows - 1) / kRows);
    p.causal = pb->causal;
    p.has_lse = pb->lse.data != NULL;
    p.varlen = pb->cu_q != NULL;
    if (pb->has_bias) {
        p.has_bias = 1;
        p.bias_dtype = (int)pb->bias_dtype;
        p.bias_sb = pb->bias.sb, p.bias_sh = pb->bias.sh, p.bias_sn = pb->bias.sn, p.bias_sd = pb->bias.sd;
    }
    p.window = pb->window;
    p.window_left = pb->window && pb->window_left >= 0 && pb->window_left <= INT32_MAX ? (int)pb->window_left : -1;
    p.window_right = pb->window && pb->window_right >= 0 && pb->window_right <= INT32_MAX ? (int)pb->window_right : -1;
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

ffpa_status ffpa_cl_forward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                            size_t err_len)
{
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0 || pb->dv == 0)
        return FFPA_OK;
    const ffpa_cl_device *dev = ffpa_cl_device_get(err, err_len);
    if (!dev)
        return FFPA_ERR_DEVICE;
    cl_command_queue queue = ffpa_cl_queue(st->stream);
    ffpa_cl_fwd_params p = params_of(pb);
    const size_t elem = ffpa_dtype_size(pb->dtype);
    cl_mem q, k, v, o, lse, bias, alibi, cu = NULL;
    int ok = resolve(pb->q.data, elem, &q, &p.q_off) && resolve(pb->k.data, elem, &k, &p.k_off) &&
             resolve(pb->v.data, elem, &v, &p.v_off) && resolve(pb->o.data, elem, &o, &p.o_off) &&
             resolve(pb->lse.data, sizeof(float), &lse, &p.lse_off) &&
             resolve(pb->has_bias ? pb->bias.data : NULL, ffpa_dtype_size(pb->bias_dtype), &bias, &p.bias_off) &&
             resolve(pb->alibi, sizeof(float), &alibi, &p.alibi_off);
    if (!ok) {
        snprintf(err, err_len, "opencl: a tensor's memory is not from ffpa_malloc on this backend (or misaligned)");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    cl_int e;
    if (pb->cu_q) { /* [cu_q | cu_k] in the workspace */
        const size_t n = (size_t)(pb->batch + 1) * sizeof(int32_t);
        if (!resolve(ws, sizeof(int32_t), &cu, &p.cu_off) || ws_bytes < 2 * n) {
            snprintf(err, err_len, "opencl: forward workspace missing or too small");
            return FFPA_ERR_INTERNAL;
        }
        size_t at = (size_t)p.cu_off * sizeof(int32_t);
        if ((e = clEnqueueWriteBuffer(queue, cu, CL_TRUE, at, n, pb->cu_q, 0, NULL, NULL)) != CL_SUCCESS ||
            (e = clEnqueueWriteBuffer(queue, cu, CL_TRUE, at + n, n, pb->cu_k, 0, NULL, NULL)) != CL_SUCCESS) {
            snprintf(err, err_len, "opencl: uploading cu_seqlens: %s", ffpa_cl_error_string(e));
            return FFPA_ERR_DEVICE;
        }
    }

    /* GPUs: O's registers sized to Dv, the Dv loop unrolled; CPUs: one program
     * per dtype (kernels/fwd.cl says why). */
    char options[96];
    const int dvb = dev->is_gpu ? (int)((pb->dv + kChunk - 1) / kChunk * kChunk) : FFPA_MAX_HEAD_DIM;
    snprintf(options, sizeof options, "-DDT=%d -DDVB=%d%s", (int)pb->dtype, dvb, dev->is_gpu ? " -DFFPA_CL_UNROLL" : "");
    cl_program program;
    ffpa_status s = ffpa_cl_program(dev, ffpa_cl_fwd_source, options, &program, err, err_len);
    if (s != FFPA_OK)
        return s;
    cl_kernel kernel = clCreateKernel(program, "ffpa_fwd", &e);
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: creating the forward kernel: %s", ffpa_cl_error_string(e));
        return FFPA_ERR_DEVICE;
    }
    const cl_mem args[] = {q, k, v, o, lse, bias, alibi, cu};
    e = clSetKernelArg(kernel, 0, sizeof p, &p);
    for (cl_uint i = 0; e == CL_SUCCESS && i < sizeof args / sizeof args[0]; ++i)
        e = clSetKernelArg(kernel, i + 1, sizeof(cl_mem), &args[i]);
    const size_t local = kWorkGroup;
    const size_t global = (size_t)p.q_blocks * (size_t)pb->hq * (size_t)pb->batch * local;
    if (e == CL_SUCCESS)
        e = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL);
    clReleaseKernel(kernel); /* kept alive by the enqueued command */
    if (e != CL_SUCCESS) {
        snprintf(err, err_len, "opencl: launching the forward kernel: %s", ffpa_cl_error_string(e));
        return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ? FFPA_ERR_OUT_OF_MEMORY
                                                                                 : FFPA_ERR_DEVICE;
    }
    st->last_kernel = "opencl portable";
    return FFPA_OK;
}
