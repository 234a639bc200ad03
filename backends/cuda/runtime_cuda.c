/*
 * The CUDA backend plugin (libffpa-cuda), loaded by the core with dlopen:
 * the CUDA runtime's calls, the device choice and the kernel launchers in
 * the table the shared GPU host layer (backends/gpu/gpu_host.c) turns into
 * the backend table. The kernels sit behind fwd_launch.h, kv/kv_launch.h
 * and bwd/bwd_launch.h (when built).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_state.h"
#include "env.h"
#include "gpu_calls.h"
#include "fwd_launch.h"
#include "kv/kv_launch.h"
#ifdef FFPA_CUDA_HAVE_BWD
#include "bwd/bwd_launch.h"
#endif

/* as_arch: the part FFPA_CUDA_AS_ARCH emulates (0: none), named in the
 * device name so that the device's own tuning table is not taken for it. */
static void fill_caps(const struct cudaDeviceProp *prop, int as_arch, ffpa_backend_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    char as[16] = "";
    if (as_arch)
        snprintf(as, sizeof as, " as sm_%d", as_arch);
    snprintf(caps->device_name, sizeof caps->device_name, "%.100s%s (sm_%d%d, %d SMs)", prop->name, as,
             prop->major, prop->minor, prop->multiProcessorCount);
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

/* The emulated part's carveout (below), read by gpu_launch.cuh; -1: none. */
int ffpa_cuda_carveout_percent = -1;

/* FFPA_CUDA_AS_ARCH=80|86|89: plan, choose kernels and load tuning tables
 * as on that part (its arch and shared memory: the generic kernels, since
 * the Hopper ones need sm_90; each SM limited to the part's shared memory
 * by the kernels' carveout) while running on this device, which keeps its
 * SM count, registers, clocks and memory. How the sm_80/86/89 tuning tables
 * are measured on an H100 (docs/notes/tuning.md). prop is rewritten, so
 * every launcher's check sees the part. */
static ffpa_status apply_as_arch(struct cudaDeviceProp *prop, int *as_arch, char *err, size_t err_len)
{
    *as_arch = 0;
    const char *v = ffpa_env_string("FFPA_CUDA_AS_ARCH");
    if (!v)
        return FFPA_OK;
    ffpa_device_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.arch = prop->major * 10 + prop->minor;
    lim.smem_per_block = prop->sharedMemPerBlockOptin;
    lim.smem_per_sm = prop->sharedMemPerMultiprocessor;
    char *end = NULL;
    const long arch = strtol(v, &end, 10);
    if (end == v || *end || arch < 0 || arch > 1000 || !ffpa_limits_as_arch(&lim, (int)arch)) {
        snprintf(err, err_len,
                 "FFPA_CUDA_AS_ARCH='%.40s': expected 80, 86 or 89, a part of at most this %.100s's sm_%d%d and "
                 "%zu KiB of shared memory per SM",
                 v, prop->name, prop->major, prop->minor, (size_t)prop->sharedMemPerMultiprocessor / 1024);
        return FFPA_ERR_NO_BACKEND;
    }
    /* The carveout of every generic kernel: the part's shared memory per
     * SM, a percentage of this device's rounded down, which the driver
     * rounds up to the configuration it names (H100: 100 and 164 KiB are
     * configurations), so an SM holds as many blocks as on the part.
     * Stored atomically: contexts may be created from several threads. */
    __atomic_store_n(&ffpa_cuda_carveout_percent, (int)(lim.smem_per_sm * 100 / prop->sharedMemPerMultiprocessor),
                     __ATOMIC_RELAXED);
    prop->major = lim.arch / 10;
    prop->minor = lim.arch % 10;
    prop->sharedMemPerBlockOptin = lim.smem_per_block;
    prop->sharedMemPerMultiprocessor = lim.smem_per_sm;
    *as_arch = lim.arch;
    return FFPA_OK;
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
    int as_arch = 0;
    const ffpa_status st = apply_as_arch(&prop, &as_arch, err, err_len);
    if (st != FFPA_OK)
        return st;
    fill_caps(&prop, as_arch, caps);
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
