/*
 * Per-context state of the CUDA backend, shared by the forward (this folder)
 * and the backward (bwd/) code. Plain C: included from C and from .cu files.
 */
#ifndef FFPA_CUDA_STATE_H
#define FFPA_CUDA_STATE_H

#include <cuda_runtime_api.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ffpa_cuda_state {
    int device;                  /* CUDA device ordinal the context is bound to */
    cudaStream_t stream;         /* stream of every launch and copy (NULL: default) */
    struct cudaDeviceProp prop;  /* properties read once at init */
    ffpa_backend_caps caps;      /* what probe reported: name, limits for the planner */
    const char *last_kernel;     /* kernel(s) of the last forward or backward (static string or bwd_kernel) */
    char bwd_kernel[64];         /* the last backward's kernels and tiles (bwd_host.h tiles_label) */
};

/* Writes "<what>: <cuda error string>" into err; returns FFPA_ERR_DEVICE
 * (FFPA_ERR_OUT_OF_MEMORY for cudaErrorMemoryAllocation). */
ffpa_status ffpa_cuda_error(cudaError_t e, const char *what, char *err, size_t err_len);

/* Fills limits from device properties (used by probe and init). */
void ffpa_cuda_fill_caps(const struct cudaDeviceProp *prop, ffpa_backend_caps *caps);

#ifdef __cplusplus
}
#endif

#endif
