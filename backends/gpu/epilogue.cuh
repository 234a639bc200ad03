/*
 * Forward epilogue: normalise O, stage it through shared memory (swizzled,
 * conflict-free 4-byte writes from the fragments) and write it out with
 * coalesced 16-byte stores; write LSE. For split-KV (flash-decoding) blocks
 * the fp32 partial O and LSE go straight to the workspace instead.
 */
#ifndef FFPA_GPU_EPILOGUE_CUH
#define FFPA_GPU_EPILOGUE_CUH

#include "fwd_params.h"
#include "smem_tile.cuh"

namespace ffpa {

/* O column of element (slab vs, n-tile nt) of warp column-group wn. */
template <class Cfg> __device__ __forceinline__ int o_col(int vs, int wn, int nt, int lane, int e)
{
    return vs * Cfg::kCols + wn * Cfg::kWC + nt * 8 + arch::frag_c_col(lane, e);
}

/* Normalised O of one 16-row group rg of the tile into the staging tile
 * (swizzled, conflict-free 4-byte writes from the fragments). */
template <class Cfg, typename T>
__device__ __forceinline__ void stage_o_rows(const arch::FragC (&o)[Cfg::kVSlabs][Cfg::kONT], const float (&inv_l)[2],
                                             T *stile, int rg, int wn, int lane)
{
#pragma unroll
    for (int vs = 0; vs < Cfg::kVSlabs; ++vs) {
#pragma unroll
        for (int nt = 0; nt < Cfg::kONT; ++nt) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                int r = rg * 16 + arch::frag_c_row(lane, 2 * half);
                int c = o_col<Cfg>(vs, wn, nt, lane, 2 * half);
                uint32_t packed = arch::pack_f32x2<T>(o[vs][nt].r[2 * half] * inv_l[half],
                                                      o[vs][nt].r[2 * half + 1] * inv_l[half]);
                *reinterpret_cast<uint32_t *>(stile + swz<Cfg::kDv>(r, c)) = packed;
            }
        }
    }
}

/* The staged tile out with coalesced 16-byte stores (after a barrier);
 * row_ptr(r): the global address of tile row r (< rows_valid). */
template <class Cfg, typename T, class RowPtr>
__device__ __forceinline__ void copy_o_tile(const T *stile, RowPtr &&row_ptr, int rows_valid, int dv, int tid)
{
    constexpr int pieces_per_row = Cfg::kDv / 8;
    constexpr int pieces = Cfg::kBr * pieces_per_row;
    for (int i = tid; i < pieces; i += Cfg::kThreads) {
        int r = i / pieces_per_row;
        int c = (i % pieces_per_row) * 8;
        if (r < rows_valid && c < dv)
            *reinterpret_cast<uint4 *>(row_ptr(r) + c) =
                *reinterpret_cast<const uint4 *>(stile + swz<Cfg::kDv>(r, c));
    }
}

/* Both, for warps of one m-tile (wm: the warp's 16-row group). */
template <class Cfg, typename T, class RowPtr>
__device__ __forceinline__ void store_o_tile(const arch::FragC (&o)[Cfg::kVSlabs][Cfg::kONT],
                                             const float (&inv_l)[2], T *stile, RowPtr &&row_ptr,
                                             int rows_valid, int dv, int wm, int wn, int lane, int tid)
{
    static_assert(Cfg::kMT == 1, "one m-tile per warp");
    stage_o_rows<Cfg, T>(o, inv_l, stile, wm, wn, lane);
    __syncthreads();
    copy_o_tile<Cfg, T>(stile, row_ptr, rows_valid, dv, tid);
}

/* fp32 partial O (normalised within the split) and LSE of one split. */
template <class Cfg>
__device__ __forceinline__ void store_partial(const arch::FragC (&o)[Cfg::kVSlabs][Cfg::kONT],
                                              const float (&inv_l)[2], const float (&lse)[2],
                                              float *po, float *plse, int row0, int rows_valid,
                                              int dv, int wn, int lane)
{
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        int r = row0 + arch::frag_c_row(lane, 2 * half);
        if (r >= rows_valid)
            continue;
#pragma unroll
        for (int vs = 0; vs < Cfg::kVSlabs; ++vs) {
#pragma unroll
            for (int nt = 0; nt < Cfg::kONT; ++nt) {
                int c = o_col<Cfg>(vs, wn, nt, lane, 2 * half);
                if (c < dv)
                    *reinterpret_cast<float2 *>(po + (int64_t)r * dv + c) =
                        make_float2(o[vs][nt].r[2 * half] * inv_l[half],
                                    o[vs][nt].r[2 * half + 1] * inv_l[half]);
            }
        }
        if (wn == 0 && (lane & 3) == 0)
            plse[r] = lse[half];
    }
}

} /* namespace ffpa */

#endif
