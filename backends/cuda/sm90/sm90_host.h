/*
 * Host helpers shared by the Hopper forward and backward launchers: the
 * "not covered here" status, and TMA tensor maps built through the driver
 * entry point the runtime hands out (the plugin links no driver library).
 */
#ifndef FFPA_CUDA_SM90_HOST_H
#define FFPA_CUDA_SM90_HOST_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "problem.h"

namespace ffpa {
namespace sm90 {

/* FFPA_ERR_UNSUPPORTED with the reason: the caller falls back to the
 * generic kernels (or reports it when the Hopper path was forced). */
inline ffpa_status unsupported(char *err, size_t err_len, const char *msg)
{
    if (err && err_len)
        snprintf(err, err_len, "%s", msg);
    return FFPA_ERR_UNSUPPORTED;
}

inline PFN_cuTensorMapEncodeTiled_v12000 encode_fn()
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return fn;
}

/* A 4-D tensor map, dims[0] contiguous; strides of the other three in
 * elements (a dimension of extent 1 gets a harmless one: TMA wants
 * multiples of 16 bytes; stride 0, a broadcast, is refused); 128-byte
 * swizzle, zero fill outside. */
inline bool encode_tiled(CUtensorMap *map, void *data, CUtensorMapDataType type, int64_t elt, const int64_t dims_in[4],
                         const int64_t strides_in[3], int box_cols, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
    if (!fn)
        return false;
    cuuint64_t dims[4], strides[3];
    int64_t span = dims_in[0];
    for (int i = 0; i < 4; ++i)
        dims[i] = (cuuint64_t)dims_in[i];
    for (int i = 0; i < 3; ++i) {
        const int64_t st = dims_in[i + 1] > 1 ? strides_in[i] : span;
        if (st <= 0)
            return false;
        strides[i] = (cuuint64_t)(st * elt);
        span = st * dims_in[i + 1];
    }
    cuuint32_t box[4] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult r = fn(map, type, 4, data, dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

/* [D, rows, heads, batch] view of one 16-bit input, 64 x box_rows boxes
 * (key/query tails and D padding zero-filled; the MLA kernel's pages past a
 * sequence). */
inline bool encode(CUtensorMap *map, const ffpa_view &v, ffpa_dtype dt, int64_t d, int64_t rows, int64_t heads,
                   int64_t batch, int box_rows = 64)
{
    const int64_t dims[4] = {d, rows, heads, batch}, strides[3] = {v.sn, v.sh, v.sb};
    return encode_tiled(map, v.data,
                        dt == FFPA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dims,
                        strides, 64, box_rows);
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
