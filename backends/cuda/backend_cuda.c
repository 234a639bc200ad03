/*
 * Host glue of the CUDA backend plugin (libffpa-cuda): the backend table
 * the core loads with dlopen. Probe, context state, memory, streams; the
 * kernels sit behind fwd_launch.h (and bwd/bwd_launch.h when built).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "cuda_state.h"
#include "fwd_launch.h"
#include "kv/kv_launch.h"
#ifdef FFPA_CUDA_HAVE_BWD
#include "bwd/bwd_launch.h"
#endif

#define FFPA_CUDA_EXPORT __attribute__((visibility("default")))

static void set_err(char *err, size_t err_len, const char *msg)
{
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
}

ffpa_status ffpa_cuda_error(cudaError_t e, const char *what, char *err, size_t err_len)
{
    /* Consume a reported non-sticky error (a failed malloc, say): the runtime
     * keeps it as the thread's last error, and the next launch check would
     * report it as that launch's failure. */
    (void)cudaGetLastError();
    if (err && err_len)
        snprintf(err, err_len, "cuda: %s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
}

void ffpa_cuda_fill_caps(const struct cudaDeviceProp *prop, ffpa_backend_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    snprintf(caps->device_name, sizeof caps->device_name, "%.100s (sm_%d%d, %d SMs)", prop->name, prop->major,
             prop->minor, prop->multiProcessorCount);
    caps->dtype_mask = (1u << FFPA_F16) | (1u << FFPA_BF16);
    caps->max_head_dim = FFPA_MAX_HEAD_DIM;
#ifdef FFPA_CUDA_HAVE_BWD
    caps->has_backward = 1;
#else
    caps->has_backward = 0;
#endif
    ffpa_device_limits *lim = &caps->limits;
    lim->is_gpu = 1;
    lim->arch = prop->major * 10 + prop->minor;
    lim->sm_count = prop->multiProcessorCount;
    lim->warp_size = prop->warpSize;
    lim->smem_per_block = prop->sharedMemPerBlockOptin;
    lim->smem_per_sm = prop->sharedMemPerMultiprocessor;
    lim->regs_per_sm = prop->regsPerMultiprocessor;
    lim->max_threads_per_block = prop->maxThreadsPerBlock;
}

/* Device chosen by CUDA_VISIBLE_DEVICES / the current device (0 by default). */
static ffpa_status pick_device(int *device, struct cudaDeviceProp *prop, char *err, size_t err_len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        set_err(err, err_len, "no CUDA device");
        return FFPA_ERR_NO_BACKEND;
    }
    if (e == cudaErrorInsufficientDriver) {
        /* Also what the runtime says when there is no driver at all. */
        set_err(err, err_len, "no usable NVIDIA driver (libcuda.so.1 missing or older than the CUDA "
                              "runtime this plugin was built with)");
        return FFPA_ERR_NO_BACKEND;
    }
    if (e != cudaSuccess) {
        if (err && err_len)
            snprintf(err, err_len, "cuda: %s", cudaGetErrorString(e));
        return FFPA_ERR_NO_BACKEND;
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        dev = 0;
    e = cudaGetDeviceProperties(prop, dev);
    if (e != cudaSuccess) {
        if (err && err_len)
            snprintf(err, err_len, "cuda: %s", cudaGetErrorString(e));
        return FFPA_ERR_NO_BACKEND;
    }
    if (prop->major < 8) {
        if (err && err_len)
            snprintf(err, err_len, "%s is sm_%d%d; the cuda backend needs sm_80 or later", prop->name,
                     prop->major, prop->minor);
        return FFPA_ERR_NO_BACKEND;
    }
    *device = dev;
    return FFPA_OK;
}

static ffpa_status cuda_probe(ffpa_backend_caps *caps, char *err, size_t err_len)
{
    struct cudaDeviceProp prop;
    int dev;
    ffpa_status s = pick_device(&dev, &prop, err, err_len);
    if (s != FFPA_OK)
        return s;
    ffpa_cuda_fill_caps(&prop, caps);
    return FFPA_OK;
}

static ffpa_status cuda_init(void **state, char *err, size_t err_len)
{
    struct ffpa_cuda_state *st = calloc(1, sizeof *st);
    if (!st) {
        set_err(err, err_len, "cuda: out of host memory for the context");
        return FFPA_ERR_OUT_OF_MEMORY;
    }
    ffpa_status s = pick_device(&st->device, &st->prop, err, err_len);
    if (s != FFPA_OK) {
        free(st);
        return s;
    }
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) {
        free(st);
        return ffpa_cuda_error(e, "cudaSetDevice", err, err_len);
    }
    ffpa_cuda_fill_caps(&st->prop, &st->caps);
    st->stream = NULL;
    *state = st;
    return FFPA_OK;
}

static void cuda_destroy(void *state)
{
    struct ffpa_cuda_state *st = state;
    if (!st)
        return;
    cudaSetDevice(st->device);
    cudaStreamSynchronize(st->stream);
    free(st);
}

