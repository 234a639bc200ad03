/*
 * HIP launcher of the backward: the HIP runtime as the shim of the shared
 * host logic (backends/gpu/bwd/bwd_host.h: checks, workspace, tile choice,
 * launch sequence) and the plugin's extern "C" entry points.
 * Shared memory per block is what the probe reported (64 KiB on gfx90a,
 * gfx942, gfx1100: bwd_host.h then picks the small-shared-memory kernels;
 * the opt-in limit on NVIDIA), or less with FFPA_BWD_SMEM_LIMIT.
 */
#include "hip_port.h"

#include "arch_hip.h"

#include "bwd/bwd_host.h"
#include "bwd_kernels_hip.h"
#include "hip_state.h"

namespace {

using namespace ffpa::hip;

struct HipRuntime {
    using Error = hipError_t;
    using Stream = hipStream_t;
    static bool ok(Error e) { return e == hipSuccess; }
    static const char *error_string(Error e) { return hipGetErrorString(e); }
    static bool out_of_memory(Error e) { return e == hipErrorOutOfMemory; }
    static Error copy_to_device(void *dst, const void *src, size_t bytes, Stream s)
    {
        return hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, s);
    }
    static Error zero(void *dst, size_t bytes, Stream s) { return hipMemsetAsync(dst, 0, bytes, s); }
    static Error delta(int dtype, const ffpa_bwd_params &p, Stream s) { return bwd_launch_delta(dtype, p, s); }
    static Error dkdv(int dtype, int kernel, const ffpa_bwd_params &p, size_t smem, Stream s)
    {
        return bwd_launch_dkdv(dtype, kernel, p, smem, s);
    }
    static Error dq(int dtype, int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, Stream s)
    {
        return bwd_launch_dq(dtype, kernel, p, blocks, smem, s);
    }
    static Error convert(int dtype, const ConvertJob &job, Stream s) { return bwd_launch_convert(dtype, job, s); }
    static Error dbias_convert(const float *acc, const int64_t (&grid)[4], void *out, int out_dtype,
                               const int64_t (&stride)[4], Stream s)
    {
        return bwd_launch_dbias_convert(acc, grid, out, out_dtype, stride, s);
    }
};

} /* namespace */

extern "C" size_t ffpa_hip_backward_workspace(const ffpa_problem *pb)
{
    return ffpa::bwd::host::layout_of(pb).total;
}

extern "C" ffpa_status ffpa_hip_backward(struct ffpa_hip_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                         char *err, size_t err_len)
{
    return ffpa::bwd::host::run<HipRuntime>(st->stream, st->caps.limits, "hip", pb, ws, ws_bytes, err, err_len);
}
