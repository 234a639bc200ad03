/*
 * extern "C" interface between the CUDA plugin's host glue and the backward
 * (paper Algorithm 2, split launch): a preprocess kernel (Delta), the dK/dV
 * kernel, the dQ kernel (+ dbias) and, with FFPA_GRAD_ACCUM_F32, one
 * conversion of the fp32 gradient buffers into dq/dk/dv.
 */
#ifndef FFPA_CUDA_BWD_LAUNCH_H
#define FFPA_CUDA_BWD_LAUNCH_H

#include <stddef.h>

#include "cuda_state.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exact workspace bytes ffpa_cuda_backward needs for pb: varlen offsets,
 * Delta, the fp32 gradient buffers (FFPA_GRAD_ACCUM_F32) and the fp32 dbias
 * buffer, each 256-byte aligned. 0 for problems it rejects. */
size_t ffpa_cuda_backward_workspace(const ffpa_problem *pb);

/* Launches the backward of pb on gpu->stream (asynchronous). fp16/bf16,
 * Dqk/Dv multiples of 8 up to 1024, q/k/v/o/dout with unit last-dim stride
 * and 16-byte aligned rows; anything else: FFPA_ERR_UNSUPPORTED saying why. */
ffpa_status ffpa_cuda_backward(ffpa_gpu_state *gpu, const ffpa_problem *pb, void *ws,
                               size_t ws_bytes, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
