/*
 * The runtime calls of an ffpa_gpu_runtime (gpu_host.h) for the plugins
 * whose vendor runtime gpu_api.h maps (CUDA, HIP), written once in
 * gpu_calls.c: a vendor file puts FFPA_GPU_API_CALLS in its table. Plain C.
 */
#ifndef FFPA_GPU_CALLS_H
#define FFPA_GPU_CALLS_H

#include <stddef.h>

#include "backend.h"
#include "gpu_api.h"

#ifdef __cplusplus
extern "C" {
#endif

int ffpa_gpu_api_set_device(int device);
int ffpa_gpu_api_stream_synchronize(void *stream);
int ffpa_gpu_api_malloc(void **ptr, size_t bytes);
int ffpa_gpu_api_free(void *ptr);
int ffpa_gpu_api_memcpy_async(void *dst, const void *src, size_t bytes, ffpa_copy_kind kind, void *stream);
int ffpa_gpu_api_take_last_error(void);
const char *ffpa_gpu_api_error_string(int error);

#define FFPA_GPU_API_CALLS                                                                                          \
    .set_device = ffpa_gpu_api_set_device, .stream_synchronize = ffpa_gpu_api_stream_synchronize,                \
    .malloc = ffpa_gpu_api_malloc, .free = ffpa_gpu_api_free, .memcpy_async = ffpa_gpu_api_memcpy_async,         \
    .take_last_error = ffpa_gpu_api_take_last_error, .error_string = ffpa_gpu_api_error_string,                 \
    .error_out_of_memory = (int)gpuErrorOutOfMemory

#ifdef __cplusplus
}
#endif

#endif
