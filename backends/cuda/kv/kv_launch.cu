/*
 * KV-cache launcher of the CUDA backend: the runtime shim for the shared
 * host layer (backends/gpu/kv/kv_host.h) and the small kernels (schedule,
 * append, merge).
 */
#include "kv_kernels.cuh"
#include "kv_launch.h"

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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    ffpa::kv_merge_body<T>(p);
#endif
}

struct CudaRt {
    using Error = cudaError_t;
    using Stream = cudaStream_t;
    static bool ok(Error e) { return e == cudaSuccess; }
    static const char *error_string(Error e) { return cudaGetErrorString(e); }
    static Error schedule(const ffpa_gpu_kv_params &p, Stream s)
    {
        kv_schedule_kernel<<<1, ffpa::kKvScheduleThreads, 0, s>>>(p);
        return cudaGetLastError();
    }
    static Error append(ffpa_dtype dt, const ffpa_gpu_kv_params &p, Stream s)
    {
        dim3 grid((unsigned)p.nq, (unsigned)p.hkv, (unsigned)p.batch);
        if (dt == FFPA_F16)
            kv_append_kernel<ffpa::arch::f16><<<grid, 64, 0, s>>>(p);
        else
            kv_append_kernel<ffpa::arch::bf16><<<grid, 64, 0, s>>>(p);
        return cudaGetLastError();
    }
    static Error merge(ffpa_dtype dt, const ffpa_gpu_kv_params &p, Stream s)
    {
        dim3 grid((unsigned)p.rows, (unsigned)p.hkv, (unsigned)p.batch);
        if (dt == FFPA_F16)
            kv_merge_kernel<ffpa::arch::f16><<<grid, 128, 0, s>>>(p);
        else
            kv_merge_kernel<ffpa::arch::bf16><<<grid, 128, 0, s>>>(p);
        return cudaGetLastError();
    }
};

const ffpa::cuda::KvDesc *table_of(ffpa_dtype dt)
{
    return dt == FFPA_F16 ? ffpa::cuda::kv_f16 : ffpa::cuda::kv_bf16;
}

} /* namespace */

extern "C" size_t ffpa_cuda_kv_workspace(const struct ffpa_cuda_state *st, const ffpa_problem *pb)
{
    return ffpa::kv::workspace(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels, st->caps.limits);
}

extern "C" ffpa_status ffpa_cuda_forward_kvcache(struct ffpa_cuda_state *st, const ffpa_problem *pb, void *ws,
                                                 size_t ws_bytes, char *err, size_t err_len)
{
    const char *name = NULL;
    ffpa_status s = ffpa::kv::forward<CudaRt>(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels, st->caps.limits, ws,
                                              ws_bytes, st->stream, "cuda", &name, err, err_len);
    if (s == FFPA_OK)
        st->last_kernel = name;
    return s;
}

extern "C" ffpa_status ffpa_cuda_kv_schedule(const struct ffpa_cuda_state *st, const ffpa_problem *pb,
                                             const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err,
                                             size_t err_len)
{
    return ffpa::kv::schedule_info(pb, table_of(pb->dtype), ffpa::cuda::kKvKernels, st->caps.limits, host_seqlens,
                                   out, err, err_len);
}
