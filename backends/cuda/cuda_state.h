/*
 * Per-context state of the CUDA backend: the shared GPU host layer's part
 * (gpu_host.h) first, then what only CUDA code reads. The launchers get the
 * shared part (ffpa_gpu_state) and reach the rest with ffpa_cuda_of(). Plain
 * C: included from C and from .cu files.
 */
#ifndef FFPA_CUDA_STATE_H
#define FFPA_CUDA_STATE_H

#include <cuda_runtime_api.h>

#include "gpu_host.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ffpa_cuda_state {
    ffpa_gpu_state gpu;          /* first: device, stream, caps, last kernel */
    struct cudaDeviceProp prop;  /* properties read once at init */
};

static inline struct ffpa_cuda_state *ffpa_cuda_of(ffpa_gpu_state *gpu)
{
    return (struct ffpa_cuda_state *)gpu;
}

static inline cudaStream_t ffpa_cuda_stream(const ffpa_gpu_state *gpu)
{
    return (cudaStream_t)gpu->stream;
}

#ifdef __cplusplus
}
#endif

#endif
