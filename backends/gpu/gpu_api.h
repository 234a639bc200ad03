/*
 * The thin vendor layer under the shared GPU host code: one neutral
 * spelling (gpu*) of the few runtime names that code uses, mapped 1:1 onto
 * the HIP runtime in the HIP plugin (built with __HIP_PLATFORM_AMD__, or
 * __HIP_PLATFORM_NVIDIA__ for its run on an NVIDIA GPU) and onto the CUDA
 * runtime otherwise. Plain C and C++; the device-side names (launch
 * syntax, kernel attributes) are the same words in both languages.
 */
#ifndef FFPA_GPU_API_H
#define FFPA_GPU_API_H

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_NVIDIA__)
#include "hip_port.h"
#define FFPA_GPU_VENDOR "hip"
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipMemcpyKind gpuMemcpyKind;
#define gpuSuccess hipSuccess
#define gpuErrorOutOfMemory hipErrorOutOfMemory
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuSetDevice hipSetDevice
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuFuncSetAttribute hipFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#else
#include <cuda_runtime_api.h>
#define FFPA_GPU_VENDOR "cuda"
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef enum cudaMemcpyKind gpuMemcpyKind;
#define gpuSuccess cudaSuccess
#define gpuErrorOutOfMemory cudaErrorMemoryAllocation
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuSetDevice cudaSetDevice
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuFuncSetAttribute cudaFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#endif

#endif
