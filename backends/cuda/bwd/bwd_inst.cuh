/*
 * Kernel entry points of one element type; bwd_inst_f16.cu and
 * bwd_inst_bf16.cu include this with FFPA_BWD_T set, so the two dtypes
 * compile in parallel. Instantiated per dtype: dK/dV with 64-row key tiles
 * (Dqk + Dv up to 1152 on a 227 KB device; also as the twins that add dQ
 * themselves, and the resident one's plain twin), with 32-row key tiles (the rest, up to 2 x 1024), and one dQ
 * kernel, all of BigCfg; and the
 * dK/dV of BigCfg's tile with K/V streamed (StreamCfg: D whose 64-key K/V
 * tiles do not fit resident), the
 * small-shared-memory configuration (SmallCfg: at most 64 KiB per block,
 * chosen by bwd_host.h only where BigCfg does not fit): dK/dV with K/V
 * streamed, and dQ. Every head dimension routes to these (D is a run-time
 * loop bound, not a template argument).
 * The bodies are vendor-neutral (backends/gpu/bwd/), compiled here with the
 * CUDA arch layer.
 */
#include <cuda_runtime.h>

#include "arch_sm80.cuh"
#include "masking.cuh"
#include "smem_tile.cuh"

#include "bwd/bwd_dkdv.cuh"
#include "bwd/bwd_dq.cuh"
#include "bwd_kernels.h"
#include "gpu_launch.cuh"

namespace ffpa {
namespace bwd {

template <typename T, int kBc, bool kResident = false, bool kDqAtomic = false, bool kPlain = false>
__global__ void __launch_bounds__(BigCfg::kThreads, 1) dkdv_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dkdv_body<T, kBc, BigCfg, kResident, kDqAtomic, kPlain>(p);
}

/* D <= 64, plain calls: 128-key blocks (Big64Cfg), dK/dV in registers, dQ added. */
template <typename T>
__global__ void __launch_bounds__(Big64Cfg::kThreads, 1) dkdv128_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dkdv_body<T, 128, Big64Cfg, true, true, true>(p);
}

/* D in (64, 128], plain calls: 128-key blocks of 64-row query tiles (Wide128Cfg). */
template <typename T>
__global__ void __launch_bounds__(Wide128Cfg::kThreads, 1) dkdv128w_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dkdv_body<T, 128, Wide128Cfg, true, true, true>(p);
}

/* D in (128, 256], plain calls: 64-key blocks of 64-row query tiles (Wide256Cfg). */
template <typename T>
__global__ void __launch_bounds__(Wide256Cfg::kThreads, 1) dkdv64w_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dkdv_body<T, 64, Wide256Cfg, true, true, true>(p);
}

template <typename T, bool kDqAtomic>
__global__ void __launch_bounds__(StreamCfg::kThreads, 1) dkdv_stream_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dkdv_body<T, 64, StreamCfg, false, kDqAtomic>(p);
}

template <typename T, bool kResident = false>
__global__ void __launch_bounds__(BigCfg::kThreads, 1) dq_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dq_body<T, BigCfg, kResident>(p);
}

template <typename T, bool kResident = false, bool kDqAtomic = false>
__global__ void __launch_bounds__(SmallCfg::kThreads, 1) dkdv_small_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dkdv_body<T, 64, SmallCfg, kResident, kDqAtomic>(p);
}

template <typename T, bool kResident = false>
__global__ void __launch_bounds__(SmallCfg::kThreads, 1) dq_small_kernel(const __grid_constant__ ffpa_bwd_params p)
{
    dq_body<T, SmallCfg, kResident>(p);
}

