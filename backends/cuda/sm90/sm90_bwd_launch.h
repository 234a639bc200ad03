/*
 * extern "C" interface of the Hopper (sm_90a) backward, called by the CUDA
 * backward launcher (../bwd/bwd_launch.cu) before it falls back to the
 * generic mma.sync kernels.
 */
#ifndef FFPA_CUDA_SM90_BWD_LAUNCH_H
#define FFPA_CUDA_SM90_BWD_LAUNCH_H

#include <stddef.h>

#include "../cuda_state.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the whole backward of pb on the WGMMA/TMA kernel: Delta, the fused
 * dK/dV/dQ kernel (dQ through the fp32 workspace buffer, with reductions;
 * in deterministic mode in a fixed order), the dQ conversion.
 * boxes x cluster: the width a tuning table chose (ffpa_plan.bwd_boxes,
 * .cluster; boxes 0: none), run where it covers pb, else the default
 * width. FFPA_ERR_UNSUPPORTED (reason in err, nothing launched) when this
 * path does not cover pb: another device, D above 1024, a broadcast dbias
 * in deterministic mode, layouts TMA cannot express. *kernel names the
 * kernel that ran. */
ffpa_status ffpa_cuda_sm90_backward(struct ffpa_cuda_state *st, const ffpa_problem *pb, int boxes, int cluster,
                                    void *ws, size_t ws_bytes, const char **kernel, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
