/*
 * Epilogue of the Hopper forward: O = acc / l for this CTA's head-dim slice
 * (rows and columns bounded by the sequence and Dv) and, from cluster rank 0
 * only, the natural-log LSE. The accumulator uses the mma.sync FragC layout
 * per warp (wgmma's m64nN D fragment), so each quad of lanes writes 16
 * contiguous bytes of a row.
 */
#ifndef FFPA_CUDA_SM90_EPILOGUE_CUH
#define FFPA_CUDA_SM90_EPILOGUE_CUH

#include "fwd_params.h"
#include "sm90_arch.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg>
FFPA_DEV void store_o(const float (&o)[Cfg::kOAcc], const float (&inv_l)[2], typename Cfg::T *og, int64_t o_sn,
                      int row0, int rows_valid, int col0, int dv, int lane)
{
    using T = typename Cfg::T;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = row0 + arch::frag_c_row(lane, 2 * half);
        if (r >= rows_valid)
            continue;
        T *orow = og + (int64_t)r * o_sn;
#pragma unroll
        for (int nt = 0; nt < Cfg::kSliceV / 8; ++nt) {
            const int c = col0 + nt * 8 + arch::frag_c_col(lane, 2 * half);
            if (c < dv)
                *reinterpret_cast<uint32_t *>(orow + c) =
                    arch::pack_f32x2<T>(o[4 * nt + 2 * half] * inv_l[half], o[4 * nt + 2 * half + 1] * inv_l[half]);
        }
    }
}

FFPA_DEV void store_lse(const float (&lse)[2], float *lg, int64_t lse_sn, int row0, int rows_valid, int lane)
{
    if ((lane & 3) != 0)
        return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = row0 + arch::frag_c_row(lane, 2 * half);
        if (r < rows_valid)
            lg[(int64_t)r * lse_sn] = lse[half];
    }
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
