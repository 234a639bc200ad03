/*
 * Per-context state of the HIP backend, shared by the host glue
 * (backend_hip.c) and the launchers (fwd_launch.hip, bwd_launch.hip). Plain C.
 */
#ifndef FFPA_HIP_STATE_H
#define FFPA_HIP_STATE_H

#include "hip_port.h"

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ffpa_hip_state {
    int device;               /* HIP device ordinal the context is bound to */
    hipStream_t stream;       /* stream of every launch and copy (NULL: default) */
    ffpa_backend_caps caps;   /* what probe reported: name, limits for the planner */
};

/* Writes "hip: <what>: <hip error string>" into err; returns FFPA_ERR_DEVICE
 * (FFPA_ERR_OUT_OF_MEMORY for hipErrorOutOfMemory). */
ffpa_status ffpa_hip_error(hipError_t e, const char *what, char *err, size_t err_len);

/* Workspace bytes a forward of pb needs (varlen offsets, split-KV partials). */
size_t ffpa_hip_forward_workspace(const struct ffpa_hip_state *st, const ffpa_problem *pb);

/* Launches the forward of pb on st->stream (asynchronous). */
ffpa_status ffpa_hip_forward(struct ffpa_hip_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                             char *err, size_t err_len);

/* Workspace bytes a backward of pb needs (from shapes alone; see bwd_host.h). */
size_t ffpa_hip_backward_workspace(const ffpa_problem *pb);

/* Launches the backward of pb on st->stream (asynchronous). fp16/bf16,
 * Dqk/Dv multiples of 8, q/k/v/o/dout with unit last-dim stride and 16-byte
 * aligned rows, and the shared memory the kernels need; anything else:
 * FFPA_ERR_UNSUPPORTED saying why. */
ffpa_status ffpa_hip_backward(struct ffpa_hip_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                              char *err, size_t err_len);

/* Paged KV cache (kv_launch.hip, backends/gpu/kv): workspace from shapes,
 * the launch sequence, and the split plan for host lengths. */
size_t ffpa_hip_kv_workspace(const struct ffpa_hip_state *st, const ffpa_problem *pb);
ffpa_status ffpa_hip_forward_kvcache(struct ffpa_hip_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                     char *err, size_t err_len);
ffpa_status ffpa_hip_kv_schedule(const struct ffpa_hip_state *st, const ffpa_problem *pb,
                                 const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
