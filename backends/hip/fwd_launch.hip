/*
 * Forward launcher of the HIP backend: the shared host logic
 * (backends/gpu/fwd_host.h) over the HIP instantiations and runtime.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fwd_kernels_hip.h" /* before fwd_host.h: the arch layer and the kernel bodies */
#include "fwd_host.h"
#include "hip_launch.h"

namespace {

using ffpa::FwdKernelDesc;
namespace host = ffpa::fwd::host;

const FwdKernelDesc *kernel_for(const ffpa_problem *pb, const ffpa_plan &plan)
{
    const int dt16 = pb->dtype == FFPA_F16;
    return host::pick_kernel(dt16 ? ffpa::hip::fwd_f16_small() : ffpa::hip::fwd_bf16_small(), ffpa::kFwdSmallKernels,
                             dt16 ? ffpa::hip::fwd_f16_large() : ffpa::hip::fwd_bf16_large(), ffpa::kFwdLargeKernels,
                             pb->dv, plan);
}

} /* namespace */

extern "C" size_t ffpa_hip_forward_workspace(const ffpa_gpu_state *st, const ffpa_problem *pb)
{
    ffpa_plan plan;
    char err[8];
    if (host::make_plan(st->caps.limits, pb, &plan, err, sizeof err) != FFPA_OK)
        return 0;
    return host::workspace_of(pb, plan).total;
}

extern "C" ffpa_status ffpa_hip_forward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws,
                                        size_t ws_bytes, char *err, size_t err_len)
{
    char reason[256];
    const char *why = host::unsupported(pb, "hip", reason, sizeof reason);
    if (why)
        return host::fail(FFPA_ERR_UNSUPPORTED, err, err_len, why);
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0)
        return FFPA_OK;

    ffpa_plan plan;
    ffpa_status s = host::make_plan(st->caps.limits, pb, &plan, err, err_len);
    if (s != FFPA_OK)
        return s;
    const FwdKernelDesc *kd = kernel_for(pb, plan);
    const int q_resident = ffpa_plan_q_resident(&plan);
    size_t smem = kd ? kd->smem_bytes(q_resident, plan.n_qk_chunks, plan.stages) : 0;
    if ((s = host::check_kernel(kd, smem, plan.smem_bytes, pb, plan, "hip", err, err_len)) != FFPA_OK)
        return s;
    ffpa_gpu_fwd_params p = host::params_of(pb, plan, q_resident);
    hipStream_t stream = (hipStream_t)st->stream;
    s = host::attach_workspace(&p, pb, plan, ws, ws_bytes, stream, err, err_len);
    return s != FFPA_OK ? s : host::launch(kd, p, smem, pb, plan, stream, err, err_len);
}
