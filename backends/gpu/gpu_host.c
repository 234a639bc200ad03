/*
 * The backend table of every GPU plugin, written once over the vendor's
 * ffpa_gpu_runtime (gpu_host.h): context state, device binding, streams,
 * memory, workspace queries and the launch entry points. Each plugin links
 * its own copy, so the one runtime it serves is a file-scope pointer.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_host.h"

static const ffpa_gpu_runtime *rt; /* set once by ffpa_gpu_backend(), under the core's registry lock */

ffpa_status ffpa_gpu_error(const ffpa_gpu_runtime *r, int error, const char *what, char *err, size_t err_len)
{
    (void)r->take_last_error();
    if (err && err_len)
        snprintf(err, err_len, "%s: %s: %s", r->name, what, r->error_string(error));
    return error == r->error_out_of_memory ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
}

ffpa_status ffpa_gpu_launch_error(int error, const char *what, char *err, size_t err_len)
{
    return ffpa_gpu_error(rt, error, what, err, err_len);
}

/* Binds the calling thread to the context's device and drops a stale
 * non-sticky error left by an earlier call on this thread, so that the
 * launch checks of this call report only this call's failures. */
static ffpa_status enter(ffpa_gpu_state *st, char *err, size_t err_len)
{
    int e = rt->set_device(st->device);
    if (e)
        return ffpa_gpu_error(rt, e, "setting the device", err, err_len);
    (void)rt->take_last_error();
    return FFPA_OK;
}

static ffpa_status gpu_probe(ffpa_backend_caps *caps, char *err, size_t err_len)
{
    int device;
    return rt->pick_device(&device, caps, NULL, err, err_len);
}

static ffpa_status gpu_init(void **state, char *err, size_t err_len)
{
    ffpa_gpu_state *st = calloc(1, rt->state_size);
    if (!st) {
        snprintf(err, err_len, "%s: out of host memory for the context", rt->name);
        return FFPA_ERR_OUT_OF_MEMORY;
    }
    ffpa_status s = rt->pick_device(&st->device, &st->caps, st, err, err_len);
    if (s == FFPA_OK)
        s = enter(st, err, err_len);
    if (s != FFPA_OK) {
        free(st);
        return s;
    }
    *state = st;
    return FFPA_OK;
}

static void gpu_destroy(void *state)
{
    ffpa_gpu_state *st = state;
    if (!st)
        return;
    (void)rt->set_device(st->device);
    (void)rt->stream_synchronize(st->stream);
    free(st);
}

static size_t gpu_workspace_size(void *state, const ffpa_problem *pb, int backward)
{
    if (backward)
        return rt->backward_workspace ? rt->backward_workspace(pb) : 0;
    return rt->forward_workspace(state, pb);
}

static ffpa_status gpu_forward(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                               size_t err_len)
{
    ffpa_status s = enter(state, err, err_len);
    return s != FFPA_OK ? s : rt->forward(state, pb, ws, ws_bytes, err, err_len);
}

static ffpa_status gpu_backward(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                size_t err_len)
{
    ffpa_status s = enter(state, err, err_len);
    return s != FFPA_OK ? s : rt->backward(state, pb, ws, ws_bytes, err, err_len);
}

static ffpa_status gpu_forward_kvcache(void *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                                       size_t err_len)
{
    ffpa_status s = enter(state, err, err_len);
    return s != FFPA_OK ? s : rt->forward_kvcache(state, pb, ws, ws_bytes, err, err_len);
}

static size_t gpu_kv_workspace_size(void *state, const ffpa_problem *pb)
{
    return rt->kv_workspace(state, pb);
}

static ffpa_status gpu_kv_schedule(void *state, const ffpa_problem *pb, const int32_t *host_seqlens,
                                   ffpa_kv_schedule_info *out, char *err, size_t err_len)
{
    return rt->kv_schedule(state, pb, host_seqlens, out, err, err_len);
}

static ffpa_status gpu_merge(void *state, const ffpa_merge_problem *mp, char *err, size_t err_len)
{
    ffpa_status s = enter(state, err, err_len);
    return s != FFPA_OK ? s : rt->merge(state, mp, err, err_len);
}

static ffpa_status gpu_set_stream(void *state, void *stream, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    ((ffpa_gpu_state *)state)->stream = stream;
    return FFPA_OK;
}

static ffpa_status gpu_synchronize(void *state, char *err, size_t err_len)
{
    int e = rt->stream_synchronize(((ffpa_gpu_state *)state)->stream);
    return e ? ffpa_gpu_error(rt, e, "synchronizing the stream", err, err_len) : FFPA_OK;
}

static ffpa_status gpu_mem_alloc(void *state, void **ptr, size_t bytes, char *err, size_t err_len)
{
    *ptr = NULL;
    ffpa_status s = enter(state, err, err_len);
    if (s != FFPA_OK)
        return s;
    int e = rt->malloc(ptr, bytes ? bytes : 1);
    if (e) {
        *ptr = NULL;
        char what[64];
        snprintf(what, sizeof what, "allocating %zu bytes of device memory", bytes);
        return ffpa_gpu_error(rt, e, what, err, err_len);
    }
    return FFPA_OK;
}

static void gpu_mem_free(void *state, void *ptr)
{
    if (!ptr)
        return;
    (void)rt->set_device(((ffpa_gpu_state *)state)->device);
    (void)rt->free(ptr);
}

static ffpa_status gpu_mem_copy(void *state, void *dst, const void *src, size_t bytes, ffpa_copy_kind kind,
                                char *err, size_t err_len)
{
    ffpa_gpu_state *st = state;
    int e = rt->memcpy_async(dst, src, bytes, kind, st->stream);
    /* Copies touching host memory are synchronous for the caller. */
    if (!e && kind != FFPA_COPY_DEVICE_TO_DEVICE)
        e = rt->stream_synchronize(st->stream);
    return e ? ffpa_gpu_error(rt, e, "copying memory", err, err_len) : FFPA_OK;
}

static const char *gpu_last_kernel(void *state)
{
    const ffpa_gpu_state *st = state;
    return st->last_kernel ? st->last_kernel : rt->name; /* NULL: one kernel family, the backend's */
}

static ffpa_backend_i table = {
    .abi_version = FFPA_BACKEND_ABI_VERSION,
    .probe = gpu_probe,
    .init = gpu_init,
    .destroy = gpu_destroy,
    .workspace_size = gpu_workspace_size,
    .forward = gpu_forward,
    .set_stream = gpu_set_stream,
    .synchronize = gpu_synchronize,
    .mem_alloc = gpu_mem_alloc,
    .mem_free = gpu_mem_free,
    .mem_copy = gpu_mem_copy,
    .last_kernel = gpu_last_kernel,
    .forward_kvcache = gpu_forward_kvcache,
    .kv_workspace_size = gpu_kv_workspace_size,
    .kv_schedule = gpu_kv_schedule,
    .version = FFPA_VERSION_STRING,
};

const ffpa_backend_i *ffpa_gpu_backend(const ffpa_gpu_runtime *runtime)
{
    rt = runtime;
    table.name = runtime->name;
    table.backward = runtime->backward ? gpu_backward : NULL;
    table.merge = runtime->merge ? gpu_merge : NULL;
    return &table;
}
