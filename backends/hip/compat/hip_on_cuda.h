/*
 * HIP on CUDA, the narrow subset this backend uses. Replaces Debian's
 * hip/nvidia_detail/nvidia_hip_runtime_api.h (HIP 5.2), whose 45 compile
 * errors under CUDA 13 all sit in wrappers this backend never calls
 * (textures, graphs, cooperative multi-device launch, old cudaDeviceProp
 * fields). Every name below is HIP's own spelling mapped 1:1 onto CUDA, so
 * the backend's sources are the same text on both platforms.
 *
 * Host part: plain C (runtime_hip.c includes it). Device part: only under a
 * CUDA compiler.
 */
#ifndef FFPA_HIP_ON_CUDA_H
#define FFPA_HIP_ON_CUDA_H

#include <cuda_runtime_api.h>

/* ---------------------------------------------------------------- runtime */

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef enum cudaMemcpyKind hipMemcpyKind;
typedef enum cudaDeviceAttr hipDeviceAttribute_t;
typedef struct cudaDeviceProp hipDeviceProp_t;

#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorInvalidDeviceFunction cudaErrorInvalidDeviceFunction

#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice

#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeMaxThreadsPerBlock cudaDevAttrMaxThreadsPerBlock
#define hipDeviceAttributeMaxSharedMemoryPerBlock cudaDevAttrMaxSharedMemoryPerBlock
#define hipDeviceAttributeSharedMemPerBlockOptin cudaDevAttrMaxSharedMemoryPerBlockOptin
#define hipDeviceAttributeMaxSharedMemoryPerMultiprocessor cudaDevAttrMaxSharedMemoryPerMultiprocessor
#define hipDeviceAttributeMaxRegistersPerMultiprocessor cudaDevAttrMaxRegistersPerMultiprocessor
#define hipDeviceAttributeComputeCapabilityMajor cudaDevAttrComputeCapabilityMajor
#define hipDeviceAttributeComputeCapabilityMinor cudaDevAttrComputeCapabilityMinor

#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipStreamSynchronize cudaStreamSynchronize

#ifdef __cplusplus
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipFuncSetAttribute(fn, attr, value) cudaFuncSetAttribute((fn), (attr), (value))
#endif

/* ----------------------------------------------------------------- device */

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* HIP's cross-lane calls (no mask argument: the whole warp takes part).
 * CUDA still declares mask-less ones for its host pass and pre-sm_70
 * targets; it dropped them for sm_70+, where these stand in. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
__device__ __forceinline__ int __shfl(int v, int src, int width = 32)
{
    return __shfl_sync(0xffffffffu, v, src, width);
}
__device__ __forceinline__ unsigned __shfl(unsigned v, int src, int width = 32)
{
    return __shfl_sync(0xffffffffu, v, src, width);
}
__device__ __forceinline__ float __shfl(float v, int src, int width = 32)
{
    return __shfl_sync(0xffffffffu, v, src, width);
}
__device__ __forceinline__ int __shfl_xor(int v, int mask, int width = 32)
{
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
__device__ __forceinline__ unsigned __shfl_xor(unsigned v, int mask, int width = 32)
{
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
__device__ __forceinline__ float __shfl_xor(float v, int mask, int width = 32)
{
    return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
#endif
#endif

#endif
