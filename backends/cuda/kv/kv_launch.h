/*
 * extern "C" interface between the CUDA runtime table (runtime_cuda.c) and the
 * KV-cache launcher (kv_launch.cu).
 */
#ifndef FFPA_CUDA_KV_LAUNCH_H
#define FFPA_CUDA_KV_LAUNCH_H

#include <stddef.h>

#include "../cuda_state.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t ffpa_cuda_kv_workspace(const ffpa_gpu_state *gpu, const ffpa_problem *pb);
/* 1 when a KV-cache instantiation runs pb on this device. */
int ffpa_cuda_kv_runs(const ffpa_gpu_state *gpu, const ffpa_problem *pb);
ffpa_status ffpa_cuda_forward_kvcache(ffpa_gpu_state *gpu, const ffpa_problem *pb, void *ws,
                                      size_t ws_bytes, char *err, size_t err_len);
ffpa_status ffpa_cuda_kv_schedule(const ffpa_gpu_state *gpu, const ffpa_problem *pb,
                                  const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err,
                                  size_t err_len);
/* ffpa_merge_partials (backends/gpu/merge_kernel.cuh, the split-KV merge's conventions). */
ffpa_status ffpa_cuda_merge(ffpa_gpu_state *gpu, const ffpa_merge_problem *mp, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
