/* The vendor runtime's calls behind FFPA_GPU_API_CALLS (gpu_calls.h). */
#include "gpu_calls.h"

int ffpa_gpu_api_set_device(int device)
{
    return (int)gpuSetDevice(device);
}

int ffpa_gpu_api_stream_synchronize(void *stream)
{
    return (int)gpuStreamSynchronize((gpuStream_t)stream);
}

int ffpa_gpu_api_malloc(void **ptr, size_t bytes)
{
    return (int)gpuMalloc(ptr, bytes);
}

int ffpa_gpu_api_free(void *ptr)
{
    return (int)gpuFree(ptr);
}

int ffpa_gpu_api_memcpy_async(void *dst, const void *src, size_t bytes, ffpa_copy_kind kind, void *stream)
{
    gpuMemcpyKind k = kind == FFPA_COPY_HOST_TO_DEVICE   ? gpuMemcpyHostToDevice
                      : kind == FFPA_COPY_DEVICE_TO_HOST ? gpuMemcpyDeviceToHost
                                                         : gpuMemcpyDeviceToDevice;
    return (int)gpuMemcpyAsync(dst, src, bytes, k, (gpuStream_t)stream);
}

int ffpa_gpu_api_take_last_error(void)
{
    return (int)gpuGetLastError();
}

const char *ffpa_gpu_api_error_string(int error)
{
    return gpuGetErrorString((gpuError_t)error);
}
