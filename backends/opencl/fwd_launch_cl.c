/*
 * Host side of the OpenCL forward: the kernel parameters of a problem
 * (kernels/cl_params.h), its buffers resolved from the API's pointers
 * (cl_memory.h), the varlen offsets uploaded to the workspace, the program
 * for the dtype and Dv (cl_program.h), the launch.
 */
#include "cl_launch.h"

#include <stdio.h>
#include <string.h>

#include "cl_program.h"
#include "dtype.h"

extern const char ffpa_cl_fwd_source[];


size_t ffpa_cl_forward_workspace(const ffpa_gpu_state *state, const ffpa_problem *pb)
{
    (void)state;
    return pb->cu_q ? 2 * (size_t)(pb->batch + 1) * sizeof(int32_t) : 0;
}

/* The forward program for pb's dtype and Dv: GPUs get O's registers sized to
 * Dv and the Dv loop unrolled; CPUs one program per dtype (kernels/fwd.cl
 * says why). */
ffpa_status ffpa_cl_forward_program(const ffpa_cl_device *dev, const ffpa_problem *pb, const ffpa_portable_tiles *t,
                                    cl_program *program, char *err, size_t err_len)
{
    char tiles[64], options[160];
    ffpa_cl_tile_options(t, tiles, sizeof tiles);
    const int dvb = dev->is_gpu ? (int)((pb->dv + t->dc - 1) / t->dc * t->dc) : FFPA_MAX_HEAD_DIM;
    snprintf(options, sizeof options, "%s -DDT=%d -DDVB=%d%s", tiles, (int)pb->dtype, dvb,
             dev->is_gpu ? " -DFFPA_CL_UNROLL" : "");
    return ffpa_cl_program(dev, ffpa_cl_fwd_source, options, program, err, err_len);
}

ffpa_status ffpa_cl_forward_launch(cl_command_queue queue, cl_program program, const ffpa_problem *pb,
                                   const ffpa_cl_inputs_t *in, const ffpa_cl_kv_params *kv, cl_mem block_table,
                                   cl_mem seqlens, char *err, size_t err_len)
{
    const ffpa_cl_arg args[] = {{sizeof in->p, &in->p},     {sizeof(cl_mem), &in->q},     {sizeof(cl_mem), &in->k},
                                {sizeof(cl_mem), &in->v},     {sizeof(cl_mem), &in->o},     {sizeof(cl_mem), &in->lse},
                                {sizeof(cl_mem), &in->bias},  {sizeof(cl_mem), &in->alibi}, {sizeof(cl_mem), &in->cu},
                                {sizeof *kv, kv},             {sizeof(cl_mem), &block_table},
                                {sizeof(cl_mem), &seqlens}};
    const size_t wg = (size_t)in->tiles.wg;
    const size_t global = (size_t)in->p.q_blocks * (size_t)pb->hq * (size_t)pb->batch * wg;
    return ffpa_cl_launch(queue, program, "ffpa_fwd", args, 12, global, wg, err, err_len);
}

ffpa_status ffpa_cl_forward_begin(const ffpa_gpu_state *st, const ffpa_problem *pb, const ffpa_cl_device **dev,
                                  cl_command_queue *queue, ffpa_cl_inputs_t *in, char *err, size_t err_len)
{
    if (!(*dev = ffpa_cl_device_get(err, err_len)))
        return FFPA_ERR_DEVICE;
    *queue = ffpa_cl_queue(st->stream);
    ffpa_status s = ffpa_cl_tiles(st, &in->tiles, err, err_len);
    if (s != FFPA_OK)
        return s;
    in->p = ffpa_cl_params_of(pb, in->tiles.br);
    return ffpa_cl_inputs(pb, in, err, err_len);
}

ffpa_status ffpa_cl_forward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                            size_t err_len)
{
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0 || pb->dv == 0)
        return FFPA_OK;
    const ffpa_cl_device *dev;
    cl_command_queue queue;
    ffpa_cl_inputs_t in;
    ffpa_status s = ffpa_cl_forward_begin(st, pb, &dev, &queue, &in, err, err_len);
    if (s == FFPA_OK && pb->cu_q && ws_bytes < ffpa_cl_forward_workspace(st, pb)) {
        snprintf(err, err_len, "opencl: forward workspace missing or too small");
        s = FFPA_ERR_INTERNAL;
    }
    if (s == FFPA_OK)
        s = ffpa_cl_upload_offsets(queue, pb, ws, &in, err, err_len); /* [cu_q | cu_k] at the workspace's start */
    cl_program program;
    if (s == FFPA_OK)
        s = ffpa_cl_forward_program(dev, pb, &in.tiles, &program, err, err_len);
    ffpa_cl_kv_params no_cache;
    memset(&no_cache, 0, sizeof no_cache);
    if (s == FFPA_OK)
        s = ffpa_cl_forward_launch(queue, program, pb, &in, &no_cache, NULL, NULL, err, err_len);
    if (s == FFPA_OK)
        st->last_kernel = "opencl portable";
    return s;
}
