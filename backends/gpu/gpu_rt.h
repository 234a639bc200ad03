/*
 * The runtime half of the shim the shared host templates (fwd_host.h,
 * kv/kv_host.h, bwd/bwd_host.h) run on, over gpu_api.h: each template's
 * shim adds its kernel launches to this. Host C++.
 */
#ifndef FFPA_GPU_RT_H
#define FFPA_GPU_RT_H

#include <stddef.h>

#include "gpu_api.h"
#include "gpu_host.h"

namespace ffpa {

struct GpuRt {
    using Error = gpuError_t;
    using Stream = gpuStream_t;
    static bool ok(Error e) { return e == gpuSuccess; }
    static const char *error_string(Error e) { return gpuGetErrorString(e); }
    static bool out_of_memory(Error e) { return e == gpuErrorOutOfMemory; }
    static Error last_error() { return gpuGetLastError(); }
    static Error copy_to_device(void *dst, const void *src, size_t bytes, Stream s)
    {
        return gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, s);
    }
    static Error zero(void *dst, size_t bytes, Stream s) { return gpuMemsetAsync(dst, 0, bytes, s); }
    /* "<backend>: <what>: <error string>", the error consumed (ffpa_gpu_launch_error). */
    static ffpa_status error(Error e, const char *what, char *err, size_t err_len)
    {
        return ffpa_gpu_launch_error((int)e, what, err, err_len);
    }
};

} /* namespace ffpa */

#endif
