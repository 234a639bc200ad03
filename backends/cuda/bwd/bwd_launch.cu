/*
 * CUDA launcher of the backward: the CUDA runtime as the shim of the shared
 * host logic (backends/gpu/bwd/bwd_host.h: checks, workspace, tile choice,
 * launch sequence) and the plugin's extern "C" entry points.
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

namespace {

using namespace ffpa::bwd;

struct CudaRuntime {
    using Error = cudaError_t;
    using Stream = cudaStream_t;
    static bool ok(Error e) { return e == cudaSuccess; }
    static const char *error_string(Error e) { return cudaGetErrorString(e); }
    static bool out_of_memory(Error e) { return e == cudaErrorMemoryAllocation; }
    static Error copy_to_device(void *dst, const void *src, size_t bytes, Stream s)
    {
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
    }
    static Error zero(void *dst, size_t bytes, Stream s) { return cudaMemsetAsync(dst, 0, bytes, s); }
    static Error delta(int dtype, const ffpa_bwd_params &p, Stream s) { return launch_delta(dtype, p, s); }
    static Error dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, Stream s)
    {
        return launch_dkdv(dtype, kernel, p, smem, s);
    }
    static Error dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, Stream s)
    {
        return launch_dq(dtype, kernel, p, blocks, smem, s);
    }
    static Error convert(int dtype, const ConvertJob &job, Stream s) { return launch_convert(dtype, job, s); }
    static Error dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                               const int64_t (&stride)[4], Stream s)
    {
        return launch_dbias_convert(acc, grid, out, out_dtype, stride, s);
    }
};

} /* namespace */

extern "C" size_t ffpa_cuda_backward_workspace(const ffpa_problem *pb)
{
    return host::layout_of(pb).total;
}

extern "C" ffpa_status ffpa_cuda_backward(struct ffpa_cuda_state *st, const ffpa_problem *pb, void *ws,
                                          size_t ws_bytes, char *err, size_t err_len)
{
    /* FFPA_CUDA_KERNEL=generic|sm90 forces one family (as in the forward);
     * auto or unset: the Hopper kernel where it covers pb, else generic. */
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    const bool force_sm90 = choice && strcmp(choice, "sm90") == 0;
    const bool force_generic = choice && strcmp(choice, "generic") == 0;
    if (choice && !force_sm90 && !force_generic && strcmp(choice, "auto") != 0) {
        snprintf(err, err_len, "FFPA_CUDA_KERNEL: unknown kernel family; expected generic, sm90 or auto");
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    if (!force_generic) {
        const char *kernel = NULL;
        char why[256] = "";
        const ffpa_status s = ffpa_cuda_sm90_backward(st, pb, ws, ws_bytes, &kernel, why, sizeof why);
        if (s == FFPA_OK) {
            st->last_kernel = kernel;
            return FFPA_OK;
        }
        if (s != FFPA_ERR_UNSUPPORTED || force_sm90) {
            snprintf(err, err_len, "%s%s", force_sm90 ? "FFPA_CUDA_KERNEL=sm90: " : "", why);
            return s;
        }
    }
    host::Tiles ran;
    const ffpa_status s = host::run<CudaRuntime>(st->stream, st->caps.limits, "cuda", pb, ws, ws_bytes, err, err_len,
                                                 &ran);
    if (s == FFPA_OK) {
        host::tiles_label(ran, st->bwd_kernel, sizeof st->bwd_kernel);
        st->last_kernel = st->bwd_kernel;
    }
    return s;
}
