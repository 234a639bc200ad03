/*
 * The CUDA backend plugin (libffpa-cuda), loaded by the core with dlopen:
 * the CUDA runtime's calls, the device choice and the kernel launchers in
 * the table the shared GPU host layer (backends/gpu/gpu_host.c) turns into
 * the backend table. The kernels sit behind fwd_launch.h, kv/kv_launch.h
 * and bwd/bwd_launch.h (when built).
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_state.h"
#include "gpu_calls.h"
#include "fwd_launch.h"
#include "kv/kv_launch.h"
#ifdef FFPA_CUDA_HAVE_BWD
#include "bwd/bwd_launch.h"
#endif

static void fill_caps(const struct cudaDeviceProp *prop, ffpa_backend_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    snprintf(caps->device_name, sizeof caps->device_name, "%.100s (sm_%d%d, %d SMs)", prop->name, prop->major,
             prop->minor, prop->multiProcessorCount);
    caps->dtype_mask = (1u << FFPA_F16) | (1u << FFPA_BF16);
    caps->max_head_dim = FFPA_MAX_HEAD_DIM;
    /* The generic kernels' score epilogue and tile ranges (gpu/masking.cuh). */
    caps->variants = FFPA_VARIANT_WINDOW | FFPA_VARIANT_SOFTCAP | FFPA_VARIANT_ALIBI;
#ifdef FFPA_CUDA_HAVE_BWD
    caps->has_backward = 1;
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

/* The device CUDA_VISIBLE_DEVICES and the current device pick (0 by default). */
static ffpa_status pick_device(int *device, ffpa_backend_caps *caps, ffpa_gpu_state *state, char *err,
                               size_t err_len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        snprintf(err, err_len, "no CUDA device");
        return FFPA_ERR_NO_BACKEND;
    }
    if (e == cudaErrorInsufficientDriver) {
        /* Also what the runtime says when there is no driver at all. */
        snprintf(err, err_len, "no usable NVIDIA driver (libcuda.so.1 missing or older than the CUDA runtime this "
                               "plugin was built with)");
        return FFPA_ERR_NO_BACKEND;
    }
    struct cudaDeviceProp prop;
    int dev = 0;
    if (e == cudaSuccess && cudaGetDevice(&dev) != cudaSuccess)
        dev = 0;
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return FFPA_ERR_NO_BACKEND;
    }
    if (prop.major < 8) {
        snprintf(err, err_len, "%s is sm_%d%d; the cuda backend needs sm_80 or later", prop.name, prop.major,
                 prop.minor);
        return FFPA_ERR_NO_BACKEND;
    }
    fill_caps(&prop, caps);
    if (state)
        ffpa_cuda_of(state)->prop = prop;
    *device = dev;
    return FFPA_OK;
}

static const ffpa_gpu_runtime cuda_runtime = {
    .name = "cuda",
    .state_size = sizeof(struct ffpa_cuda_state),
    .pick_device = pick_device,
    FFPA_GPU_API_CALLS,
    .forward_workspace = ffpa_cuda_forward_workspace,
    .forward = ffpa_cuda_forward,
#ifdef FFPA_CUDA_HAVE_BWD
    .backward_workspace = ffpa_cuda_backward_workspace,
    .backward = ffpa_cuda_backward,
#endif
    .kv_workspace = ffpa_cuda_kv_workspace,
    .forward_kvcache = ffpa_cuda_forward_kvcache,
    .kv_schedule = ffpa_cuda_kv_schedule,
    .merge = ffpa_cuda_merge,
};

__attribute__((visibility("default"))) const ffpa_backend_i *ffpa_backend_entry(void)
{
    return ffpa_gpu_backend(&cuda_runtime);
}
