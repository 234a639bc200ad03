/*
 * Host glue of the HIP backend plugin (libffpa-hip): the backend table the
 * core loads with dlopen. Probe, context state, memory, streams; the
 * kernels sit behind ffpa_hip_forward (fwd_launch.hip) and
 * ffpa_hip_backward (bwd_launch.hip).
 *
 * Built for AMD (HIP runtime, libamdhip64) or, to run the same sources on
 * an NVIDIA GPU, for __HIP_PLATFORM_NVIDIA__ (compat/hip_on_cuda.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_state.h"

#define FFPA_HIP_EXPORT __attribute__((visibility("default")))

/* Offload targets this plugin carries code for (set by the build). */
#ifndef FFPA_HIP_ARCHS
#define FFPA_HIP_ARCHS ""
#endif

static void set_err(char *err, size_t err_len, const char *msg)
{
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
}

ffpa_status ffpa_hip_error(hipError_t e, const char *what, char *err, size_t err_len)
{
    /* Consume a reported non-sticky error (a failed malloc, say): the runtime
     * keeps it as the thread's last error, and the next launch check would
     * report it as that launch's failure. */
    (void)hipGetLastError();
    if (err && err_len)
        snprintf(err, err_len, "hip: %s: %s", what, hipGetErrorString(e));
    return e == hipErrorOutOfMemory ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
}

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

/* Device chosen by HIP_VISIBLE_DEVICES / the current device (0 by default);
 * fills caps. */
