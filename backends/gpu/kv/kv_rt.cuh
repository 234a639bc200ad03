/*
 * The KV-cache launchers' runtime shim (KvRt: gpu_rt.h's calls and the
 * launches of the small kernels, schedule, append and merge) with those
 * kernels' entry points, shared by CUDA and HIP. Include after the
 * launcher's kernel header (the arch layer and kv_kernel.cuh).
 */
#ifndef FFPA_GPU_KV_RT_CUH
#define FFPA_GPU_KV_RT_CUH

#include "../gpu_rt.h"
#include "kv_params.h"

namespace ffpa {
namespace kv {

template <typename T> __global__ void append_kernel(const ffpa_gpu_kv_params p)
{
    kv_append_body<T>(p);
}

__global__ void __launch_bounds__(kKvScheduleThreads) schedule_kernel(const ffpa_gpu_kv_params p)
{
    kv_schedule_body(p);
}

template <typename T> __global__ void merge_kernel(const ffpa_gpu_kv_params p)
{
    kv_merge_body<T>(p);
}

struct KvRt : GpuRt {
    static Error schedule(const ffpa_gpu_kv_params &p, Stream s)
    {
        schedule_kernel<<<dim3(1), dim3(kKvScheduleThreads), 0, s>>>(p);
        return last_error();
    }
    static Error append(ffpa_dtype dt, const ffpa_gpu_kv_params &p, Stream s)
    {
        dim3 grid((unsigned)p.nq, (unsigned)p.hkv, (unsigned)p.batch);
        if (dt == FFPA_F16)
            append_kernel<arch::f16><<<grid, dim3(64), 0, s>>>(p);
        else
            append_kernel<arch::bf16><<<grid, dim3(64), 0, s>>>(p);
        return last_error();
    }
    static Error merge(ffpa_dtype dt, const ffpa_gpu_kv_params &p, Stream s)
    {
        dim3 grid((unsigned)p.rows, (unsigned)p.hkv, (unsigned)p.batch);
        if (dt == FFPA_F16)
            merge_kernel<arch::f16><<<grid, dim3(128), 0, s>>>(p);
        else
            merge_kernel<arch::bf16><<<grid, dim3(128), 0, s>>>(p);
        return last_error();
    }
};

} /* namespace kv */
} /* namespace ffpa */

#endif
