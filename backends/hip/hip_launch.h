/*
 * The HIP backend's launchers (fwd_launch.hip, bwd_launch.hip,
 * kv_launch.hip) as the runtime table (runtime_hip.c) calls them. Its
 * per-context state is the shared GPU host layer's ffpa_gpu_state alone
 * (gpu_host.h); the stream there is a hipStream_t. Plain C.
 */
#ifndef FFPA_HIP_LAUNCH_H
#define FFPA_HIP_LAUNCH_H

#include "hip_port.h"

#include "gpu_host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace bytes a forward of pb needs (varlen offsets, split-KV partials). */
size_t ffpa_hip_forward_workspace(const ffpa_gpu_state *st, const ffpa_problem *pb);

/* Launches the forward of pb on st->stream (asynchronous). */
ffpa_status ffpa_hip_forward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                             char *err, size_t err_len);

/* Workspace bytes a backward of pb needs (from shapes alone; see bwd_host.h). */
size_t ffpa_hip_backward_workspace(const ffpa_problem *pb);

/* Launches the backward of pb on st->stream (asynchronous). fp16/bf16,
 * Dqk/Dv multiples of 8, q/k/v/o/dout with unit last-dim stride and 16-byte
 * aligned rows, and the shared memory the kernels need; anything else:
 * FFPA_ERR_UNSUPPORTED saying why. */
ffpa_status ffpa_hip_backward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                              char *err, size_t err_len);

/* Paged KV cache (kv_launch.hip, backends/gpu/kv): workspace from shapes,
 * the launch sequence, and the split plan for host lengths. */
size_t ffpa_hip_kv_workspace(const ffpa_gpu_state *st, const ffpa_problem *pb);
ffpa_status ffpa_hip_forward_kvcache(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                     char *err, size_t err_len);
ffpa_status ffpa_hip_kv_schedule(const ffpa_gpu_state *st, const ffpa_problem *pb,
                                 const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err, size_t err_len);
/* ffpa_merge_partials (kv_launch.hip over backends/gpu/merge_kernel.cuh). */
ffpa_status ffpa_hip_merge(ffpa_gpu_state *st, const ffpa_merge_problem *mp, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
