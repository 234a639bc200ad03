/*
 * The Hopper MLA decode kernel as an entry of the KV-cache kernel table
 * (backends/gpu/kv/kv_host.h KvKernel): coverage, shared memory and launch,
 * defined in sm90_mla_launch.cu.
 */
#ifndef FFPA_CUDA_SM90_MLA_LAUNCH_H
#define FFPA_CUDA_SM90_MLA_LAUNCH_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_params.h"
#include "plan.h"
#include "problem.h"

namespace ffpa {
namespace sm90 {

/* NULL when the kernel runs pb on this device, else why not. */
const char *mla_accepts(const ffpa_problem *pb, const ffpa_device_limits &lim);
/* Its fixed shared memory (two key tiles: any other ring depth does not fit). */
size_t mla_smem_bytes(int qk_chunks, int stages);
cudaError_t mla_launch_f16(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, cudaStream_t stream);
cudaError_t mla_launch_bf16(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, cudaStream_t stream);

} /* namespace sm90 */
} /* namespace ffpa */

#endif
