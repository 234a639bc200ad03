/*
 * KV-cache launcher of the CUDA backend: the shared host layer
 * (backends/gpu/kv/kv_host.h) over the CUDA instantiations and KvRt.
 */
#include "kv_kernels.cuh" /* before kv_rt.cuh: the arch layer and the kernel bodies */
#include "kv_launch.h"
#include "../../gpu/kv/kv_rt.cuh"
#include "../../gpu/merge_kernel.cuh"

namespace {

const ffpa::KvDesc *table_of(ffpa_dtype dt)
{
    return dt == FFPA_F16 ? ffpa::cuda::kv_f16 : ffpa::cuda::kv_bf16;
}

} /* namespace */

extern "C" size_t ffpa_cuda_kv_workspace(const ffpa_gpu_state *gpu, const ffpa_problem *pb)
{
    return ffpa::kv::workspace(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels, gpu->caps.limits);
}

extern "C" int ffpa_cuda_kv_runs(const ffpa_gpu_state *gpu, const ffpa_problem *pb)
{
    return ffpa::kv::runs(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels, gpu->caps.limits);
}

extern "C" ffpa_status ffpa_cuda_forward_kvcache(ffpa_gpu_state *gpu, const ffpa_problem *pb, void *ws,
                                                 size_t ws_bytes, char *err, size_t err_len)
{
    const char *name = NULL;
    ffpa_status s = ffpa::kv::forward<ffpa::kv::KvRt>(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels,
                                                      gpu->caps.limits, ws, ws_bytes, ffpa_cuda_stream(gpu), "cuda",
                                                      &name, err, err_len);
    if (s == FFPA_OK)
        gpu->last_kernel = name;
    return s;
}

extern "C" ffpa_status ffpa_cuda_kv_schedule(const ffpa_gpu_state *gpu, const ffpa_problem *pb,
                                             const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err,
                                             size_t err_len)
{
    return ffpa::kv::schedule_info(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels, gpu->caps.limits, host_seqlens,
                                   out, err, err_len);
}

extern "C" ffpa_status ffpa_cuda_merge(ffpa_gpu_state *gpu, const ffpa_merge_problem *mp, char *err, size_t err_len)
{
    return ffpa::merge::run(mp, ffpa_cuda_stream(gpu), err, err_len);
}
