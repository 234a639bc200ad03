/*
 * The architecture layer the HIP backend compiles backends/gpu/ with,
 * chosen per offload target at compile time:
 *   gfx90a, gfx942 (CDNA, wave64): MFMA 16x16x16 for two logical warps at
 *       once (arch_cdna.h), FMA fallback when the wave is partly inactive;
 *   gfx1100 (RDNA3, wave32) and every other target, including NVIDIA for
 *       the portability check: the FMA path of arch_portable.h.
 * The loads, softmax helpers and conversions are those of arch_portable.h
 * on every target.
 */
#ifndef FFPA_HIP_ARCH_HIP_H
#define FFPA_HIP_ARCH_HIP_H

#include "arch_portable.h"
#include "arch_cdna.h"

namespace ffpa {
namespace arch {

/* The FMA path as one out-of-line call per MMA: inlined at every call site
 * of the unrolled tile loops it made kernels of 10^5 instructions that took
 * ptxas / the AMDGPU backend many minutes each. Fragments travel by value
 * (registers), not through memory. */
template <typename T> __device__ __noinline__ FragC mma_m16n8k16_fma_call(FragC d, FragA a, FragB b)
{
    mma_m16n8k16_fma<T>(d, a, b);
    return d;
}

/* D = A * B + D, fp32 accumulate (m16n8k16 fragments of one logical warp). */
template <typename T> FFPA_DEV void mma_m16n8k16(FragC &d, const FragA &a, const FragB &b)
{
#if defined(FFPA_HIP_HAVE_MFMA)
    if (wave_full()) {
        mma_m16n8k16_mfma_pair<T>(d, a, b);
        return;
    }
#endif
    d = mma_m16n8k16_fma_call<T>(d, a, b);
}

} /* namespace arch */
} /* namespace ffpa */

#endif
