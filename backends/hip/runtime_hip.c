/*
 * The HIP backend plugin (libffpa-hip), loaded by the core with dlopen: the
 * HIP runtime's calls, the device choice and the kernel launchers
 * (hip_launch.h) in the table the shared GPU host layer
 * (backends/gpu/gpu_host.c) turns into the backend table.
 *
 * Built for AMD (HIP runtime, libamdhip64) or, to run the same sources on
 * an NVIDIA GPU, for __HIP_PLATFORM_NVIDIA__ (compat/hip_on_cuda.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_launch.h"
#include "gpu_calls.h"

/* Offload targets this plugin carries code for (set by the build). */
#ifndef FFPA_HIP_ARCHS
#define FFPA_HIP_ARCHS ""
#endif

static int attr(hipDeviceAttribute_t a, int dev)
{
    int v = 0;
    if (hipDeviceGetAttribute(&v, a, dev) != hipSuccess)
        return 0;
    return v;
}

#if !defined(__HIP_PLATFORM_NVIDIA__)
/* "gfx90a:sramecc+:xnack-" -> "gfx90a". */
static void base_arch(const char *gcn, char *out, size_t len)
{
    size_t n = strcspn(gcn, ":");
    if (n >= len)
        n = len - 1;
    memcpy(out, gcn, n);
    out[n] = '\0';
}

/* Is arch one of the comma-separated FFPA_HIP_ARCHS? */
static int arch_compiled(const char *arch)
{
    const char *list = FFPA_HIP_ARCHS;
    size_t n = strlen(arch);
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && strncmp(p, arch, n) == 0)
            return 1;
        p += m;
        if (*p == ',')
            ++p;
    }
    return 0;
}
#endif

/* The device HIP_VISIBLE_DEVICES and the current device pick (0 by default). */
static ffpa_status pick_device(int *device, ffpa_backend_caps *caps, ffpa_gpu_state *state, char *err,
                               size_t err_len)
{
    (void)state; /* the HIP state is the shared part alone */
    int count = 0;
    hipError_t e = hipGetDeviceCount(&count);
    if (e == hipErrorNoDevice || (e == hipSuccess && count == 0)) {
        snprintf(err, err_len, "hip: no AMD GPU found (the HIP runtime sees no device)");
        return FFPA_ERR_NO_BACKEND;
    }
    if (e != hipSuccess) {
        snprintf(err, err_len, "hip: no usable GPU: hipGetDeviceCount failed: %s", hipGetErrorString(e));
        (void)hipGetLastError();
        return FFPA_ERR_NO_BACKEND;
    }
    int dev = 0;
    if (hipGetDevice(&dev) != hipSuccess)
        dev = 0;
    hipDeviceProp_t prop;
    e = hipGetDeviceProperties(&prop, dev);
    if (e != hipSuccess) {
        snprintf(err, err_len, "hip: hipGetDeviceProperties: %s", hipGetErrorString(e));
        (void)hipGetLastError();
        return FFPA_ERR_NO_BACKEND;
    }

    memset(caps, 0, sizeof *caps);
    ffpa_device_limits *lim = &caps->limits;
    lim->is_gpu = 1;
    lim->sm_count = attr(hipDeviceAttributeMultiprocessorCount, dev);
    lim->warp_size = attr(hipDeviceAttributeWarpSize, dev);
    lim->max_threads_per_block = attr(hipDeviceAttributeMaxThreadsPerBlock, dev);
    lim->smem_per_sm = (size_t)attr(hipDeviceAttributeMaxSharedMemoryPerMultiprocessor, dev);
    lim->regs_per_sm = attr(hipDeviceAttributeMaxRegistersPerMultiprocessor, dev);
#if defined(__HIP_PLATFORM_NVIDIA__)
    int major = attr(hipDeviceAttributeComputeCapabilityMajor, dev);
    int minor = attr(hipDeviceAttributeComputeCapabilityMinor, dev);
    if (major < 8) {
        snprintf(err, err_len, "hip: %s is sm_%d%d; the HIP-on-CUDA build needs sm_80 or later", prop.name,
                     major, minor);
        return FFPA_ERR_NO_BACKEND;
    }
    lim->arch = major * 10 + minor;
    lim->smem_per_block = (size_t)attr(hipDeviceAttributeSharedMemPerBlockOptin, dev);
    snprintf(caps->device_name, sizeof caps->device_name, "%.100s (HIP on CUDA, sm_%d%d, %d SMs)", prop.name, major,
             minor, lim->sm_count);
#else
    char arch[64];
    base_arch(prop.gcnArchName, arch, sizeof arch);
    if (!arch_compiled(arch)) {
        snprintf(err, err_len, "hip: %s is %s; this libffpa-hip carries code for %s only", prop.name, arch,
                     FFPA_HIP_ARCHS);
        return FFPA_ERR_NO_BACKEND;
    }
    /* gfx id as a number: "gfx90a" -> 0x90a, "gfx1100" -> 0x1100. */
    lim->arch = (int)strtol(arch + 3, NULL, 16);
    lim->smem_per_block = (size_t)attr(hipDeviceAttributeMaxSharedMemoryPerBlock, dev);
    snprintf(caps->device_name, sizeof caps->device_name, "%.100s (%.20s, %d CUs, wave%d)", prop.name, arch,
             lim->sm_count, lim->warp_size);
#endif
    caps->dtype_mask = (1u << FFPA_F16) | (1u << FFPA_BF16);
    caps->max_head_dim = FFPA_MAX_HEAD_DIM;
    /* The generic kernels' score epilogue and tile ranges (gpu/masking.cuh). */
    caps->variants = FFPA_VARIANT_WINDOW | FFPA_VARIANT_SOFTCAP | FFPA_VARIANT_ALIBI;
    caps->has_backward = 1;
    *device = dev;
    return FFPA_OK;
}

static const ffpa_gpu_runtime hip_runtime = {
    .name = "hip",
    .state_size = sizeof(ffpa_gpu_state),
    .pick_device = pick_device,
    FFPA_GPU_API_CALLS,
    .forward_workspace = ffpa_hip_forward_workspace,
    .forward = ffpa_hip_forward,
    .backward_workspace = ffpa_hip_backward_workspace,
    .backward = ffpa_hip_backward,
    .kv_workspace = ffpa_hip_kv_workspace,
    .forward_kvcache = ffpa_hip_forward_kvcache,
    .kv_schedule = ffpa_hip_kv_schedule,
    .merge = ffpa_hip_merge,
};

__attribute__((visibility("default"))) const ffpa_backend_i *ffpa_backend_entry(void)
{
    return ffpa_gpu_backend(&hip_runtime);
}
