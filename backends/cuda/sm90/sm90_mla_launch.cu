/*
 * Host side of the Hopper MLA decode kernel: its coverage, the TMA map of
 * the page pool and the launch, for the KV-cache host layer (kv_host.h),
 * which runs the schedule before and the split merge after it.
 */
#include <limits.h>
#include <string.h>

#include <type_traits>

#include "env.h"
#include "sm90_host.h"
#include "sm90_mla_kernel.cuh"
#include "sm90_mla_launch.h"

namespace ffpa {
namespace sm90 {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_mla_kernel(const __grid_constant__ MlaMaps maps, const ffpa_gpu_kv_params p)
{
#if FFPA_SM90_DEVICE
    mla_body<Cfg>(maps, p);
#endif
}

namespace {

bool aligned16_bytes(int64_t elems)
{
    return (elems * 2) % 16 == 0;
}

template <class Cfg>
cudaError_t mla_launch(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, cudaStream_t stream)
{
    MlaMaps maps;
    ffpa_view pool = {const_cast<void *>(p.k), p.k_sp, p.k_sh, p.k_sn, 1};
    const int box_rows = mla_box_rows(p.page_size, p.block_table != NULL);
    const ffpa_dtype dt = std::is_same<typename Cfg::T, arch::f16>::value ? FFPA_F16 : FFPA_BF16;
    if (!encode(&maps.kv, pool, dt, p.dqk, p.page_size, p.hkv, p.num_pages, box_rows))
        return cudaErrorInvalidValue;
    cudaError_t e = cudaFuncSetAttribute(sm90_mla_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    sm90_mla_kernel<Cfg><<<(unsigned)blocks, Cfg::kThreads, smem, stream>>>(maps, p);
    return cudaGetLastError();
}

} /* namespace */

const char *mla_accepts(const ffpa_problem *pb, const ffpa_device_limits &lim)
{
#ifndef FFPA_CUDA_HAVE_SM90A
    (void)pb, (void)lim;
    return "the sm90 kernels were not built (-Dcuda-archs has no 90a)";
#else
    using Cfg = MlaConfig<arch::bf16>;
    const char *choice = ffpa_env_string("FFPA_CUDA_KERNEL");
    if (choice && strcmp(choice, "generic") == 0)
        return "FFPA_CUDA_KERNEL=generic";
    if (lim.arch != 90)
        return "the MLA kernel needs an sm_90 device (H100/H200)";
    if (pb->window || pb->softcap > 0.0f || pb->alibi)
        return "the MLA kernel has no window, softcap or ALiBi (the generic KV kernel does)";
    if (pb->dqk != Cfg::kDqk || pb->dv != Cfg::kDv)
        return "the MLA kernel covers Dqk 576 / Dv 512";
    if (pb->dtype != FFPA_F16 && pb->dtype != FFPA_BF16)
        return "the MLA kernel runs float16 and bfloat16";
    const ffpa_view &k = pb->k, &v = pb->v;
    const bool v_in_k = (pb->kv && pb->kv->v_in_k) ||
                        (v.data == k.data && v.sb == k.sb && v.sh == k.sh && v.sn == k.sn && v.sd == k.sd);
    if (!v_in_k)
        return "the MLA kernel reads V from K's pages (V a view of K's first 512 columns)";
    if (k.sd != 1 || ((uintptr_t)k.data & 15) || !aligned16_bytes(k.sn) ||
        (pb->hkv > 1 && !aligned16_bytes(k.sh)) || !aligned16_bytes(k.sb) || k.sn <= 0 || k.sb <= 0)
        return "the MLA kernel's TMA loads need 16-byte aligned rows, heads and pages";
    if (!encode_fn())
        return "the driver has no cuTensorMapEncodeTiled";
    if ((size_t)Cfg::kSmemBytes > lim.smem_per_block)
        return "the MLA kernel needs 226 KiB of shared memory per block";
    return NULL;
#endif
}

size_t mla_smem_bytes(int qk_chunks, int stages)
{
    (void)qk_chunks;
    return stages == MlaConfig<arch::bf16>::kStages ? MlaConfig<arch::bf16>::kSmemBytes : (size_t)INT_MAX;
}

cudaError_t mla_launch_f16(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, cudaStream_t stream)
{
    return mla_launch<MlaConfig<arch::f16>>(p, smem, blocks, stream);
}

cudaError_t mla_launch_bf16(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, cudaStream_t stream)
{
    return mla_launch<MlaConfig<arch::bf16>>(p, smem, blocks, stream);
}

} /* namespace sm90 */
} /* namespace ffpa */