cudaError_t FFPA_BWD_LAUNCH_DKDV(int kernel, const ffpa_bwd_params &p, size_t smem, cudaStream_t stream)
{
    dim3 grid((unsigned)p.kv_blocks, (unsigned)p.hkv, (unsigned)p.batch);
    switch (kernel) { /* *Resident: dK/dV in registers (bwd_host.h choose_tiles) */
    case kDkdvStream:
        return launch_with_smem(dkdv_stream_kernel<FFPA_BWD_T, false>, grid, StreamCfg::kThreads, smem, stream, p);
    case kDkdvStreamDqAtomic:
        return launch_with_smem(dkdv_stream_kernel<FFPA_BWD_T, true>, grid, StreamCfg::kThreads, smem, stream, p);
    case kDkdvSmallResident:
        return launch_with_smem(dkdv_small_kernel<FFPA_BWD_T, true>, grid, SmallCfg::kThreads, smem, stream, p);
    case kDkdvSmall:
        return launch_with_smem(dkdv_small_kernel<FFPA_BWD_T>, grid, SmallCfg::kThreads, smem, stream, p);
    case kDkdvSmallResidentDqAtomic:
        return launch_with_smem(dkdv_small_kernel<FFPA_BWD_T, true, true>, grid, SmallCfg::kThreads, smem, stream,
                                p);
    case kDkdvSmallDqAtomic:
        return launch_with_smem(dkdv_small_kernel<FFPA_BWD_T, false, true>, grid, SmallCfg::kThreads, smem, stream,
                                p);
    case kDkdv64Resident:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 64, true>, grid, BigCfg::kThreads, smem, stream, p);
    case kDkdv64ResidentDqAtomic:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 64, true, true>, grid, BigCfg::kThreads, smem, stream, p);
    case kDkdv64ResidentDqAtomicPlain:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 64, true, true, true>, grid, BigCfg::kThreads, smem, stream,
                                p);
    case kDkdv128PlainDqAtomic:
        return launch_with_smem(dkdv128_kernel<FFPA_BWD_T>, grid, Big64Cfg::kThreads, smem, stream, p);
    case kDkdv128WidePlainDqAtomic:
        return launch_with_smem(dkdv128w_kernel<FFPA_BWD_T>, grid, Wide128Cfg::kThreads, smem, stream, p);
    case kDkdv64WidePlainDqAtomic:
        return launch_with_smem(dkdv64w_kernel<FFPA_BWD_T>, grid, Wide256Cfg::kThreads, smem, stream, p);
    case kDkdv64DqAtomic:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 64, false, true>, grid, BigCfg::kThreads, smem, stream, p);
    case kDkdv64DqAtomicPlain:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 64, false, true, true>, grid, BigCfg::kThreads, smem, stream,
                                p);
    case kDkdv64:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 64>, grid, BigCfg::kThreads, smem, stream, p);
    case kDkdv32DqAtomic:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 32, false, true>, grid, BigCfg::kThreads, smem, stream, p);
    default:
        return launch_with_smem(dkdv_kernel<FFPA_BWD_T, 32>, grid, BigCfg::kThreads, smem, stream, p);
    }
}

cudaError_t FFPA_BWD_LAUNCH_DQ(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem,
                               cudaStream_t stream)
{
    const dim3 grid((unsigned)blocks);
    switch (kernel) { /* *Resident: dQ in registers (bwd_host.h choose_tiles) */
    case kDqSmallResident:
        return launch_with_smem(dq_small_kernel<FFPA_BWD_T, true>, grid, SmallCfg::kThreads, smem, stream, p);
    case kDqSmall:
        return launch_with_smem(dq_small_kernel<FFPA_BWD_T>, grid, SmallCfg::kThreads, smem, stream, p);
    case kDqResident:
        return launch_with_smem(dq_kernel<FFPA_BWD_T, true>, grid, BigCfg::kThreads, smem, stream, p);
    default:
        return launch_with_smem(dq_kernel<FFPA_BWD_T>, grid, BigCfg::kThreads, smem, stream, p);
    }
}

cudaError_t FFPA_BWD_ATTR(int which, cudaFuncAttributes *attr)
{
    switch (which) {
    case kDkdv64:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 64>);
    case kDkdv32:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 32>);
    case kDkdvStream:
        return cudaFuncGetAttributes(attr, dkdv_stream_kernel<FFPA_BWD_T, false>);
    case kDkdvStreamDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv_stream_kernel<FFPA_BWD_T, true>);
    case kDkdvSmall:
        return cudaFuncGetAttributes(attr, dkdv_small_kernel<FFPA_BWD_T>);
    case kDkdvSmallResidentDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv_small_kernel<FFPA_BWD_T, true, true>);
    case kDkdvSmallDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv_small_kernel<FFPA_BWD_T, false, true>);
    case kDkdv64Resident:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 64, true>);
    case kDkdv64ResidentDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 64, true, true>);
    case kDkdv64ResidentDqAtomicPlain:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 64, true, true, true>);
    case kDkdv128PlainDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv128_kernel<FFPA_BWD_T>);
    case kDkdv128WidePlainDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv128w_kernel<FFPA_BWD_T>);
    case kDkdv64WidePlainDqAtomic:
        return cudaFuncGetAttributes(attr, dkdv64w_kernel<FFPA_BWD_T>);
    case kDkdv64DqAtomic:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 64, false, true>);
    case kDkdv64DqAtomicPlain:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 64, false, true, true>);
    case kDkdv32DqAtomic:
        return cudaFuncGetAttributes(attr, dkdv_kernel<FFPA_BWD_T, 32, false, true>);
    case kDkdvSmallResident:
        return cudaFuncGetAttributes(attr, dkdv_small_kernel<FFPA_BWD_T, true>);
    case kDqResident:
        return cudaFuncGetAttributes(attr, dq_kernel<FFPA_BWD_T, true>);
    case kDqSmallResident:
        return cudaFuncGetAttributes(attr, dq_small_kernel<FFPA_BWD_T, true>);
    case kDqSmall:
        return cudaFuncGetAttributes(attr, dq_small_kernel<FFPA_BWD_T>);
    default:
        return cudaFuncGetAttributes(attr, dq_kernel<FFPA_BWD_T>);
    }
}

} /* namespace bwd */
} /* namespace ffpa */
