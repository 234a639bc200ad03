/*
 * The host layer every GPU backend plugin shares (CUDA, HIP; OpenCL next):
 * the backend table (backend.h) written once in gpu_host.c over a small
 * per-vendor table of runtime calls and kernel launchers. A vendor file
 * (backends/cuda/runtime_cuda.c, backends/hip/runtime_hip.c) fills one
 * ffpa_gpu_runtime and exports
 *
 *     const ffpa_backend_i *ffpa_backend_entry(void) { return ffpa_gpu_backend(&its_runtime); }
 *
 * Its per-context state starts with an ffpa_gpu_state (what this layer
 * reads and writes); the launchers get that member and reach the rest.
 * Runtime calls return the vendor's error code: 0 for success. Plain C.
 */
#ifndef FFPA_GPU_HOST_H
#define FFPA_GPU_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The part of a vendor's per-context state this layer owns. */
typedef struct ffpa_gpu_state {
    int device;               /* device ordinal the context is bound to */
    void *stream;             /* stream of every launch and copy (NULL: the default stream) */
    ffpa_backend_caps caps;   /* what probe reported: name, limits for the planner */
    const char *last_kernel;  /* kernel(s) of the last call (a static string or kernel_label); NULL: the backend */
    char kernel_label[64];    /* a composed last_kernel (the backward's kernels and tiles) */
} ffpa_gpu_state;

typedef struct ffpa_gpu_runtime {
    const char *name;         /* "cuda", "hip": the backend's name and every message's prefix */
    size_t state_size;        /* bytes of the vendor state, an ffpa_gpu_state first */

    /* ---- device and runtime (all required) ---- */
    /* Picks the device (the visible devices' current one), fills caps and,
     * when state is not NULL (init rather than probe), the vendor's part of
     * it. FFPA_ERR_NO_BACKEND with the reason when there is no usable one. */
    ffpa_status (*pick_device)(int *device, ffpa_backend_caps *caps, ffpa_gpu_state *state, char *err,
                               size_t err_len);
    int (*set_device)(int device);
    int (*stream_synchronize)(void *stream);
    int (*malloc)(void **ptr, size_t bytes);
    int (*free)(void *ptr);   /* waits for the device: work using ptr is done */
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, ffpa_copy_kind kind, void *stream);
    /* Returns and clears the thread's last (non-sticky) error. */
    int (*take_last_error)(void);
    const char *(*error_string)(int error);
    int error_out_of_memory;  /* the code for an allocation failure */

    /* ---- kernel launchers (asynchronous on state->stream) ---- */
    size_t (*forward_workspace)(const ffpa_gpu_state *state, const ffpa_problem *pb);
    ffpa_status (*forward)(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                           size_t err_len);
    /* optional (NULL: this build has no backward) */
    size_t (*backward_workspace)(const ffpa_problem *pb);
    ffpa_status (*backward)(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                            size_t err_len);
    size_t (*kv_workspace)(const ffpa_gpu_state *state, const ffpa_problem *pb);
    ffpa_status (*forward_kvcache)(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                   char *err, size_t err_len);
    ffpa_status (*kv_schedule)(const ffpa_gpu_state *state, const ffpa_problem *pb, const int32_t *host_seqlens,
                               ffpa_kv_schedule_info *out, char *err, size_t err_len);
    /* optional (NULL: ffpa_merge_partials unsupported) */
    ffpa_status (*merge)(ffpa_gpu_state *state, const ffpa_merge_problem *mp, char *err, size_t err_len);
} ffpa_gpu_runtime;

/* The backend table over rt (which must outlive the plugin: a static). */
const ffpa_backend_i *ffpa_gpu_backend(const ffpa_gpu_runtime *rt);

/* Writes "<name>: <what>: <error string>" into err and consumes the error
 * (the runtime keeps a failed call's error as the thread's last error, and
 * the next launch check would report it as its own). Returns
 * FFPA_ERR_OUT_OF_MEMORY for an allocation failure, else FFPA_ERR_DEVICE. */
ffpa_status ffpa_gpu_error(const ffpa_gpu_runtime *rt, int error, const char *what, char *err, size_t err_len);

/* ffpa_gpu_error() for the runtime this plugin serves: what the launchers
 * call on a failed launch or copy. */
ffpa_status ffpa_gpu_launch_error(int error, const char *what, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
