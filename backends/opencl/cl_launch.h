/*
 * The OpenCL backend's launchers, behind the shared GPU host layer
 * (gpu/gpu_host.h): the forward (fwd_launch_cl.c) and the backward
 * (bwd_launch_cl.c), over the kernel arguments of cl_args.c. Plain C.
 */
#ifndef FFPA_OPENCL_CL_LAUNCH_H
#define FFPA_OPENCL_CL_LAUNCH_H

#include "cl_device.h"
#include "cl_params.h"
#include "gpu_host.h"

/* The problem's score, mask and layout parameters (kernels/cl_params.h;
 * tensor offsets left 0: ffpa_cl_resolve_arg fills them) for query blocks
 * of rows_per_block rows. */
ffpa_cl_fwd_params ffpa_cl_params_of(const ffpa_problem *pb, int rows_per_block);

/* The buffer and element offset of a tensor at p (NULL: no tensor, no
 * buffer); 0 when p is not backend memory or not element-aligned. */
int ffpa_cl_resolve_arg(const void *p, size_t elem, cl_mem *mem, int64_t *off);

/* The forward inputs' buffers with their offsets in p (cu: the varlen
 * offsets' buffer, set by ffpa_cl_upload_offsets). */
typedef struct ffpa_cl_inputs_t {
    ffpa_portable_tiles tiles; /* the kernels' tiles for this device (common/plan.h) */
    int matrix;                /* the forward runs kernels/fwd_mma.cl, in geometry mt */
    ffpa_matrix_tiles mt;
    ffpa_cl_fwd_params p;
    cl_mem q, k, v, o, lse, bias, alibi, cu;
    int tiles_in_pages; /* a paged KV cache whose pages hold whole key tiles of mt (fwd_mma.cl's copies) */
} ffpa_cl_inputs_t;

/* Resolves q, k, v, o (out), lse, bias and ALiBi slopes into in (in->p
 * already filled by ffpa_cl_params_of); FFPA_ERR_INVALID_ARGUMENT for memory
 * that is not the backend's. */
ffpa_status ffpa_cl_inputs(const ffpa_problem *pb, ffpa_cl_inputs_t *in, char *err, size_t err_len);

/* Varlen: [cu_q | cu_k] into the workspace at `at` (blocking). */
ffpa_status ffpa_cl_upload_offsets(cl_command_queue queue, const ffpa_problem *pb, void *at, ffpa_cl_inputs_t *in,
                                   char *err, size_t err_len);

/* The portable kernels' tiles for the context's device (ffpa_plan_portable
 * over its local memory and work-group limits), and their build options
 * ("-DWG=.. -DBR=.. -DBC=.. -DDC=.."); FFPA_ERR_UNSUPPORTED when no tile
 * set fits the device. */
ffpa_status ffpa_cl_tiles(const ffpa_gpu_state *st, ffpa_portable_tiles *tiles, char *err, size_t err_len);
void ffpa_cl_tile_options(const ffpa_portable_tiles *tiles, char *buf, size_t len);

/* One kernel argument: its size and a pointer to its value. */
typedef struct ffpa_cl_arg {
    size_t size;
    const void *value;
} ffpa_cl_arg;

/* Creates kernel `name` of program, sets args and enqueues global (rounded
 * up to local) work-items in groups of local; 0 work-items: nothing. */
ffpa_status ffpa_cl_launch(cl_command_queue queue, cl_program program, const char *name, const ffpa_cl_arg *args,
                           int n_args, size_t global, size_t local, char *err, size_t err_len);

/* Releases mem once the commands queued on queue so far have completed
 * (cl_args.c says why not at once). */
void ffpa_cl_release_mem_when_done(cl_command_queue queue, cl_mem mem);

/* Releases the retired objects whose commands have completed (each launch
 * and each synchronisation calls it). */
void ffpa_cl_release_retired(void);

/* A pass's start (forward, KV cache, backward): the device, the stream's
 * queue, the tiles, pb's parameters and buffers (in). */
ffpa_status ffpa_cl_forward_begin(const ffpa_gpu_state *st, const ffpa_problem *pb, const ffpa_cl_device **dev,
                                  cl_command_queue *queue, ffpa_cl_inputs_t *in, char *err, size_t err_len);

/* Picks the forward kernel: on GPUs the matrix one (kernels/fwd_mma.cl)
 * where the device and the tensors' layout allow it, else the
 * register-tiled one (kernels/fwd_tiled.cl) where its tiles fit; else
 * kernels/fwd.cl. FFPA_OPENCL_FORWARD = mma | tiled | portable forces one
 * (one that cannot run the call: FFPA_ERR_UNSUPPORTED saying why). Sets
 * in->matrix, in->mt, in->tiles and the query blocks of in->p. */
ffpa_status ffpa_cl_forward_kernel(const ffpa_gpu_state *st, const ffpa_cl_device *dev, const ffpa_problem *pb,
                                   ffpa_cl_inputs_t *in, char *err, size_t err_len);

/* The forward kernel chosen in in (kernels/fwd_mma.cl, fwd_tiled.cl or
 * fwd.cl): its program for pb, and one launch over in's buffers; kv->paged:
 * a KV-cache call, key rows through the pages (block_table NULL: page b is
 * sequence b; seqlens NULL: kv->uniform_len). */
ffpa_status ffpa_cl_forward_program(const ffpa_cl_device *dev, const ffpa_problem *pb, const ffpa_cl_inputs_t *in,
                                    cl_program *program, char *err, size_t err_len);
/* Its name for ffpa_last_kernel. */
const char *ffpa_cl_forward_name(const ffpa_cl_inputs_t *in, int paged);
ffpa_status ffpa_cl_forward_launch(cl_command_queue queue, cl_program program, const ffpa_problem *pb,
                                   const ffpa_cl_inputs_t *in, const ffpa_cl_kv_params *kv, cl_mem block_table,
                                   cl_mem seqlens, char *err, size_t err_len);

size_t ffpa_cl_forward_workspace(const ffpa_gpu_state *state, const ffpa_problem *pb);

/* The KV cache's workspace: the split partials (kv_launch_cl.c), 0 without a split. */
size_t ffpa_cl_kv_workspace(const ffpa_gpu_state *state, const ffpa_problem *pb);
ffpa_status ffpa_cl_forward(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                            size_t err_len);

/* ffpa_forward_kvcache (kv_launch_cl.c): the append, then the forward kernel
 * through the pages. No workspace. */
ffpa_status ffpa_cl_forward_kvcache(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                    char *err, size_t err_len);

/* ffpa_merge_partials (merge_launch_cl.c, kernels/merge.cl). */
ffpa_status ffpa_cl_merge(ffpa_gpu_state *state, const ffpa_merge_problem *mp, char *err, size_t err_len);

size_t ffpa_cl_backward_workspace(const ffpa_problem *pb);
ffpa_status ffpa_cl_backward(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                             size_t err_len);

#endif
