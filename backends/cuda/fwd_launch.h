/*
 * extern "C" interface between the CUDA runtime table (runtime_cuda.c) and the
 * forward kernels (fwd_launch.cu and the fwd_inst_*.cu instantiations).
 */
#ifndef FFPA_CUDA_FWD_LAUNCH_H
#define FFPA_CUDA_FWD_LAUNCH_H

#include <stddef.h>

#include "cuda_state.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace bytes a forward of pb needs on this device (varlen offsets,
 * split-KV partials). */
size_t ffpa_cuda_forward_workspace(const ffpa_gpu_state *gpu, const ffpa_problem *pb);

/* Launches the forward of pb on gpu->stream (asynchronous). */
ffpa_status ffpa_cuda_forward(ffpa_gpu_state *gpu, const ffpa_problem *pb, void *ws,
                              size_t ws_bytes, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
