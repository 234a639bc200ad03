/*
 * CUDA launcher of the backward: the Hopper kernel where it covers the
 * problem, else the shared host logic (backends/gpu/bwd/bwd_host.h: checks,
 * workspace, tile choice, launch sequence) over the generic kernels.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "arch_sm80.cuh"
#include "env.h"

#include "bwd/bwd_host.h"
#include "bwd_kernels.h"
#include "bwd_launch.h"
#include "sm90/sm90_bwd_launch.h"

using namespace ffpa::bwd;

extern "C" size_t ffpa_cuda_backward_workspace(const ffpa_problem *pb)
{
    return host::layout_of(pb).total;
}

extern "C" ffpa_status ffpa_cuda_backward(ffpa_gpu_state *gpu, const ffpa_problem *pb, void *ws,
                                          size_t ws_bytes, char *err, size_t err_len)
{
    /* FFPA_CUDA_KERNEL=generic|sm90 forces one family (as in the forward,
     * over the tuning table); auto or unset: the plan's family (a table's
     * choice, else the Hopper kernel where it covers pb, else generic). */
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    const bool force_sm90 = choice && strcmp(choice, "sm90") == 0;
    const bool force_generic = choice && strcmp(choice, "generic") == 0;
    if (choice && !force_sm90 && !force_generic && strcmp(choice, "auto") != 0) {
        snprintf(err, err_len, "FFPA_CUDA_KERNEL: unknown kernel family; expected generic, sm90 or auto");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    const ffpa_plan plan = host::tuned_plan(pb, gpu->caps.limits);
    if (force_sm90 || (!force_generic && plan.family != FFPA_FAMILY_GENERIC)) {
        const char *kernel = NULL;
        char why[256] = "";
        const ffpa_status s = ffpa_cuda_sm90_backward(ffpa_cuda_of(gpu), pb, plan.bwd_boxes, plan.cluster, ws,
                                                      ws_bytes, &kernel, why, sizeof why);
        if (s == FFPA_OK) {
            gpu->last_kernel = kernel;
            return FFPA_OK;
        }
        if (s != FFPA_ERR_UNSUPPORTED || force_sm90) {
            snprintf(err, err_len, "%s%s", force_sm90 ? "FFPA_CUDA_KERNEL=sm90: " : "", why);
            return s;
        }
    }
    host::Tiles ran;
    const ffpa_status s = host::run<BwdRt>(ffpa_cuda_stream(gpu), gpu->caps.limits, "cuda", pb, ws, ws_bytes, err, err_len,
                                                 &ran);
    if (s == FFPA_OK) {
        host::tiles_label(ran, gpu->kernel_label, sizeof gpu->kernel_label);
        gpu->last_kernel = gpu->kernel_label;
    }
    return s;
}
