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

/* [D, rows, heads, batch] view of one input, 64 x box_rows boxes, 128-byte
 * swizzle, zero fill outside (key/query tails, D padding; the MLA kernel's
 * pages past a sequence). A dimension of extent 1 gets a harmless stride
 * (TMA wants multiples of 16 bytes). */
inline bool encode(CUtensorMap *map, const ffpa_view &v, ffpa_dtype dt, int64_t d, int64_t rows, int64_t heads,
                   int64_t batch, int box_rows = 64)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
    if (!fn)
        return false;
    const int64_t elt = 2;
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    int64_t sn = rows > 1 ? v.sn : d, sh = heads > 1 ? v.sh : d * rows, sb = batch > 1 ? v.sb : d * rows * heads;
    if (sn <= 0 || sh <= 0 || sb <= 0)
        return false; /* broadcast (stride 0) inputs: the generic kernels handle them */
    cuuint64_t strides[3] = {(cuuint64_t)(sn * elt), (cuuint64_t)(sh * elt), (cuuint64_t)(sb * elt)};
    cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult r = fn(map, dt == FFPA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, v.data,
                    dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