static size_t cuda_workspace_size(void *state, const ffpa_problem *pb, int backward)
{
    struct ffpa_cuda_state *st = state;
    if (backward) {
#ifdef FFPA_CUDA_HAVE_BWD
        return ffpa_cuda_backward_workspace(pb);
#else
        return 0;
#endif
    }
    return ffpa_cuda_forward_workspace(st, pb);
}

static ffpa_status cuda_forward(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                size_t err_len)
{
    struct ffpa_cuda_state *st = state;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess)
        return ffpa_cuda_error(e, "cudaSetDevice", err, err_len);
    return ffpa_cuda_forward(st, pb, ws, ws_bytes, err, err_len);
}

#ifdef FFPA_CUDA_HAVE_BWD
static ffpa_status cuda_backward(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                 size_t err_len)
{
    struct ffpa_cuda_state *st = state;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess)
        return ffpa_cuda_error(e, "cudaSetDevice", err, err_len);
    return ffpa_cuda_backward(st, pb, ws, ws_bytes, err, err_len);
}
#endif

static ffpa_status cuda_set_stream(void *state, void *stream, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    struct ffpa_cuda_state *st = state;
    st->stream = (cudaStream_t)stream;
    return FFPA_OK;
}

static ffpa_status cuda_synchronize(void *state, char *err, size_t err_len)
{
    struct ffpa_cuda_state *st = state;
    cudaError_t e = cudaStreamSynchronize(st->stream);
    if (e != cudaSuccess)
        return ffpa_cuda_error(e, "cudaStreamSynchronize", err, err_len);
    return FFPA_OK;
}

static ffpa_status cuda_mem_alloc(void *state, void **ptr, size_t bytes, char *err, size_t err_len)
{
    struct ffpa_cuda_state *st = state;
    cudaSetDevice(st->device);
    *ptr = NULL;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *ptr = NULL;
        (void)cudaGetLastError(); /* as in ffpa_cuda_error: not the next launch's failure */
        if (err && err_len)
            snprintf(err, err_len, "cuda: cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
    }
    return FFPA_OK;
}

static void cuda_mem_free(void *state, void *ptr)
{
    struct ffpa_cuda_state *st = state;
    if (!ptr)
        return;
    cudaSetDevice(st->device);
    /* cudaFree synchronises the device: outstanding work using ptr is done. */
    cudaFree(ptr);
}

static ffpa_status cuda_mem_copy(void *state, void *dst, const void *src, size_t bytes, ffpa_copy_kind kind,
                                 char *err, size_t err_len)
{
    struct ffpa_cuda_state *st = state;
    enum cudaMemcpyKind k = kind == FFPA_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                            : kind == FFPA_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                               : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, st->stream);
    /* Copies touching host memory are synchronous for the caller. */
    if (e == cudaSuccess && kind != FFPA_COPY_DEVICE_TO_DEVICE)
        e = cudaStreamSynchronize(st->stream);
    if (e != cudaSuccess)
        return ffpa_cuda_error(e, "cudaMemcpy", err, err_len);
    return FFPA_OK;
}

static ffpa_status cuda_forward_kvcache(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                        char *err, size_t err_len)
{
    struct ffpa_cuda_state *st = state;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess)
        return ffpa_cuda_error(e, "cudaSetDevice", err, err_len);
    return ffpa_cuda_forward_kvcache(st, pb, ws, ws_bytes, err, err_len);
}

static size_t cuda_kv_workspace_size(void *state, const ffpa_problem *pb)
{
    return ffpa_cuda_kv_workspace(state, pb);
}

static ffpa_status cuda_kv_schedule(void *state, const ffpa_problem *pb, const int32_t *host_seqlens,
                                    ffpa_kv_schedule_info *out, char *err, size_t err_len)
{
    return ffpa_cuda_kv_schedule(state, pb, host_seqlens, out, err, err_len);
}

static const char *cuda_last_kernel(void *state)
{
    const struct ffpa_cuda_state *st = state;
    return st->last_kernel ? st->last_kernel : "";
}

static const ffpa_backend_i cuda_backend = {
    .abi_version = FFPA_BACKEND_ABI_VERSION,
    .name = "cuda",
    .probe = cuda_probe,
    .init = cuda_init,
    .destroy = cuda_destroy,
    .workspace_size = cuda_workspace_size,
    .forward = cuda_forward,
#ifdef FFPA_CUDA_HAVE_BWD
    .backward = cuda_backward,
#else
    .backward = NULL,
#endif
    .set_stream = cuda_set_stream,
    .synchronize = cuda_synchronize,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_copy = cuda_mem_copy,
    .last_kernel = cuda_last_kernel,
    .forward_kvcache = cuda_forward_kvcache,
    .kv_workspace_size = cuda_kv_workspace_size,
    .kv_schedule = cuda_kv_schedule,
    .version = FFPA_VERSION_STRING,
};

FFPA_CUDA_EXPORT const ffpa_backend_i *ffpa_backend_entry(void)
{
    return &cuda_backend;
}
