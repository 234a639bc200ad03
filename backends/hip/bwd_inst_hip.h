/*
 * HIP entry points of the backward kernels of one element type over the
 * vendor-neutral bodies (backends/gpu/bwd/), compiled with arch_hip.h;
 * bwd_inst_f16.hip and bwd_inst_bf16.hip include this with FFPA_BWD_T set.
 * Per dtype: dK/dV with 64- and 32-row key tiles and dQ of BigCfg, dK/dV of
 * StreamCfg (more than 64 KiB of LDS: NVIDIA), and dK/dV (K/V streamed) and dQ of SmallCfg
 * (at most 64 KiB: gfx90a, gfx942, gfx1100). D is a run-time loop bound.
 * BigCfg is built for NVIDIA only (FFPA_HIP_BIG_BWD): no AMD target has
 * the shared memory for it, and bwd_launch.hip caps the planner's limit at
 * FFPA_HIP_AMD_BWD_SMEM there, so it is never chosen (and the AMD code objects carry
 * no dead kernels: they were half of the HIP backward's build time).
 */
#include "hip_port.h"

#include "arch_hip.h"

#include "bwd/bwd_dkdv.cuh"
#include "bwd/bwd_dq.cuh"
#include "bwd_kernels_hip.h"
#include "gpu_launch.cuh"

namespace ffpa {
namespace bwd {

#if FFPA_HIP_BIG_BWD
template <typename T, int kBc, bool kResident = false, bool kDqAtomic = false, bool kPlain = false>
__global__ void __launch_bounds__(BigCfg::kThreads) bwd_dkdv_kernel(const ffpa_bwd_params p)
{
    bwd::dkdv_body<T, kBc, BigCfg, kResident, kDqAtomic, kPlain>(p);
}

template <typename T>
__global__ void __launch_bounds__(Big64Cfg::kThreads) bwd_dkdv128_kernel(const ffpa_bwd_params p)
{
    bwd::dkdv_body<T, 128, Big64Cfg, true, true, true>(p);
}

template <typename T>
__global__ void __launch_bounds__(Wide128Cfg::kThreads) bwd_dkdv128w_kernel(const ffpa_bwd_params p)
{
    bwd::dkdv_body<T, 128, Wide128Cfg, true, true, true>(p);
}

template <typename T>
__global__ void __launch_bounds__(Wide256Cfg::kThreads) bwd_dkdv64w_kernel(const ffpa_bwd_params p)
{
    bwd::dkdv_body<T, 64, Wide256Cfg, true, true, true>(p);
}

template <typename T, bool kDqAtomic>
__global__ void __launch_bounds__(StreamCfg::kThreads) bwd_dkdv_stream_kernel(const ffpa_bwd_params p)
{
    bwd::dkdv_body<T, 64, StreamCfg, false, kDqAtomic>(p);
}

template <typename T, bool kResident = false>
__global__ void __launch_bounds__(BigCfg::kThreads) bwd_dq_kernel(const ffpa_bwd_params p)
{
    bwd::dq_body<T, BigCfg, kResident>(p);
}
#endif

template <typename T, bool kResident = false, bool kDqAtomic = false>
__global__ void __launch_bounds__(SmallCfg::kThreads) bwd_dkdv_small_kernel(const ffpa_bwd_params p)
{
    bwd::dkdv_body<T, 64, SmallCfg, kResident, kDqAtomic>(p);
}

template <typename T, bool kResident = false>
__global__ void __launch_bounds__(SmallCfg::kThreads) bwd_dq_small_kernel(const ffpa_bwd_params p)
{
    bwd::dq_body<T, SmallCfg, kResident>(p);
}

hipError_t FFPA_BWD_LAUNCH_DKDV(int kernel, const ffpa_bwd_params &p, size_t smem, hipStream_t stream)
{
    dim3 grid((unsigned)p.kv_blocks, (unsigned)p.hkv, (unsigned)p.batch);
    switch (kernel) { /* *Resident: dK/dV in registers (bwd_host.h choose_tiles) */
    case bwd::kDkdvSmallResident:
        return launch_with_smem(bwd_dkdv_small_kernel<FFPA_BWD_T, true>, grid, SmallCfg::kThreads, smem, stream, p);
    case bwd::kDkdvSmall:
        return launch_with_smem(bwd_dkdv_small_kernel<FFPA_BWD_T>, grid, SmallCfg::kThreads, smem, stream, p);
    case bwd::kDkdvSmallResidentDqAtomic:
        return launch_with_smem(bwd_dkdv_small_kernel<FFPA_BWD_T, true, true>, grid, SmallCfg::kThreads, smem, stream,
                                p);
    case bwd::kDkdvSmallDqAtomic:
        return launch_with_smem(bwd_dkdv_small_kernel<FFPA_BWD_T, false, true>, grid, SmallCfg::kThreads, smem,
                                stream, p);
#if FFPA_HIP_BIG_BWD
    case bwd::kDkdv64Resident:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 64, true>, grid, BigCfg::kThreads, smem, stream, p);
    case bwd::kDkdv64ResidentDqAtomic:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 64, true, true>, grid, BigCfg::kThreads, smem, stream,
                                p);
    case bwd::kDkdv64ResidentDqAtomicPlain:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 64, true, true, true>, grid, BigCfg::kThreads, smem,
                                stream, p);
    case bwd::kDkdv128PlainDqAtomic:
        return launch_with_smem(bwd_dkdv128_kernel<FFPA_BWD_T>, grid, Big64Cfg::kThreads, smem, stream, p);
    case bwd::kDkdv128WidePlainDqAtomic:
        return launch_with_smem(bwd_dkdv128w_kernel<FFPA_BWD_T>, grid, Wide128Cfg::kThreads, smem, stream, p);
    case bwd::kDkdv64WidePlainDqAtomic:
        return launch_with_smem(bwd_dkdv64w_kernel<FFPA_BWD_T>, grid, Wide256Cfg::kThreads, smem, stream, p);
    case bwd::kDkdv64DqAtomic:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 64, false, true>, grid, BigCfg::kThreads, smem, stream,
                                p);
    case bwd::kDkdv64DqAtomicPlain:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 64, false, true, true>, grid, BigCfg::kThreads, smem,
                                stream, p);
    case bwd::kDkdv64:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 64>, grid, BigCfg::kThreads, smem, stream, p);
    case bwd::kDkdv32DqAtomic:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 32, false, true>, grid, BigCfg::kThreads, smem, stream,
                                p);
    case bwd::kDkdvStream:
        return launch_with_smem(bwd_dkdv_stream_kernel<FFPA_BWD_T, false>, grid, StreamCfg::kThreads, smem, stream,
                                p);
    case bwd::kDkdvStreamDqAtomic:
        return launch_with_smem(bwd_dkdv_stream_kernel<FFPA_BWD_T, true>, grid, StreamCfg::kThreads, smem, stream,
                                p);
    case bwd::kDkdv32:
        return launch_with_smem(bwd_dkdv_kernel<FFPA_BWD_T, 32>, grid, BigCfg::kThreads, smem, stream, p);
    default:
        return hipErrorInvalidDeviceFunction;
