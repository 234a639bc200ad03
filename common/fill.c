/* See fill.h. */
#include "fill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

enum { FILL_PATTERN_BYTES = 16384 };

ffpa_status ffpa_fill_tensor(const ffpa_backend_i *b, void *state, const ffpa_tensor *t, float value,
                             char *err, size_t err_len)
{
    int64_t shape[4], stride[4];
    int dims = 0;
    for (int i = 0; i < 4; ++i) {
        if (t->shape[i] == 0)
            return FFPA_OK;
        if (t->shape[i] > 1 && t->stride[i] != 0) { /* size-1 and stride-0 dims: one element */
            shape[dims] = t->shape[i];
            stride[dims++] = t->stride[i];
        }
    }
    /* Innermost first, then the dense run: dims whose stride steps exactly
     * over the elements of the faster ones. */
    for (int a = 1; a < dims; ++a)
        for (int c = a; c > 0 && stride[c] < stride[c - 1]; --c) {
            int64_t s = stride[c], n = shape[c];
            stride[c] = stride[c - 1], shape[c] = shape[c - 1];
            stride[c - 1] = s, shape[c - 1] = n;
        }
    int64_t run = 1;
    int outer = 0;
    while (outer < dims && stride[outer] == run)
        run *= shape[outer++];

    /* The pattern lives on the stack: a fill allocates nothing, so it
     * cannot fail half-way through a call's outputs. */
    uint32_t pattern[FILL_PATTERN_BYTES / 4];
    const size_t elt = ffpa_dtype_size(t->dtype);
    const int64_t buf_elems = run < (int64_t)(sizeof pattern / elt) ? run : (int64_t)(sizeof pattern / elt);
    void *buf = pattern;
    for (int64_t i = 0; i < buf_elems; ++i)
        ffpa_store_f32(buf, t->dtype, i, value);

    int64_t idx[4] = {0, 0, 0, 0}; /* over the outer dims outer..dims-1 */
    ffpa_status st = FFPA_OK;
    for (;;) {
        int64_t off = 0;
        for (int d = outer; d < dims; ++d)
            off += idx[d] * stride[d];
        for (int64_t done = 0; done < run && st == FFPA_OK; done += buf_elems) {
            const int64_t n = run - done < buf_elems ? run - done : buf_elems;
            st = b->mem_copy(state, (char *)t->data + (size_t)(off + done) * elt, buf, (size_t)n * elt,
                             FFPA_COPY_HOST_TO_DEVICE, err, err_len);
        }
        if (st != FFPA_OK)
            break;
        int d = outer;
        while (d < dims && ++idx[d] == shape[d])
            idx[d++] = 0;
        if (d == dims)
            break;
    }
    return st;
}
