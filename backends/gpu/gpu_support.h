/*
 * What the GPU kernels (generic forward, KV cache; CUDA and HIP) need of a
 * problem, checked once for every launcher: fp16/bf16, a contiguous head
 * dimension, 16-byte aligned rows (cp.async / global_load of 16 bytes), head
 * dims that are multiples of 8. Plain C.
 */
#ifndef FFPA_GPU_SUPPORT_H
#define FFPA_GPU_SUPPORT_H

#include <stdint.h>
#include <stdio.h>

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why `backend` cannot run pb with these views (NULL data: skipped), the
 * message in buf; NULL when it can. */
static inline const char *ffpa_gpu_unsupported(const ffpa_problem *pb, const ffpa_view *const *views,
                                               const char *const *names, int n, const char *backend, char *buf,
                                               size_t len)
{
    if (pb->dtype != FFPA_F16 && pb->dtype != FFPA_BF16) {
        snprintf(buf, len, "q: float32 tensors are not supported by the %s backend; expected float16 or bfloat16",
                 backend);
        return buf;
    }
    for (int i = 0; i < n; ++i) {
        const ffpa_view *v = views[i];
        if (!v->data)
            continue;
        if (v->sd != 1) {
            snprintf(buf, len, "%s: the %s backend needs a contiguous head dimension; expected stride[3] == 1",
                     names[i], backend);
            return buf;
        }
        if (((uintptr_t)v->data & 15) || (v->sn & 7) || (v->sh & 7) || (v->sb & 7)) {
            snprintf(buf, len,
                     "%s: the %s backend needs 16-byte aligned rows; expected a 16-byte aligned data pointer and "
                     "strides that are multiples of 8 elements",
                     names[i], backend);
            return buf;
        }
    }
    if (pb->dqk % 8 || pb->dv % 8) {
        snprintf(buf, len,
                 "q: head dimension %lld/%lld is not supported by the %s backend; expected Dqk and Dv multiples of 8",
                 (long long)pb->dqk, (long long)pb->dv, backend);
        return buf;
    }
    return NULL;
}

#ifdef __cplusplus
}
#endif

#endif