#else
    default:
        return hipErrorInvalidDeviceFunction; /* not built for AMD targets (see above) */
#endif
    }
}

hipError_t FFPA_BWD_LAUNCH_DQ(int kernel, const ffpa_bwd_params &p, int64_t blocks, size_t smem, hipStream_t stream)
{
    const dim3 grid((unsigned)blocks);
    switch (kernel) { /* *Resident: dQ in registers (bwd_host.h choose_tiles) */
    case bwd::kDqSmallResident:
        return launch_with_smem(bwd_dq_small_kernel<FFPA_BWD_T, true>, grid, SmallCfg::kThreads, smem, stream, p);
    case bwd::kDqSmall:
        return launch_with_smem(bwd_dq_small_kernel<FFPA_BWD_T>, grid, SmallCfg::kThreads, smem, stream, p);
#if FFPA_HIP_BIG_BWD
    case bwd::kDqResident:
        return launch_with_smem(bwd_dq_kernel<FFPA_BWD_T, true>, grid, BigCfg::kThreads, smem, stream, p);
    default:
        return launch_with_smem(bwd_dq_kernel<FFPA_BWD_T>, grid, BigCfg::kThreads, smem, stream, p);
#else
    default:
        return hipErrorInvalidDeviceFunction;
#endif
    }
}

} /* namespace bwd */
} /* namespace ffpa */
