/*
 * KV-cache launcher of the HIP backend: the shared host layer
 * (backends/gpu/kv/kv_host.h) over the HIP instantiations and KvRt.
 */
#include "hip_port.h"

#include "hip_launch.h"
#include "kv_kernels_hip.h" /* before kv_rt.cuh: the arch layer and the kernel bodies */
#include "kv/kv_rt.cuh"
#include "merge_kernel.cuh"

namespace {

const ffpa::KvDesc *table_of(ffpa_dtype dt)
{
    return dt == FFPA_F16 ? ffpa::hip::kv_f16() : ffpa::hip::kv_bf16();
}

} /* namespace */

extern "C" size_t ffpa_hip_kv_workspace(const ffpa_gpu_state *st, const ffpa_problem *pb)
{
    return ffpa::kv::workspace(pb, table_of(pb->dtype), ffpa::hip::kKvKernels, st->caps.limits);
}

extern "C" ffpa_status ffpa_hip_forward_kvcache(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws,
                                                size_t ws_bytes, char *err, size_t err_len)
{
    const char *name = NULL;
    return ffpa::kv::forward<ffpa::kv::KvRt>(pb, table_of(pb->dtype), ffpa::hip::kKvKernels, st->caps.limits, ws,
                                             ws_bytes, (hipStream_t)st->stream, "hip", &name, err, err_len);
}

extern "C" ffpa_status ffpa_hip_kv_schedule(const ffpa_gpu_state *st, const ffpa_problem *pb,
                                            const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err,
                                            size_t err_len)
{
    return ffpa::kv::schedule_info(pb, table_of(pb->dtype), ffpa::hip::kKvKernels, st->caps.limits, host_seqlens,
                                   out, err, err_len);
}

extern "C" ffpa_status ffpa_hip_merge(ffpa_gpu_state *st, const ffpa_merge_problem *mp, char *err, size_t err_len)
{
    return ffpa::merge::run(mp, (hipStream_t)st->stream, err, err_len);
}
