/*
 * KV-cache launcher of the HIP backend: the HIP runtime as the shim of the
 * shared host layer (backends/gpu/kv/kv_host.h) and the small kernels
 * (schedule, append, merge).
 */
#include "hip_port.h"

#include "hip_state.h"
#include "kv_kernels_hip.h"

namespace {

template <typename T> __global__ void kv_append_kernel(const ffpa_gpu_kv_params p)
{
    ffpa::kv_append_body<T>(p);
}

__global__ void __launch_bounds__(ffpa::kKvScheduleThreads) kv_schedule_kernel(const ffpa_gpu_kv_params p)
{
    ffpa::kv_schedule_body(p);
}

template <typename T> __global__ void kv_merge_kernel(const ffpa_gpu_kv_params p)
{
    ffpa::kv_merge_body<T>(p);
}

struct HipRt {
    using Error = hipError_t;
    using Stream = hipStream_t;
    static bool ok(Error e) { return e == hipSuccess; }
    static const char *error_string(Error e) { return hipGetErrorString(e); }
    static Error schedule(const ffpa_gpu_kv_params &p, Stream s)
    {
        kv_schedule_kernel<<<dim3(1), dim3(ffpa::kKvScheduleThreads), 0, s>>>(p);
        return hipGetLastError();
    }
    static Error append(ffpa_dtype dt, const ffpa_gpu_kv_params &p, Stream s)
    {
        dim3 grid((unsigned)p.nq, (unsigned)p.hkv, (unsigned)p.batch);
        if (dt == FFPA_F16)
            kv_append_kernel<ffpa::arch::f16><<<grid, dim3(64), 0, s>>>(p);
        else
            kv_append_kernel<ffpa::arch::bf16><<<grid, dim3(64), 0, s>>>(p);
        return hipGetLastError();
    }
    static Error merge(ffpa_dtype dt, const ffpa_gpu_kv_params &p, Stream s)
    {
        dim3 grid((unsigned)p.rows, (unsigned)p.hkv, (unsigned)p.batch);
        if (dt == FFPA_F16)
            kv_merge_kernel<ffpa::arch::f16><<<grid, dim3(128), 0, s>>>(p);
        else
            kv_merge_kernel<ffpa::arch::bf16><<<grid, dim3(128), 0, s>>>(p);
        return hipGetLastError();
    }
};

const ffpa::hip::KvDesc *table_of(ffpa_dtype dt)
{
    return dt == FFPA_F16 ? ffpa::hip::kv_f16() : ffpa::hip::kv_bf16();
}

} /* namespace */

extern "C" size_t ffpa_hip_kv_workspace(const struct ffpa_hip_state *st, const ffpa_problem *pb)
{
    return ffpa::kv::workspace(pb, table_of(pb->dtype), ffpa::hip::kKvKernels, st->caps.limits);
}

extern "C" ffpa_status ffpa_hip_forward_kvcache(struct ffpa_hip_state *st, const ffpa_problem *pb, void *ws,
                                                size_t ws_bytes, char *err, size_t err_len)
{
    const char *name = NULL;
    return ffpa::kv::forward<HipRt>(pb, table_of(pb->dtype), ffpa::hip::kKvKernels, st->caps.limits, ws, ws_bytes,
                                    st->stream, "hip", &name, err, err_len);
}

extern "C" ffpa_status ffpa_hip_kv_schedule(const struct ffpa_hip_state *st, const ffpa_problem *pb,
                                            const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err,
                                            size_t err_len)
{
    return ffpa::kv::schedule_info(pb, table_of(pb->dtype), ffpa::hip::kKvKernels, st->caps.limits, host_seqlens,
                                   out, err, err_len);
}
