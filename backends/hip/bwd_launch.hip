/*
 * HIP launcher of the backward: the shared host logic
 * (backends/gpu/bwd/bwd_host.h: checks, workspace, tile choice, launch
 * sequence) over the HIP kernels, as the plugin's extern "C" entry points.
 * Shared memory per block is what the probe reported (64 KiB on gfx90a,
 * gfx942, gfx1100: bwd_host.h then picks the small-shared-memory kernels;
 * the opt-in limit on NVIDIA), or less with FFPA_BWD_SMEM_LIMIT; on AMD at
 * most FFPA_HIP_AMD_BWD_SMEM, since only the small kernels are built there
 * (bwd_kernels_hip.h).
 */
#include "hip_port.h"

#include "arch_hip.h"

#include "bwd/bwd_host.h"
#include "bwd_kernels_hip.h"
#include "hip_launch.h"

extern "C" size_t ffpa_hip_backward_workspace(const ffpa_problem *pb)
{
    return ffpa::bwd::host::layout_of(pb).total;
}

extern "C" ffpa_status ffpa_hip_backward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes,
                                         char *err, size_t err_len)
{
    ffpa_device_limits lim = st->caps.limits;
    if (!FFPA_HIP_BIG_BWD && lim.smem_per_block > FFPA_HIP_AMD_BWD_SMEM)
        lim.smem_per_block = FFPA_HIP_AMD_BWD_SMEM;
    return ffpa::bwd::host::run<ffpa::bwd::BwdRt>((hipStream_t)st->stream, lim, "hip", pb, ws, ws_bytes, err,
                                                  err_len);
}
