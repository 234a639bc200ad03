/*
 * Device-library functions for builds with -nogpulib (FFPA_HIP_NOGPULIB).
 *
 * Debian 12 ships the ROCm 5.2 device libraries (ocml/ockl bitcode), which
 * have no gfx942 or gfx1100 variant, so the HIP backend is compiled without
 * them for every target. The HIP 5.2 headers still route a few basics
 * through those libraries: threadIdx/blockIdx/blockDim/gridDim
 * (__ockl_get_*), the fences of __syncthreads (__atomic_work_item_fence),
 * log2f and the fast exp/log of the kernels (__ocml_*), and the message of a
 * device assert (__ockl_fprintf_*). Exactly those are defined here, on
 * compiler builtins; the kernels use nothing else from the libraries (the
 * link fails with "undefined hidden symbol" if that ever changes).
 *
 * Included by hip_port.h in the device pass only.
 */
#ifndef FFPA_HIP_AMDGCN_NOGPULIB_H
#define FFPA_HIP_AMDGCN_NOGPULIB_H

#include <stddef.h>
#include <stdint.h>

/* hsa_kernel_dispatch_packet_t: workgroup_size_{x,y,z} at byte 4 (uint16),
 * grid_size_{x,y,z} at byte 12 (uint32). */
__device__ static inline const uint16_t *ffpa_dispatch_u16()
{
    return (const uint16_t *)__builtin_amdgcn_dispatch_ptr();
}

extern "C" __device__ size_t __ockl_get_local_id(uint32_t dim)
{
    return dim == 0 ? __builtin_amdgcn_workitem_id_x()
           : dim == 1 ? __builtin_amdgcn_workitem_id_y()
                      : __builtin_amdgcn_workitem_id_z();
}

extern "C" __device__ size_t __ockl_get_group_id(uint32_t dim)
{
    return dim == 0 ? __builtin_amdgcn_workgroup_id_x()
           : dim == 1 ? __builtin_amdgcn_workgroup_id_y()
                      : __builtin_amdgcn_workgroup_id_z();
}

extern "C" __device__ size_t __ockl_get_local_size(uint32_t dim)
{
    return ffpa_dispatch_u16()[2 + (dim > 2 ? 2 : dim)];
}

extern "C" __device__ size_t __ockl_get_num_groups(uint32_t dim)
{
    uint32_t d = dim > 2 ? 2 : dim;
    const uint32_t *grid = (const uint32_t *)(ffpa_dispatch_u16() + 6);
    uint32_t wg = ffpa_dispatch_u16()[2 + d];
    return (grid[d] + wg - 1) / wg;
}

/* OpenCL-style fence; scopes and orders as HIP 5.2's __syncthreads passes them. */
extern "C" __device__ void __atomic_work_item_fence(unsigned flags, int order, int scope)
{
    (void)flags;
    if (scope == __OPENCL_MEMORY_SCOPE_WORK_GROUP || scope == __OPENCL_MEMORY_SCOPE_SUB_GROUP ||
        scope == __OPENCL_MEMORY_SCOPE_WORK_ITEM) {
        if (order == __ATOMIC_ACQUIRE)
            __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
        else if (order == __ATOMIC_RELEASE)
            __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
        else
            __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
    } else if (scope == __OPENCL_MEMORY_SCOPE_DEVICE) {
        if (order == __ATOMIC_ACQUIRE)
            __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
        else if (order == __ATOMIC_RELEASE)
            __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
        else
            __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
    } else {
        __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "");
    }
}

/* Math: LLVM lowers these intrinsics to v_log_f32 / v_exp_f32 sequences. */
extern "C" __device__ float __ocml_log2_f32(float x) { return __builtin_log2f(x); }
extern "C" __device__ float __ocml_native_log2_f32(float x) { return __builtin_log2f(x); }
extern "C" __device__ float __ocml_native_exp2_f32(float x) { return __builtin_exp2f(x); }
extern "C" __device__ float __ocml_native_exp_f32(float x) { return __builtin_exp2f(x * 1.4426950408889634f); }
extern "C" __device__ float __ocml_native_log_f32(float x) { return __builtin_log2f(x) * 0.6931471805599453f; }
extern "C" __device__ float __ocml_exp_f32(float x) { return __builtin_expf(x); }
extern "C" __device__ float __ocml_log_f32(float x) { return __builtin_logf(x); }
extern "C" __device__ float __ocml_fmax_f32(float a, float b) { return __builtin_fmaxf(a, b); }
extern "C" __device__ float __ocml_fmin_f32(float a, float b) { return __builtin_fminf(a, b); }

/* Device assert messages go through the hostcall printf of ockl: dropped;
 * a failing assert still traps. */
extern "C" __device__ uint64_t __ockl_fprintf_stderr_begin() { return 0; }
extern "C" __device__ uint64_t __ockl_fprintf_append_string_n(uint64_t msg, const char *data, uint64_t len,
                                                              uint32_t is_last)
{
    (void)data;
    (void)len;
    (void)is_last;
    return msg;
}
extern "C" __device__ uint64_t __ockl_fprintf_append_args(uint64_t msg, uint32_t n, uint64_t a0, uint64_t a1,
                                                          uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5,
                                                          uint64_t a6, uint32_t is_last)
{
    (void)n, (void)a0, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)is_last;
    return msg;
}

#endif
