/*
 * The one HIP include of the HIP backend. On AMD it is HIP itself; on
 * NVIDIA (__HIP_PLATFORM_NVIDIA__, used to run this backend's portable path
 * on an NVIDIA GPU) it is hip_on_cuda.h, because the NVIDIA-platform
 * runtime wrapper of the HIP 5.2 headers Debian ships
 * (hip/nvidia_detail/nvidia_hip_runtime_api.h) no longer compiles against
 * CUDA 12/13 (texture references, removed cudaDeviceProp fields, changed
 * graph/prefetch signatures). Usable from C (host glue) and HIP/CUDA C++.
 */
#ifndef FFPA_HIP_PORT_H
#define FFPA_HIP_PORT_H

#if defined(__HIP_PLATFORM_NVIDIA__)
#include "hip_on_cuda.h"
#else
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#if defined(__HIPCC__) || defined(__HIP__)
#include <hip/hip_runtime.h>
#if defined(__HIP_DEVICE_COMPILE__) && defined(FFPA_HIP_NOGPULIB)
#include "amdgcn_nogpulib.h"
#endif
#else
#include <hip/hip_runtime_api.h>
#endif
#endif

#endif
