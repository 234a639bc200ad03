/*
 * extern "C" interface of the Hopper (sm_90a) forward, called by the CUDA
 * forward launcher (../fwd_launch.cu) before it falls back to the generic
 * mma.sync kernels.
 */
#ifndef FFPA_CUDA_SM90_FWD_LAUNCH_H
#define FFPA_CUDA_SM90_FWD_LAUNCH_H

#include <stddef.h>

#include "../cuda_state.h"
#include "fwd_params.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launches pb on the WGMMA/TMA kernels. base holds the generic launcher's
 * parameters (pointers, strides, masks, device varlen offsets); the schedule
 * fields are overwritten here. cluster: CTAs per cluster a tuning table
 * chose (ffpa_plan.cluster), 0 for the default instantiation.
 * FFPA_ERR_UNSUPPORTED (with the reason in err) when this path does not
 * cover pb; *kernel names the kernel that ran. */
ffpa_status ffpa_cuda_sm90_forward(struct ffpa_cuda_state *st, const ffpa_problem *pb,
                                   const ffpa_gpu_fwd_params *base, int cluster, const char **kernel,
                                   char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
