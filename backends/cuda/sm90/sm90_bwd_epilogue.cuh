/*
 * Epilogue pieces of the Hopper backward:
 *   store_grad: a consumer's dK or dV columns of one pass (64 keys x 128
 *               columns, fp32 registers) into the output view, rounded once;
 *   reduce_dq:  its dQ = dS K columns of one query tile into the fp32 dQ
 *               buffer with 8-byte vector reductions (every key block of
 *               the head adds into the same rows).
 * Accumulators are wgmma m64n128 fragments: value 4j + 2h + e of a thread is
 * row 16 * warp + lane / 4 + 8h, column 8j + 2 * (lane % 4) + e.
 */
#ifndef FFPA_CUDA_SM90_BWD_EPILOGUE_CUH
#define FFPA_CUDA_SM90_BWD_EPILOGUE_CUH

#include "sm90_arch.cuh"

namespace ffpa {
namespace sm90 {

/* out points at (key 0 of the block, column 0); element (r, c) at
 * r * sn + c * sd. Rows >= rows_valid and columns >= dim are not written. */
template <typename T>
FFPA_DEV void store_grad(const float (&acc)[64], T *out, int64_t sn, int64_t sd, int rows_valid, int col0, int dim,
                         int ctid)
{
    const int warp = ctid >> 5, lane = ctid & 31;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = warp * 16 + (lane >> 2) + 8 * half;
        if (r >= rows_valid)
            continue;
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = col0 + 8 * j + 2 * (lane & 3) + e;
                if (c < dim)
                    out[(int64_t)r * sn + (int64_t)c * sd] = arch::from_f32<T>(acc[4 * j + 2 * half + e]);
            }
    }
}

/* dq points at (row 0 of the tile, column 0) of the fp32 buffer (row
 * stride sn, a multiple of 8); dim is a multiple of 8. */
FFPA_DEV void reduce_dq(const float (&acc)[64], float *dq, int64_t sn, int rows_valid, int col0, int dim, int ctid)
{
    const int warp = ctid >> 5, lane = ctid & 31;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = warp * 16 + (lane >> 2) + 8 * half;
        if (r >= rows_valid)
            continue;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int c = col0 + 8 * j + 2 * (lane & 3);
            if (c < dim)
                red_add_v2(dq + (int64_t)r * sn + c, acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
        }
    }
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
