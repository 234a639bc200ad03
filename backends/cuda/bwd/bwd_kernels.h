/*
 * The backward kernels' entry points (bwd/bwd_entry.h, shared with HIP)
 * and what only CUDA has: their attributes (registers, spills) for the
 * checks. bwd_inst_*.cu and bwd_aux.cu define them.
 */
#ifndef FFPA_CUDA_BWD_KERNELS_H
#define FFPA_CUDA_BWD_KERNELS_H

#include <cuda_runtime_api.h>

#include "bwd/bwd_entry.h"

namespace ffpa {
namespace bwd {

/* Registers / spills of kernel `which` (a bwd::Kernel). */
cudaError_t kernel_attributes(int dtype, int which, cudaFuncAttributes *attr);
cudaError_t attr_f16(int which, cudaFuncAttributes *attr);
cudaError_t attr_bf16(int which, cudaFuncAttributes *attr);

} /* namespace bwd */
} /* namespace ffpa */

#endif
