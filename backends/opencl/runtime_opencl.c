/*
 * The OpenCL backend plugin (libffpa-opencl): the shared GPU host layer
 * (gpu/gpu_host.c) over OpenCL. A "stream" is a cl_command_queue (NULL:
 * the device's default in-order queue); device memory is cl_mem behind
 * stand-in addresses (cl_memory.h); the device is the process's
 * (cl_device.h). Links only the ICD loader (libOpenCL.so.1).
 */
#include <stdio.h>

#include "cl_device.h"
#include "cl_launch.h"
#include "gpu_host.h"

typedef struct ffpa_cl_state {
    ffpa_gpu_state gpu; /* first: what the host layer owns */
} ffpa_cl_state;

static ffpa_status pick_device(int *device, ffpa_backend_caps *caps, ffpa_gpu_state *state, char *err,
                               size_t err_len)
{
    const ffpa_cl_device *d = ffpa_cl_device_get(err, err_len);
    if (!d)
        return FFPA_ERR_NO_BACKEND;
    ffpa_cl_fill_caps(d, caps);
    if (state)
        state->stream = NULL; /* the default queue */
    *device = 0;
    return FFPA_OK;
}

static int set_device(int device)
{
    (void)device; /* one device per process */
    return CL_SUCCESS;
}

static int stream_synchronize(void *stream)
{
    char err[8];
    if (!ffpa_cl_device_get(err, sizeof err))
        return CL_INVALID_COMMAND_QUEUE;
    const cl_int e = clFinish(ffpa_cl_queue(stream));
    ffpa_cl_release_retired();
    return e;
}

static int cl_malloc(void **ptr, size_t bytes)
{
    char err[8];
    const ffpa_cl_device *d = ffpa_cl_device_get(err, sizeof err);
    if (!d)
        return CL_INVALID_CONTEXT;
    cl_int e = ffpa_cl_alloc(d->context, bytes, ptr);
    /* Every way a driver says "too big" is an out-of-memory to the caller. */
    if (e == CL_OUT_OF_RESOURCES || e == CL_OUT_OF_HOST_MEMORY || e == CL_INVALID_BUFFER_SIZE)
        e = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    return e;
}

static int cl_free(void *ptr)
{
    return ffpa_cl_free(ptr);
}

/* Host copies block (the caller may reuse the host memory at once); device
 * to device is queued. */
static int memcpy_async(void *dst, const void *src, size_t bytes, ffpa_copy_kind kind, void *stream)
{
    if (bytes == 0)
        return CL_SUCCESS;
    cl_command_queue q = ffpa_cl_queue(stream);
    size_t dst_off = 0, src_off = 0;
    cl_mem dm = kind == FFPA_COPY_DEVICE_TO_HOST ? NULL : ffpa_cl_resolve(dst, &dst_off);
    cl_mem sm = kind == FFPA_COPY_HOST_TO_DEVICE ? NULL : ffpa_cl_resolve(src, &src_off);
    if ((kind != FFPA_COPY_DEVICE_TO_HOST && !dm) || (kind != FFPA_COPY_HOST_TO_DEVICE && !sm))
        return CL_INVALID_MEM_OBJECT;
    if (kind == FFPA_COPY_HOST_TO_DEVICE)
        return clEnqueueWriteBuffer(q, dm, CL_TRUE, dst_off, bytes, src, 0, NULL, NULL);
    if (kind == FFPA_COPY_DEVICE_TO_HOST)
        return clEnqueueReadBuffer(q, sm, CL_TRUE, src_off, bytes, dst, 0, NULL, NULL);
    return clEnqueueCopyBuffer(q, sm, dm, src_off, dst_off, bytes, 0, NULL, NULL);
}

static int take_last_error(void)
{
    return CL_SUCCESS; /* OpenCL keeps no per-thread error */
}

static ffpa_status kv_schedule(const ffpa_gpu_state *state, const ffpa_problem *pb, const int32_t *host_seqlens,
                               ffpa_kv_schedule_info *out, char *err, size_t err_len)
{
    (void)state, (void)pb, (void)host_seqlens, (void)out;
    snprintf(err, err_len,
             "cache: the opencl backend runs no common/kv_sched.h schedule (its split is static: each query "
             "block's work-groups share its key tiles evenly)");
    return FFPA_ERR_UNSUPPORTED;
}

static const ffpa_gpu_runtime opencl_runtime = {
    .name = "opencl",
    .state_size = sizeof(ffpa_cl_state),
    .pick_device = pick_device,
    .set_device = set_device,
    .stream_synchronize = stream_synchronize,
    .malloc = cl_malloc,
    .free = cl_free,
    .memcpy_async = memcpy_async,
    .take_last_error = take_last_error,
    .error_string = ffpa_cl_error_string,
    .error_out_of_memory = CL_MEM_OBJECT_ALLOCATION_FAILURE,
    .forward_workspace = ffpa_cl_forward_workspace,
    .forward = ffpa_cl_forward,
    .backward_workspace = ffpa_cl_backward_workspace,
    .backward = ffpa_cl_backward,
    .kv_workspace = ffpa_cl_kv_workspace,
    .forward_kvcache = ffpa_cl_forward_kvcache,
    .kv_schedule = kv_schedule,
    .merge = ffpa_cl_merge,
};

__attribute__((visibility("default"))) const ffpa_backend_i *ffpa_backend_entry(void)
{
    return ffpa_gpu_backend(&opencl_runtime);
}