static ffpa_status pick_device(int *device, ffpa_backend_caps *caps, char *err, size_t err_len)
{
    int count = 0;
    hipError_t e = hipGetDeviceCount(&count);
    if (e == hipErrorNoDevice || (e == hipSuccess && count == 0)) {
        set_err(err, err_len, "hip: no AMD GPU found (the HIP runtime sees no device)");
        return FFPA_ERR_NO_BACKEND;
    }
    if (e != hipSuccess) {
        if (err && err_len)
            snprintf(err, err_len, "hip: no usable GPU: hipGetDeviceCount failed: %s", hipGetErrorString(e));
        return FFPA_ERR_NO_BACKEND;
    }
    int dev = 0;
    if (hipGetDevice(&dev) != hipSuccess)
        dev = 0;
    hipDeviceProp_t prop;
    e = hipGetDeviceProperties(&prop, dev);
    if (e != hipSuccess) {
        if (err && err_len)
            snprintf(err, err_len, "hip: hipGetDeviceProperties: %s", hipGetErrorString(e));
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
        if (err && err_len)
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
        if (err && err_len)
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
    caps->has_backward = 1;
    *device = dev;
    return FFPA_OK;
}

static ffpa_status hip_probe(ffpa_backend_caps *caps, char *err, size_t err_len)
{
    int dev;
    return pick_device(&dev, caps, err, err_len);
}

static ffpa_status hip_init(void **state, char *err, size_t err_len)
{
    struct ffpa_hip_state *st = calloc(1, sizeof *st);
    if (!st) {
        set_err(err, err_len, "hip: out of host memory for the context");
        return FFPA_ERR_OUT_OF_MEMORY;
    }
    ffpa_status s = pick_device(&st->device, &st->caps, err, err_len);
    if (s != FFPA_OK) {
        free(st);
        return s;
    }
    hipError_t e = hipSetDevice(st->device);
    if (e != hipSuccess) {
        free(st);
        return ffpa_hip_error(e, "hipSetDevice", err, err_len);
    }
    st->stream = NULL;
    *state = st;
    return FFPA_OK;
}

static void hip_destroy(void *state)
{
    struct ffpa_hip_state *st = state;
    if (!st)
        return;
    hipSetDevice(st->device);
    hipStreamSynchronize(st->stream);
    free(st);
}

static size_t hip_workspace_size(void *state, const ffpa_problem *pb, int backward)
{
    if (backward)
        return ffpa_hip_backward_workspace(pb);
    return ffpa_hip_forward_workspace(state, pb);
}

static ffpa_status hip_forward(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                               size_t err_len)
{
    struct ffpa_hip_state *st = state;
    hipError_t e = hipSetDevice(st->device);
    if (e != hipSuccess)
        return ffpa_hip_error(e, "hipSetDevice", err, err_len);
    return ffpa_hip_forward(st, pb, ws, ws_bytes, err, err_len);
}

static ffpa_status hip_forward_kvcache(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                       size_t err_len)
{
    struct ffpa_hip_state *st = state;
    hipError_t e = hipSetDevice(st->device);
    if (e != hipSuccess)
        return ffpa_hip_error(e, "hipSetDevice", err, err_len);
    return ffpa_hip_forward_kvcache(st, pb, ws, ws_bytes, err, err_len);
}

static size_t hip_kv_workspace_size(void *state, const ffpa_problem *pb)
{
    return ffpa_hip_kv_workspace(state, pb);
}

static ffpa_status hip_kv_schedule(void *state, const ffpa_problem *pb, const int32_t *host_seqlens,
                                   ffpa_kv_schedule_info *out, char *err, size_t err_len)
{
    return ffpa_hip_kv_schedule(state, pb, host_seqlens, out, err, err_len);
}

static ffpa_status hip_backward(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                size_t err_len)
{
    struct ffpa_hip_state *st = state;
    hipError_t e = hipSetDevice(st->device);
    if (e != hipSuccess)
        return ffpa_hip_error(e, "hipSetDevice", err, err_len);
    return ffpa_hip_backward(st, pb, ws, ws_bytes, err, err_len);
}

static ffpa_status hip_set_stream(void *state, void *stream, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    struct ffpa_hip_state *st = state;
    st->stream = (hipStream_t)stream;
    return FFPA_OK;
}

static ffpa_status hip_synchronize(void *state, char *err, size_t err_len)
{
    struct ffpa_hip_state *st = state;
    hipError_t e = hipStreamSynchronize(st->stream);
    if (e != hipSuccess)
        return ffpa_hip_error(e, "hipStreamSynchronize", err, err_len);
    return FFPA_OK;
}

static ffpa_status hip_mem_alloc(void *state, void **ptr, size_t bytes, char *err, size_t err_len)
{
    struct ffpa_hip_state *st = state;
    hipSetDevice(st->device);
    *ptr = NULL;
    hipError_t e = hipMalloc(ptr, bytes ? bytes : 1);
    if (e != hipSuccess) {
        *ptr = NULL;
        (void)hipGetLastError(); /* as in ffpa_hip_error: not the next launch's failure */
        if (err && err_len)
            snprintf(err, err_len, "hip: hipMalloc of %zu bytes: %s", bytes, hipGetErrorString(e));
        return e == hipErrorOutOfMemory ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
    }
    return FFPA_OK;
}

static void hip_mem_free(void *state, void *ptr)
{
    struct ffpa_hip_state *st = state;
    if (!ptr)
        return;
    hipSetDevice(st->device);
    /* hipFree waits for the device: outstanding work using ptr is done. */
    hipFree(ptr);
}

static ffpa_status hip_mem_copy(void *state, void *dst, const void *src, size_t bytes, ffpa_copy_kind kind,
                                char *err, size_t err_len)
{
    struct ffpa_hip_state *st = state;
    hipMemcpyKind k = kind == FFPA_COPY_HOST_TO_DEVICE   ? hipMemcpyHostToDevice
                      : kind == FFPA_COPY_DEVICE_TO_HOST ? hipMemcpyDeviceToHost
                                                         : hipMemcpyDeviceToDevice;
    hipError_t e = hipMemcpyAsync(dst, src, bytes, k, st->stream);
    /* Copies touching host memory are synchronous for the caller. */
    if (e == hipSuccess && kind != FFPA_COPY_DEVICE_TO_DEVICE)
        e = hipStreamSynchronize(st->stream);
    if (e != hipSuccess)
        return ffpa_hip_error(e, "hipMemcpyAsync", err, err_len);
    return FFPA_OK;
}

static const ffpa_backend_i hip_backend = {
    .abi_version = FFPA_BACKEND_ABI_VERSION,
    .name = "hip",
    .probe = hip_probe,
    .init = hip_init,
    .destroy = hip_destroy,
    .workspace_size = hip_workspace_size,
    .forward = hip_forward,
    .backward = hip_backward,
    .set_stream = hip_set_stream,
    .synchronize = hip_synchronize,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .mem_copy = hip_mem_copy,
    .last_kernel = NULL, /* one kernel family per call kind */
    .forward_kvcache = hip_forward_kvcache,
    .kv_workspace_size = hip_kv_workspace_size,
    .kv_schedule = hip_kv_schedule,
    .version = FFPA_VERSION_STRING,
};

FFPA_HIP_EXPORT const ffpa_backend_i *ffpa_backend_entry(void)
{
    return &hip_backend;
}
